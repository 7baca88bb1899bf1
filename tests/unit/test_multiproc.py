"""Data-parallel training on the CPU: two processes under torchrun (gloo backend) train a
tiny model with DDP and with FSDP2 through the `fourcast train` CLI, and the result is
checked against one process that sees the same global batch.

Two torchrun launches run one after the other: bf16 DDP exactly as a user runs it (the CLI
creates and destroys the process group), and ue5m3 DDP, bf16 FSDP2, ue5m3 FSDP2 one after
the other in one process group the worker creates first (re-creating a destroyed group
in one process can hang with torchrun's store). This file is its own worker
(`python test_multiproc.py worker PLAN`), which also records, through a Python audit
hook, every file each rank writes under the run folders, and ends as the `fourcast`
command does (cli.exit_process: after gloo training, without interpreter finalization,
where a gloo thread that takes the GIL aborts the process).

Same global batch: a rank draws its windows from (seed, step, rank) (data.py), so rank 0
and rank 1 together see different text from one process drawing twice as many windows.
The single-process reference therefore trains batch 4 made of exactly rank 0's and
rank 1's windows (Data.batch patched in this process). With that:

- bf16 (fp32 math on the CPU): DDP and FSDP2 average the two ranks' gradients, which
  equals the global-batch gradient up to fp32 reassociation (per-rank partial sums, then
  the all-reduce or reduce-scatter). Bound: |loss difference| <= 2e-5 nats on every step
  (about 40 ulps of fp32 at a loss of 5; measured: at most 1 ulp, 4.8e-7), grad_norm to
  1e-5 relative (measured 4.5e-7) and final parameters to 1e-4 of the largest possible
  Adam displacement, LR * STEPS (8e-6). Adam divides each gradient element by its own
  running RMS, so where an element's gradient nearly cancels, fp32 reassociation noise
  in it reaches the update at up to O(LR): the parameter difference depends on the
  machine's summation order (measured 9e-8 on one machine, 1.6e-6 on another), while a
  wrong reduction moves parameters by O(LR * STEPS).
  A missing all-reduce moves the losses by ~1e-2; a sum instead of a mean doubles
  grad_norm (Adam alone would hide that: it is invariant to the gradients' scale).
- ue5m3: the ranks quantize differently from one process by design: SR on dY draws from
  a per-rank Philox stream (nn.operand_seed), and on the tensor-scale refresh step each
  rank measures its own tensor amax (synced to the max afterwards). The bound is the
  measured noise of quantization itself: a second single-process run whose SR stream is
  rank 1's (everything else equal). Every step's |DDP or FSDP2 - reference| must stay within
  NOISE_FACTOR = 3 times the largest |SR variant - reference| over the run (measured:
  DDP 0.011, SR variant 0.0095 nats), and the first step's loss, which only the per-rank
  amax touches (no update has happened yet), within 1e-3 (measured 1.5e-4).
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import subprocess
import sys

WORLD = 2
STEPS = 8
BATCH = 2  # per process
SEQ = 64
MODEL = "tiny,n_layers=1"
RECIPES = ("bf16", "ue5m3")
MODES = ("ddp", "fsdp")
BF16_LOSS_TOL = 2e-5
BF16_GRAD_NORM_RTOL = 1e-5
LR = 1e-2
BF16_PARAM_TOL = 1e-4 * LR * STEPS
NOISE_FACTOR = 3.0
FIRST_STEP_TOL = 1e-3


def _cli_args(recipe: str, text: pathlib.Path, out: pathlib.Path, batch: int, dist: str = "ddp") -> list[str]:
    return [
        "train", "--recipe", recipe, "--model", MODEL, "--data", str(text / "train.txt"), "--val", str(text / "val.txt"),
        "--steps", str(STEPS), "--batch", str(batch), "--seq", str(SEQ), "--lr", str(LR), "--device", "cpu",
        "--eval-every", "0", "--ckpt-every", "0", "--set", "train.eval_batches=1", "--set", f"train.dist={dist}",
        "--no-progress", "--out", str(out),
    ]  # fmt: skip


# ---------------------------------------------------------------- the torchrun worker


def _worker(plan_path: str) -> int:
    """Run each CLI argv of the plan in turn (in one process group created here when the
    plan says "preinit", else the CLI's own); record writes under the plan's run
    folders; exit non-zero on any failure."""
    plan = json.loads(pathlib.Path(plan_path).read_text())
    roots = [os.path.realpath(p) for p in plan["runs"]]
    writes: list[list] = []

    def inside(path) -> bool:
        try:
            p = os.path.realpath(os.fsdecode(path))
        except (TypeError, ValueError):
            return False
        return any(p == r or p.startswith(r + os.sep) for r in roots)

    def hook(event: str, args: tuple) -> None:
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            mode, flags = args[1], args[2] if len(args) > 2 else 0
            writing = any(c in mode for c in "wax+") if isinstance(mode, str) else bool((flags or 0) & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if writing and inside(args[0]):
                writes.append([event, os.fsdecode(args[0])])
        elif event in ("os.rename", "os.replace", "os.mkdir", "os.remove", "os.unlink", "os.rmdir", "shutil.rmtree", "shutil.copyfile"):
            if any(isinstance(a, (str, bytes, os.PathLike)) and inside(a) for a in args[:2]):
                writes.append([event, os.fsdecode(args[0])])

    sys.addaudithook(hook)
    import torch

    torch.set_num_threads(1)
    from fourcast.cli import main

    if plan["preinit"]:
        import torch.distributed as dist

        dist.init_process_group("gloo")
    codes = [main(argv) for argv in plan["argvs"]]
    rank = int(os.environ["RANK"])
    # Written after the hook's last use of `writes`; the log path is outside the runs.
    pathlib.Path(plan["log"].format(rank=rank)).write_text(json.dumps({"codes": codes, "writes": writes}))
    if plan["preinit"]:
        dist.destroy_process_group()
    return max(codes)


if __name__ == "__main__" and len(sys.argv) == 3 and sys.argv[1] == "worker":
    from fourcast.cli import exit_process

    exit_process(_worker(sys.argv[2]))


# ---------------------------------------------------------------- the tests


import numpy as np  # noqa: E402
import pytest  # noqa: E402

@pytest.fixture(scope="module")
def text(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("text")
    corpus = shared_data / "corpus"
    (d / "train.txt").write_bytes((corpus / "train" / "gutenberg.txt").read_bytes()[:300_000])
    (d / "val.txt").write_bytes((corpus / "val" / "gutenberg.txt").read_bytes()[:50_000])
    return d


def _launch(root: pathlib.Path, name: str, runs: dict, text: pathlib.Path, preinit: bool) -> subprocess.Popen:
    plan = {
        "argvs": [_cli_args(r, text, out, BATCH, m) for (r, m), out in runs.items()],
        "runs": [str(p) for p in runs.values()],
        "log": str(root / f"{name}-rank{{rank}}.json"),
        "preinit": preinit,
    }
    (root / f"{name}.json").write_text(json.dumps(plan))
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(FOURCAST_CACHE=str(root / f"cache-{name}"), OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD}", __file__, "worker", str(root / f"{name}.json")]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


@pytest.fixture(scope="module")
def launched(text, tmp_path_factory):
    """Both launches, 2 processes each: (run folders by (recipe, mode), per-rank logs
    {"codes": [CLI exit codes], "writes": [[event, path]]} of both launches merged)."""
    root = tmp_path_factory.mktemp("dist")
    runs = {(r, m): root / f"{r}-{m}" for r in RECIPES for m in MODES}
    first = {("bf16", "ddp"): runs[("bf16", "ddp")]}
    rest = {k: v for k, v in runs.items() if k not in first}
    # One launch at a time: two ranks per core are enough load for a 2-core CI machine.
    launches = (("cli", first, False), ("rest", rest, True))
    for name, plan_runs, preinit in launches:
        proc = _launch(root, name, plan_runs, text, preinit)
        try:
            out, _ = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"torchrun launch '{name}' ran past 240 s")
        if proc.returncode != 0:
            pytest.fail(f"torchrun launch '{name}' failed ({proc.returncode}):\n{out[-6000:]}")
    logs = []
    for r in range(WORLD):
        parts = [json.loads((root / f"{name}-rank{r}.json").read_text()) for name, _, _ in launches]
        logs.append({"codes": sum((p["codes"] for p in parts), []), "writes": sum((p["writes"] for p in parts), [])})
    return runs, logs


def _reference(text, out, recipe, monkeypatch, sr_rank_offset=0):
    """One process, batch WORLD*BATCH = rank 0's windows then rank 1's (see the module doc)."""
    import torch

    from fourcast import nn as fcnn
    from fourcast.cli import main
    from fourcast.train.data import Data

    draw = Data.batch

    def global_batch(self, step, batch, seq, *, seed, rank=0):
        parts = [draw(self, step, batch // WORLD, seq, seed=seed, rank=r) for r in range(WORLD)]
        return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])

    set_step = fcnn.set_step
    with monkeypatch.context() as m:
        m.setattr(Data, "batch", global_batch)
        m.setattr(fcnn, "set_step", lambda model, step, rank=0: set_step(model, step, rank + sr_rank_offset))
        for key in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
            m.delenv(key, raising=False)
        m.setenv("FOURCAST_CACHE", str(out.parent / "cache"))
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            assert main(_cli_args(recipe, text, out, WORLD * BATCH)) == 0
        finally:
            torch.set_num_threads(threads)
    return out


@pytest.fixture(scope="module")
def references(text, tmp_path_factory):
    mp = pytest.MonkeyPatch()
    root = tmp_path_factory.mktemp("ref")
    try:
        refs = {r: _reference(text, root / r, r, mp) for r in RECIPES}
        refs["ue5m3-sr1"] = _reference(text, root / "ue5m3-sr1", "ue5m3", mp, sr_rank_offset=1)
    finally:
        mp.undo()
    return refs


def _lines(run_dir):
    from fourcast.train import run

    return run.read_metrics(run_dir)[0]


def _params(run_dir) -> dict:
    from safetensors.numpy import load_file

    return {k: v for k, v in load_file(str(run_dir / "checkpoint.safetensors")).items() if k.startswith("model/")}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("recipe", RECIPES)
def test_run_folder_is_complete_and_the_loss_falls(launched, recipe, mode):
    from fourcast.train import checkpoint, run

    runs, _ = launched
    run_dir = runs[(recipe, mode)]
    for f in run.REQUIRED:
        assert (run_dir / f).is_file(), f
    assert not [p.name for p in run_dir.iterdir() if ".tmp" in p.name]  # every atomic write finished
    lines = _lines(run_dir)
    assert [r["step"] for r in lines] == list(range(1, STEPS + 1))  # one writer: no duplicate lines
    losses = [r["loss"] for r in lines]
    assert all(math.isfinite(x) for x in losses)
    assert np.mean(losses[-2:]) < np.mean(losses[:2]) - 0.5, losses
    assert lines[-1]["tokens"] == STEPS * WORLD * BATCH * SEQ
    summary = json.loads((run_dir / "summary.json").read_text())
    env = json.loads((run_dir / "env.json").read_text())
    cfg = json.loads((run_dir / "config.json").read_text())
    assert summary["world_size"] == env["world_size"] == WORLD and cfg["train"]["dist"] == mode
    assert summary["tokens"] == STEPS * WORLD * BATCH * SEQ
    assert len(summary["convert"]["converted"]) == (0 if recipe == "bf16" else 4)  # wqkv, wo, w_gate_up, w_down
    assert checkpoint.read_meta(run_dir)["step"] == STEPS


def test_only_rank_0_writes_the_run_folder(launched):
    runs, logs = launched
    assert [log["codes"] for log in logs] == [[0] * len(runs)] * WORLD
    assert logs[1]["writes"] == []
    written = {pathlib.Path(path).name for _, path in logs[0]["writes"]}
    # The hook sees rank 0's writes (so an empty list for rank 1 means something).
    assert {"metrics.jsonl", "loss.png"} <= written and any(n.startswith("checkpoint.tmp") for n in written)
    for run_dir in runs.values():
        assert any(path.startswith(str(run_dir)) for _, path in logs[0]["writes"])


@pytest.mark.parametrize("mode", MODES)
def test_bf16_matches_one_process_on_the_same_global_batch(launched, references, mode):
    runs, _ = launched
    dist, ref = _lines(runs[("bf16", mode)]), _lines(references["bf16"])
    diff = np.abs(np.array([r["loss"] for r in dist]) - [r["loss"] for r in ref])
    assert diff.max() <= BF16_LOSS_TOL, diff
    norms = np.array([[a["grad_norm"], b["grad_norm"]] for a, b in zip(dist, ref)])
    np.testing.assert_allclose(norms[:, 0], norms[:, 1], rtol=BF16_GRAD_NORM_RTOL)  # mean, not sum, of rank gradients
    pd, pr = _params(runs[("bf16", mode)]), _params(references["bf16"])
    assert pd.keys() == pr.keys()
    worst = max(float(np.abs(pd[k] - pr[k]).max()) for k in pd)
    assert worst <= BF16_PARAM_TOL, worst


@pytest.mark.parametrize("mode", MODES)
def test_ue5m3_matches_one_process_within_quantization_noise(launched, references, mode):
    runs, _ = launched
    dist = np.array([r["loss"] for r in _lines(runs[("ue5m3", mode)])])
    ref = np.array([r["loss"] for r in _lines(references["ue5m3"])])
    variant = np.array([r["loss"] for r in _lines(references["ue5m3-sr1"])])
    noise = np.abs(variant - ref).max()
    assert noise > 0  # the SR stream does change the run (else the bound would mean nothing)
    assert abs(dist[0] - ref[0]) <= FIRST_STEP_TOL
    assert np.abs(dist - ref).max() <= NOISE_FACTOR * noise, (np.abs(dist - ref), noise)


@pytest.mark.parametrize("recipe", RECIPES)
def test_fsdp2_and_ddp_agree(launched, references, recipe):
    """Same ranks, same data, same SR streams and amax: the two wrappers differ only by
    fp32 reassociation of the gradient reduction. In bf16 that is an ulp of the loss.
    Through a 4-bit quantizer it is nothing until an ulp moves a weight across a rounding
    boundary, and from then on a flipped code (ue5m3, session 7: equal losses for six
    steps, then 5e-6 and 7e-5; equal for all eight before the epilogue's rounding changed).
    So ue5m3's have equal step-1 losses and step-1 gradient norms within reassociation
    (identical weights, data and SR streams; only the reduction order differs), and losses
    within the quantization noise after that."""
    runs, _ = launched
    a, b = _lines(runs[(recipe, "ddp")]), _lines(runs[(recipe, "fsdp")])
    diff = np.abs(np.array([x["loss"] for x in a]) - [y["loss"] for y in b])
    if recipe == "bf16":
        assert diff.max() <= BF16_LOSS_TOL, diff
        return
    ref = np.array([r["loss"] for r in _lines(references["ue5m3"])])
    noise = np.abs(np.array([r["loss"] for r in _lines(references["ue5m3-sr1"])]) - ref).max()
    assert diff[0] == 0 and diff.max() <= NOISE_FACTOR * noise, (diff, noise)
    np.testing.assert_allclose(a[0]["grad_norm"], b[0]["grad_norm"], rtol=BF16_GRAD_NORM_RTOL)


# ---------------------------------------------------------------- benchmarks/multigpu.py (its CPU-checkable parts)


@pytest.fixture(scope="module")
def bench():
    """benchmarks/multigpu.py imported by path (it sets the NCCL variables on import:
    restored here so other tests see the environment they had)."""
    import importlib.util

    path = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "multigpu.py"
    saved = dict(os.environ)
    spec = importlib.util.spec_from_file_location("multigpu_bench", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
        assert {k: os.environ[k] for k in mod.NCCL_ENV} == {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return mod


@pytest.mark.parametrize("hw_name", ["h200", "b200", "mi355x"])
@pytest.mark.parametrize("ranks", [2, 4, 8])
def test_benchmark_comm_formula_is_the_rust_step_term(bench, hw_name, ranks):
    """The benchmark's collective time and parameter count mirror the Rust step model
    (its comm term with no overlap), for a dense, a GQA and a MoE model."""
    import fourcast as fc

    from fourcast.train.config import model_config

    tiny = {"name": "t", "layers": 2, "hidden": 256, "heads": 4, "kv_heads": 4, "head_dim": 0, "ffn": 768, "gated": True, "vocab": 512,
            "seq_len": 128, "experts": 0, "top_k": 0, "expert_ffn": 0, "tied_embeddings": False}  # fmt: skip
    moe = {**tiny, "experts": 8, "top_k": 2, "expert_ffn": 384, "tied_embeddings": True}
    for spec in ("llama3-8b", tiny, moe):
        check = bench.check_mirror(fc.hw.load(hw_name), fc.hw.model(spec), fc.recipe("bf16"), ranks)
        assert check["agree"], (spec, check)
    cfg = {"model": {**vars(model_config("tiny")), "vocab_size": 300}, "model_name": "tiny", "train": {"seq": 64}}
    m = fc.hw.model(bench.train_model_for_hw(cfg))
    assert (m.hidden, m.layers, m.vocab, m.gated, m.tied_embeddings) == (64, 4, 384, True, False)


def _synthetic_comm(bench, busbw, alpha, ranks=2):
    sizes = [2**k for k in range(10, 31)]
    ops = {op: [{"bytes": s, "time_s": alpha + bench.bus_factor(op, ranks) * s / busbw} for s in sizes] for op in bench.OPS}
    for op, rows in ops.items():
        for r in rows:
            r["busbw_gbs"] = r["bytes"] * bench.bus_factor(op, ranks) / r["time_s"] / 1e9
    return {"meta": {"world": ranks, "backend": "nccl", "device": "cuda", "gpu": "synthetic", "date": "2026-01-01T00:00:00"}, "ops": ops}


def test_benchmark_calibration_recovers_a_known_link(bench):
    import fourcast as fc

    # A pure-bandwidth link of 300 GB/s bus bandwidth (below H200's 450 GB/s per direction).
    cal = bench.calibrate(_synthetic_comm(bench, 300e9, 0.0), "h200", 2**28)
    assert cal["override"]["efficiency.comm"] == pytest.approx(300 / 450, rel=1e-4)  # 4 significant digits
    assert "links.scaleup_gbs" not in cal["override"] and cal["override"]["efficiency.comm.confidence"] == "measured"
    hw = fc.hw.load("h200", set=cal["override"])  # the override is one a user can load
    assert bench.model_busbw(hw) == pytest.approx(300e9, rel=1e-4)
    for op in bench.OPS:  # every size and op, since this link has no latency
        assert max(abs(e["err_after"]) for e in cal["errors"][op]) < 1e-4
    assert cal["summary"]["all_reduce"]["max_abs_err_before_fit_range"] == pytest.approx(1 - 300 / 360, rel=1e-9)  # model 360 GB/s
    # With 20 us latency: the alpha-beta fit finds both; the model (bandwidth only) is off
    # at small sizes, which the report states rather than hides.
    cal = bench.calibrate(_synthetic_comm(bench, 300e9, 20e-6), "h200", 2**28)
    ab = cal["summary"]["reduce_scatter"]["alpha_beta"]
    assert ab["alpha_us"] == pytest.approx(20, rel=1e-3) and ab["busbw_gbs"] == pytest.approx(300, rel=1e-3)
    assert cal["measured_busbw_gbs"] == pytest.approx(300 * (1 - 0.013), rel=0.01)  # 20 us of ~0.9-3.6 ms
    small = cal["errors"]["all_reduce"][0]
    assert small["bytes"] == 1024 and small["err_after"] < -0.99
    # Faster than the vendor link: the link number moves, efficiency.comm saturates at 1.
    fast = bench.calibrate(_synthetic_comm(bench, 500e9, 0.0), "h200", 2**28)["override"]
    assert fast["efficiency.comm"] == 1.0 and fast["links.scaleup_gbs"] == pytest.approx(1000, rel=1e-3)
    assert bench.model_busbw(fc.hw.load("h200", set=fast)) == pytest.approx(500e9, rel=1e-3)


def test_benchmark_loss_agreement(bench):
    rng = np.random.default_rng(0)
    trend = 3 + 2 * np.exp(-np.arange(200) / 40)
    a, b = trend + 0.05 * rng.standard_normal(200), trend + 0.05 * rng.standard_normal(200)
    same = bench.loss_agreement(list(a), list(b))
    assert same["within_noise"] and same["batch_sigma"] == pytest.approx(0.05, rel=0.2)
    assert same["rms_over_sqrt2_sigma"] == pytest.approx(1, abs=0.2)
    assert not bench.loss_agreement(list(a + 0.1), list(b))["within_noise"]
