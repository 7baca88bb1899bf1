"""fourcast.hw (Python API over the Rust hardware model) and its CLI commands."""

import json
import pathlib
import subprocess
import sys

import pytest

import fourcast as fc
from fourcast import hw
from fourcast.cli import main
from fourcast.errors import ConfigError, FormatError, HardwareError, RecipeError

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_catalogues():
    assert hw.names() == ["h100", "h200", "b200", "gb200", "b300", "gb300", "rubin", "mi300x", "mi355x"]
    assert {"llama3-8b", "llama3-70b", "llama3.1-405b", "gpt-1.5b", "moe-8b"} == set(hw.models())
    assert {"ue5m3", "e1m2", "int4", "sr", "rht", "fused-quant"} <= set(hw.natives())
    assert {"bf16", "fp8", "mxfp8", "mxfp4", "nvfp4", "ue5m3", "e1m2", "int4"} <= set(hw.formats())


def test_every_number_has_source_and_confidence():
    for name in hw.names():
        d = hw.load(name).to_dict()
        for section in ("chip", "memory", "links", "efficiency"):
            for key, n in d[section].items():
                assert n["source"], f"{name} {section}.{key}"
                assert n["confidence"] in ("vendor", "measured", "derived", "preliminary")
        for k in d["mma"]:
            assert k["tflops"]["source"] and k["tflops"]["confidence"]
    assert hw.load("rubin").preliminary


def test_load_by_path_and_errors(tmp_path):
    text = (ROOT / "hwmodels" / "b200.toml").read_text()
    mine = tmp_path / "my_gpu.toml"
    mine.write_text(text.replace('name = "b200"', 'name = "my-gpu"'))
    assert hw.load(mine).name == "my-gpu"
    assert hw.load(str(mine)).kinds == hw.load("b200").kinds

    broken = tmp_path / "broken.toml"
    lines = text.splitlines()
    i = next(n for n, line in enumerate(lines) if line.startswith("hbm_gb"))
    lines[i] = "hbm_gb = { value = , source = 1 }"
    broken.write_text("\n".join(lines))
    with pytest.raises(ConfigError, match=rf"broken.toml:{i + 1}:"):
        hw.load(broken)

    impossible = tmp_path / "impossible.toml"
    lines = text.splitlines()
    j = next(n for n, line in enumerate(lines) if line.startswith("sms ="))
    lines[j] = lines[j].replace("value = 148", "value = 0")
    impossible.write_text("\n".join(lines))
    with pytest.raises(HardwareError, match=rf"impossible.toml:{j + 1}: chip.sms: must be > 0"):
        hw.load(impossible)

    with pytest.raises(HardwareError, match="valid: h100, h200, b200"):
        hw.load("b400")


def test_set_overrides_hardware():
    rubin = hw.load("rubin", set={"mma.mxf4nvf4.tflops": 50000, "memory.hbm_tbs": 30})
    assert rubin.kinds["mxf4nvf4"] == 50000
    assert rubin.data["memory"]["hbm_tbs"]["confidence"] == "preliminary"
    assert "set by user" in rubin.data["memory"]["hbm_tbs"]["source"]
    with pytest.raises(HardwareError, match="must be > 0"):
        hw.load("b200").set("memory.hbm_tbs", -1)
    with pytest.raises(HardwareError, match="no hardware field"):
        hw.load("b200").set("memory.speed", 1)


def test_gemm_paths_name_the_choice():
    g = hw.gemm("b200", 8192, 6144, 4096, "nvfp4")
    assert (g.kind, g.bound) == ("mxf4nvf4", "compute")
    assert set(g.to_dict()) >= {"time_s", "tflops", "bound", "kind", "path", "candidates"}
    assert g.time_s == pytest.approx(g.gemm_s + g.conversion_s)
    assert g.tflops == pytest.approx(2 * 8192 * 6144 * 4096 / g.time_s / 1e12)
    # The chosen kind is the fastest of every kind that can run it.
    assert g.candidates[0]["kind"] == g.kind
    assert all(c["time_s"] >= g.time_s for c in g.candidates)
    # E1M2 with UE8M0/32: FP6 E2M3 at the FP8 rate on B300, the FP4 rate on MI355X.
    b300 = hw.gemm("b300", 8192, 8192, 8192, "mxe1m2")
    mi = hw.gemm("mi355x", 8192, 8192, 8192, "mxe1m2")
    assert (b300.kind, mi.kind) == ("mxf8f6f4", "f6f4")
    assert "as e2m3" in b300.path and "as e2m3" in mi.path
    # UE5M3 without native support is re-encoded; with it, a native kind runs it.
    assert "re-encoded as e4m3" in hw.gemm("b200", 4096, 4096, 4096, "ue5m3").path
    assert hw.gemm("b200", 4096, 4096, 4096, "ue5m3", native="ue5m3").kind == "native-ue5m3"
    # UFP4 is emulated until E1M2 is native; a slower native rate costs time.
    assert "emulated" in hw.gemm("b300", 8192, 8192, 8192, "ufp4").path
    fast = hw.gemm("b300", 8192, 8192, 8192, "ufp4", native=["e1m2"])
    half = hw.gemm("b300", 8192, 8192, 8192, "ufp4", native=["e1m2@0.5"])
    assert fast.kind == "native-e1m2" and half.time_s > fast.time_s
    # Mixed operands and tensor-format dicts.
    fmt = {"element": "e2m1", "scale": "ue8m0", "block": 32, "rule": "floor"}
    assert hw.gemm("mi355x", 4096, 4096, 4096, fmt).kind == "f6f4"
    assert hw.gemm("b200", 4096, 4096, 4096, "bf16", "nvfp4").kind == "bf16"


def test_gemm_errors():
    with pytest.raises(FormatError, match="valid: bf16, fp8, mxfp8"):
        hw.gemm("b200", 64, 64, 64, "fp5")
    with pytest.raises(FormatError):
        hw.gemm("b200", 0, 64, 64, "bf16")
    with pytest.raises(HardwareError, match="fused-quant"):
        hw.gemm("b200", 64, 64, 64, "bf16", native="warp-drive")


def test_op_time_each_class():
    copy = hw.op_time("h200", {"op": "copy", "bytes": 2**31})
    assert copy.bound == "memory"
    assert 2 * 2**31 / copy.time_s / 1e12 == pytest.approx(4.27, rel=0.01)  # calibrated
    g = hw.op_time("h200", {"op": "gemm", "m": 8192, "n": 8192, "k": 8192, "format": "bf16"})
    assert g.kind == "bf16" and g.tflops == pytest.approx(685, rel=0.05)
    q = hw.op_time("b300", {"op": "quantize", "numel": 2**26, "outputs": [{"format": "nvfp4"}, {"format": "nvfp4", "rht": 16, "sr": True}]})
    assert q.time_s == pytest.approx(sum(q.detail[k] for k in ("amax_s", "quantize_s", "rht_s", "sr_s")))
    assert min(q.detail[k] for k in ("amax_s", "quantize_s", "rht_s", "sr_s")) > 0
    fused = hw.op_time("b300", {"op": "quantize", "numel": 2**26, "outputs": [{"format": "nvfp4"}]}, native="fused-quant")
    plain = hw.op_time("b300", {"op": "quantize", "numel": 2**26, "outputs": [{"format": "nvfp4"}]})
    assert fused.time_s < plain.time_s
    a = hw.op_time("b200", {"op": "attention", "batch": 2, "seq": 8192, "heads": 32, "kv_heads": 8, "head_dim": 128, "backward": True})
    assert a.detail["bwd_s"] > a.detail["fwd_s"] > 0
    m = hw.op_time("b200", {"op": "memory", "read_bytes": 1e9, "write_bytes": 1e9})
    assert m.time_s > 2e9 / 8e12
    many = hw.op_times("b200", [{"op": "copy", "bytes": 1e9}, {"op": "gemm", "m": 64, "n": 64, "k": 64}])
    assert [r.op for r in many] == ["copy", "gemm"]
    with pytest.raises(ConfigError, match="ops: gemm, memory"):
        hw.op_time("b200", {"op": "fft", "n": 4})


@pytest.mark.parametrize("recipe", fc.recipes.names())
def test_step_for_every_recipe(recipe):
    r = hw.step("b200", "llama3-8b", recipe)
    assert r.recipe == recipe and r.hw == "b200"
    assert sum(r.breakdown.values()) == pytest.approx(r.step_time_s)
    assert r.tokens_per_s_per_gpu == pytest.approx(r.tokens_per_gpu / r.step_time_s)
    assert all(v >= 0 for v in r.breakdown.values())
    assert {g["gemm"] for g in r.gemms} == {"fprop", "dgrad", "wgrad"}
    d = r.to_dict()
    assert json.loads(json.dumps(d))["step_time_s"] == r.step_time_s


def test_step_options_and_models(tmp_path):
    base = hw.step("b300", "llama3-8b", "nvfp4")
    no_keep = hw.step("b300", "llama3-8b", "nvfp4", set={"keep_bf16_last": 0})
    assert no_keep.breakdown["gemm_hp"] < base.breakdown["gemm_hp"]
    mlp = hw.step("b300", "llama3-8b", "nvfp4", fp4_layers="mlp")
    assert mlp.breakdown["gemm_hp"] > base.breakdown["gemm_hp"]
    assert hw.step("b300", "llama3-8b", "nvfp4", set={"rht": "none"}).breakdown["rht"] == 0
    # UE5M3 recipe: periodic tensor scale, so no amax passes.
    assert hw.step("b300", "llama3-8b", "ue5m3").breakdown["amax"] == 0
    # Recipe and model from files and dicts.
    f = tmp_path / "r.toml"
    f.write_text('base = "nvfp4"\nkeep_bf16_last = 0\n')
    assert hw.step("b300", "llama3-8b", f).step_time_s == pytest.approx(no_keep.step_time_s)
    tiny = {"name": "tiny", "layers": 2, "hidden": 512, "heads": 8, "kv_heads": 8, "ffn": 1024, "vocab": 1000, "seq_len": 512}
    t = hw.step("h100", tiny, "mxfp4", tokens_per_gpu=4096)
    assert t.model == "tiny" and t.seq_len == 512
    moe = hw.step("mi355x", "moe-8b", "mxfp4")
    assert any(g["layer"] == "moe.experts.up" and g["groups"] == 64 for g in moe.gemms)
    dp = hw.step("b200", "llama3-70b", "bf16", dp=8, comm_overlap=0.0)
    assert dp.breakdown["comm_exposed"] > 0 and dp.dp == 8
    with pytest.raises(ConfigError, match="valid: llama3-8b"):
        hw.step("b200", "gpt-5", "bf16")
    with pytest.raises(RecipeError, match="valid: bf16"):
        hw.step("b200", "llama3-8b", "nvfp5")
    with pytest.raises(ConfigError, match="whole sequences"):
        hw.step("b200", "llama3-8b", "bf16", tokens_per_gpu=1000)


def test_whatif_default_study():
    rows = hw.whatif()
    assert len(rows) == 4 * 5 * 3
    assert {r.hw for r in rows} == set(hw.DEFAULT_HW)
    by = {(r.hw, r.recipe, "+".join(r.native) or "none"): r for r in rows}
    for h in hw.DEFAULT_HW:
        assert by[(h, "bf16", "none")].speedup_vs_bf16 == pytest.approx(1.0)
        for rec in hw.DEFAULT_RECIPES:
            assert by[(h, rec, "none")].gain == pytest.approx(1.0)
            for nat in ("ue5m3", "e1m2"):
                assert by[(h, rec, nat)].gain >= 1.0
    # Native E1M2 lifts UFP4 off BF16 emulation on NVIDIA parts.
    assert by[("b300", "ufp4", "e1m2")].gain > 1.3
    assert by[("b200", "ue5m3", "ue5m3")].gain > 1.0


def test_import_without_torch():
    code = "import sys; sys.modules['torch'] = None; from fourcast import hw; print(hw.gemm('b200', 64, 64, 64).kind)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "bf16"


def test_cli_gemm_json(capsys):
    assert main(["gemm", "--hw", "b200", "--m", "8192", "--n", "6144", "--k", "4096", "--format", "nvfp4", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert {"time_s", "tflops", "bound", "kind"} <= set(d)
    assert d["kind"] == "mxf4nvf4"


def test_cli_hw_list_and_show(capsys):
    assert main(["hw", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == hw.names()
    assert main(["hw", "show", "mi355x", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "mi355x"
    assert main(["hw", "show", "b300"]) == 0
    assert "mxf4nvf4" in capsys.readouterr().out


def test_cli_whatif_json(capsys):
    args = ["whatif", "--hw", "b200,mi355x", "--recipe", "nvfp4,ue5m3", "--native", "none,ue5m3+sr", "--set", "keep_bf16_last=0", "--json"]
    assert main(args) == 0
    rows = json.loads(capsys.readouterr().out)
    assert len(rows) == 8
    assert {"step_time_s", "tokens_per_s_per_gpu", "mfu", "breakdown", "gain"} <= set(rows[0])
    assert ["ue5m3", "sr"] in [r["native"] for r in rows]
    assert all(r["breakdown"]["gemm_hp"] < 0.2 * r["breakdown"]["gemm"] for r in rows if r["hw"] == "b200")


def test_cli_errors_list_valid_names(capsys):
    assert main(["whatif", "--hw", "b900", "--no-plot"]) == 2
    assert "valid: h100" in capsys.readouterr().err
    assert main(["whatif", "--recipe", "fp3", "--no-plot"]) == 2
    assert "valid: bf16" in capsys.readouterr().err
    assert main(["whatif", "--model", "gpt-9", "--no-plot"]) == 2
    assert "valid: llama3-8b" in capsys.readouterr().err
    assert main(["gemm", "--m", "8", "--n", "8", "--k", "8", "--format", "fp2"]) == 2
    assert "valid: bf16" in capsys.readouterr().err


def test_cli_default_whatif_writes_chart(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.chdir(tmp_path)
    assert main(["whatif"]) == 0
    captured = capsys.readouterr()
    assert "chart saved to whatif.png" in captured.err
    assert "ufp4" in captured.out and "mi355x" in captured.out
    png = (tmp_path / "whatif.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
