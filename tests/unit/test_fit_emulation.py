"""benchmarks/calibration/fit_emulation.py's per-call fit constrained by the class pins
(--pin-fit), on the committed training-h200 profiles, checked against the Rust price."""

import importlib.util
import pathlib

import numpy as np
import pytest

from fourcast import hw as fchw

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def F():
    return _load("fit_emulation_under_test", ROOT / "benchmarks/calibration/fit_emulation.py")


@pytest.fixture(scope="module")
def calls(F):
    """Every quantize call of --pin-fit's default runs (runs 10-22 with a timeline step)."""
    return _calls(F, F.PIN_FIT)


def _calls(F, runs, f32_amax=True):
    """The quantize calls of these runs, their features priced with the file's [emulation]
    factors (f32_amax False: without session 20's f32 amax factors, as a fit before them)."""
    em = {k: v for k, v in fchw.load("h200").data["emulation"].items() if f32_amax or k not in F32_AMAX}
    dirs = list(dict.fromkeys(F.recipe_dirs(runs) + F.pin_dirs()))
    return [r for d in dirs for r in F.call_rows(d, em)]


@pytest.fixture(scope="module")
def calls_before_f32(F):
    """`calls` as a fit before session 20's f32 amax factors priced them."""
    return _calls(F, F.PIN_FIT, f32_amax=False)


@pytest.fixture(scope="module")
def fits(F, calls):
    hw = fchw.load("h200")
    return {objective: F.pin_fit(hw, calls, F.CALL_TERMS, objective) for objective in ("lsq", "max")}


# Session 20's measured factors of an f32 input's amax pass: a fit from before them prices
# without them (absent: 1).
F32_AMAX = tuple(f"triton_quant_{k}amax_{r}f32_time_factor" for k in ("", "gluon_") for r in ("", "rht_"))


def _file_with(F, values, f32_amax=True):
    """The h200 file with these CALL_TERMS values and no line for the other CALL_TERMS (a
    rotation term absent prices as its fallback, another absent term is 0); f32_amax False:
    without session 20's f32 amax factors either."""
    hw = fchw.load("h200")
    em = {k: v for k, v in hw.data["emulation"].items()
          if (k not in F.CALL_TERMS or k in values) and (f32_amax or k not in F32_AMAX)}
    return F.with_terms(hw.set("emulation", em), tuple(values), values.values())


def _errors(F, hw, calls):
    """Each call's model / GPU time - 1, the Rust price (its roofline floor included)."""
    return F.price_calls(hw, calls) / np.array([r["us"] for r in calls]) - 1


def test_the_fits_pins_are_test_project_s(F):
    tp = _load("test_project_bounds", ROOT / "tests/unit/test_project.py")
    pinned = {f"{run.parent.name}/{run.name}": {r: b for (r, cls), b in cells.items() if cls == "quantize"}
              for run, cells in tp.GPU_BOUNDS.items()}
    assert F.QUANT_PINS == {run: cells for run, cells in pinned.items() if cells}
    assert sum(map(len, F.QUANT_PINS.values())) == 23


def test_least_squares_within_solves_a_small_program(F):
    A, b = np.eye(2), np.array([2.0, -1.0])
    x = F.least_squares_within(A, b, np.eye(2), np.zeros(2))  # x >= 0
    assert x == pytest.approx([2.0, 0.0], abs=1e-12)
    x = F.least_squares_within(A, b, np.array([[-1.0, -1.0]]), np.array([-1.0]))  # x0 + x1 <= 1
    assert x == pytest.approx([2.0, -1.0], abs=1e-12)
    x = F.least_squares_within(A, b, np.array([[-1.0, 0.0]]), np.array([-1.5]))  # x0 <= 1.5
    assert x == pytest.approx([1.5, -1.0], abs=1e-12)
    with pytest.raises(SystemExit, match="no term values"):
        F.least_squares_within(A, b, np.array([[1.0, 0.0], [-1.0, 0.0]]), np.array([1.0, 0.0]))  # x0 >= 1, <= 0


@pytest.mark.parametrize("objective", ["lsq", "max"])
def test_the_pin_fit_meets_every_constraint_in_the_rust_price(F, calls, fits, objective):
    """Every constraint row holds (to 1e-9); priced by Rust with the fitted values, every pinned
    class is within its bound less the margin, and no call kind of the kept run has a larger
    max |error| or a wider range than with the file's values (plus the slack)."""
    p, x = fits[objective]
    slack = p.G @ x - p.h
    assert slack.min() >= -1e-9, p.labels[int(np.argmin(slack))]
    hw0 = fchw.load("h200")
    hw = F.with_terms(hw0, p.free, x)
    err, err0 = _errors(F, hw, calls), _errors(F, hw0, calls)
    assert np.allclose(err, p.A @ x - p.b, rtol=0, atol=1e-9)  # the program prices calls as Rust does
    summary = F.call_summary(hw, calls)
    for run, recipes in F.QUANT_PINS.items():
        for recipe, bound in recipes.items():
            assert abs(summary[(run, recipe, "class")][0]) <= bound - F.PIN_MARGIN + 1e-9, (run, recipe)
    for kind in {(r["run"], r["recipe"], r["kind"]) for r in calls if r["run"] in F.PIN_KEEP}:
        sel = np.array([(r["run"], r["recipe"], r["kind"]) == kind for r in calls])
        assert np.abs(err[sel]).max() <= np.abs(err0[sel]).max() + F.PIN_SLACK + 1e-9, kind
        assert np.ptp(err[sel]) <= np.ptp(err0[sel]) + F.PIN_SLACK + 1e-9, kind


# hwmodels/h200.toml's quantize terms before session 17 adopted the --pin-fit (session 16's;
# the rotated amax term, session 19's, absent: 0; the SR RHT16 rotation term, session 19 (2)'s,
# absent: the SR tile's rotation term).
SESSION_16 = {
    "triton_quant_call_us": 9.68, "triton_quant_ns_per_elem": 0.00148, "triton_quant_rht_ns_per_elem": 0.0036,
    "triton_quant_strip_rht_ns_per_elem": 0.0022, "triton_quant_sr_ns_per_elem": 0.00305,
    "triton_quant_sr4_ns_per_elem": 0.00083, "triton_quant_sr16_ns_per_elem": 0.00009,
    "triton_quant_amax_ns_per_elem": 0.0004, "triton_quant_amax_rht_ns_per_elem": 0.0,
    "triton_quant_amax_tile_ns": 0.91508,
    "triton_quant_prefetch_saving_ns_per_elem": 0.000164, "triton_quant_gather_saving_ns_per_elem": 0.000338,
    "triton_quant_sr16_int_saving_ns_per_elem": 0.000198,
}


# Session 17's --pin-fit: runs 10-18, kept no worse in run 18; its terms (the file's until
# session 19 (2); the rotated amax term at 0, the SR RHT16 rotation term absent).
SESSION_17_RUNS = tuple(f"training-h200-run{n}" for n in (10, 11, 12, 13, 14, 16, 17, 18))
SESSION_17_KEEP = ("training-h200-run18/125m",)
SESSION_17 = {
    "triton_quant_call_us": 6.00169, "triton_quant_ns_per_elem": 0.00139979,
    "triton_quant_rht_ns_per_elem": 0.00340879, "triton_quant_strip_rht_ns_per_elem": 0.00127839,
    "triton_quant_sr_ns_per_elem": 0.00295033, "triton_quant_sr4_ns_per_elem": 0.000791585,
    "triton_quant_sr16_ns_per_elem": 0.000288375, "triton_quant_amax_ns_per_elem": 0.00087568,
    "triton_quant_amax_rht_ns_per_elem": 0.0, "triton_quant_amax_tile_ns": 1.47498,
    "triton_quant_prefetch_saving_ns_per_elem": 0.0001218, "triton_quant_gather_saving_ns_per_elem": 0.000384944,
    "triton_quant_sr16_int_saving_ns_per_elem": 0.00024307,
}


def test_the_pin_fit_from_session_16_is_no_worse_and_gives_session_17s_terms(F):
    """From session 16's terms (the start: they meet every constraint), each fit of session
    17's calls and terms (the SR RHT16 rotation priced as the SR tile's other rotations) is no
    worse than the start; the least-squares fit is session 17's terms (to the six significant
    digits --write keeps; the rotated amax term, free, at 0), and it narrows the calls'
    squared errors at least sevenfold (386 -> 48)."""
    calls = _calls(F, SESSION_17_RUNS, f32_amax=False)
    start = _file_with(F, SESSION_16, f32_amax=False)
    free = tuple(SESSION_16)
    x0 = np.array(list(SESSION_16.values()))
    err0 = _errors(F, start, calls)
    for objective in ("lsq", "max"):
        p, x = F.pin_fit(start, calls, free, objective, keep=SESSION_17_KEEP)
        assert (p.G @ x0 - p.h).min() >= -1e-9, objective  # the start is feasible
        assert (p.G @ x - p.h).min() >= -1e-9, objective
        if objective == "lsq":
            assert np.sum((p.A @ x - p.b) ** 2) * 7 <= err0 @ err0
            assert x == pytest.approx([SESSION_17[t] for t in free], rel=1e-5)
        else:
            assert np.abs(p.A @ x - p.b).max() <= np.abs(err0).max() + 1e-9


def test_on_gluon_mirrors_the_rust_price(F):
    """fit_emulation.on_gluon says which calls ops.rs prices as run on rowcol_gluon
    (revision 13 on; from 14 its "sr16" calls and column RHTs of 16 too, from 16 on a decoded
    column copy too, from 18 MXFP4's calls: "sr16" on blocks of 32, a rounding a copy, a row
    RHT of the block): exactly those whose price at 13, 14, 16 or 18 differs from their price
    at 12; call_features, the strip features scaled by the file's Gluon factors, give ops.rs's
    price for every one (the block-32 "sr16" factor, 1.0 in the file, set off 1 so the price
    tells)."""
    hw = fchw.load("h200", {"emulation.triton_quant_gluon_block32_sr16_time_factor": 0.9})

    def fmt(element, scale, block, rule, tile_2d=False):
        return {"element": element, "scale": scale, "block": block, "rule": rule, "tile_2d": tile_2d}

    nv, ue = fmt("e2m1", "e4m3", 16, "te"), fmt("e2m1", "ue5m3", 16, "te")
    mx, mx8 = fmt("e2m1", "ue8m0", 32, "floor"), fmt("e4m3", "ue8m0", 32, "floor")
    nv2d = fmt("e2m1", "e4m3", 16, "te", tile_2d=True)
    cases = [
        [{"format": nv}, {"format": nv}],
        [{"format": ue, "decoded": True}, {"format": ue}],
        [{"format": mx}, {"format": mx, "decoded": True}],
        [{"format": nv, "sr": True, "sr16": True}, {"format": nv, "sr": True, "sr16": True}],
        [{"format": ue, "decoded": True, "sr": True, "sr16": True},
         {"format": ue, "decoded": True, "sr": True, "sr16": True}],
        [{"format": mx, "sr": True, "sr16": True}, {"format": mx, "sr": True, "sr16": True}],
        [{"format": nv, "sr": True}, {"format": nv, "sr": True}],
        [{"format": nv}, {"format": nv, "sr": True, "sr16": True}],
        [{"format": nv}, {"format": nv, "rht": 16}],
        [{"format": nv, "sr": True, "sr16": True}, {"format": nv, "rht": 16, "sr": True, "sr16": True}],
        [{"format": ue, "decoded": True}, {"format": ue, "rht": 16}],
        [{"format": nv, "rht": 16}, {"format": nv}],
        [{"format": nv}, {"format": nv, "rht": 16, "decoded": True}],
        [{"format": nv, "decoded": True, "sr": True, "sr16": True},
         {"format": nv, "rht": 16, "decoded": True, "sr": True, "sr16": True}],
        [{"format": mx}, {"format": mx, "rht": 32}],
        [{"format": mx, "rht": 32, "decoded": True}, {"format": mx, "sr": True, "sr16": True}],
        [{"format": mx, "rht": 32, "decoded": True}, {"format": mx, "rht": 32}],
        [{"format": mx, "rht": 32}, {"format": mx, "sr": True}],
        [{"format": nv}],
        [{"format": mx8}, {"format": mx8}],
        [{"format": nv, "container": "bf16"}, {"format": nv, "container": "bf16"}],
        [{"format": nv2d}, {"format": nv2d}],
    ]
    seen = set()
    for outs in cases:
        q = {"op": "quantize", "numel": 75497472, "impl": "fourcast-triton", "refresh": 10, "outputs": outs}
        revs = (13, 14, 16, 18)
        old, *new = (r.detail["emulation_s"] for r in fchw.op_times(hw, [{**q, "quant_rev": rev} for rev in (12, *revs)]))
        for rev, price in zip(revs, new):
            assert F.on_gluon(q, rev) == (price != old), (rev, outs)
            seen.add((rev, F.on_gluon(q, rev)))
            if F.on_gluon(q, rev):  # the strip features scaled by the Gluon factor: ops.rs's price
                assert F.call_features(q, rev, hw.data["emulation"]) @ F.term_values(hw) == pytest.approx(price, rel=1e-9), (rev, outs)
        assert not F.on_gluon(q, 12)
        assert F.on_gluon(q, None) == F.on_gluon(q, 18)
    assert seen == {(rev, on) for rev in revs for on in (True, False)}
    for outs in cases[:3]:  # an f32 input: rowcol_gluon's from revision 17
        q = {"op": "quantize", "numel": 75497472, "impl": "fourcast-triton", "refresh": 10, "outputs": outs,
             "src_bytes": 4.0}
        strip, at16, at17 = (r.detail["emulation_s"] for r in fchw.op_times(hw, [{**q, "quant_rev": rev}
                                                                                 for rev in (12, 16, 17)]))
        assert at16 == strip and not F.on_gluon(q, 16) and F.on_gluon(q, 17) and at17 < strip
        assert F.call_features(q, 17, hw.data["emulation"]) @ F.term_values(hw) == pytest.approx(at17, rel=1e-9)
    sr16, te_dy, mx_sr16, mx_x = cases[3], cases[13], cases[5], cases[15]
    assert F.on_gluon({"outputs": sr16}, 14) and not F.on_gluon({"outputs": sr16}, 13)
    assert F.on_gluon({"outputs": mx_sr16}, 18) and not F.on_gluon({"outputs": mx_sr16}, 17)
    assert F.on_gluon({"outputs": mx_x}, 18) and not F.on_gluon({"outputs": mx_x}, 17)
    assert F.on_gluon({"outputs": te_dy}, 16) and not F.on_gluon({"outputs": te_dy}, 15)


def test_call_rows_of_a_gluon_run_price_as_rust_does(F):
    """Runs 19 and 20 (quantizer revisions 14 and 15) have calls on rowcol_gluon and its amax
    pass: their call_features (the strip features scaled by the file's Gluon factors) give
    the Rust price of every call (price_calls checks it), so a fit can take them."""
    hw = fchw.load("h200")
    for run in ("training-h200-run19/125m/ue5m3+sr16", "training-h200-run20/125m/nvfp4+sr16"):
        rows = F.call_rows(ROOT / "benchmarks/results" / run)
        assert any(F.on_gluon(r["op"], r["rev"]) for r in rows), run
        us = F.price_calls(hw, rows)  # raises if the features and ops.rs disagree
        assert len(us) == len(rows) and (us > 0).all()
    assert any(F.on_gluon_amax(r["op"], r["rev"]) for r in rows)


def test_on_gluon_amax_mirrors_the_rust_price(F):
    """fit_emulation.on_gluon_amax says which calls ops.rs prices with rowcol_gluon's amax
    pass (revision 15 on): exactly the row+col calls whose price at 15 differs from 14's
    among calls that measure their amax; call_features give ops.rs's price for each."""
    hw = fchw.load("h200")
    nv = {"element": "e2m1", "scale": "e4m3", "block": 16, "rule": "te", "tile_2d": False}
    cases = [
        [{"format": nv, "decoded": True}, {"format": nv, "rht": 16}],
        [{"format": nv, "decoded": True, "sr": True, "sr16": True},
         {"format": nv, "decoded": True, "rht": 16, "sr": True, "sr16": True}],
        [{"format": nv}, {"format": nv}],
        [{"format": nv, "rht": 16}, {"format": nv}],
        [{"format": nv}],
    ]
    seen = set()
    for outs in cases:
        q = {"op": "quantize", "numel": 75497472, "impl": "fourcast-triton", "refresh": 1, "outputs": outs}
        old, new = (r.detail["emulation_s"] for r in fchw.op_times(hw, [{**q, "quant_rev": r} for r in (14, 15)]))
        assert F.on_gluon_amax(q, 15) == (new != old), outs
        assert not F.on_gluon_amax(q, 14) and not F.on_gluon_amax({**q, "refresh": 10}, 15)
        seen.add(F.on_gluon_amax(q, 15))
        assert F.call_features(q, 15) @ F.term_values(hw) == pytest.approx(new, rel=1e-9), outs
    assert seen == {True, False}


def test_call_features_price_the_rotated_amax_pass_as_rust_does(F):
    """With the rotated amax term set (triton_quant_amax_rht_ns_per_elem, against 0),
    call_features' column for it (the amax-pass elements of a call with an RHT on a copy,
    times rowcol_gluon's amax factor where its pass runs: revision 15 on, a column RHT of 16)
    gives what the term adds to ops.rs's price at revisions 12-16, and every call of runs 19-22
    prices as Rust does (price_calls raises if not)."""
    term, value = "triton_quant_amax_rht_ns_per_elem", 0.0015
    hw0 = F.set_term(fchw.load("h200"), term, 0.0)
    hw = F.set_term(hw0, term, value)
    j, n = F.CALL_TERMS.index(term), 75497472
    nv = {"element": "e2m1", "scale": "e4m3", "block": 16, "rule": "te", "tile_2d": False}
    mx = {"element": "e2m1", "scale": "ue8m0", "block": 32, "rule": "floor", "tile_2d": False}
    sr16 = {"sr": True, "sr16": True}
    te_x = [{"format": nv, "decoded": True}, {"format": nv, "rht": 16}]
    cases = [  # (outputs, whether the call rotates a copy whose tensor amax its pass measures)
        (te_x, True),
        ([{"format": nv, "decoded": True, **sr16}, {"format": nv, "decoded": True, "rht": 16, **sr16}], True),
        ([{"format": nv, "rht": 16}, {"format": nv}], True),
        ([{"format": nv, "rht": 16}], True),
        ([{"format": nv}, {"format": nv}], False),
        ([{"format": mx}, {"format": mx, "rht": 32}], False),  # no tensor amax: no pass
    ]
    _check_term_column(F, hw0, hw, term, cases, (12, 14, 15, 16), lambda refresh: refresh == 1)
    q = {"numel": n, "refresh": 1, "outputs": te_x}
    factor = hw0.data["emulation"]["triton_quant_gluon_amax_rht_time_factor"]["value"]
    assert F.call_features(q, 16)[j] == pytest.approx(n * 1e-9 * factor)  # rowcol_gluon's pass
    assert F.call_features(q, 14)[j] == pytest.approx(n * 1e-9)  # strip.py's
    _check_runs_19_to_22(F, hw, j)


def _check_term_column(F, hw0, hw, term, cases, revs, counts):
    """For each (outputs, whether the term prices the call) of `cases`, at refresh 1 and 10 and
    each of `revs`: call_features' column for `term` is non-zero where the term prices the call
    (and counts(refresh)), gives hw's Rust price with the other columns, and times the term's
    value what hw (the term set) adds to hw0's price (the term at 0)."""
    j, value = F.CALL_TERMS.index(term), F.term_values(hw)[F.CALL_TERMS.index(term)]
    for outs, priced in cases:
        for refresh in (1, 10):
            q = {"op": "quantize", "numel": 75497472, "impl": "fourcast-triton", "refresh": refresh, "outputs": outs}
            for rev in revs:
                op = {**q, "quant_rev": rev}
                with_term, without = (fchw.op_times(h, [op])[0].detail["emulation_s"] for h in (hw, hw0))
                f = F.call_features(q, rev)
                assert (f[j] > 0) == (priced and counts(refresh)), (outs, refresh, rev)
                assert f @ F.term_values(hw) == pytest.approx(with_term, rel=1e-9), (outs, refresh, rev)
                assert f[j] * value == pytest.approx(with_term - without, rel=1e-9, abs=1e-15), (outs, refresh, rev)


def _check_runs_19_to_22(F, hw, j):
    """Every call of runs 19-22 prices with hw as Rust does (price_calls raises if not), and
    some call of each has call_features' column j."""
    for run in ("training-h200-run19", "training-h200-run20", "training-h200-run21", "training-h200-run22"):
        rows = [r for d in F.recipe_dirs([run]) for r in F.call_rows(d, hw.data["emulation"])]
        assert any(r["features"][j] for r in rows), run
        F.price_calls(hw, rows)


def test_call_features_price_the_sr_rht16_rotation_as_rust_does(F):
    """Session 19 (2): a copy rotated by an RHT of 16 in a call with SR (TE's dY call, with
    "sr16", "sr4" or "sr") has its own rotation term (triton_quant_rht16_sr_ns_per_elem);
    call_features' column for it gives what the term adds to ops.rs's price at revisions 9-17
    (rowcol_gluon's factor where the call runs there), MXFP4's row RHT of 32 with SR and the
    RTNE calls (TE's X call) have none, and every call of runs 19-22 prices as Rust does. A
    file without the term prices those copies with triton_quant_rht_ns_per_elem, and the fits
    (term_columns) price them so too."""
    term = "triton_quant_rht16_sr_ns_per_elem"
    hw0 = F.set_term(fchw.load("h200"), term, 0.0)
    hw = F.set_term(hw0, term, 0.0025)
    nv = {"element": "e2m1", "scale": "e4m3", "block": 16, "rule": "te", "tile_2d": False}
    mx = {"element": "e2m1", "scale": "ue8m0", "block": 32, "rule": "floor", "tile_2d": False}
    sr16, sr4 = {"sr": True, "sr16": True}, {"sr": True, "sr4": True}
    te_dy = [{"format": nv, "decoded": True, **sr16}, {"format": nv, "decoded": True, "rht": 16, **sr16}]
    cases = [  # (outputs, whether the term prices the call)
        (te_dy, True),
        ([{"format": nv, **sr16}, {"format": nv, "rht": 16, **sr16}], True),  # rowcol_gluon from 14
        ([{"format": nv, **sr4}, {"format": nv, "rht": 16, **sr4}], True),
        ([{"format": nv, "sr": True}, {"format": nv, "rht": 16, "sr": True}], True),
        ([{"format": nv, "decoded": True}, {"format": nv, "rht": 16}], False),  # TE's X call: RTNE
        ([{"format": mx, "rht": 32}, {"format": mx, **sr16}], False),  # MXFP4's X call
    ]
    _check_term_column(F, hw0, hw, term, cases, (9, 12, 14, 16, 17), lambda refresh: True)
    j = F.CALL_TERMS.index(term)
    _check_runs_19_to_22(F, hw, j)
    without = _file_with(F, {t: v for t, v in zip(F.CALL_TERMS, F.term_values(hw)) if t != term})
    rht = F.CALL_TERMS.index("triton_quant_rht_ns_per_elem")
    assert F.term_values(without)[j] == F.term_values(without)[rht]
    rows = [r for d in F.recipe_dirs(["training-h200-run21"]) for r in F.call_rows(d)]
    us = np.array([r["us"] for r in rows])
    M, c = F.linear_errors(without, rows, ("triton_quant_rht_ns_per_elem",))
    moved = F.set_term(without, "triton_quant_rht_ns_per_elem", 0.004)  # the fit moves both rotations
    emulated = np.array([t.detail["emulation_s"] * 1e6 for t in fchw.op_times(moved, [r["op"] for r in rows])])
    assert (M[:, 0] * 0.004 + c + 1) * us == pytest.approx(emulated, rel=1e-9)


# Session 19 (2): the SR RHT16 rotation term and the rotated amax term held at strip.py's
# kernel-benchmark value (kernels-h200.md session 18 item 5: the pass with the RHT minus the
# pass without, over numel, median) while --pin-fit refitted the rest; its terms (the file's
# until session 20 (2)).
AMAX_RHT_MEASURED = 0.00144
SESSION_19_2 = {
    "triton_quant_call_us": 5.99913, "triton_quant_ns_per_elem": 0.0013982,
    "triton_quant_rht_ns_per_elem": 0.00341035, "triton_quant_rht16_sr_ns_per_elem": 0.00165915,
    "triton_quant_strip_rht_ns_per_elem": 0.0, "triton_quant_sr_ns_per_elem": 0.00302555,
    "triton_quant_sr4_ns_per_elem": 0.0007906, "triton_quant_sr16_ns_per_elem": 0.000290916,
    "triton_quant_amax_ns_per_elem": 0.000915048, "triton_quant_amax_rht_ns_per_elem": AMAX_RHT_MEASURED,
    "triton_quant_amax_tile_ns": 1.47964, "triton_quant_prefetch_saving_ns_per_elem": 0.0001218,
    "triton_quant_gather_saving_ns_per_elem": 0.000381708, "triton_quant_sr16_int_saving_ns_per_elem": 0.000243953,
}


def _pin_fit_holding_amax_rht(F, calls, before):
    """--pin-fit's least squares from `before`, the rotated amax term held at its measured
    value: (the values of the other CALL_TERMS, the problem)."""
    amax = "triton_quant_amax_rht_ns_per_elem"
    start = F.set_term(before, amax, AMAX_RHT_MEASURED)
    free = tuple(t for t in F.CALL_TERMS if t != amax)
    p, x = F.pin_fit(start, calls, free, "lsq", base=before)
    return dict(zip(free, x)), p, x


def test_session_19_2s_fit_holds_the_rotated_amax_term(F, calls_before_f32):
    """From session 17's terms (without session 20's f32 amax factors, as then), --pin-fit's
    least squares over its default runs (10-22, kept no worse in runs 18 and 22) with the
    rotated amax term held at its measured value gives session 19 (2)'s terms (to the six
    significant digits --write keeps); against session 17's terms it narrows the calls'
    squared errors and every max |error| of TE NVFP4's X and dY calls in runs 19-22."""
    amax = "triton_quant_amax_rht_ns_per_elem"
    calls = calls_before_f32
    before = _file_with(F, {t: v for t, v in SESSION_17.items() if t != amax}, f32_amax=False)
    fitted, _, _ = _pin_fit_holding_amax_rht(F, calls, before)
    assert list(fitted.values()) == pytest.approx([SESSION_19_2[t] for t in fitted], rel=1e-5, abs=1e-12)
    err0 = _errors(F, before, calls)
    err = _errors(F, _file_with(F, SESSION_19_2, f32_amax=False), calls)
    assert err @ err < err0 @ err0
    for run in ("training-h200-run19", "training-h200-run20", "training-h200-run21", "training-h200-run22"):
        for kind in ("X", "dY"):
            sel = np.array([r["run"].startswith(run) and r["recipe"] == "nvfp4+sr16" and r["kind"] == kind
                            for r in calls])
            assert sel.any() and np.abs(err[sel]).max() < np.abs(err0[sel]).max(), (run, kind)


def test_the_file_is_the_pin_fit_with_the_f32_amax_factors(F, calls, calls_before_f32):
    """Session 20 (2): with the measured f32 amax factors in the file, --pin-fit from session
    19 (2)'s terms (the rotated amax term held) gives the file's quantize terms; every pin
    holds, the held value's source says it is measured, and the calls' squared errors fall
    below both session 19 (2)'s file and the factors alone. The f32 X calls of TE NVFP4 (run
    22's wqkv and w_gate_up, whose amax pass read f32) come closer: -23.7 .. -20.2% before,
    -16.6 .. -12.8% after (model-calibration-per-call.md, session 20 (2))."""
    hw = fchw.load("h200")
    assert all(hw.data["emulation"][k]["source"].startswith("measured, kernel benchmarks") for k in F32_AMAX)
    fitted, p, x = _pin_fit_holding_amax_rht(F, calls, _file_with(F, SESSION_19_2))
    values = dict(zip(F.CALL_TERMS, F.term_values(hw)))
    assert list(fitted.values()) == pytest.approx([values[t] for t in fitted], rel=1e-5, abs=1e-12)
    assert (p.G @ x - p.h).min() >= -1e-9
    amax = "triton_quant_amax_rht_ns_per_elem"
    assert values[amax] == AMAX_RHT_MEASURED
    assert hw.data["emulation"][amax]["source"].startswith("measured, kernel benchmarks")
    old, alone, err = (_errors(F, _file_with(F, SESSION_19_2, f32_amax=False), calls_before_f32),
                       _errors(F, _file_with(F, SESSION_19_2), calls), _errors(F, hw, calls))
    assert err @ err < alone @ alone < old @ old
    sel = np.array([r["run"].startswith("training-h200-run22") and r["recipe"] == "nvfp4+sr16" and r["kind"] == "X"
                    and r["layer"].endswith(("wqkv", "w_gate_up")) for r in calls])
    assert sel.sum() == 20 and np.abs(err[sel]).max() < np.abs(old[sel]).max() - 0.05
