"""CI-sized training on the CPU: every recipe trains a tiny model for a few dozen steps,
the loss falls and the run folder is complete; a run killed after a checkpoint and
resumed continues with bit-identical losses; profile and tensor capture; compare."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import fourcast as fc
from fourcast.cli import main
from fourcast.kernels import QUANT_REV
from fourcast.train import checkpoint, run
from fourcast.train.compare import compare, plot
from fourcast.train.config import DataConfig, RunConfig, TrainConfig, model_config
from fourcast.train.loop import lr_at, train
from fourcast.train.profile import SCHEMA

PRESETS = fc.recipes.names()
STEPS = 24


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """The CPU reference quantizer runs ~10x faster single-threaded on a busy 2-core box."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _cfg(recipe, data_dir, cache, **train_kw):
    # nvfp4 keeps its last 2 blocks in bf16: give it 3 so one block is quantized.
    spec = "tiny,n_layers=3" if recipe.keep_bf16_last >= 2 else "tiny,n_layers=1"
    kw = dict(steps=STEPS, batch=2, seq=64, lr=1e-2, eval_every=12, eval_batches=1, ckpt_every=12, progress=False)
    kw.update(train_kw)
    return RunConfig(
        recipe=recipe.to_dict(),
        model=model_config(spec),
        model_name=spec,
        data=DataConfig(path=str(data_dir / "train.txt"), val_path=str(data_dir / "val.txt"), cache_dir=str(cache)),
        train=TrainConfig(**kw),
    )


@pytest.fixture(scope="module")
def text(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    corpus = shared_data / "corpus"
    (d / "train.txt").write_bytes((corpus / "train" / "gutenberg.txt").read_bytes()[:300_000])
    (d / "val.txt").write_bytes((corpus / "val" / "gutenberg.txt").read_bytes()[:50_000])
    return d


@pytest.fixture(scope="module")
def runs(text, tmp_path_factory):
    """Every preset trained once (ufp4 also profiles two steps and captures tensors)."""
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for name in PRESETS:
        extra = dict(profile_steps=2, capture_every=12, capture_rows=32) if name == "ufp4" else {}
        try:
            out[name] = (root / name, train(_cfg(fc.recipe(name), text, root / "cache", **extra), root / name))
        except Exception as exc:  # re-raised by the tests of that recipe only
            out[name] = exc
    return out


def _run(runs, name):
    if isinstance(runs[name], Exception):
        raise runs[name]
    return runs[name]


@pytest.mark.parametrize("name", PRESETS)
def test_every_recipe_trains_and_the_loss_falls(runs, name):
    run_dir, summary = _run(runs, name)
    lines, val = run.read_metrics(run_dir)
    losses = [r["loss"] for r in lines]
    assert [r["step"] for r in lines] == list(range(1, STEPS + 1))
    assert np.mean(losses[-4:]) < np.mean(losses[:4]) - 0.8, losses
    assert [r["step"] for r in val] == [12, 24]
    assert val[-1]["val_loss"] < np.log(256) - 0.8
    assert summary["final_val_loss"] == val[-1]["val_loss"]
    quantized = summary["convert"]["converted"]
    if name == "bf16":
        assert quantized == [] and summary["activation_memory"]["layers"] == 0
    else:
        assert len(quantized) == 4 and {r["recipe"] for r in quantized} == {name}  # wqkv, wo, w_gate_up, w_down
        assert summary["activation_memory"]["ratio"] < 0.6  # packed Wgrad activations


@pytest.mark.parametrize("name", PRESETS)
def test_run_folder_is_complete(runs, name):
    run_dir, summary = _run(runs, name)
    for f in run.REQUIRED:
        assert (run_dir / f).is_file(), f
    cfg = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    assert cfg.recipe == fc.recipe(name).to_dict()
    env = json.loads((run_dir / "env.json").read_text())
    assert env["versions"]["torch"] == torch.__version__ and "git" in env and env["device"] == "cpu"
    assert (run_dir / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for key in ("final_train_loss", "final_val_loss", "step_time_ms", "tokens_per_s", "peak_memory_bytes", "params"):
        assert summary[key] > 0, key
    assert summary["tokens"] == STEPS * 2 * 64
    assert checkpoint.read_meta(run_dir)["step"] == STEPS
    assert summary["cuda_graphs"] == {"used": False, "why_not": "the device is not CUDA", "captured": 0, "replayed": 0}


def test_profile_json_follows_the_schema(runs):
    run_dir, _ = _run(runs, "ufp4")
    prof = json.loads((run_dir / "profile.json").read_text())
    assert prof["schema"] == SCHEMA and prof["timer"] == "perf_counter"
    assert len(prof["steps"]) == 2 and prof["tokens_per_step"] == 128
    assert prof["quant_rev"] == QUANT_REV  # the hardware model prices the quantize ops by it
    kinds = {op["kind"] for op in prof["ops"]}
    assert {"gemm", "quantize", "dequantize", "attention", "optimizer"} <= kinds
    gemms = [op for op in prof["ops"] if op["kind"] == "gemm"]
    roles = {(op["layer"], op["role"]) for op in gemms}
    assert ("blocks.0.mlp.w_gate_up", "wgrad") in roles and ("head", "fprop") in roles and ("head", "dgrad+wgrad") in roles
    gate_up = next(op for op in gemms if op["layer"] == "blocks.0.mlp.w_gate_up" and op["role"] == "wgrad")
    assert (gate_up["M"], gate_up["N"], gate_up["K"], gate_up["a"], gate_up["rht"]) == (384, 64, 128, "e1m2/e4m3x16", 16)
    dgrad = next(op for op in gemms if op["layer"] == "blocks.0.mlp.w_gate_up" and op["role"] == "dgrad")
    assert (dgrad["M"], dgrad["N"], dgrad["K"]) == (128, 64, 384)
    quant = [op for op in prof["ops"] if op["kind"] == "quantize" and op["layer"] == "blocks.0.mlp.w_down"]
    assert {op["operand"] for op in quant} == {"fprop.x+wgrad.x", "fprop.w+dgrad.w", "dgrad.dy+wgrad.dy"}
    assert all(op["ms_per_step"] >= 0 and op["calls_per_step"] > 0 for op in prof["ops"])
    assert prof["classes"]["other"] >= 0 and prof["overhead"] is not None
    total = sum(prof["classes"].values())
    assert abs(total - prof["step_time_ms"]["profiled"]) / total < 0.5


def test_tensor_capture(runs):
    run_dir, _ = _run(runs, "ufp4")
    folders = sorted(p.name for p in (run_dir / "tensors").iterdir() if p.is_dir())
    assert folders == ["step000000", "step000012"]
    index = json.loads((run_dir / "tensors" / "index.json").read_text())
    assert index["blocks.0.mlp.w_down"]["formats"]["wgrad.dy"] == "e1m2/e4m3x16"
    assert index["head"]["class"] == "Linear"
    step = run_dir / "tensors" / "step000012"
    x = np.load(step / "blocks.0.mlp.w_down.x.npy")
    w = np.load(step / "blocks.0.mlp.w_down.w.npy")
    dy = np.load(step / "blocks.0.mlp.w_down.dy.npy")
    assert x.shape == (32, 192) and w.shape == (32, 192) and dy.shape == (32, 64)
    assert x.dtype == w.dtype == dy.dtype == np.float32
    assert np.abs(dy).max() > 0
    assert len(list(step.glob("*.npy"))) == 5 * 3  # 4 block linears and the head


def test_compare_table_and_plot(runs, tmp_path):
    dirs = [str(_run(runs, n)[0]) for n in ("bf16", "nvfp4", "ufp4")]
    rows = compare(dirs)
    assert [r["recipe"] for r in rows] == ["bf16", "nvfp4", "ufp4"]
    assert rows[0]["val_degradation"] == 0 and rows[0]["step_time_ratio"] == 1
    base = _run(runs, "bf16")[1]
    assert rows[2]["val_degradation"] == pytest.approx(_run(runs, "ufp4")[1]["final_val_loss"] / base["final_val_loss"] - 1)
    assert rows[2]["step_time_ratio"] > 1  # the CPU reference quantizer is slow
    plot(dirs, tmp_path / "cmp.png")
    assert (tmp_path / "cmp.png").read_bytes()[:4] == b"\x89PNG"
    no_base = compare(dirs[1:])
    assert no_base[0]["val_degradation"] is None


def test_lr_schedule():
    t = TrainConfig(steps=100, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, t) == pytest.approx(0.1) and lr_at(9, t) == pytest.approx(1.0)
    assert lr_at(10, t) == pytest.approx(1.0)
    assert lr_at(55, t) == pytest.approx(0.55)
    assert lr_at(100, t) == pytest.approx(0.1)
    assert TrainConfig(steps=100).warmup == 5


KILLER = textwrap.dedent(
    """
    import os, sys, torch
    torch.set_num_threads(1)
    import fourcast.train.loop as loop
    real = loop.train
    def killed_after(*args, **kw):
        kw["on_step"] = lambda step, rec: os.kill(os.getpid(), 9) if step == int(os.environ["KILL_AT"]) else None
        return real(*args, **kw)
    loop.train = killed_after
    from fourcast.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


def test_killed_run_resumes_bit_identically(text, tmp_path):
    # ue5m3 with a 3-step tensor-scale period: the resumed step 4 uses the amax stored
    # at step 3, which must come back from the checkpoint; SR on dY must repeat too.
    args = [
        "train", "--recipe", "ue5m3", "--set", "tensor_scale_refresh=3", "--model", "tiny,n_layers=1",
        "--data", str(text / "train.txt"), "--val", str(text / "val.txt"), "--steps", "10",
        "--batch", "2", "--seq", "64", "--lr", "1e-2", "--eval-every", "5", "--ckpt-every", "4",
        "--set", "train.eval_batches=1", "--no-progress", "--seed", "3",
    ]  # fmt: skip
    env = {**os.environ, "FOURCAST_CACHE": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1", "KILL_AT": "6"}
    whole, part = tmp_path / "whole", tmp_path / "part"
    os.environ["FOURCAST_CACHE"] = env["FOURCAST_CACHE"]
    try:
        assert main(args + ["--out", str(whole)]) == 0
    finally:
        del os.environ["FOURCAST_CACHE"]
    proc = subprocess.run([sys.executable, "-c", KILLER] + args + ["--out", str(part)], env=env, capture_output=True, text=True)
    assert proc.returncode == -9, proc.stderr
    assert checkpoint.read_meta(part)["step"] == 4
    assert len(run.read_metrics(part)[0]) == 6  # two steps past the checkpoint, lost
    assert not (part / "summary.json").exists()
    resumed = subprocess.run([sys.executable, "-m", "fourcast.cli"] + args + ["--out", str(part), "--resume"], env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr
    a_train, a_val = run.read_metrics(whole)
    b_train, b_val = run.read_metrics(part)
    assert [r["step"] for r in b_train] == list(range(1, 11))
    for a, b in zip(a_train, b_train):
        assert (a["loss"], a["grad_norm"], a["lr"], a["tokens"]) == (b["loss"], b["grad_norm"], b["lr"], b["tokens"]), a["step"]
    assert a_val == b_val
    # the uninterrupted run's losses do move step to step (the comparison is not vacuous)
    assert len({r["loss"] for r in a_train}) == 10


def test_resume_extends_a_run_and_refuses_other_settings(text, tmp_path):
    cfg = _cfg(fc.recipe("bf16"), text, tmp_path / "cache", steps=4, ckpt_every=2)
    cfg.data.tokenizer = "bpe:320"  # the vocabulary comes from the data: resume must see the same
    train(cfg, tmp_path / "r")
    longer = _cfg(fc.recipe("bf16"), text, tmp_path / "cache", steps=6, ckpt_every=2)
    longer.data.tokenizer = "bpe:320"
    summary = train(longer, tmp_path / "r", resume=True)
    assert summary["steps"] == 6 and len(run.read_metrics(tmp_path / "r")[0]) == 6
    other = _cfg(fc.recipe("bf16"), text, tmp_path / "cache", steps=8, seed=5)
    other.data.tokenizer = "bpe:320"
    with pytest.raises(fc.TrainError, match="train differs.*seed"):
        train(other, tmp_path / "r", resume=True)
    with pytest.raises(fc.TrainError, match="recipe differs"):
        train(_cfg(fc.recipe("bf16", keep_bf16_first=1), text, tmp_path / "cache", steps=8), tmp_path / "r", resume=True)


def test_timeline_summary_unions_overlapping_kernels():
    from fourcast.train.profile import kernel_class, timeline_summary

    kernels = [("_strip_kernel", 0.0, 100.0), ("nvjet_tst_128x256", 50.0, 100.0), ("elementwise_add", 400.0, 50.0)]
    s = timeline_summary(kernels, wall_ms=0.5)
    assert s["gpu_busy_ms"] == pytest.approx(0.2)  # [0, 150] and [400, 450] us
    assert s["gpu_idle_ms"] == pytest.approx(0.3)
    assert s["kernel_ms_by_class"] == pytest.approx({"quantize": 0.1, "gemm": 0.1, "other": 0.05})
    assert kernel_class("flash_fwd_kernel") == "attention" and s["top_kernels"][0]["calls"] == 1
    assert kernel_class("_dequantize_kernel") == "dequantize" and kernel_class("_epilogue_kernel") == "gemm"
    assert kernel_class("_strip_amax_kernel") == kernel_class("_amax_kernel") == "quantize"
    assert kernel_class("cudnn_generated_fort_native_sdpa_sm90_flash_fprop") == "attention"
    assert kernel_class("ncclDevKernel_AllReduce_Sum_bf16_RING_LL") == "communication"


def test_timeline_regions_match_the_profile_ops():
    """A Timeline step traces the same regions (same keys) as a Profiler step, so every
    profiled op gets its GPU kernel time; on the CPU those times are 0 but the calls match."""
    from fourcast.train.profile import Profiler, Timeline

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 32))
    fc.convert(model, fc.recipe("ue5m3", keep_bf16_last=0))
    model.append(torch.nn.Linear(32, 16))  # left in high precision: traced by hooks
    x = torch.randn(32, 64)

    def step():
        model(x).square().sum().backward()

    prof = Profiler(torch.device("cpu"))
    prof.start_step(model)
    step()
    prof.stop_step(0, 1.0)
    tl = Timeline(model)
    tl.start()
    step()
    traced = {"step": 1, **tl.stop(1.0)}
    regions = {k: r for k, r in traced["regions"].items() if k != "(unattributed)"}
    assert regions and all(r["calls"] > 0 for r in regions.values())
    report = prof.report(unprofiled_ms=1.0, context={}, timeline=traced)
    kinds = {op["kind"] for op in report["ops"]}
    assert {"gemm", "quantize"} <= kinds
    drop = ("ms_per_call", "ms_per_step")  # same ops, same calls; the times differ
    assert sorted(json.dumps({k: v for k, v in op.items() if k not in drop}, sort_keys=True) for op in report["gpu_ops"]) \
        == sorted(json.dumps({k: v for k, v in op.items() if k not in drop}, sort_keys=True) for op in report["ops"])
    assert report["gpu_time"]["step"] == 1


def test_region_gpu_times_follow_each_launch_to_its_region():
    """GPU work is counted for the innermost region open on the launching thread when its
    launch call ran (runtime or driver API: Triton launches through cuLaunchKernelEx), not
    by when it ran on the GPU; work launched outside every region is reported apart."""
    from fourcast.train.profile import REGION_PREFIX, region_gpu_times

    q, g = '{"kind": "quantize"}', '{"kind": "gemm"}'

    def x(cat, name, ts, dur, tid=1, **args):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "tid": tid, "args": args}

    keys = {REGION_PREFIX + "quantize::0": q, REGION_PREFIX + "gemm::1": g}
    trace = {"traceEvents": [
        x("user_annotation", REGION_PREFIX + "quantize::0", 0, 10),
        x("user_annotation", REGION_PREFIX + "gemm::1", 20, 10, tid=2),  # the backward thread
        x("user_annotation", REGION_PREFIX + "quantize::0", 40, 10),
        x("cuda_driver", "cuLaunchKernelEx", 2, 1, correlation=1),
        x("cuda_runtime", "cudaLaunchKernel", 21, 1, tid=2, correlation=2),
        x("cuda_runtime", "cudaMemcpyAsync", 25, 1, tid=2, correlation=3),
        x("cuda_runtime", "cudaLaunchKernel", 31, 1, tid=2, correlation=4),  # after the gemm range
        x("cuda_driver", "cuLaunchKernelEx", 45, 1, correlation=5),
        x("kernel", "_strip_kernel", 500, 70, correlation=1),  # runs long after its launch
        x("kernel", "nvjet_gemm", 600, 300, correlation=2),
        x("gpu_memcpy", "Memcpy DtoD", 900, 20, correlation=3),
        x("kernel", "elementwise", 920, 5, correlation=4),
        x("kernel", "_strip_kernel", 930, 30, correlation=5),
        x("gpu_user_annotation", REGION_PREFIX + "gemm::1", 600, 400),  # GPU mirrors are not work
        x("kernel", "_epilogue_kernel", 960, 10, correlation=6),  # no launch call in the trace:
    ]}                                                            # by the mirror it runs in
    r = region_gpu_times(trace, keys)
    assert r[q] == pytest.approx({"calls": 2, "gpu_ms": 0.1})
    assert r[g] == pytest.approx({"calls": 1, "gpu_ms": 0.33})
    assert r["(unattributed)"] == pytest.approx({"calls": 1, "gpu_ms": 0.005, "by_gpu_span_ms": 0.01})


def test_region_gpu_times_on_a_real_h200_trace():
    """The attribution on a committed H200 trace (run 8, MoE ue5m3, torch 2.11): every
    kernel reaches its launch call (Triton's through cuLaunchKernelEx), and the GPU time
    per op kind equals the run's committed gpu_ops."""
    import gzip

    from fourcast.train.profile import REGION_PREFIX, region_gpu_times

    run = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results/training-h200-run8/moe-125m/ue5m3"
    trace = json.load(gzip.open(run / "timeline-trace.json.gz"))
    names = {e["name"] for e in trace["traceEvents"] if e.get("cat") == "user_annotation"
             and e["name"].startswith(REGION_PREFIX)}
    r = region_gpu_times(trace, {n: n for n in names})  # each name its own key: the kind is in it
    assert r["(unattributed)"]["by_gpu_span_ms"] == 0.0  # no kernel without its launch call
    by_kind: dict = {}
    for name, slot in r.items():
        if name != "(unattributed)":
            kind = name.split(":")[1]
            by_kind[kind] = by_kind.get(kind, 0.0) + slot["gpu_ms"]
    committed: dict = {}
    for op in json.loads((run / "profile.json").read_text())["gpu_ops"]:
        committed[op["kind"]] = committed.get(op["kind"], 0.0) + op["ms_per_step"]
    assert by_kind == pytest.approx(committed, rel=1e-9)
    assert by_kind["quantize"] > 25 and by_kind["gemm"] > 20  # ms: the step's real work


def test_the_timeline_step_is_picked_apart_from_the_profiled_ones():
    from fourcast.train.profile import pick_timeline_step, sampled_steps

    at = set(sampled_steps(0, 26, 3))
    step = pick_timeline_step(None, 0, 26, at)
    assert step not in at and 3 <= step < 26 and at == set(sampled_steps(0, 26, 3))
    assert pick_timeline_step(None, 0, 26, set()) == -1  # profiling off: no trace unless asked
    assert pick_timeline_step("off", 0, 26, at) == -1
    chosen = set(at)
    assert pick_timeline_step(str(sorted(at)[1]), 0, 26, chosen) == sorted(at)[1]
    assert sorted(at)[1] not in chosen  # the asked step is traced, not also profiled
    assert pick_timeline_step(None, 20, 22, {21}) == -1  # no free step past warm-up
