"""Fit the H200 terms that explain the profiled training runs (RUNS/<recipe>/profile.json;
default training-h200-run5: session 3's kernels, fused projections) with an honest fit / hold-out
split, and print per-recipe class errors; --check-runs prices another run folder's
profiles with the fitted terms (a second model size and attention shape: all held out).

- attention: `efficiency.attention_tile_cycles` (fixed cycles per flash-attention tile, the
  small-shape term of rust/core/src/hw/attention.rs), fitted on every run's attention ops
  (all runs of one folder share one shape: the other folder's shape is the check).
- gemm: `emulation.torch_eager_call_us` (fixed cost of one eager GEMM call as the CUDA
  events time it), fitted on the BF16 run's GEMMs only; the FP4 runs' GEMMs are held out.
  The kernels run at `emulation.torch_eager_gemm_clock_ghz`, not fitted: the H200's max
  boost clock (datasheet), since a training step leaves the power headroom that the
  isolated back-to-back calibration GEMMs (fit.py, at the 1.83 GHz the rates refer to)
  do not. The script prints the clock that alone would close the BF16 GEMM class, as
  the check of that reading.
- quantize: `emulation.triton_quant_*` (fourcast's Triton quantizers: per call, per element
  written, per rotated element in calls with SR (the strip kernel's SR tile; an RHT of 16, TE's
  dY call, apart from the others) and in calls without (its plain tile), per stochastically
  rounded element, per input element of an amax pass, and again of a rotated call's amax pass,
  which measures the rotated copy's amax), least squares weighted by calls, on the quantize
  ops of QUANT_FIT; QUANT_HELD_OUT are predicted, not fitted. These runs must be one-tile runs (below).
- prefetch: `emulation.triton_quant_prefetch_saving_ns_per_elem` (--prefetch-fit): what a
  strip program of several row tiles saves per overlapped element written (ITERS - 1 of
  ITERS tiles), fitted on the per-call drop of the same row+col calls from a run with one
  tile a program to a run with several (least squares weighted by calls).
- integer sr16: `emulation.triton_quant_sr16_int_saving_ns_per_elem` (--sr16-int-fit): what
  an element written with "sr16" saves in quantizer revision 11's integer form, fitted on
  the per-call drop of the same row+col calls from a run of the float form to a run of the
  integer one (least squares weighted by calls).
- gather: `emulation.triton_quant_gather_saving_ns_per_elem` (--gather-fit): what a row+col
  call saves per input element when its strip programs of several row tiles store the packed
  column copy's code and scale bytes once (quantizer revision 12), fitted on the per-call drop
  of the same calls from a run before it to a run of it (least squares weighted by calls).

- per call: --call-fit refits CALL_TERMS (default CALL_FIT: the per-call constant, the prefetch,
  gather and integer-sr16 savings) on every quantize call of the given runs' timeline step,
  least squares of the relative error per call (model / GPU time - 1), the other terms as
  the file has them; --check-runs are priced per call with the result (held out). Only those
  terms are fitted and written (the other fits do not run). benchmarks/calibration/
  quantize_calls.py lists the calls and their errors.
- per call, within the pins: --pin-fit refits --pin-terms (default: every CALL_TERMS term) on
  every quantize call of the given runs (default: training-h200 runs 10-22), constrained so
  that every quantize class pinned in tests/unit/test_project.py (QUANT_PINS) stays inside its
  bound less --pin-margin and no call kind of --pin-keep (default runs 18 and 22: the last
  strip-kernel run, the current kernels' run, revision 17) gets a larger max |error| or a
  wider range than the file gives it (pin_problem; the class errors are linear in the terms).
  Least squares of the relative error per call (Lawson-Hanson LSI) and the least max |error|
  (a linear program), both printed; --write writes the first. --pin-hold TERM=V sets terms
  measured elsewhere (a kernel benchmark) and leaves them out of the fit. Needs scipy (not a
  fourcast dependency: imported only here).

Quantizer revisions: profiles up to run 17 do not record which quantizer kernels ran, so `quant_rev_of`
tags a committed run with the session whose kernels did (as project.project(quant_rev=...)
does), and `quant_kernel` says what those kernels did, as rust ops.rs `quant_kernel`: up to
9 (training-h200 runs up to 14) one row tile a strip program, float sr16; 10 (runs 15-16) up
to 4 tiles (kernels/strip.py strip_iters), float sr16; 11 (run 17) integer sr16; 12 (run 18
on, whose profiles record it) the column copy's bytes stored once a program (`gathers`); 13
on rowcol_gluon (`on_gluon`), 15 its amax pass (`on_gluon_amax`), priced by fixed factors of
the strip price (`gluon_scaling`: the amax pass's factor scales both amax terms).

--measure gpu fits and checks against GPU time: the profile's "gpu_ops" (the ops of the
timeline step, each with the GPU time of the kernels it launched; runs recorded with
FOURCAST_TIMELINE_STEP) instead of the sampled steps' CUDA-event spans, which also hold the
time the GPU waited for the host.

    python benchmarks/calibration/fit_emulation.py [--runs DIR] [--check-runs DIR...] [--measure gpu] [--write]
    python benchmarks/calibration/fit_emulation.py --call-fit RUN[,RUN...] [--check-runs DIR...] [--write]
    python benchmarks/calibration/fit_emulation.py --pin-fit [RUN[,RUN...]] [--pin-terms T,...]
        [--pin-keep RUN,...] [--pin-margin M] [--pin-hold TERM=V ...] [--pin-hold-source S] [--write]
"""

from __future__ import annotations

import argparse
import functools
import pathlib
import re
from typing import NamedTuple

import numpy as np

from fourcast import hw as fchw
from fourcast import project as P

ROOT = pathlib.Path(__file__).resolve().parents[2]
RUNS = ROOT / "benchmarks/results/training-h200-run5"
RECIPES = ("bf16", "ue5m3", "nvfp4", "mxfp4", "ufp4")
MEASURE = "events"  # or "gpu"
GEMM_FIT = ("bf16",)
QUANT_FIT = ("nvfp4", "mxfp4", "ue5m3")
QUANT_HELD_OUT = ("ufp4",)
ATTN_FIT = RECIPES


def run_dir(recipe: str) -> pathlib.Path:
    """A run of --runs by recipe name, or any run folder given as a path relative to
    benchmarks/results ("training-h200-run11/125m/mxfp4+sr4")."""
    return ROOT / "benchmarks/results" / recipe if "/" in recipe else RUNS / recipe


STRIP_ITERS = 4  # kernels/strip.py STRIP_ITERS: the most row tiles a strip program takes since session 10
QUANT_REV = 24  # rust ops.rs QUANT_REV: the current quantizer kernels' revision (an op's default)


def quant_kernel(rev: int | None) -> tuple[int, bool]:
    """(the most row tiles a strip program takes, whether sr16 rounds in integers) of
    quantizer revision `rev` (None: the current one), as rust ops.rs quant_kernel."""
    rev = QUANT_REV if rev is None else rev
    if not 1 <= rev <= QUANT_REV:
        raise SystemExit(f"quant_rev {rev} is not a quantizer revision (1 ..= {QUANT_REV})")
    return (1 if rev <= 9 else STRIP_ITERS), rev >= 11


def quant_rev_of(path: pathlib.Path | str) -> int | None:
    """The revision (session) of the quantizer kernels a committed training-h200 run ran: 9
    up to run 14 (one row tile a strip program), 10 for runs 15-16 (session 10's multi-tile
    kernel), 11 for run 17 (session 11's integer sr16); None (the model's default, the
    current kernels) for later runs and other folders."""
    m = re.search(r"training-h200-run(\d+)(/|$)", pathlib.Path(path).as_posix())
    if not m:
        return None
    n = int(m.group(1))
    return 9 if n <= 14 else 10 if n <= 16 else 11 if n == 17 else None  # run 18 on: in profile.json


# Per-call GPU means (ms) of run 15's ue5m3 row+col calls (every strip call took up to four
# tiles; for ue5m3 the same rule as the final one): its profile was not kept, these are
# quoted in training-h200.md ("Runs 14-16"), as means of the same calls as run 14's.
RECORDED_MS = {
    "training-h200-run15/125m/ue5m3+sr16": {
        ("fprop.x+wgrad.x", 32768, 768): 0.0708, ("fprop.x+wgrad.x", 32768, 2304): 0.1887,
        ("dgrad.dy+wgrad.dy", 32768, 768): 0.0876, ("dgrad.dy+wgrad.dy", 32768, 2304): 0.2512,
        ("dgrad.dy+wgrad.dy", 32768, 4608): 0.4914,
    },
}


def profile(recipe: str) -> dict:
    prof = P.load_profile(run_dir(recipe))
    rev = quant_rev_of(run_dir(recipe))
    if rev is not None:
        prof["quant_rev"] = rev
    if MEASURE == "events":
        return prof
    if not prof.get("gpu_ops"):
        raise SystemExit(f"{run_dir(recipe)}: no GPU times (record runs with FOURCAST_TIMELINE_STEP)")
    return {**prof, "ops": prof["gpu_ops"], "classes": P.class_ms(prof["gpu_ops"])}


QUANT_TERMS = ("triton_quant_call_us", "triton_quant_ns_per_elem", "triton_quant_rht_ns_per_elem",
               "triton_quant_rht16_sr_ns_per_elem", "triton_quant_strip_rht_ns_per_elem", "triton_quant_sr_ns_per_elem",
               "triton_quant_sr4_ns_per_elem", "triton_quant_sr16_ns_per_elem", "triton_quant_amax_ns_per_elem",
               "triton_quant_amax_rht_ns_per_elem", "triton_quant_amax_tile_ns")  # quant_features' columns


def strip_tiles(q: dict, max_iters: int) -> tuple[float, float]:
    """(tiles, row tiles a program) of a call's strip kernel, as ops.rs strip_tiles counts them
    (kernels/strip.py strip_config and strip_iters)."""
    outs = q["outputs"]
    strip = not any(o.get("sr") for o in outs)
    block = max(o["format"]["block"] for o in outs)
    rows = max(block, 16, *(o.get("rht", 0) for o in outs[1:]))
    tiles = q["numel"] / (rows * max(64 if strip else 32, outs[0].get("rht", 0)))
    iters = float(max_iters) if rows == 16 and not any(o.get("rht", 0) for o in outs) else 1.0
    while iters > 1 and tiles // iters < 4096:
        iters /= 2
    return tiles, iters


def overlapped_elems(q: dict, max_iters: int) -> float:
    """Elements written by a row+col call whose tile loads overlapped the previous tile's
    quantize (ITERS - 1 of ITERS tiles a program), as ops.rs counts them."""
    if len(q["outputs"]) != 2:
        return 0.0
    copies = sum(2.0 if o.get("transposed_copy") else 1.0 for o in q["outputs"])
    return float(q["numel"]) * copies * (1 - 1 / strip_tiles(q, max_iters)[1])


def measures_amax(q: dict) -> bool:
    """The call runs an amax pass: refresh 1 and a format with a tensor scale (ops.rs)."""
    return q.get("refresh", 1) == 1 and any(o["format"]["scale"] in ("e4m3", "ue5m3", "fp32") for o in q["outputs"])


def quant_features(q: dict, max_iters: int = STRIP_ITERS) -> list[float]:
    """[1, elements written, rotated with SR (by an RHT other than 16), rotated with SR by an RHT
    of 16, rotated without SR (strip kernel), rounded "sr", rounded "sr4", rounded "sr16",
    amax-pass elements, amax-pass elements of rotated calls, in-kernel amax programs] of a
    quantize op, as Rust counts them (the amax pass: refresh 1 and a format with a tensor
    scale; rotated: a copy with an RHT, whose amax the pass measures rotated; in-kernel amax:
    formats without one, two atomics per strip program, ops.rs in_kernel_amax_programs).
    max_iters: the most row tiles a strip program took (1 in runs up to 14)."""
    n = float(q["numel"])
    copies = [2.0 if o.get("transposed_copy") else 1.0 for o in q["outputs"]]
    rotated = n * sum(c for c, o in zip(copies, q["outputs"]) if o.get("rht", 0) > 0)
    rotated16 = n * sum(c for c, o in zip(copies, q["outputs"]) if o.get("rht", 0) == 16)

    def rounded(group: int) -> float:
        return n * sum(c for c, o in zip(copies, q["outputs"])
                       if o.get("sr") and (16 if o.get("sr16") else 4 if o.get("sr4") else 1) == group)

    sr, sr4, sr16 = rounded(1), rounded(4), rounded(16)
    strip = sr + sr4 + sr16 == 0
    measures = measures_amax(q)
    outs = q["outputs"]
    single = all(o["format"].get("block") and o["format"]["scale"] not in ("e4m3", "ue5m3", "fp32") for o in outs)
    programs = 0.0
    if single and q.get("refresh", 1) == 1:  # given, or recorded by nobody ("none"): no atomics
        tiles, iters = strip_tiles(q, max_iters)
        programs = tiles / iters
    amax = n if measures else 0.0
    with_sr = [0.0, 0.0] if strip else [rotated - rotated16, rotated16]  # the SR tile's RHTs: others, 16
    return [1.0, n * sum(copies), *with_sr, rotated if strip else 0.0, sr, sr4, sr16,
            amax, amax if rotated else 0.0, programs]


def quant_rows(recipe: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X, y, w = [], [], []
    prof = profile(recipe)
    iters, int_sr16 = quant_kernel(prof.get("quant_rev"))
    for op in prof["ops"]:
        if op["kind"] != "quantize":
            continue
        for _, q, calls in P.model_ops({**prof, "ops": [op]}):
            if overlapped_elems(q, iters):
                raise SystemExit(f"{recipe}: strip programs of several tiles; --quant-fit takes one-tile runs "
                                 "(runs up to 14), --prefetch-fit the rest")
            features = quant_features(q, iters)
            if int_sr16 and features[QUANT_TERMS.index("triton_quant_sr16_ns_per_elem")]:
                raise SystemExit(f"{recipe}: integer sr16; --quant-fit takes float-sr16 runs, --sr16-int-fit the rest")
            X.append(features)
            y.append(float(op["ms_per_call"]) * 1e-3)
            w.append(calls)
    return np.array(X), np.array(y), np.array(w)


def fit_quant() -> dict[str, float]:
    """{term: value in the TOML's unit} for the QUANT_TERMS the fitted ops exercise (a
    column without data, e.g. "sr" in runs that only use "sr4", is left as the TOML has it)."""
    parts = [quant_rows(r) for r in QUANT_FIT]
    X = np.vstack([p[0] for p in parts])
    y = np.concatenate([p[1] for p in parts])
    w = np.sqrt(np.concatenate([p[2] for p in parts]))
    cols = [j for j in range(X.shape[1]) if X[:, j].any()]
    while True:  # least squares without negative costs: drop the most negative term, refit
        coef, *_ = np.linalg.lstsq(X[:, cols] * w[:, None], y * w, rcond=None)
        if (coef >= 0).all():
            break
        dropped = cols.pop(int(np.argmin(coef)))
        print(f"quantize fit: {QUANT_TERMS[dropped]} came out negative; fixed at 0")
    exercised = [j for j in range(X.shape[1]) if X[:, j].any()]
    full = dict(zip(cols, coef))
    return {QUANT_TERMS[j]: round(full.get(j, 0.0) * (1e6 if j == 0 else 1e9), 2 if j == 0 else 5)
            for j in exercised}


def row_col_ms(recipe: str) -> dict[tuple, tuple[float, float, dict]]:
    """{(operand, rows, cols): (calls per step, ms per call, model op)} of a run's row+col
    quantize calls, or (calls 0) the per-call means RECORDED_MS quotes for a run without a profile."""
    if recipe in RECORDED_MS:
        return {k: (0.0, ms, {}) for k, ms in RECORDED_MS[recipe].items()}
    prof = profile(recipe)
    out: dict[tuple, tuple[float, float, dict]] = {}
    for op in prof["ops"]:
        if op["kind"] == "quantize" and "+" in op["operand"]:
            (_, q, _), = P.model_ops({**prof, "ops": [op]})
            key = (op["operand"], op["rows"], op["cols"])
            calls, ms, _ = out.get(key, (0.0, 0.0, q))
            c = float(op["calls_per_step"])
            out[key] = (calls + c, (ms * calls + op["ms_per_call"] * c) / (calls + c), q)
    return out


def _paired_saving(pairs: list[tuple[str, str]], elems_of, what: str, after: bool = False) -> float:
    """A saving in ns per element from (before, after) run pairs of the same calls: least
    squares of each row+col call's drop in GPU time (ms per call) against elems_of(call's
    quantize op, before run) (after: the after run's op and run), weighted by the before
    run's calls."""
    x, y, w = [], [], []
    for before, after_run in pairs:
        a, b = row_col_ms(before), row_col_ms(after_run)
        for key, (calls, ms, q) in a.items():
            elems = 0.0 if key not in b else elems_of(*((b[key][2], after_run) if after else (q, before)))
            if key in b and elems:
                x.append(elems)
                y.append((ms - b[key][1]) * 1e-3)
                w.append(calls)
                print(f"  {what} {key[0]} {key[1]}x{key[2]}: {ms * 1e3:.1f} -> {b[key][1] * 1e3:.1f} us, "
                      f"{(ms - b[key][1]) * 1e-3 / elems * 1e12:.3f} ps per element")
    if not x:
        raise SystemExit(f"--{what}-fit: no row+col calls in both runs of a pair")
    x, y, w = map(np.array, (x, y, w))
    return max(0.0, float(np.sum(w * x * y) / np.sum(w * x * x)) * 1e9)


def fit_prefetch(pairs: list[tuple[str, str]]) -> float:
    """`triton_quant_prefetch_saving_ns_per_elem` from (one-tile run, multi-tile run) pairs of
    the same calls, per overlapped element."""
    for one, multi in pairs:
        if quant_kernel(quant_rev_of(run_dir(one)))[0] != 1 or quant_kernel(quant_rev_of(run_dir(multi)))[0] == 1:
            raise SystemExit(f"--prefetch-fit {one}:{multi}: the first run must be a one-tile run, the second not")
    return _paired_saving(pairs, lambda q, _run: overlapped_elems(q, STRIP_ITERS), "prefetch")


def gathers(rev: int | None) -> bool:
    """Whether quantizer revision `rev` (None: the current one) stores a strip program's
    packed column copy once (rust ops.rs QuantKernel.gather)."""
    return (QUANT_REV if rev is None else rev) >= 12


def gathered_elems(q: dict, max_iters: int) -> float:
    """The input elements of a row+col call whose packed 4-bit column copy a strip program of
    several row tiles stores once (ops.rs emulated_quant_s `gathered`)."""
    outs = q.get("outputs", [])
    if len(outs) != 2 or outs[1].get("decoded") or outs[1]["format"]["element"] not in FOUR_BIT:
        return 0.0
    return q["numel"] if strip_tiles(q, max_iters)[1] > 1 else 0.0


FOUR_BIT = ("e2m1", "e1m2", "int4", "int4-sm")


def fit_gather(pairs: list[tuple[str, str]]) -> float:
    """`triton_quant_gather_saving_ns_per_elem` from (run before revision 12, run of it) pairs
    of the same calls, per input element of a call with a packed column copy (the copies'
    kinds from the second run's profile, which records them)."""
    for old, new in pairs:
        if gathers(quant_rev_of(run_dir(old))) or not gathers(quant_rev_of(run_dir(new))):
            raise SystemExit(f"--gather-fit {old}:{new}: the first run must store a tile's column bytes at a "
                             "time (revision < 12), the second gather them")
    return _paired_saving(pairs, lambda q, _run: gathered_elems(q, STRIP_ITERS), "gather", after=True)


def fit_sr16_int(pairs: list[tuple[str, str]]) -> float:
    """`triton_quant_sr16_int_saving_ns_per_elem` from (float-sr16 run, integer-sr16 run)
    pairs of the same calls on the same strip kernel, per element written with sr16."""
    col = QUANT_TERMS.index("triton_quant_sr16_ns_per_elem")
    for old, new in pairs:
        (iters_old, int_old), (iters_new, int_new) = (quant_kernel(quant_rev_of(run_dir(r))) for r in (old, new))
        if int_old or not int_new or iters_old != iters_new:
            raise SystemExit(f"--sr16-int-fit {old}:{new}: the first run must round sr16 in floats, the second "
                             "in integers, both on the same strip kernel")
    return _paired_saving(pairs, lambda q, run: quant_features(q, quant_kernel(quant_rev_of(run_dir(run)))[0])[col],
                          "sr16-int")


# The CALL_TERMS columns that price the amax pass (ops.rs emulated_quant_s `amax_pass_s`).
AMAX_PASS = [QUANT_TERMS.index(t) for t in ("triton_quant_amax_ns_per_elem", "triton_quant_amax_rht_ns_per_elem")]

# Per call: every term of ops.rs emulated_quant_s, with the sign it enters the price with
# (the savings subtract); call_features' columns, in the TOML's units (us per call, ns per unit).
SAVINGS = ("triton_quant_prefetch_saving_ns_per_elem", "triton_quant_gather_saving_ns_per_elem",
           "triton_quant_sr16_int_saving_ns_per_elem")
CALL_TERMS = QUANT_TERMS + SAVINGS


def on_gluon(q: dict, rev: int | None) -> bool:
    """Whether ops.rs prices this call as run on kernels/rowcol_gluon.py (revision 13 on: an
    RTNE row+col call of a bf16 input (from 17 f32 too) without an RHT on 4-bit formats with 1-D blocks of 16 or 32, no
    fake-quant container; from revision 14 also such a call with "sr16" on both copies and
    blocks of 16, or with an RHT of 16 on a packed column copy alone, blocks of 16; from 16
    on a decoded column copy too; from 18 "sr16" on blocks of 32, a rounding for each copy and
    a row RHT of the block size; emulated_quant_s `on_gluon`)."""
    rev = QUANT_REV if rev is None else rev
    outs = q.get("outputs", [])
    if len(outs) != 2 or (q.get("src_bytes", 2) != 2 and rev < 17):  # bf16 only before 17
        return False
    blocks16 = all(o["format"].get("block") == 16 for o in outs)
    rtne = not any(o.get("sr") for o in outs)
    sr16 = rev >= 14 and blocks16 and all(o.get("sr") and o.get("sr16") for o in outs)
    sr16 = sr16 or (rev >= 18 and not rtne and _sr16_only(outs))  # each copy its own rounding
    rht = [o.get("rht", 0) for o in outs]
    col_rht16 = rev >= 14 and blocks16 and rht == [0, 16] and (rev >= 16 or not outs[1].get("decoded"))
    return (rev >= 13 and (rtne or sr16) and (rht == [0, 0] or col_rht16 or _row_rht(outs, rev))
            and all(o["format"]["element"] in FOUR_BIT and not o["format"].get("tile_2d")
                    and o["format"].get("block") in (16, 32) and not o.get("container") for o in outs))


def _sr16_only(outs: list) -> bool:
    """Every copy rounded stochastically uses "sr16"."""
    return all(o.get("sr16") for o in outs if o.get("sr"))


def _row_rht(outs: list, rev: int) -> bool:
    """A row RHT of the block size beside an unrotated column copy (revision 18 on)."""
    return rev >= 18 and outs[0].get("rht", 0) == outs[0]["format"].get("block") and not outs[1].get("rht")


def on_gluon_amax(q: dict, rev: int | None) -> bool:
    """Whether ops.rs prices this call's amax pass as rowcol_gluon.py's (revision 15 on: a
    row+col call of a bf16 input (from 17 f32 too) that measures its tensor amax, no row RHT, a
    column RHT of 16 or none)."""
    outs = q.get("outputs", [])
    rev = QUANT_REV if rev is None else rev
    return (rev >= 15 and len(outs) == 2 and (q.get("src_bytes", 2) == 2 or rev >= 17)
            and measures_amax(q) and not outs[0].get("rht") and outs[1].get("rht", 0) in (0, 16))


def gluon_scaling(q: dict, rev: int | None, emulation: dict) -> tuple[float, float]:
    """(f, a) of ops.rs emulated_quant_s for this call: f scales the strip price beyond the
    call cost and the amax pass where the call runs on rowcol_gluon (on_gluon; else 1), a
    the whole amax pass (both amax terms): rowcol_gluon's factor where the pass is its
    (on_gluon_amax), times the f32 factor of the pass's kernel and rotation for an f32 input;
    emulation: the TOML's [emulation] table (a factor it lacks is 1)."""
    rev = QUANT_REV if rev is None else rev

    def factor(name: str) -> float:
        return float(emulation[name]["value"]) if name in emulation else 1.0

    outs = q.get("outputs", [])
    f = 1.0
    if on_gluon(q, rev):
        if _row_rht(outs, rev):  # MXFP4's X and W calls, bf16 or f32 input
            f = factor("triton_quant_gluon_row_rht_time_factor")
        elif q.get("src_bytes", 2) != 2:  # an f32 input (revision 17 on)
            f = factor("triton_quant_gluon_f32_time_factor")
        elif rev < 14:
            f = factor("triton_quant_gluon_time_factor")
        elif (rev >= 18 and any(o.get("sr") for o in outs) and not any(o.get("rht") for o in outs)
              and any(o["format"].get("block") == 32 for o in outs)):  # "sr16" on blocks of 32
            f = factor("triton_quant_gluon_block32_sr16_time_factor")
        elif any(o.get("rht") for o in outs) and rev >= 16 and not any(o.get("sr") for o in outs):
            f = factor("triton_quant_gluon_rht_rtne_time_factor")  # two row tiles a program
        elif any(o.get("rht") for o in outs) and rev >= 16 and outs[1].get("decoded"):
            f = factor("triton_quant_gluon_rht_decoded_time_factor")
        elif any(o.get("rht") for o in outs):
            f = factor("triton_quant_gluon_rht_time_factor")
        elif any(o.get("sr") for o in outs):
            f = factor("triton_quant_gluon_sr16_time_factor")
        else:
            f = factor("triton_quant_gluon_one_lane_time_factor")
    a = 1.0
    gluon_amax = on_gluon_amax(q, rev)
    if gluon_amax:
        a = factor("triton_quant_gluon_amax_rht_time_factor" if outs[1].get("rht") == 16
                   else "triton_quant_gluon_amax_time_factor")
    if q.get("src_bytes", 2) != 2:  # an f32 input's pass: its factor per kernel and rotation
        rotated = any(o.get("rht") for o in outs)
        a *= factor("triton_quant_" + ("gluon_" if gluon_amax else "") + "amax_" + ("rht_" if rotated else "")
                    + "f32_time_factor")
    return f, a


@functools.lru_cache(maxsize=None)
def _h200_emulation() -> dict:
    return fchw.load("h200").data["emulation"]


def call_features(q: dict, rev: int | None, emulation: dict | None = None) -> np.ndarray:
    """One call's price as ops.rs emulated_quant_s counts it, column by column of CALL_TERMS
    (seconds per unit of each term's TOML value): price = call_features . values. A call on
    rowcol_gluon (revision 13 on) or with its amax pass (15 on) is the strip price's features
    scaled by the TOML's fixed Gluon factors (gluon_scaling; emulation: that table, default
    the h200 file's), so the fits take it with the factors held."""
    iters, int_sr16 = quant_kernel(rev)
    f = quant_features(q, iters)
    sr16 = f[QUANT_TERMS.index("triton_quant_sr16_ns_per_elem")]
    gathered = gathered_elems(q, iters) if gathers(rev) else 0.0
    units = [1e-6] + [1e-9] * (len(QUANT_TERMS) - 1)
    x = np.array([v * u for v, u in zip(f, units)]
                 + [-1e-9 * overlapped_elems(q, iters), -1e-9 * gathered, -1e-9 * sr16 * int_sr16])
    scale, amax = gluon_scaling(q, rev, _h200_emulation() if emulation is None else emulation)
    x[1:] *= scale
    x[AMAX_PASS] *= amax / scale  # the pass is its own kernel: its factor, not the quantizer's
    return x


def call_kind(operand: str) -> str:
    """X (an activation: fprop.x+wgrad.x), dY (dgrad.dy+wgrad.dy) or W (a weight) of a quantize op."""
    first = operand.split("+")[0].partition(".")[2]
    return {"x": "X", "dy": "dY", "w": "W"}.get(first, first)


def call_rows(path: pathlib.Path, emulation: dict | None = None) -> list[dict]:
    """Every quantize op of a run's timeline step (its GPU time, one op per layer and call
    site), with the kernels' revision (recorded, else quant_rev_of) and its call_features
    (emulation: the [emulation] table whose Gluon factors they hold; default the h200 file's)."""
    prof = P.load_profile(path)
    rev = prof.get("quant_rev", quant_rev_of(path))
    if not prof.get("gpu_ops"):
        raise SystemExit(f"{path}: no GPU times (record runs with FOURCAST_TIMELINE_STEP)")
    rows = []
    for op in prof["gpu_ops"]:
        if op["kind"] != "quantize":
            continue
        (_, q, _), = P.model_ops({**prof, "ops": [op]})
        rows.append({"run": f"{path.parent.parent.name}/{path.parent.name}", "recipe": path.name, "rev": rev,
                     "layer": op.get("layer", ""), "operand": op["operand"], "kind": call_kind(op["operand"]),
                     "rows": op["rows"], "cols": op["cols"], "calls": float(op["calls_per_step"]),
                     "us": float(op["ms_per_call"]) * 1e3,
                     "features": call_features(q, rev, emulation),
                     "op": {**q, "impl": "fourcast-triton", **({"quant_rev": rev} if rev is not None else {})}})
    return rows


# A term the file may lack that ops.rs then prices as another (profile.rs Emulation).
FALLBACK = {"triton_quant_rht16_sr_ns_per_elem": "triton_quant_rht_ns_per_elem"}


def term_values(hw: fchw.Hardware) -> np.ndarray:
    """hw's CALL_TERMS values (where the file has none: its FALLBACK term's value, else 0)."""
    em = hw.data["emulation"]

    def value(k: str) -> float:
        k = k if k in em else FALLBACK.get(k, k)
        return float(em[k]["value"]) if k in em else 0.0

    return np.array([value(k) for k in CALL_TERMS])


def term_columns(hw: fchw.Hardware, rows: list[dict], free: tuple[str, ...]) -> np.ndarray:
    """The rows' call_features in us per unit of each CALL_TERMS term; a term hw lacks and the
    fit holds prices as its FALLBACK term (ops.rs), so its column joins that term's."""
    X = np.array([r["features"] for r in rows]) * 1e6
    for term, other in FALLBACK.items():
        if term not in hw.data["emulation"] and term not in free:
            i, j = CALL_TERMS.index(term), CALL_TERMS.index(other)
            X[:, j] += X[:, i]
            X[:, i] = 0.0
    return X


def price_calls(hw: fchw.Hardware, rows: list[dict]) -> np.ndarray:
    """us per call of each row, from the Rust model. The check of call_features: they give
    the emulation price (detail "emulation_s"), which ops.rs then keeps no lower than the
    vendor-grade memory price (a floor that a low per-call constant reaches on small calls)."""
    res = fchw.op_times(hw, [row["op"] for row in rows])
    emulated = np.array([r.detail["emulation_s"] * 1e6 for r in res])
    linear = np.array([row["features"] for row in rows]) @ term_values(hw) * 1e6
    if not np.allclose(emulated, linear, rtol=1e-6, atol=1e-6):
        raise SystemExit("call_features disagree with ops.rs emulated_quant_s; update them together")
    return np.array([r.time_s * 1e6 for r in res])


def fit_calls(hw: fchw.Hardware, rows: list[dict], free: tuple[str, ...]) -> dict[str, float]:
    """{term: value} of the `free` CALL_TERMS minimising the calls' squared relative error
    (each call one residual, model/measured - 1), the other terms as hw has them; a term that
    comes out negative is fixed at 0 and the rest refitted, as fit_quant."""
    X = term_columns(hw, rows, free)
    y = np.array([r["us"] for r in rows])
    theta = term_values(hw)
    cols = [CALL_TERMS.index(t) for t in free if X[:, CALL_TERMS.index(t)].any()]  # no data: left as hw has it
    fixed = [j for j in range(len(CALL_TERMS)) if j not in cols]
    rest = y - X[:, fixed] @ theta[fixed]  # what the free terms must price
    while True:
        coef, *_ = np.linalg.lstsq(X[:, cols] / y[:, None], rest / y, rcond=None)
        if (coef >= 0).all():
            break
        dropped = cols.pop(int(np.argmin(coef)))
        print(f"per-call fit: {CALL_TERMS[dropped]} came out negative; fixed at 0")
    got = dict(zip(cols, coef))
    exercised = [t for t in free if X[:, CALL_TERMS.index(t)].any()]
    return {t: round(float(got.get(CALL_TERMS.index(t), 0.0)), 2 if t == "triton_quant_call_us" else 6)
            for t in exercised}


CALL_FIT = ("triton_quant_call_us", "triton_quant_prefetch_saving_ns_per_elem",
            "triton_quant_gather_saving_ns_per_elem", "triton_quant_sr16_int_saving_ns_per_elem")


def call_summary(hw: fchw.Hardware, rows: list[dict]) -> dict[tuple, tuple[float, float]]:
    """{(run, recipe, kind): (max |error|, median |error|)} of rows priced with hw, and per
    (run, recipe, "class") the quantize class's error (calls per step as weights)."""
    us, calls = np.array([r["us"] for r in rows]), np.array([r["calls"] for r in rows])
    model = price_calls(hw, rows)
    err = model / us - 1
    out: dict[tuple, tuple[float, float]] = {}
    for key in dict.fromkeys((r["run"], r["recipe"]) for r in rows):
        sel = np.array([(r["run"], r["recipe"]) == key for r in rows])
        e = float((calls * model)[sel].sum() / (calls * us)[sel].sum() - 1)
        out[(*key, "class")] = (e, e)
    for key in dict.fromkeys((r["run"], r["recipe"], r["kind"]) for r in rows):
        e = np.abs([x for x, r in zip(err, rows) if (r["run"], r["recipe"], r["kind"]) == key])
        out[key] = (float(e.max()), float(np.median(e)))
    return out


def recipe_dirs(specs) -> list[pathlib.Path]:
    """A recipe's run folder, or every one under a folder (paths, or relative to
    benchmarks/results), that has GPU time per quantize call: a timeline step, and quantize
    ops (not BF16)."""
    out = []
    for spec in specs:
        path = pathlib.Path(spec) if pathlib.Path(spec).exists() else ROOT / "benchmarks/results" / spec
        out += [path] if (path / "profile.json").is_file() else sorted(p.parent for p in path.rglob("profile.json"))
    return [d for d in out if P.load_profile(d).get("gpu_ops") and call_rows(d)]


def call_fit_main(args: argparse.Namespace) -> None:
    """--call-fit: the per-call refit of `--call-terms`, before/after per call, and --write."""
    fit_dirs = recipe_dirs(r for r in args.call_fit.split(",") if r)
    checks = [d for d in recipe_dirs(args.check_runs) if d not in fit_dirs]
    fit_rows = [r for d in fit_dirs for r in call_rows(d)]
    check_rows = [r for d in checks for r in call_rows(d)]
    hw0 = fchw.load("h200")
    terms = tuple(term_name(t) for t in args.call_terms.split(","))
    vals = fit_calls(hw0, fit_rows, terms)
    hw = hw0
    for key, v in vals.items():
        hw = set_term(hw, key, v)
    print("per-call fit on " + ", ".join(f"{d.parent.parent.name}/{d.parent.name}/{d.name}" for d in fit_dirs) + ": "
          + ", ".join(f"{k.removeprefix('triton_quant_')} {term_values(hw0)[CALL_TERMS.index(k)]:g} -> {v:g}"
                      for k, v in vals.items()))
    for label, rows in (("fit", fit_rows), ("held out", check_rows)):
        if not rows:
            continue
        before, after = call_summary(hw0, rows), call_summary(hw, rows)
        print(f"per call, |model / GPU time - 1|, max / median ({label}):")
        for key in before:
            if key[2] == "class":  # signed
                print(f"  {key[0]:24s} {key[1]:11s} quantize class before {before[key][0]:+6.1%}   after {after[key][0]:+6.1%}")
            else:
                print(f"  {key[0]:24s} {key[1]:11s} {key[2]:3s} before {before[key][0]:6.1%} / {before[key][1]:6.1%}"
                      f"   after {after[key][0]:6.1%} / {after[key][1]:6.1%}")
    if args.write:
        fitted = ", ".join(f"{d.parent.parent.name}/{d.parent.name}/{d.name}" for d in fit_dirs)
        held = ", ".join(dict.fromkeys(f"{d.parent.parent.name}/{d.parent.name}" for d in checks)) or "none"
        write_toml({key: (v, f"fit: benchmarks/calibration/fit_emulation.py --call-fit (GPU time of every quantize "
                             f"call of {fitted}, one by one: least squares of the relative error per call, with "
                             f"{', '.join(t.removeprefix('triton_quant_') for t in terms)} refitted together and the "
                             f"other terms as the file had them; held out per call: {held}: model-calibration-per-call.md, "
                             "session 16)")
                    for key, v in vals.items()})


# The pinned quantize classes: tests/unit/test_project.py GPU_BOUNDS's "quantize" cells, as
# {run folder: {recipe: |class error| bound}} (a unit test checks that the two agree).
QUANT_PINS = {
    "training-h200-run10/125m": {"ue5m3": 0.02, "nvfp4": 0.02, "ue5m3+sr4": 0.04, "nvfp4+sr4": 0.04, "mxfp4+sr4": 0.03},
    "training-h200-run10/350m": {"ue5m3+sr4": 0.05},
    "training-h200-run11/125m": {"mxfp4+sr4": 0.03, "nvfp4+sr4": 0.03, "ue5m3+sr4": 0.04},
    "training-h200-run12/125m": {"ue5m3+sr4": 0.06, "ue5m3+sr16": 0.01, "nvfp4+sr16": 0.03},
    "training-h200-run12/350m": {"ue5m3+sr4": 0.05, "ue5m3+sr16": 0.01},
    "training-h200-run13/125m": {"ue5m3+sr16": 0.01},
    "training-h200-run14/125m": {"ue5m3+sr16": 0.01, "mxfp4+sr16": 0.04},
    "training-h200-run16/125m": {"ue5m3+sr16": 0.01, "mxfp4+sr16": 0.04},
    "training-h200-run17/125m": {"ue5m3+sr16": 0.01, "mxfp4+sr16": 0.02},
    "training-h200-run18/125m": {"ue5m3+sr16": 0.01, "mxfp4+sr16": 0.02},
}
# --pin-fit's default calls: runs 10-22 (run 15 kept no profile)
PIN_FIT = tuple(f"training-h200-run{n}" for n in (10, 11, 12, 13, 14, 16, 17, 18, 19, 20, 21, 22))
# --pin-keep's default: the last strip-kernel run (ue5m3, mxfp4) and the current kernels'
# (revision 17: ue5m3, TE NVFP4)
PIN_KEEP = ("training-h200-run18/125m", "training-h200-run22/125m")
PIN_MARGIN = 0.0005  # --pin-margin's default: how far inside its bound each pinned class is kept
# How far past the start's max |error| and range a kept call kind may go: more than the
# rounding of a fit written to the file (six significant digits: a few 1e-6), so that
# --pin-fit from the written file is feasible (and moves the terms by no more than this).
PIN_SLACK = 1e-5


def pin_dirs(pins: dict = QUANT_PINS) -> list[pathlib.Path]:
    """The recipe folders of the pinned classes."""
    return [ROOT / "benchmarks/results" / run / recipe for run, cells in pins.items() for recipe in cells]


def linear_errors(hw: fchw.Hardware, rows: list[dict], free: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(M, c): each call's relative error (model / GPU time - 1) as M @ values + c, values the
    `free` CALL_TERMS in the TOML's units, the other terms as hw has them (ops.rs's emulation
    price, before its floor)."""
    X = term_columns(hw, rows, free)
    y = np.array([r["us"] for r in rows])
    cols = [CALL_TERMS.index(t) for t in free]
    fixed = [j for j in range(len(CALL_TERMS)) if j not in cols]
    return X[:, cols] / y[:, None], X[:, fixed] @ term_values(hw)[fixed] / y - 1


def class_errors(rows: list[dict], M: np.ndarray, c: np.ndarray,
                 pins: dict = QUANT_PINS) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[tuple]]:
    """(C, cc, bound, cells): each pinned quantize class's error (model / GPU time - 1 of its
    calls per step, as call_summary and project.project compute it) as C @ values + cc, from
    its calls' relative errors M @ values + c weighted by their share of the class's GPU time."""
    share = np.array([r["calls"] * r["us"] for r in rows])
    C, cc, bound, cells = [], [], [], []
    for run, recipes in pins.items():
        for recipe, b in recipes.items():
            sel = np.array([(r["run"], r["recipe"]) == (run, recipe) for r in rows])
            if not sel.any():
                raise SystemExit(f"pinned class {run}/{recipe}: no quantize calls in the rows")
            wgt = np.where(sel, share, 0.0) / share[sel].sum()
            C.append(wgt @ M)
            cc.append(wgt @ c)
            bound.append(b)
            cells.append((run, recipe))
    return np.array(C), np.array(cc), np.array(bound), cells


def roofline_us(hw: fchw.Hardware, rows: list[dict]) -> np.ndarray:
    """us per call of each row at the vendor-grade (memory-roofline) price: the floor ops.rs
    keeps the emulation price above."""
    return np.array([r.time_s * 1e6 for r in fchw.op_times(hw, [{k: v for k, v in row["op"].items() if k != "impl"}
                                                                 for row in rows])])


class PinProblem(NamedTuple):
    """min ||A @ values - b||^2 (or max |A @ values - b|) subject to G @ values >= h: the
    `free` CALL_TERMS' values; `labels` names each constraint row."""
    free: tuple[str, ...]
    A: np.ndarray
    b: np.ndarray
    G: np.ndarray
    h: np.ndarray
    labels: list[tuple]


def pin_problem(hw: fchw.Hardware, rows: list[dict], free: tuple[str, ...], floored: frozenset = frozenset(),
                margin: float = PIN_MARGIN, keep: tuple[str, ...] = PIN_KEEP, pins: dict = QUANT_PINS,
                base: fchw.Hardware | None = None) -> PinProblem:
    """The per-call fit of `free` on `rows` (relative error per call), constrained: every
    pinned class within its bound less `margin` (a pin: two rows), no term negative, and in
    the runs `keep` no call kind's max |error| or range wider than `base` (default hw) gives
    it, plus PIN_SLACK (no_worse). ops.rs prices a call at its memory roofline where the
    emulation price falls below it: the calls `floored` (indices of rows) are priced there and
    kept there, every other call kept at or above it ("roofline" rows), so that the price stays
    linear in the terms."""
    M, c = linear_errors(hw, rows, free)
    y = np.array([r["us"] for r in rows])
    roof = roofline_us(hw, rows) / y - 1  # each call's error at its roofline
    on = np.array([i in floored for i in range(len(rows))])
    G = [np.where(on[:, None], -M, M)]  # above the roofline, or (floored) not
    h = [np.where(on, c - roof, roof - c)]
    M, c = np.where(on[:, None], 0.0, M), np.where(on, roof, c)
    C, cc, bound, cells = class_errors(rows, M, c, pins)
    G += [C, -C, np.eye(len(free))]
    h += [-(bound - margin) - cc, cc - (bound - margin), np.zeros(len(free))]
    labels = ([("floored" if f else "roofline", i) for i, f in enumerate(on)] + [("pin", *cell, "-") for cell in cells]
              + [("pin", *cell, "+") for cell in cells] + [("term", t) for t in free])
    kinds: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        if r["run"] in keep:
            kinds.setdefault((r["run"], r["recipe"], r["kind"]), []).append(i)
    err = price_calls(base or hw, rows) / y - 1 if kinds else None
    for kind, idx in kinds.items():
        G_, h_ = no_worse(M[idx], c[idx], err[idx], y[idx], [rows[i]["features"].tobytes() for i in idx], PIN_SLACK)
        G.append(G_)
        h.append(h_)
        labels += [("keep", *kind, "-")] * len(idx) + [("keep", *kind, "+")] * len(idx) \
            + [("keep", *kind, "range")] * (len(h_) - 2 * len(idx))
    return PinProblem(free, M, -c, np.vstack(G), np.concatenate(h), labels)


def no_worse(M: np.ndarray, c: np.ndarray, err: np.ndarray, y: np.ndarray, shape: list,
             slack: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(G, h): the calls of one kind (relative errors M @ values + c) keep |error| within the
    largest of err (their errors now) and their range (max - min) within err's, each plus
    slack: the range counted between the calls that can hold it, the fastest and slowest of
    each op `shape` (the calls of one shape have one price)."""
    worst, width = np.abs(err).max() + slack, err.max() - err.min() + slack
    ends = sorted({i for s in dict.fromkeys(shape) for i in
                   (min((j for j in range(len(y)) if shape[j] == s), key=lambda j: y[j]),
                    max((j for j in range(len(y)) if shape[j] == s), key=lambda j: y[j]))})
    pairs = np.array([(a, b) for a in ends for b in ends if a != b], dtype=int).reshape(-1, 2)
    a, b = pairs[:, 0], pairs[:, 1]  # e_a - e_b <= width
    return np.vstack([M, -M, M[b] - M[a]]), np.concatenate([-worst - c, c - worst, c[a] - c[b] - width])


def _scipy_optimize():
    try:
        import scipy.optimize
    except ImportError:
        raise SystemExit("--pin-fit needs scipy (pip install scipy); the fourcast package does not") from None
    return scipy.optimize


def least_squares_within(A: np.ndarray, b: np.ndarray, G: np.ndarray, h: np.ndarray) -> np.ndarray:
    """x minimising ||A x - b|| subject to G x >= h (A of full column rank): Lawson and Hanson's
    LSI, reduced to a least-distance problem solved by NNLS (Solving Least Squares Problems, ch. 23)."""
    opt = _scipy_optimize()
    Q, R = np.linalg.qr(A)
    Rinv = np.linalg.inv(R)
    qb = Q.T @ b
    E = G @ Rinv  # in u = R x - Q^T b: min ||u|| subject to E u >= f
    f = h - E @ qb
    n = A.shape[1]
    F_, d = np.vstack([E.T, f[None, :]]), np.r_[np.zeros(n), 1.0]
    w, _ = opt.nnls(F_, d, maxiter=50 * len(f))
    r = F_ @ w - d
    if abs(r[n]) < 1e-12:
        raise SystemExit("--pin-fit: no term values meet every constraint")
    return Rinv @ (-r[:n] / r[n] + qb)


def minimax_within(A: np.ndarray, b: np.ndarray, G: np.ndarray, h: np.ndarray) -> tuple[np.ndarray, float]:
    """(x, t): x minimising t = max |A x - b| subject to G x >= h (a linear program)."""
    opt = _scipy_optimize()
    m, n = A.shape
    one, zero = np.ones((m, 1)), np.zeros((len(h), 1))
    res = opt.linprog(np.r_[np.zeros(n), 1.0], A_ub=np.vstack([np.hstack([A, -one]), np.hstack([-A, -one]),
                                                                  np.hstack([-G, zero])]),
                      b_ub=np.r_[b, -b, -h], bounds=[(None, None)] * n + [(0, None)], method="highs")
    if res.status != 0:
        raise SystemExit(f"--pin-fit: the minimax program failed ({res.message})")
    return res.x[:n], float(res.x[n])


def solve_pinned(p: PinProblem, objective: str = "lsq") -> np.ndarray:
    """The free terms' values of p: least squares ("lsq") or the least max |error| ("max");
    columns scaled to unit norm for the solvers."""
    scale = np.linalg.norm(p.A, axis=0)
    scale[scale == 0] = 1.0
    if objective == "max":
        x, _ = minimax_within(p.A / scale, p.b, p.G / scale, p.h)
    else:
        x = least_squares_within(p.A / scale, p.b, p.G / scale, p.h)
    return np.maximum(x / scale, 0.0)  # every term is >= 0; one held there may come out -1e-17


def binding(p: PinProblem, values: np.ndarray, tol: float = 1e-9) -> list[tuple]:
    """The labels of p's constraints that values meet with equality (to tol)."""
    return [lab for lab, slack in zip(p.labels, p.G @ values - p.h) if slack <= tol]


def pin_fit(hw: fchw.Hardware, rows: list[dict], free: tuple[str, ...], objective: str = "lsq",
            margin: float = PIN_MARGIN, keep: tuple[str, ...] = PIN_KEEP,
            base: fchw.Hardware | None = None) -> tuple[PinProblem, np.ndarray]:
    """(problem, values) of the fit constrained by the pins (pin_problem; the kept call kinds
    no worse than `base` prices them, default hw). A call held at its
    roofline by the solution is then priced there instead (floored, as ops.rs prices it), and
    the fit solved again, until none is: each round keeps the last solution feasible, so the
    objective never grows."""
    floored: frozenset = frozenset()
    while True:
        p = pin_problem(hw, rows, free, floored, margin, keep, base=base)
        x = solve_pinned(p, objective)
        held = {lab[1] for lab in binding(p, x) if lab[0] == "roofline"}
        if not held:
            return p, x
        floored |= held


def with_terms(hw: fchw.Hardware, free: tuple[str, ...], values) -> fchw.Hardware:
    for key, v in zip(free, values):
        hw = set_term(hw, key, float(v))
    return hw


def significant(v: float, digits: int = 6) -> float:
    return float(f"{v:.{digits}g}")


def pin_fit_main(args: argparse.Namespace) -> None:
    """--pin-fit: the per-call fit constrained by the class pins (pin_fit), by least squares and
    by least max |error|; before/after per call kind and per pin (the Rust price), what binds,
    and --write (the least-squares values to six significant digits, if every pin still holds).
    --pin-hold terms are set first and not fitted; the kept call kinds stay no worse than the
    file prices them."""
    dirs = list(dict.fromkeys(recipe_dirs(s for s in args.pin_fit.split(",") if s) + pin_dirs()))
    rows = [r for d in dirs for r in call_rows(d)]
    held = {term_name(k): float(v) for k, _, v in (h.partition("=") for h in args.pin_hold)}
    free = tuple(term_name(t) for t in args.pin_terms.split(",") if term_name(t) not in held)
    hw0 = fchw.load("h200")
    start = with_terms(hw0, tuple(held), held.values())
    free = tuple(t for t in free if linear_errors(start, rows, (t,))[0].any())  # no data: left as the file has it
    keep = tuple(k for k in args.pin_keep.split(",") if k)
    fits, binds = {}, {}
    for objective in ("lsq", "max"):
        p, fits[objective] = pin_fit(start, rows, free, objective, args.pin_margin, keep, base=hw0)
        binds[objective] = binding(p, fits[objective]) + [lab for lab in p.labels if lab[0] == "floored"]
    fits["lsq, rounded"] = np.array([significant(v) for v in fits["lsq"]])
    hws = {"file": hw0, **({"file, held": start} if held else {}),
           **{k: with_terms(start, free, v) for k, v in fits.items()}}
    print(f"pin fit: {len(rows)} calls of {len(dirs)} runs; pins at their bound less {args.pin_margin:g}; "
          f"call kinds no worse in: {', '.join(keep) or 'no run'}"
          + "".join(f"; {t} held at {v:g}" for t, v in held.items()))
    print(f"  {'term':40s} {'file':>10s} " + " ".join(f"{k:>13s}" for k in fits))
    for j, t in enumerate(free):
        print(f"  {t:40s} {term_values(hw0)[CALL_TERMS.index(t)]:10.6g} "
              + " ".join(f"{v[j]:13.6g}" for v in fits.values()))
    summary = print_call_errors(hws, rows, keep)
    out = print_pins(summary, binds)
    if args.write:
        if out["lsq, rounded"]:
            raise SystemExit("--write: the rounded values break a pin; not written")
        write_pin_fit(args, rows, keep, held, dict(zip(free, fits["lsq, rounded"])))


def write_pin_fit(args: argparse.Namespace, rows: list[dict], keep: tuple[str, ...], held: dict[str, float],
                  fitted: dict[str, float]) -> None:
    """--pin-fit --write: the fitted values, each with how the fit got it, and the held ones
    with --pin-hold-source."""
    if held and not args.pin_hold_source:
        raise SystemExit("--write with --pin-hold: say where the held values come from (--pin-hold-source)")
    terms = ", ".join(t.removeprefix("triton_quant_") for t in fitted)
    holding = "".join(f"{t.removeprefix('triton_quant_')} held at {v:g} (see its line), " for t, v in held.items())
    source = (f"fit: benchmarks/calibration/fit_emulation.py --pin-fit (GPU time of every quantize call of "
              f"{', '.join(dict.fromkeys(r['run'] for r in rows))}, one by one: least squares of the relative error "
              f"per call, {terms} together, {holding}subject to every quantize class pinned in "
              f"tests/unit/test_project.py staying {args.pin_margin:g} inside its bound, and no call kind of "
              f"{', '.join(keep) or 'no run'} getting a larger max error or a wider range than with the file's "
              "values: model-calibration-per-call.md, session 17 for the method, the section of the fit for its "
              "record)")
    write_toml({**{t: (v, args.pin_hold_source) for t, v in held.items()},
                **{t: (v, source) for t, v in fitted.items()}})


def term_name(t: str) -> str:
    """A CALL_TERMS name, given with or without its "triton_quant_" prefix."""
    return t if t.startswith("triton_quant_") else f"triton_quant_{t}"


def print_call_errors(hws: dict[str, fchw.Hardware], rows: list[dict],
                      keep: tuple[str, ...] = PIN_KEEP) -> dict[str, dict]:
    """Print each term set's per-call |error| (the Rust price): sum of squares, max / median per
    call kind over every run and per (recipe, kind) of each run of `keep`, and how many
    (run, recipe, kind)s got a larger max / median than the first set's; return each set's
    call_summary."""
    y = np.array([r["us"] for r in rows])
    err = {k: price_calls(h, rows) / y - 1 for k, h in hws.items()}
    print("per call, |model / GPU time - 1| (the Rust price): sum of squares; max / median per kind, every run, "
          f"then {', '.join(keep) or 'no run'} by recipe:")
    print(f"  {'':28s}" + "".join(f"{k:>19s}" for k in hws))
    print(f"  {'sum of squares':28s}" + "".join(f"{float(e @ e):19.2f}" for e in err.values()))
    groups = {kind: [r["kind"] == kind for r in rows] for kind in ("X", "dY", "W")}
    kept = dict.fromkeys((r["run"], r["recipe"], r["kind"]) for r in rows if r["run"] in keep)
    groups |= {f"{run.removeprefix('training-h200-')[:5]} {rec} {kind}":
               [(r["run"], r["recipe"], r["kind"]) == (run, rec, kind) for r in rows] for run, rec, kind in kept}
    for label, sel in groups.items():
        print(f"  {label:28s}" + "".join(f"{np.abs(e[sel]).max():9.1%} /{np.median(np.abs(e[sel])):6.1%}  "
                                         for e in err.values()))
    summary = {k: call_summary(h, rows) for k, h in hws.items()}
    first = next(iter(summary.values()))
    kinds = [key for key in first if key[2] != "class"]
    worse = [(sum(s[k][0] > first[k][0] + 1e-9 for k in kinds), sum(s[k][1] > first[k][1] + 1e-9 for k in kinds))
             for s in summary.values()]
    print(f"  {'(run, recipe, kind)s worse':22s}" + "".join(f"{m:9d} /{md:6d}  " for m, md in worse)
          + f" (of {len(kinds)}: max / median)")
    return summary


def print_pins(summary: dict[str, dict], binds: dict[str, list[tuple]]) -> dict[str, int]:
    """Print every pinned class's error per term set (call_summary's), marking the pins whose
    constraint binds, and the other binding constraints per fit; return the pins out of bound
    per term set."""
    print("class pins, model / GPU time - 1 (*: the constraint binds, at the bound less the margin; !: out of bound):")
    for run, recipes in QUANT_PINS.items():
        for recipe, b in recipes.items():
            cells = []
            for k, s in summary.items():
                e = s[(run, recipe, "class")][0]
                mark = "*" if any(lab[:3] == ("pin", run, recipe) for lab in binds.get(k, [])) else " "
                cells.append(f"{e:+7.2%}{mark}{'!' if abs(e) > b else ' '}")
            print(f"  {run.removeprefix('training-h200-'):10s} {recipe:11s} {b:3.0%}"
                  + "".join(f"{c:>19s}" for c in cells))
    out = {k: sum(abs(s[(run, recipe, "class")][0]) > b for run, rs in QUANT_PINS.items() for recipe, b in rs.items())
           for k, s in summary.items()}
    print("  pins out of bound: " + ", ".join(f"{k} {n}" for k, n in out.items()))
    for k, labs in binds.items():
        print(f"  {k}, binding besides the pins: " + (", ".join(
            f"{n} {what}" for what, n in _count([lab for lab in labs if lab[0] != "pin"]).items()) or "none"))
    return out


def _count(labels: list[tuple]) -> dict[str, int]:
    """{what: how many} of binding constraints' labels (not the pins)."""
    out: dict[str, int] = {}
    for lab in labels:
        if lab[0] in ("roofline", "floored"):
            what = "calls at their roofline" if lab[0] == "roofline" else "calls priced at their roofline"
        elif lab[0] == "term":
            what = f"{lab[1].removeprefix('triton_quant_')} at 0"
        else:
            what = f"{lab[1].removeprefix('training-h200-')} {lab[2]} {lab[3]} at its {'range' if lab[4] == 'range' else 'max'}"
        out[what] = out.get(what, 0) + 1
    return out


def set_term(hw: fchw.Hardware, key: str, value: float) -> fchw.Hardware:
    """hw with `emulation.<key>` = value, adding the term where the file has none yet."""
    em = hw.data["emulation"]
    if key in em:
        return hw.set(f"emulation.{key}", value)
    return hw.set("emulation", {**em, key: {"value": value, "source": "fit_emulation.py", "confidence": "measured"}})


def class_ms(hw: fchw.Hardware, recipe: str, cls: str) -> tuple[float, float]:
    """(measured, model) ms per step of one class, base ops tagged as measured."""
    prof = profile(recipe)
    ops = [o for o in P.as_measured(prof) if o[0] == cls]
    return float(prof["classes"].get(cls, 0.0)), P.cost(hw, ops).get(cls, 0.0) * 1e3


def fit_attention(hw: fchw.Hardware) -> float:
    """Tile cycles making the attention class total (all runs) match; bisection (monotone)."""
    meas = sum(class_ms(hw, r, "attention")[0] for r in ATTN_FIT)
    lo, hi = 0.0, 1e5
    for _ in range(50):
        mid = (lo + hi) / 2
        h = hw.set("efficiency.attention_tile_cycles", mid)
        model = sum(class_ms(h, r, "attention")[1] for r in ATTN_FIT)
        lo, hi = (mid, hi) if model < meas else (lo, mid)
    return (lo + hi) / 2


def fit_gemm(hw: fchw.Hardware) -> float:
    """Per-call eager cost closing the BF16 GEMM class (model is linear in it)."""
    h0 = hw.set("emulation.torch_eager_call_us", 0.0)
    meas, model0 = map(sum, zip(*(class_ms(h0, r, "gemm") for r in GEMM_FIT)))
    calls = sum(c for r in GEMM_FIT for cls, o, c in P.as_measured(profile(r)) if o.get("impl") == "torch-eager")
    return max(0.0, (meas - model0) / calls * 1e3)


def fit_cublaslt(hw: fchw.Hardware, runs: tuple[str, ...]) -> float:
    """`cublaslt_gemm_time_factor` closing the GEMM class of `runs` (FP4 runs whose GEMMs
    went through fourcast's cuBLASLt call); the model is linear in it."""
    m0 = sum(class_ms(hw.set("emulation.cublaslt_gemm_time_factor", 0.0), r, "gemm")[1] for r in runs)
    m1 = sum(class_ms(hw.set("emulation.cublaslt_gemm_time_factor", 1.0), r, "gemm")[1] for r in runs)
    meas = sum(class_ms(hw, r, "gemm")[0] for r in runs)
    return (meas - m0) / (m1 - m0)


def gemm_clock_check(hw: fchw.Hardware) -> float:
    """The eager GEMM clock (GHz) that alone closes the BF16 GEMM class (no eager cost)."""
    h0 = hw.set("emulation.torch_eager_call_us", 0.0)
    lo, hi = 1.0, 3.0
    for _ in range(40):
        mid = (lo + hi) / 2
        h = h0.set("emulation.torch_eager_gemm_clock_ghz", mid)
        meas, model = map(sum, zip(*(class_ms(h, r, "gemm") for r in GEMM_FIT)))
        lo, hi = (lo, mid) if model < meas else (mid, hi)
    return (lo + hi) / 2


def errors(hw: fchw.Hardware, recipes=None) -> dict:
    """{recipe: {class: (measured ms, model ms, error)}} for the three major classes."""
    out = {}
    for r in recipes or RECIPES:
        out[r] = {}
        for cls in ("gemm", "quantize", "attention"):
            m, p = class_ms(hw, r, cls)
            if m > 0:
                out[r][cls] = (m, p, p / m - 1)
    return out


def write_toml(values: dict) -> None:
    path = ROOT / "hwmodels/h200.toml"
    text = path.read_text()
    for key, (value, src) in values.items():
        line = f'{key} = {{ value = {value}, source = "{src}", confidence = "measured" }}'
        text, n = re.subn(rf"^{key} = .*$", line, text, flags=re.M)
        if n == 0 and key.startswith("triton_quant_"):  # no line yet: after the CALL_TERMS term before it
            earlier = CALL_TERMS[:CALL_TERMS.index(key)] if key in CALL_TERMS else ()
            anchors = [m for t in earlier for m in re.finditer(rf"^{t} = .*$", text, flags=re.M)]
            last = (anchors or list(re.finditer(r"^triton_quant_.*$", text, flags=re.M)))[-1]
            text, n = text[:last.end()] + "\n" + line + text[last.end():], 1
        if n != 1:
            raise SystemExit(f"hwmodels/h200.toml: no single line for {key}")
    path.write_text(text)


def main() -> None:
    global RUNS, MEASURE, RECIPES, QUANT_FIT, QUANT_HELD_OUT, ATTN_FIT
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default=str(RUNS), help="folder of profiled runs to fit on")
    ap.add_argument("--check-runs", nargs="+", default=[str(ROOT / "benchmarks/results/training-h200-run2")],
                    help="folders of runs of another size/shape, priced with the fitted terms (all held out)")
    ap.add_argument("--measure", choices=("events", "gpu"), default="events",
                    help="fit against CUDA-event spans or GPU kernel time")
    ap.add_argument("--quant-fit", default=",".join(QUANT_FIT),
                    help="comma-separated runs of --runs whose quantize ops are fitted (the other FP4 runs are held out)")
    ap.add_argument("--lt-fit", default="",
                    help="comma-separated runs (as --quant-fit) whose GEMM class fits cublaslt_gemm_time_factor")
    ap.add_argument("--prefetch-fit", default="",
                    help="comma-separated ONE:MULTI pairs of runs (as --quant-fit: a one-tile run, a run of the "
                         "multi-tile strip kernel) whose row+col calls fit triton_quant_prefetch_saving_ns_per_elem")
    ap.add_argument("--sr16-int-fit", default="",
                    help="comma-separated OLD:NEW pairs of runs (as --quant-fit: a run of the float sr16, a run of "
                         "the integer one) whose row+col calls fit triton_quant_sr16_int_saving_ns_per_elem")
    ap.add_argument("--gather-fit", default="",
                    help="comma-separated OLD:NEW pairs of runs (as --quant-fit: a run before quantizer revision 12, "
                         "a run of it) whose row+col calls fit triton_quant_gather_saving_ns_per_elem")
    ap.add_argument("--call-fit", default="",
                    help="comma-separated run folders (relative to benchmarks/results: a recipe's or a folder of "
                         "them) whose quantize calls refit --call-terms per call; nothing else is fitted")
    ap.add_argument("--call-terms", default=",".join(CALL_FIT), help="the CALL_TERMS --call-fit refits")
    ap.add_argument("--pin-fit", nargs="?", const=",".join(PIN_FIT), default="",
                    help="comma-separated run folders (as --call-fit; default: runs 10-22) whose quantize calls "
                         "refit --pin-terms per call, constrained by test_project.py's quantize class pins "
                         "(needs scipy); nothing else is fitted")
    ap.add_argument("--pin-terms", default=",".join(CALL_TERMS), help="the CALL_TERMS --pin-fit refits")
    ap.add_argument("--pin-hold", nargs="*", default=[], metavar="TERM=V",
                    help="CALL_TERMS --pin-fit sets to V and does not refit (a value measured elsewhere); --write "
                         "writes them with --pin-hold-source")
    ap.add_argument("--pin-hold-source", default="", help="the TOML source of the --pin-hold values")
    ap.add_argument("--pin-margin", type=float, default=PIN_MARGIN,
                    help="how far inside its bound --pin-fit keeps each pinned class")
    ap.add_argument("--pin-keep", default=",".join(PIN_KEEP),
                    help="comma-separated runs (as in QUANT_PINS) whose call kinds' max |error| and range "
                         "--pin-fit may not raise ('' none)")
    ap.add_argument("--write", action="store_true", help="update hwmodels/h200.toml")
    ap.add_argument("--quant-only", action="store_true",
                    help="fit (and write) only the quantizer terms; attention and GEMM terms stay as the file has them")
    args = ap.parse_args()
    if args.call_fit:
        return call_fit_main(args)
    if args.pin_fit:
        return pin_fit_main(args)
    RUNS, MEASURE = pathlib.Path(args.runs), args.measure
    RECIPES = ATTN_FIT = tuple(p.name for p in sorted(RUNS.iterdir()) if (p / "profile.json").is_file())
    QUANT_FIT = tuple(args.quant_fit.split(","))
    QUANT_HELD_OUT = tuple(r for r in RECIPES if r not in QUANT_FIT and r not in GEMM_FIT)
    hw = fchw.load("h200")
    if args.quant_only:
        tile = hw.data["efficiency"]["attention_tile_cycles"]["value"]
        eager = hw.data["emulation"]["torch_eager_call_us"]["value"]
        clock = float("nan")
    else:
        tile = round(fit_attention(hw), -1)
        hw = hw.set("efficiency.attention_tile_cycles", tile)
        clock = gemm_clock_check(hw)
        eager = round(fit_gemm(hw), 2)
        hw = hw.set("emulation.torch_eager_call_us", eager)
    quant = fit_quant()
    for key, v in quant.items():
        hw = hw.set(f"emulation.{key}", v)
    prefetch_fit = [tuple(p.split(":")) for p in args.prefetch_fit.split(",") if p]
    if prefetch_fit:
        prefetch = round(fit_prefetch(prefetch_fit), 6)
        hw = hw.set("emulation.triton_quant_prefetch_saving_ns_per_elem", prefetch)
        print(f"triton_quant_prefetch_saving_ns_per_elem {prefetch} (the row+col calls of "
              f"{', '.join(m for _, m in prefetch_fit)} against {', '.join(o for o, _ in prefetch_fit)})")
    paired = {}  # the (old run, new run) fits of one saving term each: term -> (pairs, value)
    for arg, fit, term in ((args.gather_fit, fit_gather, "triton_quant_gather_saving_ns_per_elem"),
                           (args.sr16_int_fit, fit_sr16_int, "triton_quant_sr16_int_saving_ns_per_elem")):
        pairs = [tuple(p.split(":")) for p in arg.split(",") if p]
        if pairs:
            paired[term] = (pairs, round(fit(pairs), 6))
            hw = set_term(hw, term, paired[term][1])
            print(f"{term} {paired[term][1]} (the row+col calls of {', '.join(n for _, n in pairs)} "
                  f"against {', '.join(o for o, _ in pairs)})")
    gather_fit, gather = paired.get("triton_quant_gather_saving_ns_per_elem", ([], None))
    sr16_int_fit, sr16_int = paired.get("triton_quant_sr16_int_saving_ns_per_elem", ([], None))
    lt_fit = tuple(r for r in args.lt_fit.split(",") if r)
    if lt_fit:
        lt = round(fit_cublaslt(hw, lt_fit), 3)
        hw = hw.set("emulation.cublaslt_gemm_time_factor", lt)
        print(f"cublaslt_gemm_time_factor {lt} (the GEMM class of {', '.join(lt_fit)})")
    print(f"attention_tile_cycles {tile:.0f}; torch_eager_call_us {eager:.2f} (eager GEMM clock "
          f"{hw.data['emulation']['torch_eager_gemm_clock_ghz']['value']} GHz; alone it would take {clock:.3f}); "
          "triton quant (us/call, ns/elem): " + ", ".join(f"{k.removeprefix('triton_quant_')} {v}" for k, v in quant.items()))
    role = {"gemm": GEMM_FIT + lt_fit, "quantize": QUANT_FIT, "attention": ATTN_FIT}
    print(f"fit folder {RUNS.name}:")
    for r, row in errors(hw).items():
        cells = [f"{cls} {m:6.1f}/{p:6.1f} {e:+6.1%} ({'fit' if r in role[cls] else 'held out'})"
                 for cls, (m, p, e) in row.items()]
        print(f"  {r:10s} " + "  ".join(cells))
    checks = [pathlib.Path(c) for c in args.check_runs]
    for check in checks:
        if not check.is_dir() or check == RUNS:
            continue
        fit_dir, RUNS = RUNS, check
        print(f"check folder {check.parent.name}/{check.name} (held out):")
        for r, row in errors(hw, [p.name for p in sorted(check.iterdir()) if (p / "profile.json").is_file()]).items():
            print(f"  {r:10s} " + "  ".join(f"{cls} {m:6.1f}/{p:6.1f} {e:+6.1%}" for cls, (m, p, e) in row.items()))
        RUNS = fit_dir
    if args.write:
        run = f"{RUNS.parent.name}/{RUNS.name}"
        timed = "GPU time" if MEASURE == "gpu" else "CUDA-event time"
        tool = "fit: benchmarks/calibration/fit_emulation.py"
        others = {} if args.quant_only else {
            "attention_tile_cycles": (tile, f"{tool} ({timed} of the attention ops of {run}, one shape; "
                                            f"{', '.join(c.name for c in checks)} as the check)"),
            "torch_eager_call_us": (eager, f"{tool} ({timed} of the GEMM calls of {run}/bf16 at the eager GEMM clock; "
                                           "FP4 runs held out)"),
        }
        fitted = ", ".join(f if "/" in f else f"{run}/{f}" for f in QUANT_FIT)
        if prefetch_fit:
            quoted = any(m in RECORDED_MS for _, m in prefetch_fit)
            others["triton_quant_prefetch_saving_ns_per_elem"] = (
                prefetch, f"{tool} (GPU time of the row+col quantize calls of "
                          f"{', '.join(f'{m} against {o}' for o, m in prefetch_fit)}"
                          f"{' (the per-call means training-h200.md quotes: no profile kept)' if quoted else ''}"
                          ": the same calls with one row tile a strip program and with several; the rest held out: "
                          "projection-h200.md, session 11)")
        if sr16_int_fit:
            others["triton_quant_sr16_int_saving_ns_per_elem"] = (
                sr16_int, f"{tool} (GPU time of the row+col sr16 quantize calls of "
                          f"{', '.join(f'{n} against {o}' for o, n in sr16_int_fit)}"
                          ": the same calls with float and with integer sr16; the rest held out: "
                          "projection-h200.md, session 11)")
        if gather_fit:
            others["triton_quant_gather_saving_ns_per_elem"] = (
                gather, f"{tool} (GPU time of the row+col quantize calls of "
                        f"{', '.join(f'{n} against {o}' for o, n in gather_fit)}"
                        ": the same calls with a tile's and a program's column bytes stored at once; the rest "
                        "held out: projection-h200.md, session 12)")
        if lt_fit:
            others["cublaslt_gemm_time_factor"] = (lt, f"{tool} ({timed} of the GEMM ops of "
                                                   f"{', '.join(f if '/' in f else f'{run}/{f}' for f in lt_fit)}: "
                                                   "FP4 runs whose GEMMs went through fourcast's cuBLASLt call; "
                                                   "the rest held out: projection-h200.md, session 10)")
        write_toml({
            **others,
            **{key: (v, f"{tool} ({timed} of the quantize ops of {fitted}; the rest held out: "
                        "projection-h200.md, session 9)") for key, v in quant.items()},
        })


if __name__ == "__main__":
    main()
