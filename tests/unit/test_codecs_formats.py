"""Element and wide formats against numerics.md's tables and ml_dtypes, code for code.

Every finite bfloat16 bit pattern (65536 patterns minus Inf/NaN) is encoded with
unit scale and compared as CODES with ml_dtypes' RNE casts. Where the semantics
differ on purpose (numerics.md section 1) the test pins fourcast's behaviour
instead of skipping: E4M3/E5M2 saturate where ml_dtypes overflows to NaN/Inf,
UE8M0 rounds ties to even where ml_dtypes rounds ties up.
"""

import ml_dtypes
import numpy as np
import pytest

import fourcast as fc
from fourcast.quant import decode, encode

BITS = np.arange(65536, dtype=np.uint32)
BF16 = (BITS << 16).view(np.float32)
FINITE = BF16[np.isfinite(BF16)]

TABLES = {
    "e2m1": [0, 0.5, 1, 1.5, 2, 3, 4, 6],
    "e1m2": [k / 4 for k in range(8)],
    "int4-sm": list(range(8)),
}


@pytest.mark.parametrize("name", sorted(TABLES))
def test_every_sign_magnitude_code_decodes_to_the_table(name):
    values = decode(np.arange(16, dtype=np.uint8), name)
    mags = np.array(TABLES[name], np.float32)
    np.testing.assert_array_equal(values[:8], mags)
    np.testing.assert_array_equal(values[8:], -mags)
    assert np.signbit(values[8])  # code 8 is -0


def test_int4_is_twos_complement():
    values = decode(np.arange(16, dtype=np.uint8), "int4")
    np.testing.assert_array_equal(values, np.array(list(range(8)) + list(range(-8, 0)), np.float32))
    ref = np.arange(-8, 8, dtype=np.int8).astype(ml_dtypes.int4)
    np.testing.assert_array_equal(decode(ref.view(np.uint8) & 0xF, "int4"), np.arange(-8, 8))


def test_e2m1_rtne_ties_from_numerics_md():
    x = np.array([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 7.0, 1e30], np.float32)
    expected = [0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0]
    np.testing.assert_array_equal(decode(encode(x, "e2m1"), "e2m1"), expected)
    np.testing.assert_array_equal(decode(encode(-x, "e2m1"), "e2m1"), -np.array(expected, np.float32))
    away = decode(encode(x[:7], "e2m1", rounding="away"), "e2m1")
    np.testing.assert_array_equal(away, [0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0])


@pytest.mark.parametrize(
    "codec,dtype",
    [
        ("e2m1", ml_dtypes.float4_e2m1fn),
        ("e2m3", ml_dtypes.float6_e2m3fn),
        ("e3m2", ml_dtypes.float6_e3m2fn),
    ],
)
def test_all_bf16_patterns_match_ml_dtypes_saturating_formats(codec, dtype):
    ours = encode(FINITE, codec)
    ref = FINITE.astype(dtype).view(np.uint8)
    np.testing.assert_array_equal(ours, ref)


@pytest.mark.parametrize(
    "codec,dtype,overflow,max_code",
    [
        # e4m3fn: ml_dtypes gives NaN from the tie 464 upward; fourcast saturates (satfinite).
        ("e4m3", ml_dtypes.float8_e4m3fn, 464.0, 0x7E),
        # e5m2: ml_dtypes gives Inf from the tie 61440 upward; fourcast saturates at 57344.
        ("e5m2", ml_dtypes.float8_e5m2, 61440.0, 0x7B),
    ],
)
def test_all_bf16_patterns_match_ml_dtypes_fp8(codec, dtype, overflow, max_code):
    ours = encode(FINITE, codec)
    inside = np.abs(FINITE) <= overflow
    if codec == "e5m2":
        inside = np.abs(FINITE) < overflow
    with np.errstate(over="ignore", invalid="ignore"):
        ref = FINITE.astype(dtype).view(np.uint8)
    np.testing.assert_array_equal(ours[inside], ref[inside])
    assert inside.sum() > 30000
    sign = (FINITE[~inside] < 0).astype(np.uint8) << 7
    np.testing.assert_array_equal(ours[~inside], max_code | sign)


def test_all_bf16_patterns_e8m0_where_rounding_rules_agree():
    x = FINITE[(FINITE > 0) & (FINITE >= 2.0**-127) & (FINITE <= 2.0**127)]
    ours = encode(x, "ue8m0")
    ref = x.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    frac = np.frexp(x.astype(np.float64))[0] * 2 - 1  # x = (1 + frac) * 2^e
    tie = frac == 0.5
    np.testing.assert_array_equal(ours[~tie], ref[~tie])
    assert (~tie).sum() > 30000
    # Ties: fourcast rounds to the even byte, ml_dtypes always up (numerics.md caveat).
    up_is_even = ref[tie] % 2 == 0
    np.testing.assert_array_equal(ours[tie][up_is_even], ref[tie][up_is_even])
    np.testing.assert_array_equal(ours[tie][~up_is_even], ref[tie][~up_is_even] - 1)


def test_scale_format_ranges():
    ue5m3 = decode(np.array([0x00, 0x01, 0x08, 0xFE, 0xFF], np.uint8), "ue5m3")
    assert ue5m3[0] == 0 and ue5m3[1] == 2.0**-17 and ue5m3[2] == 2.0**-14
    assert ue5m3[3] == 114688.0 and np.isnan(ue5m3[4])
    assert decode(np.array([0xFF], np.uint8), "ue5m3-ff")[0] == 122880.0
    e8 = decode(np.array([0, 127, 254, 255], np.uint8), "ue8m0")
    assert e8[0] == np.float32(2.0**-127) and e8[1] == 1.0 and e8[2] == 2.0**127 and np.isnan(e8[3])
    ue4m3 = decode(np.arange(0x7F, dtype=np.uint8), "ue4m3")
    np.testing.assert_array_equal(ue4m3, np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32))


def test_ue5m3_rtne_matches_an_exact_reference():
    # Reference: nearest of the 255 finite UE5M3 values, ties to the even byte.
    grid = decode(np.arange(255, dtype=np.uint8), "ue5m3").astype(np.float64)
    x = FINITE[(FINITE >= 0) & (FINITE <= 114688.0)].astype(np.float64)
    hi = np.clip(np.searchsorted(grid, x), 1, 254)
    lo = hi - 1
    d_lo, d_hi = x - grid[lo], grid[hi] - x
    ref = np.where(d_lo < d_hi, lo, np.where(d_hi < d_lo, hi, np.where(lo % 2 == 0, lo, hi)))
    ref = np.where(x == grid[hi], hi, ref)
    np.testing.assert_array_equal(encode(x.astype(np.float32), "ue5m3"), ref.astype(np.uint8))


def test_catalogue_lists_every_grid_scale_and_preset():
    rows = {(r["name"], r["kind"]) for r in fc._core.format_catalogue()}
    for name in ("e2m1", "e1m2", "int4", "int4-sm"):
        assert (name, "element") in rows
    for name in ("e2m3", "e3m2", "e4m3", "e5m2"):
        assert (name, "wide") in rows
    for name in ("ue8m0", "ue4m3", "ue5m3", "fp32"):
        assert (name, "scale") in rows
    for name in fc.quant.PRESETS:
        assert (name, "preset") in rows


def test_core_stub_lists_every_extension_function():
    """python/fourcast/_core.pyi must describe everything fourcast._core exposes."""
    import ast
    import pathlib

    stub = pathlib.Path(fc.__file__).with_name("_core.pyi")
    declared = {n.name for n in ast.parse(stub.read_text()).body if isinstance(n, ast.FunctionDef)}
    exposed = {n for n in dir(fc._core) if not n.startswith("_")}
    assert exposed <= declared, f"add to _core.pyi: {sorted(exposed - declared)}"


def test_every_e4m3_scale_byte_decodes_as_the_reference_reads_it():
    """Foreign UE4M3 scale bytes past 0x7F (no quantizer writes them) decode with their sign
    bit, 0xFF as NaN, in the Rust codec as in the PyTorch reference and the Triton kernels
    (docs/conventions.md); every byte, every code."""
    import dataclasses

    import torch

    from fourcast.kernels import reference as ref

    f = fc.Format(element="e2m1", scale="e4m3", rule="te", block=16)
    q = fc.quantize(np.ones((16, 256), np.float32), f)
    scales = np.arange(256, dtype=np.uint8).reshape(16, 16)
    codes = np.tile(np.array([0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE], np.uint8), (16, 16))
    got = dataclasses.replace(q, codes=codes, scales=scales, tensor_scale=1.0).dequantize()
    want = ref.decode_scale(torch.from_numpy(scales.astype(np.int64)), "e4m3").numpy()
    grid = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], np.float32)
    want = (np.repeat(want, 16, axis=1) * np.tile(grid, (16, 16))).astype(np.float32)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok].view(np.uint32), want[ok].view(np.uint32))
