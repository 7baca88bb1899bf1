"""Projection of a measured profile onto other GPUs (fourcast/project.py)."""

import json
import pathlib

import pytest

from fourcast import hw as fchw
from fourcast import project
from fourcast.cli import main
from fourcast.errors import HardwareError

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


# Committed H200 model-vs-measured bounds on the training-h200-run5 profiles (125M model,
# fused projections, session-3 kernels): |error| per (recipe, class) must stay within these
# (the current error rounded up to the next percent). Held out = not used to fit that
# class's H200 term (benchmarks/calibration/fit_emulation.py). Run 4 (the unfused model:
# other GEMM shapes, the same attention shape) checks the GEMM and attention terms held
# out; its quantize ops ran session 2's kernels, so they are not a check of today's terms.
# Session 4 (eager GEMMs at the boost clock, split-K up to 8, strip-kernel RHT term).
RUN2 = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results/training-h200-run2"
RUN4 = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results/training-h200-run4"
RUN5 = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results/training-h200-run5"
RUN6 = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results/training-h200-run6"
RUN7 = pathlib.Path(__file__).resolve().parents[2] / "benchmarks/results/training-h200-run7/50m"
BOUNDS = {
    RUN5: {  # fit: bf16 gemm, every attention, ue5m3/nvfp4/mxfp4 quantize; the rest held out
        ("bf16", "gemm"): 0.01, ("ue5m3", "gemm"): 0.01, ("nvfp4", "gemm"): 0.01, ("mxfp4", "gemm"): 0.08,
        ("ufp4", "gemm"): 0.01,
        ("ue5m3", "quantize"): 0.02, ("nvfp4", "quantize"): 0.01, ("mxfp4", "quantize"): 0.01,
        ("ufp4", "quantize"): 0.05,
        **{(r, "attention"): 0.01 for r in ("bf16", "ue5m3", "nvfp4", "mxfp4", "ufp4")},
    },
    RUN6: {  # all held out: 350M model, another attention shape (ue5m3 quantize misses 15%)
        ("bf16", "gemm"): 0.07, ("ue5m3", "gemm"): 0.12, ("nvfp4", "gemm"): 0.13,
        ("ue5m3", "quantize"): 0.16, ("nvfp4", "quantize"): 0.13,
        **{(r, "attention"): 0.04 for r in ("bf16", "ue5m3", "nvfp4")},
    },
    RUN7: {  # all held out: 50M at B16 T2048, a third attention shape (run 7's MoE is host-bound: not pinned)
        ("bf16", "gemm"): 0.02, ("ue5m3", "gemm"): 0.04, ("nvfp4", "gemm"): 0.05,
        ("ue5m3", "quantize"): 0.15, ("nvfp4", "quantize"): 0.05,
        **{(r, "attention"): 0.06 for r in ("bf16", "ue5m3", "nvfp4")},
    },
    RUN4: {  # all held out
        ("bf16", "gemm"): 0.11, ("ue5m3", "gemm"): 0.02, ("nvfp4", "gemm"): 0.02, ("mxfp4", "gemm"): 0.05,
        ("ufp4", "gemm"): 0.04,
        **{(r, "attention"): b for r, b in
           (("bf16", 0.01), ("ue5m3", 0.01), ("nvfp4", 0.01), ("mxfp4", 0.03), ("ufp4", 0.01))},
    },
}


@pytest.mark.parametrize("run,recipe", sorted({(run, r) for run, b in BOUNDS.items() for r, _ in b}),
                         ids=lambda v: v.name if isinstance(v, pathlib.Path) else v)
def test_h200_prediction_stays_within_committed_bounds(recipe, run):
    rep = project.project(run / recipe, [])
    for (r, cls), bound in BOUNDS[run].items():
        if r == recipe:
            err = rep.h200_error[cls]
            assert abs(err) <= bound, f"{run.name} {recipe} {cls}: {err:+.1%} outside committed {bound:.0%}"


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


def fc_recipe(name):
    import fourcast as fc

    return fc.recipe(name).to_dict()


def test_host_bound_runs_are_flagged():
    """Run 7's MoE step left the GPU idle most of the time (timeline.json); its 50M step did not."""
    run7 = RUN7.parent
    moe = project.project(run7 / "moe-125m" / "ue5m3", [])
    assert moe.gpu_idle_fraction > 0.5 and any(n.startswith("host-bound run") for n in moe.notes)
    dense = project.project(run7 / "50m" / "ue5m3", [])
    assert dense.gpu_idle_fraction < 0.25 and not any(n.startswith("host-bound run") for n in dense.notes)
    assert project.project(RUN5 / "ue5m3", []).gpu_idle_fraction is None  # no timeline recorded
