"""benchmarks/kernels.py on the CPU (BENCH_SMOKE=1, Triton's interpreter, tiny shapes): every
section runs to its end with no error and every check it makes holds, so a script bug costs
no device time. The timings mean nothing here."""

import json
import os
import re
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks/kernels.py"


def run(tmp_path, *args, timeout=900):
    env = dict(os.environ, BENCH_SMOKE="1", TRITON_INTERPRET="1", OUT=str(tmp_path))
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True,
                          timeout=timeout, cwd=tmp_path)


def sections(tmp_path) -> list[str]:
    """The script's section names (--list)."""
    proc = run(tmp_path, "--list", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


@pytest.mark.interpret
@pytest.mark.slow
def test_every_section_runs_clean_on_the_cpu(tmp_path):
    proc = run(tmp_path, "--budget", "800")
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads((tmp_path / "kernels-h200.json").read_text())
    assert res["errors"] == [], res["errors"]
    failed = [c["what"] for c in res["checks"] if not c["ok"]]
    assert res["checks"] and not failed, failed
    ran = len(re.findall(r"^\[ *[0-9.]+s\] == ", proc.stdout, re.M))  # harness.section's "== name" lines
    names = sections(tmp_path)
    assert names[0] == "meta" and "peer_quant" in names
    assert ran == len(names), f"{ran} of {len(names)} sections ran:\n{proc.stdout[-2000:]}"
    assert len(res["peer_quant"]) == 6 and all(q["agreement"]["row"]["within_one_step"] for q in res["peer_quant"])
    table = report(tmp_path / "kernels-h200.json")  # the markdown report reads what the run wrote
    peers = table.split("| row+col NVFP4 call |", 1)[1].split("\n\n", 1)[0]
    assert peers.count("\n| row+col nvfp4") == 6 and "vs compiled" in peers


def report(path) -> str:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/kernels_report.py"), str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def test_the_report_reads_the_committed_gpu_run():
    """kernels_report.py on the committed kernels-h200.json (session 14's GPU run, before the
    per-call peers): every table it has, and no peer table."""
    table = report(ROOT / "benchmarks/results/kernels-h200.json")
    assert "NVIDIA H200" in table and "| packed GEMM" in table and "| row+col NVFP4 call" not in table


def test_the_report_prints_the_graphed_and_variant_tables(tmp_path):
    """The sections session 24 added or widened: `graphed` (a row per call and tile, with its
    compiled peer), `rowcol_gluon` and `gemm_rs_regs`, from a run's JSON."""
    r = json.loads((ROOT / "benchmarks/results/kernels-h200.json").read_text())
    looped = [64, 128, 8, 1, 80, True, True, 2, 3]
    r["graphed"] = [dict(call="copy", shape="8192x8192", ms=0.066, frac_copy=0.97),
                    dict(call="row+col nvfp4 delayed", shape="8192x8192", tile=looped, routes=["gluon"], ms=0.085,
                         frac_copy=0.58, eager_ms=0.088, compiled_ms=0.714, vs_compiled=8.4)]
    r["rowcol_gluon"] = [dict(call="X: decoded row", shape="8192x8192", variant=str(tuple(looped)), median_ms=0.09,
                              samples_ms=[0.09], vs_strip=0.64)]
    r["gemm_rs_regs"] = [dict(kernel="rs persistent ahead 2, decode registers 72", fmt="nvfp4",
                              shape="8192x8192x8192", sample=1, tflops=512.0, vs_cublas_bf16=0.66)]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(r))
    table = report(path)
    assert "| row+col nvfp4 delayed | 8192x8192 | 64x128x8x1 80,True,True,2,3 | gluon | 85.0 | 58% | 88.0 | 714.0 |" \
        " **8.4x** |" in table
    assert "| X: decoded row | 8192x8192 | (64, 128, 8, 1, 80, True, True, 2, 3) | 90.0 | 0.64x |" in table
    assert "| rs persistent ahead 2, decode registers 72 | nvfp4 | 8192x8192x8192 | 1 | 512 | 66% |" in table


@pytest.mark.interpret
def test_a_misspelt_section_is_an_error(tmp_path):
    proc = run(tmp_path, "--only", "peer_quant,gemm_bnech", timeout=300)
    assert proc.returncode == 2
    assert "no section gemm_bnech" in proc.stderr and "gemm_bench" in proc.stderr


@pytest.mark.interpret
def test_bad_shapes_are_an_error(tmp_path):
    proc = run(tmp_path, "--only", "quant_checks", "--shapes", "32768x768,2304", timeout=300)
    assert proc.returncode == 2 and "not a list of RxC shapes" in proc.stderr


@pytest.mark.interpret
def test_bench_recipes_parse_and_a_bad_suffix_is_an_error(tmp_path, monkeypatch):
    """--recipes: a preset and "+" suffixes; delayed16 gives the amax on 15 steps of 16."""
    import fourcast as fc

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    from kernel_bench.layer import bench_recipe

    r = bench_recipe("nvfp4+sr16+delayed16")
    assert (r.tensor_scale_refresh, r.sr_stream) == (16, "x16")
    assert bench_recipe("ue5m3").tensor_scale_refresh == fc.recipe("ue5m3").tensor_scale_refresh
    proc = run(tmp_path, "--only", "meta", "--recipes", "nvfp4+sr16,nvfp4+sr8", timeout=300)
    assert proc.returncode == 2 and "unknown suffix 'sr8'" in proc.stderr


@pytest.mark.interpret
def test_quant_overrides_reach_the_run_and_bad_ones_are_an_error(tmp_path):
    """--quant-override: KEY=VALUE entries (a bracketed value keeps its commas) recorded in the
    run's meta; an entry without "=" stops the run before it starts."""
    proc = run(tmp_path, "--only", "meta", "--quant-override", "amax_gluon=(64, 128, 8, 1),rowcol=strip", timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    meta = json.loads((tmp_path / "kernels-h200.json").read_text())["meta"]
    assert meta["quant_override"] == {"amax_gluon": "(64, 128, 8, 1)", "rowcol": "'strip'"}
    proc = run(tmp_path, "--only", "meta", "--quant-override", "rowcol", timeout=300)
    assert proc.returncode == 2 and "'rowcol' is not KEY=VALUE" in proc.stderr


@pytest.mark.interpret
def test_wheel_ab_sets_run_on_the_cpu(tmp_path):
    """benchmarks/wheel_ab.py's call sets through the CPU path (the GPU times them): every call
    runs, its bytes' checksum repeats, and an unknown set is refused with the usage line."""
    code = ("import json, torch, wheel_ab as w\n"
            "x = torch.randn(128, 256, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)\n"
            "sums = lambda s: [w.checksum(fn()) for _, fn in w.SETS[s](x)]\n"
            "print(json.dumps({s: (sums(s), sums(s)) for s in w.SETS}))\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT / "benchmarks", capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(got) == {"scale_l2", "rht", "ufp4_amax", "rht_amax"}
    assert all(a == b and len(a) >= 3 and len(set(a)) == len(a) for a, b in got.values()), got
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks/wheel_ab.py"), "nosuchset"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "SET one of scale_l2, rht, ufp4_amax, rht_amax" in proc.stderr


@pytest.mark.interpret
def test_rht_mma_probe_on_the_cpu(tmp_path, monkeypatch):
    """benchmarks/rht_mma_probe.py: the script runs (the interpreter's dot is an f32 numpy one, so
    the blocks the exactness test admits agree with f64), and its MMA amax pass writes the words
    amax_gluon's RHT_MODE 1 defines: the row amax, the column RHT's max |y| over the exact blocks
    (the reference's f64 RHT), and a bound of 0x7FFFFFFF once a block holds an inf."""
    import torch

    env = dict(os.environ, BENCH_SMOKE="1", TRITON_INTERPRET="1", OUT=str(tmp_path))
    proc = subprocess.run([sys.executable, str(SCRIPT.parent / "rht_mma_probe.py")], env=env, capture_output=True,
                          text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = json.loads((tmp_path / "rht_mma_probe.json").read_text())["rows"]
    assert rows and all(r["differ_in_exact"] == 0 for r in rows)
    assert any(r["differ_elsewhere"] for r in rows)  # the 40-binade input leaves f32's exact range

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    import rht_mma_probe as probe
    from fourcast.kernels import reference as ref

    signs = ref.rht_signs(16, "te").float()
    for name, x in probe.inputs(256, 256, torch.Generator().manual_seed(3)).items():
        if name == "normal":
            x[5, 7] = float("inf")
        bits = torch.zeros(4, dtype=torch.int32)
        probe._amax_mma_kernel[(1, 2)](x, bits, signs, 256, BM=64, BN=128, ITERS=4, UPCAST=True)
        y = ref.rht(x.float(), 16, signs, axis=0).abs().reshape(16, 16, 256).amax(1)
        exact = probe.exact_blocks(x)
        words = bits.view(torch.float32)
        assert words[0] == x.float().abs().max(), name
        assert words[1] == (y[exact].max() if exact.any() else 0.0), name
        assert (int(bits[2]) == 0x7FFFFFFF) == (name == "normal"), name
