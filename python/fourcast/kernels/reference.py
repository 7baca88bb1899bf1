"""Plain PyTorch reference of every kernel op: Philox, RHT, quantize (codes, scale
bytes, tensor scale, amax), dequantize, fake-quant and the packed GEMM. Runs on CPU and
CUDA tensors and produces the bits of docs/conventions.md, which the Rust codec and the
Triton kernels produce too.

Every step is float32 arithmetic that is exact or correctly rounded (IEEE mul/div,
int<->float bit tricks, no transcendental functions), so CPU, CUDA and Triton agree.
The Triton kernels follow these functions step for step; read them side by side.

Non-finite input (the GPU convention; the CPU entry in ops.py raises instead): a block
holding NaN/Inf gets its scale format's NaN byte and codes 0; the tensor amax is then
NaN/Inf and two-level rules use S_enc = 1 for the finite blocks; a per-tensor format
gets tensor_scale = NaN and codes 0. Decoding any of these gives NaN, never a silent 0.

Example:
    >>> import torch
    >>> from fourcast.kernels import reference as ref
    >>> nvfp4 = dict(element="e2m1", scale="e4m3", block=16, tile_2d=False, rule="te")
    >>> p = ref.quantize(torch.linspace(-3, 3, 32).reshape(2, 16), nvfp4)
    >>> p.codes.shape, p.scales.shape
    (torch.Size([2, 8]), torch.Size([2, 1]))
"""

from __future__ import annotations

import math

import torch

from fourcast.kernels.utils import (
    FLT_MAX,
    GRIDS,
    NAN_BYTE,
    SCALE_GRIDS,
    SCALE_MIN_NORMAL,
    SCALE_TARGET,
    TE_SIGNS,
    Grid,
    Packed,
    Spec,
    check_layout,
    check_rht,
    check_rounding,
    flat2d,
    normalize_axis,
    parse_fmt,
)
from fourcast.errors import FormatError, ShapeError

M32 = 0xFFFFFFFF
PHILOX_KEY_A, PHILOX_KEY_B = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUND_A, PHILOX_ROUND_B = 0xD2511F53, 0xCD9E8D57
UNIFORM_SCALE = 4.6566127342e-10  # rounds to the f32 Triton's tl.rand multiplies by


# ---------------------------------------------------------------- Philox4x32-10

def _mulhilo(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo) 32-bit halves of a * b for a < 2^32 and b an int64 tensor < 2^32,
    without overflowing int64 (a is split into 16-bit halves)."""
    a_hi, a_lo = a >> 16, a & 0xFFFF
    p_lo = a_lo * b  # < 2^48
    p_hi = a_hi * b  # < 2^48
    hi = (p_hi + (p_lo >> 16)) >> 16
    lo = (((p_hi & 0xFFFF) << 16) + p_lo) & M32
    return hi & M32, lo


def philox_rounds(c0, c1, c2, c3, k0: int, k1: int) -> tuple[torch.Tensor, ...]:
    """Ten Philox4x32 rounds on int64 tensors holding u32 counters (key as ints)."""
    for _ in range(10):
        hi_b, lo_b = _mulhilo(PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mulhilo(PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0, k1 = (k0 + PHILOX_KEY_A) & M32, (k1 + PHILOX_KEY_B) & M32
    return c0, c1, c2, c3


def philox(seed: int, offsets: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The four Philox4x32-10 words at counter (offset lo, offset hi, 0, 0) and key
    (seed lo, seed hi), as int64 tensors holding u32 values (numerics.md section 4)."""
    offsets = offsets.to(torch.int64)
    seed = int(seed) & 0xFFFFFFFFFFFFFFFF
    c0, c1 = offsets & M32, (offsets >> 32) & M32
    zero = torch.zeros_like(c0)
    return philox_rounds(c0, c1, zero, zero.clone(), seed & M32, seed >> 32)


def uniform(seed: int, offsets: torch.Tensor) -> torch.Tensor:
    """tl.rand(seed, offsets): word 0 as i32, negatives to -x-1, to f32, times 2^-31ish."""
    return _to_uniform(philox(seed, offsets)[0])


def uniform_x4(seed: int, offset: int, index: torch.Tensor) -> torch.Tensor:
    """Rounding "sr4": element `index` takes word index % 4 at counter offset + index // 4."""
    index = index.to(torch.int64)
    words = torch.stack(philox(seed, index // 4 + int(offset)), -1)
    return _to_uniform(words.gather(-1, (index % 4).unsqueeze(-1)).squeeze(-1))


def uniform_x16(seed: int, offset: int, index: torch.Tensor) -> torch.Tensor:
    """Rounding "sr16": element `index` takes byte index % 4 of word (index // 4) % 4 at
    counter offset + index // 16, as the 8-bit uniform (byte + 0.5) / 256."""
    index = index.to(torch.int64)
    words = torch.stack(philox(seed, index // 16 + int(offset)), -1)
    word = words.gather(-1, ((index // 4) % 4).unsqueeze(-1)).squeeze(-1)
    byte = (word >> (8 * (index % 4))) & 0xFF
    return (byte.to(torch.float32) + 0.5) * (1.0 / 256.0)


def _to_uniform(w: torch.Tensor) -> torch.Tensor:
    w = torch.where(w >= 2**31, w - 2**32, w)
    w = torch.where(w < 0, -w - 1, w)
    return w.to(torch.float32) * torch.tensor(UNIFORM_SCALE, dtype=torch.float32)


# ---------------------------------------------------------------- float32 bit helpers

def f32_bits(x: torch.Tensor) -> torch.Tensor:
    return x.contiguous().view(torch.int32)


def from_bits(b: torch.Tensor) -> torch.Tensor:
    return b.to(torch.int32).contiguous().view(torch.float32)


def pow2(k: torch.Tensor) -> torch.Tensor:
    """2^k as f32 for integer k in [-149, 127], built from bits (exact, subnormals too)."""
    k = k.to(torch.int32)
    normal = (k.clamp(-126, 127) + 127) << 23
    sub = torch.ones_like(k) << (k.clamp(-149, -127) + 149)
    return from_bits(torch.where(k >= -126, normal, sub))


def rceil_exponent(t: torch.Tensor) -> torch.Tensor:
    """e with 2^e = 2^ceil(log2 t) clamped to [2^-127, 2^127], t >= 0: exponent field plus
    one when the mantissa is non-zero; a subnormal t gives -127 up to 2^-127, else -126."""
    bits = f32_bits(t)
    field, man = (bits >> 23) & 0xFF, bits & 0x7FFFFF
    byte = torch.where(field == 0, (man > 0x400000).to(torch.int32), torch.clamp(field + (man != 0).to(torch.int32), max=254))
    return byte - 127


def floor_log2(a: torch.Tensor) -> torch.Tensor:
    """The f32 exponent field minus 127 (zero and subnormals give -127)."""
    return ((f32_bits(a) >> 23) & 0xFF) - 127


# ---------------------------------------------------------------- grid rounding

def round_grid(a: torch.Tensor, g: Grid, mode: str, u: torch.Tensor | None = None):
    """Round magnitudes 0 <= a <= g.gmax (f32) onto grid g.

    Returns (code magnitude int32, value f32). The step at a is 2^(e - mbits) with e the
    exponent of a, floored at emin (the subnormal range); 1 for integer grids. All steps
    are exact: a * 2^-k, floor, and differences within one binade.
    rtne: ties to the even integer n (= the even code); away: ties up; sr: up when
    u * step < a - lo (conventions.md).
    """
    if g.fixed:
        e = torch.zeros_like(a, dtype=torch.int32)
    else:
        e = torch.clamp(floor_log2(a), min=g.emin)
    k = e - g.mbits
    step, inv_step = pow2(k), pow2(-k)
    r = a * inv_step
    n = torch.floor(r)
    frac = r - n
    if mode == "rtne":
        odd = torch.remainder(n, 2.0) == 1.0
        up = (frac > 0.5) | ((frac == 0.5) & odd)
    elif mode == "away":
        up = frac >= 0.5
    elif mode in ("sr", "sr4", "sr16"):
        up = u * step < a - n * step
    else:  # pragma: no cover - checked by callers
        raise FormatError(f"unknown rounding {mode!r}")
    n = n + up.to(n.dtype)
    value = n * step
    n_int = n.to(torch.int32)
    code = n_int if g.fixed else ((e - g.emin) << g.mbits) + n_int
    return code, value


def grid_values(g: Grid) -> torch.Tensor:
    """value(code) for every code of grid g (16 or 256 entries, f32; NaN codes NaN)."""
    codes = torch.arange(1 << g.bits, dtype=torch.int32)
    return decode_codes(codes, g)


def decode_codes(codes: torch.Tensor, g: Grid) -> torch.Tensor:
    """Element code -> f32 value (integer arithmetic, no tables)."""
    c = codes.to(torch.int32)
    if g.twos:
        v = torch.where(c >= 8, c - 16, c).to(torch.float32)
        return v
    sign = (c >> g.sign_shift) & 1
    mag = c & ((1 << g.sign_shift) - 1)
    if g.fixed:
        v = mag.to(torch.float32)
    else:
        e_field = mag >> g.mbits
        m = mag & ((1 << g.mbits) - 1)
        sub = e_field == 0
        e = torch.where(sub, torch.full_like(e_field, g.emin), e_field + g.emin - 1)
        n = torch.where(sub, m, m + (1 << g.mbits))
        v = n.to(torch.float32) * pow2(e - g.mbits)
    v = torch.where(sign == 1, -v, v)
    if g.name == "e4m3":  # E4M3fn: S.1111.111 is NaN, no Inf
        v = torch.where(mag == 0x7F, torch.nan, v)
    elif g.name == "e5m2":  # exponent field 31: Inf (m = 0) or NaN
        inf = torch.where(sign == 1, -torch.inf, torch.inf)
        v = torch.where(mag == 0x7C, inf, torch.where(mag > 0x7C, torch.nan, v))
    return v


def decode_scale(b: torch.Tensor, scale: str) -> torch.Tensor:
    """Scale byte -> f32 (the NaN byte -> NaN)."""
    b = b.to(torch.int32)
    if scale == "ue8m0":
        v = pow2(b - 127)
    elif scale == "e4m3":
        v = decode_codes(b, SCALE_GRIDS["e4m3"])
    else:
        v = _ue5m3(b)
    return torch.where(b == NAN_BYTE[scale], torch.nan, v)


def _ue5m3(b: torch.Tensor) -> torch.Tensor:
    e, m = b >> 3, b & 7
    sub = e == 0
    n = torch.where(sub, m, m + 8).to(torch.float32)
    return n * pow2(torch.where(sub, torch.full_like(e, -14), e - 15) - 3)


def encode_scale(s: torch.Tensor, scale: str) -> torch.Tensor:
    """Positive f32 decode scale -> scale byte, RTNE, saturating at the largest finite."""
    g = SCALE_GRIDS[scale]
    code, _ = round_grid(torch.clamp(s, max=g.gmax), g, "rtne")
    return code


# ---------------------------------------------------------------- RHT

def hadamard_matrix(n: int, dtype=torch.float32, device=None) -> torch.Tensor:
    """Sylvester H_n (entries +-1, unnormalised): H_2k = [[H, H], [H, -H]]."""
    h = torch.ones((1, 1), dtype=dtype, device=device)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def rht16_f32_exact(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact, max |x|) per row of bf16 blocks [blocks, 16], as the amax pass's f32 column RHT
    decides them from the exponent fields (amax_gluon._rht16_amax_f32): f32 sums of the block
    equal f64's where the largest field is at most 249, the smallest nonzero at least 25 and
    within 12 of the largest (an all-zero block: its smallest taken as 512, exact)."""
    mag = blocks.view(torch.int16).to(torch.int32) & 0x7FFF
    e = mag >> 7
    emax = e.max(dim=1).values
    emin = torch.where(mag == 0, 512, e).min(dim=1).values
    exact = (emax - emin <= 12) & (emax <= 249) & (emin >= 25)
    return exact, (mag.max(dim=1).values << 16).view(torch.float32)


def rht_signs(n: int, policy: str, seed: int = 0, device=None) -> torch.Tensor:
    """+-1 sign vector of an RHT of size n (f32). te: TE's fixed 16-vector, repeated;
    per-layer / per-step: sign i is negative when bit 0 of Philox word 0 at (seed, i)
    is set (the caller mixes rht seed, layer and step into `seed`)."""
    if policy == "te":
        base = torch.tensor(TE_SIGNS, dtype=torch.float32)
        s = base.repeat((n + 15) // 16)[:n]
    elif policy in ("per-layer", "per-step"):
        w = philox(seed, torch.arange(n, dtype=torch.int64))[0]
        s = torch.where((w & 1) == 1, -1.0, 1.0).to(torch.float32)
    else:
        raise FormatError(f"unknown RHT sign policy {policy!r}; expected te, per-layer or per-step")
    return s.to(device)


def rht_lastdim(x32: torch.Tensor, n: int, signs: torch.Tensor) -> torch.Tensor:
    """Block-diagonal RHT of size n along the last dim, as the Rust core computes it:
    f64 signs, in-place FWHT butterflies (stage h pairs i, i + h in groups of 2h), times
    f64 1/sqrt(n), rounded once to f32. The Triton kernels run the same f64 sequence."""
    shape = x32.shape
    y = x32.reshape(-1, n).double() * signs.to(x32.device, torch.float64)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = torch.stack([a + b, a - b], dim=2)
        h *= 2
    return (y.reshape(shape) * (1.0 / math.sqrt(n))).to(torch.float32)


def rht(x: torch.Tensor, n: int, signs: torch.Tensor, axis: int = -1) -> torch.Tensor:
    """RHT along `axis` (its length a multiple of n): f32 result (rht_lastdim) cast to
    x.dtype, as fc.rht returns it."""
    n, signs = check_rht((n, signs), x.device)
    if x.dim() == 0 or x.shape[axis] % n:
        raise ShapeError(f"length along axis {axis} of shape {tuple(x.shape)} is not a multiple of the RHT size {n}")
    y = rht_lastdim(x.float().movedim(axis, -1).contiguous(), n, signs)
    return y.movedim(-1, axis).to(x.dtype)


# ---------------------------------------------------------------- quantize

def to_layout(x: torch.Tensor, axis: int) -> torch.Tensor:
    """The quantized layout (M, K) as f32: the flattened 2-D view, transposed for axis 0."""
    r, c = flat2d(x.shape)
    x2 = x.reshape(r, c).float()
    return x2 if axis == -1 else x2.t().contiguous()


def _block_view(t: torch.Tensor, spec: Spec) -> torch.Tensor:
    """(M, K) -> (M/16, K/16, 256) for 2D tiles, (M, K/B, B) otherwise."""
    m, k = t.shape
    if spec.tile_2d:
        return t.reshape(m // 16, 16, k // 16, 16).permute(0, 2, 1, 3).reshape(m // 16, k // 16, 256)
    return t.reshape(m, k // spec.block, spec.block)


def _expand(s: torch.Tensor, spec: Spec, m: int, k: int) -> torch.Tensor:
    """Per-block values -> (M, K)."""
    if spec.tile_2d:
        return s.repeat_interleave(16, 0).repeat_interleave(16, 1)
    return s.repeat_interleave(spec.block, 1)


def tensor_encode_scale(amax: torch.Tensor, spec: Spec) -> torch.Tensor:
    """S_enc (f32 0-d) of a two-level or per-tensor format; 1 for power-of-two formats."""
    one = torch.ones((), dtype=torch.float32, device=amax.device)
    g = spec.grid
    if spec.per_tensor:
        num = torch.tensor(g.gmax, dtype=torch.float32, device=amax.device)
    elif spec.rule == "te":
        num = torch.tensor(SCALE_TARGET[spec.scale] * g.gmax, dtype=torch.float32, device=amax.device)
    elif spec.rule == "torchao":
        pts = _torchao_pts(amax, spec)
        return one / pts
    else:
        return one
    s = torch.clamp(num / amax, max=FLT_MAX)
    bad = (amax == 0) | (s == 0) | ~torch.isfinite(amax)
    return torch.where(bad, one, s)


def _torchao_pts(amax: torch.Tensor, spec: Spec) -> torch.Tensor:
    """torchao's per-tensor (decode) scale amax / (smax * gmax); 1 when amax is 0/non-finite."""
    den = torch.tensor(SCALE_TARGET[spec.scale] * spec.grid.gmax, dtype=torch.float32, device=amax.device)
    pts = amax / den
    bad = (pts == 0) | ~torch.isfinite(pts) | ~torch.isfinite(1.0 / pts)
    return torch.where(bad, torch.ones_like(pts), pts)


def quantize_layout(q: torch.Tensor, spec: Spec, rounding: str = "rtne", seed: int = 0, offset: int = 0,
                    tensor_amax=None):
    """Quantize an f32 (M, K) layout along K. Returns (codes, scales, tensor_scale, amax)
    with codes as one int per element (unpacked) and scale bytes per block."""
    m, k = q.shape
    dev = q.device
    g = spec.grid
    absq = q.abs()
    if tensor_amax is None:
        amax = absq.amax() if q.numel() else torch.zeros((), device=dev)
        amax = torch.where(torch.isnan(q).any(), torch.tensor(torch.nan, device=dev), amax)
    else:
        amax = torch.as_tensor(tensor_amax, dtype=torch.float32, device=dev).reshape(())
    amax = amax.to(torch.float32)
    s_enc = tensor_encode_scale(amax, spec)
    gmax = torch.tensor(g.gmax, dtype=torch.float32, device=dev)
    finite = torch.isfinite(q)

    if spec.per_tensor:
        y = q * s_enc
        scale_bytes = torch.zeros((0,), dtype=torch.uint8, device=dev)
        bad_elem = ~torch.isfinite(amax).expand(m, k)
        if not bool(torch.isfinite(amax)):
            s_enc = torch.tensor(torch.nan, device=dev)
    else:
        blocks = _block_view(absq, spec)
        bad_block = ~_block_view(finite, spec).all(-1)
        bamax = torch.where(bad_block, torch.zeros((), device=dev), blocks.amax(-1))
        if spec.scale == "ue8m0":
            if spec.rule == "floor":
                e = floor_log2(bamax) - g.emax
            else:  # rceil: 2^ceil(log2(amax * f32(1/gmax))) (TE float_to_e8m0; the Rust e8m0_ceil)
                t = bamax * torch.tensor(1.0 / g.gmax, dtype=torch.float32, device=dev)
                e = rceil_exponent(t)
            e = torch.clamp(e, -127, 127)
            scale_bytes = e + 127
            mult = _expand(pow2(-e), spec, m, k)
            y = q * mult
        elif spec.rule == "te":
            inv_g = torch.tensor(1.0 / g.gmax, dtype=torch.float32, device=dev)
            s_dec = bamax * (s_enc * inv_g)
            scale_bytes = encode_scale(s_dec, spec.scale)
            s_dec_q = decode_scale(scale_bytes, spec.scale)
            enc_b = torch.clamp(1.0 / (s_dec_q * (1.0 / s_enc)), max=FLT_MAX)
            y = q * _expand(enc_b, spec, m, k)
        else:  # torchao: s = cast(clamp((bamax / gmax) / pts)); x * ((1 / pts) / f32(s))
            pts = _torchao_pts(amax, spec)
            s = torch.clamp((bamax / gmax) / pts, min=SCALE_MIN_NORMAL[spec.scale], max=SCALE_GRIDS[spec.scale].gmax)
            scale_bytes = encode_scale(s, spec.scale)
            y = q * _expand(s_enc / decode_scale(scale_bytes, spec.scale), spec, m, k)
        scale_bytes = torch.where(bad_block, NAN_BYTE[spec.scale], scale_bytes).to(torch.uint8)
        bad_elem = _expand(bad_block, spec, m, k)

    y = torch.where(bad_elem, torch.zeros((), device=dev), y)
    y = torch.clamp(y, -gmax, gmax)
    u = None
    if rounding == "sr":
        lin = torch.arange(m * k, dtype=torch.int64, device=dev).reshape(m, k) + int(offset)
        u = uniform(seed, lin)
    elif rounding in ("sr4", "sr16"):
        draw = uniform_x4 if rounding == "sr4" else uniform_x16
        u = draw(seed, offset, torch.arange(m * k, dtype=torch.int64, device=dev).reshape(m, k))
    mag, _ = round_grid(y.abs(), g, rounding, u)
    neg = (f32_bits(y) >> 31) != 0
    if g.twos:
        codes = torch.where(neg, (-mag) & 0xF, mag)
    else:
        codes = mag | (neg.to(torch.int32) << g.sign_shift)
    codes = torch.where(bad_elem, torch.zeros_like(codes), codes)
    return codes.to(torch.uint8), scale_bytes, s_enc.to(torch.float32), amax


def pack_nibbles(codes: torch.Tensor) -> torch.Tensor:
    """(M, K) 4-bit codes -> (M, K/2) bytes, element 2i in the low nibble."""
    c = codes.to(torch.uint8)
    return c[:, 0::2] | (c[:, 1::2] << 4)


def unpack_nibbles(packed: torch.Tensor) -> torch.Tensor:
    lo, hi = packed & 0xF, packed >> 4
    return torch.stack([lo, hi], dim=-1).reshape(packed.shape[0], -1)


def quantize(x: torch.Tensor, fmt, *, axis: int = -1, rounding: str = "rtne", seed: int = 0, offset: int = 0,
             rht=None, tensor_amax=None) -> Packed:
    """Reference quantizer (see the module doc). `rht` = (n, signs) rotates along the
    quantized axis first; amax is then the rotated tensor's."""
    spec = parse_fmt(fmt)
    check_rounding(rounding)
    axis = normalize_axis(axis)
    rht = check_rht(rht, x.device)
    q = to_layout(x, axis)
    m, k = q.shape
    check_layout(spec, m, k, rht)
    if rht is not None:
        q = rht_lastdim(q, rht[0], rht[1])
    codes, scales, ts, amax = quantize_layout(q, spec, rounding, seed, offset, tensor_amax)
    if spec.packed:
        codes = pack_nibbles(codes)
    return Packed(codes, scales, ts, amax, spec.as_dict(), tuple(x.shape), axis, rht)


def dequantize_layout(p: Packed) -> torch.Tensor:
    """f32 (M, K) x_hat = value(code) * f32(scale) / tensor_scale in the quantized layout."""
    spec = p.spec
    m, k = p.layout_shape
    codes = unpack_nibbles(p.codes) if spec.packed else p.codes
    vals = decode_codes(codes, spec.grid)
    if spec.per_tensor:
        sc = torch.ones((), dtype=torch.float32, device=vals.device)
    else:
        sc = _expand(decode_scale(p.scales, spec.scale), spec, m, k)
    return vals * sc / p.tensor_scale.to(vals.device)


def from_layout(t: torch.Tensor, shape, axis: int) -> torch.Tensor:
    return (t if axis == -1 else t.t()).reshape(shape)


def dequantize(p: Packed, dtype=torch.bfloat16) -> torch.Tensor:
    """x_hat in the original orientation and shape (still in the rotated basis)."""
    return from_layout(dequantize_layout(p), p.shape, p.axis).to(dtype).contiguous()


def fake_quant(x: torch.Tensor, fmt, **kw) -> torch.Tensor:
    """dequantize(quantize(x)) in x.dtype."""
    return dequantize(quantize(x, fmt, **kw), x.dtype)


def gemm(a: Packed, b: Packed, out_dtype=torch.bfloat16) -> torch.Tensor:
    """C = A . B^T from packed operands (both blocked along K): the float64 product of
    the dequantized operands, cast to out_dtype."""
    ma, ka = a.layout_shape
    nb, kb = b.layout_shape
    if ka != kb:
        raise ShapeError(f"gemm needs the same K: A is {ma}x{ka}, B is {nb}x{kb}")
    A = dequantize_layout(a).double()
    B = dequantize_layout(b).double()
    return (A @ B.t()).to(out_dtype)
