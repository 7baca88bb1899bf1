"""The split-nibble packed GEMM (kernels/gemm.py, KERNEL "split") under TRITON_INTERPRET=1:
every decode variant and format pair within the FP32-accumulation bound, ragged tiles,
NaN scales confined to their rows. The interpreter runs the decode in f32 (the same
values the GPU's PTX routines produce, CVT's 2^-6 included); the PTX routines themselves
are checked here bit for bit by a small emulator of the instructions they use, on every
code byte and on edge-case scales, so what runs on the GPU is tested offline too."""

import re

import pytest
import torch
import triton
import triton.language as tl

from fourcast.kernels import gemm as gk
from fourcast.kernels import reference as ref
from fourcast.kernels import testing
from fourcast.kernels.utils import GRIDS

pytestmark = pytest.mark.interpret

F = testing.FORMATS


def _bound_ok(c, a, b, out) -> bool:
    c64, bound = testing.gemm_bound(ref.dequantize_layout(a), ref.dequantize_layout(b), out)
    ok = (c.double() - c64).abs() <= bound
    both_nan = torch.isnan(c) & torch.isnan(c64)
    return bool((ok | both_nan).all())


PAIRS = [("nvfp4", "nvfp4-2d"), ("nvfp4-torchao", "nvfp4"), ("mxfp4", "mxfp4-rceil"), ("ufp4", "ufp4"),
         ("ue5m3", "ue5m3-2d"), ("ufp4-int4", "int4-sm-mx"), ("e1m2-mx16", "int4-ue5m3"), ("nvfp4", "mxfp4"),
         ("ufp4", "int4-sm-mx"), ("nvfp4", "mxfp8"), ("fp8", "mxfp8-e5m2"), ("fp8-e5m2", "fp8")]


@pytest.mark.parametrize("decode", ["lut", "cvt", "generic"])
@pytest.mark.parametrize("pair", PAIRS)
def test_split_kernel_within_bound(pair, decode, monkeypatch):
    monkeypatch.setitem(gk.CONFIG_OVERRIDE, "kernel", "split")
    monkeypatch.setitem(gk.CONFIG_OVERRIDE, "decode", decode)
    a = ref.quantize(testing.make_input("heavy", (48, 64), seed=1), F[pair[0]])
    b = ref.quantize(testing.make_input("random", (32, 64), seed=2), F[pair[1]])
    for out in (torch.float32, torch.bfloat16):
        assert _bound_ok(gk.gemm(a, b, out, impl="triton"), a, b, out), (pair, decode, out)


def test_split_plan_picks_f16_only_for_e4m3_scaled_4bit_pairs():
    spec = lambda n: ref.parse_fmt(F[n])  # noqa: E731
    p = gk.split_plan(spec("nvfp4"), spec("ufp4"), "cvt")
    assert p["DOT_F16"] and p["A_DEC"] == p["B_DEC"] == 2 and p["EPI_EXP"] == 12
    p = gk.split_plan(spec("nvfp4"), spec("ufp4-int4"), "lut")  # two's complement INT4: generic, bf16
    assert not p["DOT_F16"] and (p["A_DEC"], p["B_DEC"]) == (1, 0) and p["EPI_EXP"] == 0
    p = gk.split_plan(spec("mxfp4"), spec("mxfp4"), "cvt")  # UE8M0 needs bf16's range: LUT, not CVT
    assert not p["DOT_F16"] and (p["A_DEC"], p["B_DEC"]) == (1, 1)
    assert gk.split_plan(spec("nvfp4"), spec("fp8"), "lut")["B_DEC"] == 0


def test_split_plan_decodes_ue5m3_in_f16_at_an_offset(monkeypatch):
    """UE5M3 operands take the f16 MMA by the table (never CVT), their values at
    2^-UE5M3_EXP, which the epilogue multiplies back; with UE5M3_F16 off, bf16 as before."""
    spec = lambda n: ref.parse_fmt(F[n])  # noqa: E731
    p = gk.split_plan(spec("ue5m3"), spec("nvfp4"), "cvt")
    assert p["DOT_F16"] and (p["A_DEC"], p["B_DEC"]) == (1, 2) and p["EPI_EXP"] == gk.UE5M3_EXP + gk.CVT_EXP
    assert p["A_ASM"] == gk.decode_asm("e2m1", 1, True, gk.UE5M3_TABLE_SHIFT) != gk.decode_asm("e2m1", 1, True)
    p = gk.split_plan(spec("ue5m3-2d"), spec("ue5m3"), "lut")
    assert p["DOT_F16"] and (p["A_DEC"], p["B_DEC"]) == (1, 1) and p["EPI_EXP"] == 2 * gk.UE5M3_EXP
    monkeypatch.setattr(gk, "UE5M3_F16", False)
    p = gk.split_plan(spec("ue5m3"), spec("ue5m3-2d"), "cvt")
    assert not p["DOT_F16"] and p["EPI_EXP"] == 0


@triton.jit
def _ue5m3_f16_kernel(SB, OUT):
    i = tl.arange(0, 256)
    tl.store(OUT + i, gk._scale_values(tl.load(SB + i), 3, 0, 0, 255, False, True))


def test_ue5m3_scale_bytes_to_f16_at_half():
    """Every UE5M3 byte -> f16 of its value * 2^-1, bit for bit (subnormal f16 below
    2^-14; the largest, 114688, at 57344), and NaN for the NaN byte: the f16 route's scale
    conversion (gemm._scale_values; gemm_wgmma's has the same expression)."""
    sb = torch.arange(256, dtype=torch.uint8)
    out = torch.empty(256, dtype=torch.float16)
    _ue5m3_f16_kernel[(1,)](sb, out)
    want = ref.decode_scale(sb, "ue5m3").double() * 0.5
    assert torch.isnan(out[255]) and not torch.isnan(out[:255]).any()
    assert torch.equal(out[:255].view(torch.int16), want[:255].to(torch.float16).view(torch.int16))
    assert torch.equal(out[:255].double(), want[:255])  # exact: no rounding on the way to f16


@pytest.mark.parametrize("kernel", ["split", "v1"])
def test_ragged_tiles_and_k_steps(kernel, monkeypatch):
    """M, N not multiples of the tile (the split kernel clamps rows instead of masking),
    several K-steps (the scale bytes are fetched a step ahead)."""
    monkeypatch.setitem(gk.CONFIG_OVERRIDE, "kernel", kernel)
    a = ref.quantize(testing.make_input("heavy", (37, 160), seed=3), F["nvfp4"])
    b = ref.quantize(testing.make_input("heavy", (21, 160), seed=4), F["ufp4"])
    assert _bound_ok(gk.gemm(a, b, torch.float32, impl="triton"), a, b, torch.float32)
    monkeypatch.setitem(gk.CONFIG_OVERRIDE, "cfg", (16, 16, 32, 2, 4, 1))  # GROUP_M 2 over 3 x 2 tiles
    assert _bound_ok(gk.gemm(a, b, torch.bfloat16, impl="triton"), a, b, torch.bfloat16)


@pytest.mark.parametrize("row", [0, 36])
def test_nan_scale_stays_in_its_row(row, monkeypatch):
    """A NaN scale byte makes its row of C NaN and nothing else, also in the last row,
    which the split kernel re-reads for the rows past M."""
    monkeypatch.setitem(gk.CONFIG_OVERRIDE, "kernel", "split")
    a = ref.quantize(testing.make_input("random", (37, 64), seed=5), F["mxfp4"])
    b = ref.quantize(testing.make_input("random", (20, 64), seed=6), F["mxfp4"])
    a.scales[row, 1] = 0xFF
    c = gk.gemm(a, b, torch.float32, impl="triton")
    assert torch.isnan(c[row]).all() and not torch.isnan(c[torch.arange(37) != row]).any()
    assert _bound_ok(c, a, b, torch.float32)


# ------------------------------------------------------------------ the PTX routines, emulated

def _f16(bits: int, dtype) -> float:
    return float(torch.tensor([bits], dtype=torch.int32).to(torch.int16).view(dtype).float())


def _bits(v: float, dtype) -> int:
    return int(torch.tensor([v], dtype=torch.float64).to(dtype).view(torch.int16)) & 0xFFFF


def _e4m3(byte: int) -> float:
    return float(torch.tensor([byte], dtype=torch.uint8).view(torch.float8_e4m3fn).float())


def run_ptx(asm: str, regs: dict) -> dict:
    """Evaluate the instructions a decode routine uses (32-bit registers as ints)."""
    r = dict(regs)

    def val(x):
        x = x.strip()
        if x in r:
            return r[x]
        return int(x, 16) if x.lower().startswith("0x") else int(x)

    for line in asm.splitlines():
        line = line.strip().rstrip(";")
        if not line or line in "{}" or line.startswith(".reg"):
            continue
        op, rest = line.split(None, 1)
        m = re.match(r"mov\.b32 \{(\w+), (\w+)\}, (\w+)", line)
        if m:
            w = val(m.group(3))
            r[m.group(1)], r[m.group(2)] = w & 0xFFFF, w >> 16
            continue
        dst, *src = [s.strip() for s in rest.split(",")]
        a = [val(s) for s in src]
        if op == "and.b32":
            out = a[0] & a[1]
        elif op == "or.b32":
            out = a[0] | a[1]
        elif op == "shl.b32":
            out = (a[0] << a[1]) & 0xFFFFFFFF
        elif op == "shr.u32":
            out = a[0] >> a[1]
        elif op == "lop3.b32":
            out = 0
            for i in range(32):
                idx = (((a[0] >> i) & 1) << 2) | (((a[1] >> i) & 1) << 1) | ((a[2] >> i) & 1)
                out |= ((a[3] >> idx) & 1) << i
        elif op == "prmt.b32":
            src8 = [(a[0] >> (8 * i)) & 0xFF for i in range(4)] + [(a[1] >> (8 * i)) & 0xFF for i in range(4)]
            out = 0
            for i in range(4):
                sel = (a[2] >> (4 * i)) & 0xF
                byte = src8[sel & 7]
                if sel & 8:
                    byte = 0xFF if byte & 0x80 else 0
                out |= byte << (8 * i)
        elif op == "cvt.rn.f16x2.e4m3x2":
            out = _bits(_e4m3(a[0] & 0xFF), torch.float16) | (_bits(_e4m3(a[0] >> 8), torch.float16) << 16)
        elif op in ("mul.rn.f16x2", "mul.rn.bf16x2"):
            dt = torch.float16 if "f16x2" in op and "bf16" not in op else torch.bfloat16
            lo = _f16(a[0] & 0xFFFF, dt) * _f16(a[1] & 0xFFFF, dt)  # exact in float64
            hi = _f16(a[0] >> 16, dt) * _f16(a[1] >> 16, dt)
            out = _bits(lo, dt) | (_bits(hi, dt) << 16)
        else:
            raise NotImplementedError(op)
        r[dst] = out
    return r


def _same(got: int, want: float, dtype) -> bool:
    """got (16-bit pattern) is want (an exact float64 product) rounded to dtype: the same
    bits (the sign of zero and overflow to inf included), or both NaN."""
    g = _f16(got, dtype)
    return (g != g and want != want) or got == _bits(want, dtype)


ROUTINES = [("e2m1", 1, True, 0), ("e1m2", 1, True, 0), ("int4-sm", 1, True, 0), ("e2m1", 2, True, 0),
            ("e1m2", 2, True, 0), ("e2m1", 1, False, 0), ("e1m2", 1, False, 0), ("int4-sm", 1, False, 0),
            ("e2m1", 1, True, 3), ("e1m2", 1, True, 3), ("int4-sm", 1, True, 3)]  # shift 3: UE5M3 in f16


@pytest.mark.parametrize("element,dec,f16,shift", ROUTINES)
def test_decode_routine_bit_exact(element, dec, f16, shift):
    """decode_asm(element, dec, f16, shift) on all 256 code bytes in each of the 4 byte
    slots, with scales at the ends of their ranges, NaN included: value(code) * 2^-shift *
    scale (times 2^-6 for CVT) rounded once to f16 / bf16 (exact but for bf16 overflow past
    2^128), the sign of zero included."""
    dt = torch.float16 if f16 else torch.bfloat16
    asm = gk.decode_asm(element, dec, f16, shift)
    vals = ref.grid_values(GRIDS[element]).tolist()
    if f16 and shift:  # UE5M3 scales at 2^-1 (UE5M3_EXP = shift + 1): smallest subnormal to largest
        scales = [2.0**-18, 2.0**-15, 1.875 * 2.0**-15, 0.8125, 1.0, 57344.0, float("nan")]
    elif f16:  # E4M3 scales
        scales = [2.0**-9, 0.8125, 1.0, 448.0, float("nan")]
    else:  # UE8M0 / UE5M3 range
        scales = [2.0**-127, 2.0**-17, 1.75, 114688.0, 2.0**127, float("nan")]
    factor = (2.0**-6 if dec == 2 else 1.0) * 2.0**-shift
    for s in scales:
        sb = _bits(s, dt)
        for byte in range(256):
            word = [byte, (byte * 7 + 3) % 256, (byte * 13 + 5) % 256, (byte * 29 + 11) % 256]
            w = sum(x << (8 * i) for i, x in enumerate(word))
            s2 = sb | (sb << 16)
            r = run_ptx(asm, {"$4": w, "$5": s2, "$6": s2})
            outs = [r["$0"] & 0xFFFF, r["$0"] >> 16, r["$1"] & 0xFFFF, r["$1"] >> 16,
                    r["$2"] & 0xFFFF, r["$2"] >> 16, r["$3"] & 0xFFFF, r["$3"] >> 16]
            want = [vals[x & 0xF] * factor * s for x in word] + [vals[x >> 4] * factor * s for x in word]
            for got, exp, code in zip(outs, want, [x & 0xF for x in word] + [x >> 4 for x in word]):
                assert _same(got, exp, dt), (element, dec, f16, s, byte, code, hex(got), exp)
