"""Projection of a measured profile onto other GPUs (fourcast/project.py)."""

import json
import pathlib

import pytest

from fourcast import hw as fchw
from fourcast import project
from fourcast.cli import main
from fourcast.errors import ConfigError, HardwareError
from fourcast.kernels import QUANT_REV

NV = "e2m1/e4m3x16"


def _profile(timer="cuda-events"):
    tokens = 8192
    return {
        "schema": "fourcast.profile/1", "device": "cuda:0", "gpu": "NVIDIA H200", "timer": timer,
        "recipe": "nvfp4", "tokens_per_step": tokens, "world_size": 1, "steps": [5],
        "step_time_ms": {"profiled": 10.0, "unprofiled": 9.8}, "overhead": 0.02,
        "classes": {"gemm": 5.0, "quantize": 1.5, "dequantize": 0.7, "attention": 1.2, "optimizer": 0.3, "other": 1.1},
        "ops": [
            {"kind": "gemm", "role": "fprop", "layer": "blocks.0.mlp.w1", "M": tokens, "N": 2048, "K": 768,
             "a": NV, "b": NV + "x16", "rht": 0, "path": "dequant", "calls_per_step": 1, "ms_per_call": 0.1, "ms_per_step": 0.1},
            {"kind": "gemm", "role": "dgrad+wgrad", "layer": "head", "M": tokens, "N": 8192, "K": 768,
             "a": "bf16", "b": "bf16", "rht": 0, "path": "torch", "calls_per_step": 1, "ms_per_call": 0.3, "ms_per_step": 0.3},
            {"kind": "quantize", "layer": "blocks.0.mlp.w1", "operand": "fprop.x+wgrad.x", "rows": tokens, "cols": 768,
             "fmt": NV + "+" + NV, "rht": 16, "sr": False, "amax": "measured+measured",
             "bytes_in": 2 * tokens * 768, "bytes_out": tokens * 768, "calls_per_step": 1},
            {"kind": "dequantize", "layer": "blocks.0.mlp.w1", "gemm": "fprop", "emulation": True, "calls_per_step": 1},
            {"kind": "attention", "phase": "fwd", "B": 8, "H": 12, "T": 1024, "D": 64, "calls_per_step": 12},
            {"kind": "attention", "phase": "bwd", "B": 8, "H": 12, "T": 1024, "D": 64, "calls_per_step": 12},
            {"kind": "optimizer", "params": 124_000_000, "calls_per_step": 1},
        ],
    }


@pytest.fixture
def run_dir(tmp_path):
    (tmp_path / "profile.json").write_text(json.dumps(_profile()))
    return tmp_path


def test_parse_format_round_trips_labels():
    assert project.parse_format("e2m1/e4m3x16x16") == {"element": "e2m1", "scale": "e4m3", "block": 16, "tile_2d": True, "rule": "te"}
    assert project.parse_format("e2m1/ue8m0x32")["rule"] == "floor"
    assert project.parse_format("e4m3/tensor")["scale"] == "fp32"
    assert project.parse_format("bf16") is None


def test_ops_mapping_splits_backward_and_drops_dequant():
    ops = project.model_ops(_profile())
    classes = [c for c, _, _ in ops]
    assert classes.count("gemm") == 3  # fprop + (dgrad, wgrad) of the bf16 head
    assert "dequantize" not in classes
    head_dgrad, head_wgrad = [o for c, o, _ in ops if c == "gemm"][1:]
    assert (head_dgrad["m"], head_dgrad["n"], head_dgrad["k"]) == (8192, 768, 8192)
    assert (head_wgrad["m"], head_wgrad["n"], head_wgrad["k"]) == (8192, 768, 8192)


def test_projection_report(run_dir):
    rep = project.project(run_dir, ["b200", "mi355x"], ["ue5m3"])
    assert [(r["hw"], r["native"]) for r in rep.targets] == [
        ("b200", ["none"]), ("b200", ["ue5m3"]), ("mi355x", ["none"]), ("mi355x", ["ue5m3"])]
    for r in rep.targets:
        assert "dequantize" not in r["breakdown_ms"]
        assert r["step_time_s"] == pytest.approx(sum(r["breakdown_ms"].values()) / 1e3)
        assert r["speedup_vs_h200"] > 1.0  # B200 / MI355X outrun an emulating H200 here
    assert set(rep.h200_error) >= {"gemm", "quantize", "attention"}
    paths = project.write_report(rep, run_dir)
    assert all(p.is_file() for p in paths.values())


def test_correction_changes_only_named_classes(run_dir):
    a = project.project(run_dir, ["b200"], correct=True).targets[0]["breakdown_ms"]
    b = project.project(run_dir, ["b200"], correct=False).targets[0]["breakdown_ms"]
    assert a["gemm"] == b["gemm"] and a["quantize"] == b["quantize"]
    assert a["attention"] != b["attention"] and a["optimizer"] != b["optimizer"]


def test_errors(tmp_path, run_dir):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(project.ProjectionError, match="no profile.json"):
        project.project(empty, ["b200"])
    with pytest.raises(project.ProjectionError, match="no run folder"):
        project.project(tmp_path / "missing", ["b200"])
    with pytest.raises(project.ProjectionError, match="unknown target 'b999'"):
        project.project(run_dir, ["b999"])
    cpu = tmp_path / "cpu"
    cpu.mkdir()
    (cpu / "profile.json").write_text(json.dumps(_profile(timer="perf_counter")))
    with pytest.raises(project.ProjectionError, match="CPU run"):
        project.project(cpu, ["b200"])


def test_cli_json_matches_api(run_dir, capsys):
    assert main(["project", str(run_dir), "--to", "b200", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    api = project.project(run_dir, ["b200"]).to_dict()
    assert out["targets"] == api["targets"]
    assert main(["project", str(run_dir), "--to", "nope"]) == 2
    assert "unknown target" in capsys.readouterr().err


def test_other_from_a_bf16_run(tmp_path, run_dir):
    bf16 = tmp_path / "bf16"
    bf16.mkdir()
    prof = _profile()
    prof["classes"]["other"] = 0.4
    (bf16 / "profile.json").write_text(json.dumps(prof))
    a = project.project(run_dir, ["b200"]).targets[0]["breakdown_ms"]["other"]
    b = project.project(run_dir, ["b200"], other_from=bf16).targets[0]["breakdown_ms"]["other"]
    assert b == pytest.approx(a * 0.4 / 1.1)
    prof["tokens_per_step"] = 4096
    (bf16 / "profile.json").write_text(json.dumps(prof))
    with pytest.raises(project.ProjectionError, match="not the same model"):
        project.project(run_dir, ["b200"], other_from=bf16)


# Committed H200 model-vs-measured bounds: |error| per (recipe, class) must stay within
# these (the current error rounded up to the next percent). Held out = not used to fit that
# class's H200 term (benchmarks/calibration/fit_emulation.py --measure gpu, session 5).
# Run 8 is the check: each op's GPU time (the kernels it launched, from the run's timeline
# step), which is what the model prices. Fit on 125m (bf16 GEMMs, every attention op,
# ue5m3/nvfp4/mxfp4 quantize); 350M, 50M at B16 T2048 and the MoE are held out whole.
# Runs 4-7 have no GPU times: their CUDA-event spans also hold host waits, which vary with
# the host (run 8's 125M ue5m3 quantize spans: 50 ms on one machine, 74 on another, for
# 53 ms of GPU time), so only their GEMM and attention classes are pinned, as regressions.
RESULTS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results"
RUN2, RUN4, RUN5, RUN6 = (RESULTS / f"training-h200-run{n}" for n in (2, 4, 5, 6))
RUN7 = RESULTS / "training-h200-run7/50m"
RUN8 = RESULTS / "training-h200-run8"
RUN10 = RESULTS / "training-h200-run10"
RUN11 = RESULTS / "training-h200-run11"
RUN12 = RESULTS / "training-h200-run12"
RUN13 = RESULTS / "training-h200-run13"
RUN14, RUN16 = RESULTS / "training-h200-run14", RESULTS / "training-h200-run16"
RUN17, RUN18 = RESULTS / "training-h200-run17", RESULTS / "training-h200-run18"
# The quantizer's [emulation] terms were fitted (session 9, projection-h200.md) on run 12's
# 125M ue5m3+sr4, ue5m3+sr16, nvfp4+sr16 (a step without a tensor-scale refresh) and run
# 11's 125M mxfp4+sr4 and ue5m3+sr4 (a refresh step), the rest held out. Since session 17
# they are fitted per call (runs 10-18; since session 19 (2) runs 10-22, the rotated amax term
# held at its kernel-benchmark value) with every "quantize" cell below as a constraint
# (fit_emulation.py --pin-fit, QUANT_PINS: model-calibration-per-call.md), so those cells
# are no longer held out: they pin the fit. Run 8 ran the older amax pass, so only its GEMM
# and attention cells stay pinned (its quantize ops took 7-26% longer).
GPU_BOUNDS = {
    RUN10 / "125m": {
        ("bf16", "gemm"): 0.01, ("ue5m3", "gemm"): 0.07, ("nvfp4", "gemm"): 0.06, ("ue5m3+sr4", "gemm"): 0.07,
        ("nvfp4+sr4", "gemm"): 0.06, ("mxfp4+sr4", "gemm"): 0.07,
        ("ue5m3", "quantize"): 0.02, ("nvfp4", "quantize"): 0.02, ("ue5m3+sr4", "quantize"): 0.04,
        ("nvfp4+sr4", "quantize"): 0.04, ("mxfp4+sr4", "quantize"): 0.03,
        **{(r, "attention"): 0.01 for r in ("bf16", "ue5m3", "nvfp4", "ue5m3+sr4", "nvfp4+sr4", "mxfp4+sr4")},
    },
    RUN10 / "350m": {
        ("bf16", "gemm"): 0.07, ("ue5m3+sr4", "gemm"): 0.14, ("ue5m3+sr4", "quantize"): 0.05,
        **{(r, "attention"): 0.03 for r in ("bf16", "ue5m3+sr4")},
    },
    # The FP4 runs' GEMMs from run 11 on went through fourcast's cuBLASLt call, priced with
    # cublaslt_gemm_time_factor, fitted (session 10) on run 12's three 125M FP4 runs; runs 11,
    # 13, 14 and 16 are held out.
    RUN11 / "125m": {("mxfp4+sr4", "quantize"): 0.03, ("nvfp4+sr4", "quantize"): 0.03, ("ue5m3+sr4", "quantize"): 0.04,
                     ("mxfp4+sr4", "gemm"): 0.01, ("nvfp4+sr4", "gemm"): 0.02, ("ue5m3+sr4", "gemm"): 0.03},
    RUN12 / "125m": {("ue5m3+sr4", "quantize"): 0.06, ("ue5m3+sr16", "quantize"): 0.01, ("nvfp4+sr16", "quantize"): 0.03,
                     ("ue5m3+sr4", "gemm"): 0.01, ("ue5m3+sr16", "gemm"): 0.01, ("nvfp4+sr16", "gemm"): 0.01},
    RUN12 / "350m": {("ue5m3+sr4", "quantize"): 0.05, ("ue5m3+sr16", "quantize"): 0.01},
    RUN13 / "125m": {("ue5m3+sr16", "quantize"): 0.01, ("ue5m3+sr16", "gemm"): 0.03},
    RUN14 / "125m": {("ue5m3+sr16", "quantize"): 0.01, ("mxfp4+sr16", "quantize"): 0.04,
                     ("ue5m3+sr16", "gemm"): 0.03, ("mxfp4+sr16", "gemm"): 0.01},
    # Run 16's strip kernel takes up to four row tiles a program (ue5m3's calls: four). The
    # saving per overlapped element is fitted (session 11) on run 15's ue5m3 calls against
    # run 14's; run 16 is held out (ue5m3's quantize class was +7.0% without the term).
    RUN16 / "125m": {("ue5m3+sr16", "quantize"): 0.01, ("mxfp4+sr16", "quantize"): 0.04,
                     ("ue5m3+sr16", "gemm"): 0.02, ("mxfp4+sr16", "gemm"): 0.02},
    # Run 17 (quantizer revision 11: sr16 rounds in integers): the saving per sr16 element
    # is fitted (session 11) on its ue5m3 row+col sr16 calls against run 16's (the class
    # was +8.1% without the term); mxfp4 is held out (+9.3% without, +1.8% with).
    RUN17 / "125m": {("ue5m3+sr16", "quantize"): 0.01, ("mxfp4+sr16", "quantize"): 0.02,
                     ("ue5m3+sr16", "gemm"): 0.02, ("mxfp4+sr16", "gemm"): 0.02},
    # Run 18 (revision 12, recorded in its profiles: the packed column copy's bytes stored
    # once a strip program): the saving per element is fitted (session 12) on its ue5m3 X
    # calls against run 17's (the class was +4.1% without the term); mxfp4 (32-row tiles,
    # one a program: no gather) is held out.
    RUN18 / "125m": {("ue5m3+sr16", "quantize"): 0.01, ("mxfp4+sr16", "quantize"): 0.02,
                     ("ue5m3+sr16", "gemm"): 0.02, ("mxfp4+sr16", "gemm"): 0.01},
    RUN8 / "125m": {
        ("bf16", "gemm"): 0.01, ("ue5m3", "gemm"): 0.07, ("nvfp4", "gemm"): 0.06, ("mxfp4", "gemm"): 0.08,
        ("ufp4", "gemm"): 0.07,
        **{(r, "attention"): 0.01 for r in ("bf16", "ue5m3", "nvfp4", "mxfp4", "ufp4")},
    },
    RUN8 / "350m": {
        ("bf16", "gemm"): 0.07, ("ue5m3", "gemm"): 0.14, ("nvfp4", "gemm"): 0.14,
        **{(r, "attention"): 0.03 for r in ("bf16", "ue5m3", "nvfp4")},
    },
    RUN8 / "50m": {
        ("bf16", "gemm"): 0.02, ("ue5m3", "gemm"): 0.07, ("nvfp4", "gemm"): 0.05,
        **{(r, "attention"): 0.05 for r in ("bf16", "ue5m3", "nvfp4")},
    },
    RUN8 / "moe-125m": {
        ("bf16", "gemm"): 0.07, ("ue5m3", "gemm"): 0.06, ("nvfp4", "gemm"): 0.06, ("mxfp4", "gemm"): 0.06,
        ("ufp4", "gemm"): 0.06,
        **{(r, "attention"): 0.02 for r in ("bf16", "ue5m3", "nvfp4", "mxfp4", "ufp4")},
    },
}
EVENT_BOUNDS = {
    RUN5: {**{(r, "gemm"): b for r, b in (("bf16", 0.04), ("ue5m3", 0.04), ("nvfp4", 0.03), ("mxfp4", 0.05),
                                          ("ufp4", 0.04))},
           **{(r, "attention"): 0.01 for r in ("bf16", "ue5m3", "nvfp4", "mxfp4", "ufp4")}},
    RUN6: {("bf16", "gemm"): 0.04, ("ue5m3", "gemm"): 0.10, ("nvfp4", "gemm"): 0.11,
           **{(r, "attention"): 0.04 for r in ("bf16", "ue5m3", "nvfp4")}},
    RUN7: {("bf16", "gemm"): 0.04, ("ue5m3", "gemm"): 0.07, ("nvfp4", "gemm"): 0.08,
           **{(r, "attention"): 0.06 for r in ("bf16", "ue5m3", "nvfp4")}},
    RUN4: {  # the unfused model: its small q/k/v GEMMs wait on the host (bf16 -15.2%)
        ("bf16", "gemm"): 0.16, ("ue5m3", "gemm"): 0.06, ("nvfp4", "gemm"): 0.04, ("mxfp4", "gemm"): 0.01,
        ("ufp4", "gemm"): 0.01,
        **{(r, "attention"): b for r, b in
           (("bf16", 0.01), ("ue5m3", 0.01), ("nvfp4", 0.01), ("mxfp4", 0.03), ("ufp4", 0.02))},
    },
}


def _quant_rev(run):
    """The revision (session) of the quantizer kernels a committed run ran (profiles before
    run 18 do not record it): 9 before run 15 (one row tile a strip program, float sr16), 10 for run 16
    (up to four tiles), 11 for run 17 (integer sr16). Explicit, so that a later kernel
    (a new default) leaves these cells where they are."""
    if run.is_relative_to(RUN18):
        return None  # its profiles record it (12)
    return 11 if run.is_relative_to(RUN17) else 10 if run.is_relative_to(RUN16) else 9


def _cases(bounds):
    return sorted({(run, r) for run, b in bounds.items() for r, _ in b})


def _id(v):
    return f"{v.parent.name}/{v.name}" if isinstance(v, pathlib.Path) else v


@pytest.mark.parametrize("run,recipe", _cases(GPU_BOUNDS), ids=_id)
def test_h200_prediction_of_gpu_time_stays_within_committed_bounds(recipe, run):
    rep = project.project(run / recipe, [], quant_rev=_quant_rev(run))
    for (r, cls), bound in GPU_BOUNDS[run].items():
        if r == recipe:
            err = rep.h200_error_gpu[cls]
            assert abs(err) <= bound, f"{run.name} {recipe} {cls}: {err:+.1%} outside committed {bound:.0%}"
            assert abs(err) <= 0.15  # issue 6's target, every pinned class


@pytest.mark.parametrize("run,recipe", _cases(EVENT_BOUNDS), ids=_id)
def test_h200_prediction_of_event_time_stays_within_committed_bounds(recipe, run):
    rep = project.project(run / recipe, [], quant_rev=_quant_rev(run))
    for (r, cls), bound in EVENT_BOUNDS[run].items():
        if r == recipe:
            err = rep.h200_error[cls]
            assert abs(err) <= bound, f"{run.name} {recipe} {cls}: {err:+.1%} outside committed {bound:.0%}"


def test_quant_rev_reaches_the_quantize_ops_and_prices_each_revision():
    """`quant_rev` tags every quantize op (and only those). Run 14 ran revision 9 (one row
    tile a strip program): priced as revision 10 (four tiles for ue5m3's row+col calls) its
    quantize class comes out lower by the prefetch saving. Run 17 ran revision 11 (integer
    sr16): priced as revision 10 (float sr16) its ue5m3 quantize class is over-priced by the
    8% the integer saving closes; the default is the current revision, 19."""
    run = RUN14 / "125m/ue5m3+sr16"
    prof = project.load_profile(run)
    tagged = project.as_measured({**prof, "quant_rev": 9})
    assert all(o.get("quant_rev") == 9 for c, o, _ in tagged if c == "quantize")
    assert all("quant_rev" not in o for c, o, _ in tagged if c != "quantize")
    assert all("quant_rev" not in o for c, o, _ in project.as_measured(prof) if c == "quantize")
    one = project.project(run, [], quant_rev=9).h200_model_gpu["quantize"]
    four = project.project(run, [], quant_rev=10).h200_model_gpu["quantize"]
    assert four < 0.95 * one
    run = RUN17 / "125m/ue5m3+sr16"
    old = project.project(run, [], quant_rev=10).h200_error_gpu["quantize"]
    new = project.project(run, [], quant_rev=11).h200_error_gpu["quantize"]
    assert old > 0.05 and abs(new) < 0.02, (old, new)
    # the kernels' revision is the model's default (kernels/__init__.py and rust ops.rs agree)
    assert QUANT_REV == 24
    default = project.project(run, []).h200_error_gpu["quantize"]
    assert project.project(run, [], quant_rev=QUANT_REV).h200_error_gpu["quantize"] == default
    # 13 runs the RTNE row+col calls (this run's X and W calls) on rowcol_gluon: priced lower;
    # 14 its one-lane layouts, and this run's dY calls ("sr16", blocks of 16) there too
    rev12, rev13 = (project.project(run, [], quant_rev=r).h200_model_gpu["quantize"] for r in (12, 13))
    assert rev13 < 0.99 * rev12 and project.project(run, [], quant_rev=14).h200_model_gpu["quantize"] < 0.99 * rev13
    # 16 runs TE's dY calls (a decoded rotated column copy) on rowcol_gluon, its X calls at two
    # row tiles a program: run 20's TE NVFP4 quantize class priced lower than at 15
    te = RESULTS / "training-h200-run20/125m/nvfp4+sr16"
    rev15, rev16 = (project.project(te, [], quant_rev=r).h200_model_gpu["quantize"] for r in (15, 16))
    assert rev16 < 0.97 * rev15, (rev15, rev16)
    # 17 takes f32 inputs (a LayerNorm's output: run 19's wqkv and w_gate_up X calls) on rowcol_gluon
    ue = RESULTS / "training-h200-run19/125m/ue5m3+sr16"
    rev16, rev17 = (project.project(ue, [], quant_rev=r).h200_model_gpu["quantize"] for r in (16, 17))
    assert rev17 < 0.99 * rev16, (rev16, rev17)
    # 18 runs MXFP4's calls there (a block of 32 in one lane): run 23's quantize class, as measured
    mx = RESULTS / "training-h200-run23/125m/mxfp4+sr16"
    rev17, rev18 = (project.project(mx, [], quant_rev=r) for r in (17, 18))
    assert rev18.h200_model_gpu["quantize"] < 0.85 * rev17.h200_model_gpu["quantize"]
    assert abs(rev18.h200_error_gpu["quantize"]) < 0.05 < abs(rev17.h200_error_gpu["quantize"])
    # 19 (session 21's shorter RTNE codes) is priced as 18 until a training run records it
    rev19 = project.project(mx, [], quant_rev=19)
    assert rev19.h200_model_gpu["quantize"] == rev18.h200_model_gpu["quantize"]
    # 20 (session 25) measures a bf16 input's rotated column amax in f32 where exact: TE's
    # calls with a fresh amax (run 20's) priced lower; MXFP4's (no amax pass) as at 19
    rev19, rev20 = (project.project(te, [], quant_rev=r).h200_model_gpu["quantize"] for r in (19, 20))
    assert rev20 < 0.995 * rev19, (rev19, rev20)
    assert project.project(mx, [], quant_rev=20).h200_model_gpu["quantize"] == rev18.h200_model_gpu["quantize"]
    # 22 (session 28: scale bytes kept in L2, 128 x 128 tiles) is priced as 21 until a training
    # run records it
    for r in (te, ue, mx):
        rev21, rev22 = (project.project(r, [], quant_rev=v).h200_model_gpu for v in (21, 22))
        assert rev22 == rev21, r
    # 23 (session 29: UFP4's calls on rowcol_gluon, the RHT's norm in f32) likewise
    for r in (te, ue, mx):
        assert project.project(r, [], quant_rev=23).h200_model_gpu == project.project(r, [], quant_rev=21).h200_model_gpu
    # 24 (session 30: UFP4's amax pass rotates the rows in f32 too) likewise
    for r in (te, ue, mx):
        assert project.project(r, [], quant_rev=24).h200_model_gpu == project.project(r, [], quant_rev=21).h200_model_gpu
    with pytest.raises(ConfigError, match="quant_rev"):
        project.project(run, [], quant_rev=QUANT_REV + 1)


# Per call (model-calibration-per-call.md): run 18's quantize calls against the model, (min, max)
# of model / GPU time - 1 per call kind (X: fprop.x+wgrad.x, dY: dgrad.dy+wgrad.dy, W: the
# weight), as benchmarks/calibration/quantize_calls.py measures them with the current terms,
# rounded to the percent and out by a point. Session 17's terms (fit_emulation.py --pin-fit:
# per call, constrained by every quantize pin above and by no call kind here getting a larger
# max |error| or a wider range) narrowed them from session 16's: ue5m3 X (0.13, 0.23),
# dY (-0.14, -0.05), W (0.43, 1.37); mxfp4 X (0.0, 0.05), dY (-0.06, 0.10), W (0.13, 0.55).
CALL_BOUNDS = {
    "ue5m3+sr16": {"X": (0.02, 0.10), "dY": (-0.09, -0.02), "W": (0.05, 0.53)},
    "mxfp4+sr16": {"X": (-0.05, 0.0), "dY": (-0.01, 0.10), "W": (-0.09, 0.12)},
}


@pytest.mark.parametrize("recipe", sorted(CALL_BOUNDS))
def test_h200_per_call_quantize_errors_stay_within_measured_bounds(recipe):
    prof = project.load_profile(RUN18 / "125m" / recipe)
    ops = [op for op in prof["gpu_ops"] if op["kind"] == "quantize"]
    priced = project.as_measured({**prof, "ops": ops})
    assert len(priced) == len(ops)
    times = fchw.op_times("h200", [o for _, o, _ in priced])
    kind = {"x": "X", "dy": "dY", "w": "W"}
    errs: dict[str, list[float]] = {}
    for op, t in zip(ops, times):
        k = kind[op["operand"].split("+")[0].partition(".")[2]]
        errs.setdefault(k, []).append(t.time_s * 1e3 / op["ms_per_call"] - 1)
    assert set(errs) == set(CALL_BOUNDS[recipe])
    for k, (lo, hi) in CALL_BOUNDS[recipe].items():
        assert lo <= min(errs[k]) and max(errs[k]) <= hi, (recipe, k, min(errs[k]), max(errs[k]))


def test_the_scale_pass_is_priced_only_where_the_gemm_ran_one():
    """Runs before session 7 (no "epilogue" field) made an FP32 product and a scale pass
    after each emulated GEMM: a memory op beside it. Run 11's cuBLASLt GEMMs ("fused") did not."""
    for run, extra in ((RUN10 / "125m/ue5m3+sr4", True), (RUN11 / "125m/ue5m3+sr4", False)):
        prof = project.load_profile(run)
        op = next(o for o in prof["ops"] if o["kind"] == "gemm" and o.get("path") == "fused" and o["role"] == "fprop")
        assert op.get("epilogue", "pass") == ("pass" if extra else "fused")
        priced = project.as_measured({**prof, "ops": [op]})
        assert [o["op"] for _, o, _ in priced] == (["gemm", "memory"] if extra else ["gemm"]), run


def test_emulation_costs_only_price_the_h200_base():
    prof = project.load_profile(RUN2 / "nvfp4")
    base = project.as_measured(prof)
    assert any(o.get("impl") == "fourcast-triton" for c, o, _ in base if c == "quantize")
    # Every GEMM is an eager call (a dgrad+wgrad region holds two): each is tagged.
    calls = sum(2 if op["role"] == "dgrad+wgrad" else 1 for op in prof["ops"] if op["kind"] == "gemm")
    assert sum(1 for c, o, _ in base if c == "gemm" and o.get("impl") == "torch-eager") == calls
    # Targets are costed from the untagged ops and reject the tags outright.
    assert all("impl" not in o for _, o, _ in project.model_ops(prof))
    with pytest.raises(HardwareError, match="FP4 MMAs"):
        project.cost(fchw.load("b200"), [t for t in base if t[0] == "quantize"][:1])
    with pytest.raises(HardwareError, match="no \\[emulation\\]"):
        project.cost(fchw.load("b200"), [t for t in base if t[0] == "gemm"][:1])


def test_fused_quantize_op_becomes_one_output_per_copy_with_the_recipes_rht_and_sr():
    prof = {**_profile(), "recipe_spec": fc_recipe("nvfp4")}
    (q,) = [o for c, o, _ in project.model_ops(prof) if c == "quantize"]
    # "fprop.x+wgrad.x": TE's recipe rotates only the Wgrad copy; neither copy is rounded
    # stochastically, and each copy is written once (no extra transposed copy).
    assert [(o["rht"], o["sr"], o["transposed_copy"]) for o in q["outputs"]] == [(0, False, False), (16, False, False)]


def test_a_profile_that_says_which_copies_were_decoded_marks_them():
    """From run 18 on a row+col quantize op records what each copy wrote ("decoded+packed":
    QLinear's X call); the model's op then marks the decoded copy, which only the emulation's
    pricing reads (a packed column copy earns revision 12's gather saving). Without the field
    (earlier runs) neither copy is marked."""
    prof = {**_profile(), "recipe_spec": fc_recipe("ue5m3")}
    (q,) = [o for c, o, _ in project.model_ops(prof) if c == "quantize"]
    assert not any(o.get("decoded") for o in q["outputs"])
    prof["ops"] = [{**op, "outputs": "decoded+packed"} if op["kind"] == "quantize" else op for op in prof["ops"]]
    (q,) = [o for c, o, _ in project.model_ops(prof) if c == "quantize"]
    assert [o.get("decoded", False) for o in q["outputs"]] == [True, False]
    assert project.cost(fchw.load("h200"), project.as_measured(prof))  # the emulation prices it


def fc_recipe(name):
    import fourcast as fc

    return fc.recipe(name).to_dict()


def test_host_bound_runs_are_flagged():
    """Run 8's MoE step (ue5m3) left the GPU idle a quarter of the step (its timeline trace);
    the dense 125M step did not. A timeline without a busy time (run 7's, written from
    prof.events(), which drops kernels) gives no idle fraction rather than a wrong one."""
    moe = project.project(RUN8 / "moe-125m" / "ue5m3", [])
    assert moe.gpu_idle_fraction > project.HOST_BOUND_IDLE and any(n.startswith("host-bound run") for n in moe.notes)
    dense = project.project(RUN8 / "125m" / "nvfp4", [])
    assert dense.gpu_idle_fraction < 0.1 and not any(n.startswith("host-bound run") for n in dense.notes)
    assert project.project(RUN7 / "ue5m3", []).gpu_idle_fraction is None
    assert project.project(RUN5 / "ue5m3", []).gpu_idle_fraction is None  # no timeline recorded


def test_gpu_time_is_the_check_when_recorded(tmp_path):
    """A profile with a timeline step's ops ("gpu_ops", GPU time) is checked on those ops:
    the model prices them and the errors are against their GPU time; the attention and
    optimizer corrections use that ratio (the model prices GPU work, not host waits)."""
    prof = _profile()
    (tmp_path / "profile.json").write_text(json.dumps(prof))
    plain = project.project(tmp_path, ["b200"])
    assert plain.measured_gpu is None and plain.h200_error_gpu is None
    gpu_ops = [{**op, "ms_per_step": 0.5 * op["calls_per_step"], "ms_per_call": 0.5} for op in prof["ops"]]
    (tmp_path / "profile.json").write_text(json.dumps({**prof, "gpu_ops": gpu_ops,
                                                       "gpu_time": {"step": 7, "outside_regions_ms": 0.55}}))
    rep = project.project(tmp_path, ["b200"])
    assert rep.gpu_step == 7 and rep.h200_error == plain.h200_error
    assert rep.measured_gpu == pytest.approx({"gemm": 1.0, "quantize": 0.5, "dequantize": 0.5, "attention": 12.0,
                                              "optimizer": 0.5, "other": 0.55})
    assert rep.h200_model_gpu == pytest.approx(plain.h200_model)  # the same ops here
    for c, ms in rep.measured_gpu.items():
        if c in rep.h200_model_gpu:
            assert rep.h200_error_gpu[c] == pytest.approx(rep.h200_model_gpu[c] / ms - 1)
    by, by_plain = rep.targets[0]["breakdown_ms"], plain.targets[0]["breakdown_ms"]
    assert by["attention"] == pytest.approx(by_plain["attention"] * (12.0 / 1.2))  # corrected by GPU time
    assert by["gemm"] == pytest.approx(by_plain["gemm"])  # never corrected
    assert by["other"] == pytest.approx(by_plain["other"] * 0.55 / 1.1)  # GPU time launched outside every op
    md = project.markdown(rep)
    assert "GPU time" in md and f"{rep.h200_error_gpu['quantize']:+.1%}" in md
