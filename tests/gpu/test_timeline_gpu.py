"""The timeline step on a CUDA device: a profiled run traces one further step, every
kernel it runs (Triton's through cuLaunchKernelEx included) is followed to its launch call,
and profile.json gets each op's GPU time (the hardware model's check, fourcast project)."""

import json

import pytest

import fourcast as fc
from fourcast.train.config import DataConfig, RunConfig, TrainConfig, model_config
from fourcast.train.loop import train

pytestmark = pytest.mark.gpu


def test_profiled_cuda_run_records_gpu_time_per_op(shared_data, tmp_path, monkeypatch):
    monkeypatch.delenv("FOURCAST_TIMELINE_STEP", raising=False)  # the default pick
    corpus = shared_data / "corpus"
    (tmp_path / "train.txt").write_bytes((corpus / "train" / "gutenberg.txt").read_bytes()[:200_000])
    cfg = RunConfig(recipe=fc.recipe("ue5m3").to_dict(), model=model_config("tiny,n_layers=2"), model_name="tiny",
                    data=DataConfig(path=str(tmp_path / "train.txt"), val_fraction=0.1, cache_dir=str(tmp_path / "c")),
                    train=TrainConfig(steps=14, batch=2, seq=128, eval_every=100, ckpt_every=0, profile_steps=2,
                                      device="cuda", progress=False))
    run_dir = tmp_path / "run"
    train(cfg, run_dir)
    prof = json.loads((run_dir / "profile.json").read_text())
    timeline = json.loads((run_dir / "timeline.json").read_text())
    assert (run_dir / "timeline-trace.json.gz").is_file()
    step = prof["gpu_time"]["step"]
    assert step == timeline["step"] and step not in prof["steps"]
    assert prof["gpu_time"]["by_gpu_span_ms"] == 0.0  # every launch call found in the trace
    kinds = {op["kind"] for op in prof["gpu_ops"]}
    assert {"gemm", "quantize", "attention", "optimizer"} <= kinds
    for op in prof["gpu_ops"]:
        if op["kind"] in ("gemm", "quantize"):
            assert op["ms_per_call"] > 0, op  # their kernels reached them
    metrics = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in line]
    assert any(m["step"] == step + 1 and m.get("profiled") for m in metrics)  # not a step-time sample
