"""The arithmetic behind the amax pass's column RHT of 16 in f32 (rowcol_gluon._amax_kernel,
RHT_MODE 1), checked on the CPU with the same IEEE f32 operations: where the block test says
f32 is exact, the f32 butterflies give the reference's bits (reference.rht_lastdim, f64 then
one rounding); everywhere else the bound the kernel records is at least the reference's max
|y|; and the halfword trick that finds a block's smallest nonzero magnitude. The kernel itself
runs on sm_90 only (tests/gpu: test_amax_pass_column_rht_in_f32_equals_f64)."""

import numpy as np
import torch

from fourcast.kernels import reference as ref

SIGNS = ref.rht_signs(16, "te")


def f32_sums(x: torch.Tensor) -> torch.Tensor:
    """S = the RHT's butterflies of each row of x ([blocks, 16] bf16) in f32 (y = S / 4)."""
    return butterflies(x.float() * SIGNS)


def butterflies(y: torch.Tensor, h: int = 1, last: int = 16) -> torch.Tensor:
    """The RHT's butterflies on signed f32 blocks [blocks, 16], in _rht_block's order (from
    stage h: 1, 2, 4 or 8, up to but not including stage `last`)."""
    while h < last:
        y = y.reshape(-1, 16 // (2 * h), 2, h)
        y = torch.stack([y[:, :, 0, :] + y[:, :, 1, :], y[:, :, 0, :] - y[:, :, 1, :]], dim=2)
        h *= 2
    return y.reshape(-1, 16)


block_test = ref.rht16_f32_exact  # (exact, max |x|) per block, the kernel's decision


def blocks(seed: int) -> torch.Tensor:
    """Gaussian blocks, blocks with a few values 2^-13 .. 2^-40 of the rest, zeros, subnormals,
    powers of two and ties: exact and inexact blocks both."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4096, 16, generator=g)
    wide = torch.rand(4096, 16, generator=g) < 0.1
    scale = 2.0 ** -torch.randint(13, 41, (4096, 16), generator=g).float()
    x = torch.where(wide, x * scale, x)
    x[:64] = 0.0
    x[64:128, :3] = 1e-39  # bf16 subnormals beside normal values
    x[128:192] = torch.tensor([1.0, 2.0 ** -12, -(2.0 ** -12), 1.5] * 4)
    x[192:256] *= 2.0 ** 100
    return x.bfloat16()


def test_exact_blocks_give_the_references_bits():
    for seed in range(4):
        x = blocks(seed)
        exact, _ = block_test(x)
        want = ref.rht_lastdim(x.float(), 16, SIGNS)
        got = f32_sums(x) * 0.25
        assert 0.1 < exact.float().mean() < 0.9  # both kinds present
        assert torch.equal(got[exact].view(torch.int32), want[exact].view(torch.int32))


def test_the_bound_covers_every_block():
    """The kernel's bound for a block f32 cannot settle: (max |S| + 2^-14 max |x|) / 4, in f32,
    at least the reference's max |y| (f32's error is below 2^-19 max |x| in y)."""
    for seed in range(4):
        x = blocks(seed)
        exact, xmax = block_test(x)
        want = ref.rht_lastdim(x.float(), 16, SIGNS).abs().max(dim=1).values
        sums = f32_sums(x).abs().max(dim=1).values
        bound = (sums + xmax * 2.0 ** -14) * 0.25
        assert (~exact).any() and bool((bound >= want).all())
        # and the bound is tight enough to matter: within 2^-15 max |x| of the max |y|
        assert bool((bound - want <= xmax * 2.0 ** -15).all())


def test_smallest_nonzero_half_by_one_add_and_xor():
    """h + 0x7FFF with the top bit flipped is 0xFFFF for h = 0 and h - 1 otherwise, for every
    15-bit magnitude, and adding 0x7FFF7FFF to a word of two carries nothing across halves."""
    h = np.arange(0x8000, dtype=np.int64)
    t = (h + 0x7FFF) ^ 0x8000
    assert t[0] == 0xFFFF and np.array_equal(t[1:], h[1:] - 1)
    lo, hi = np.meshgrid(h[::97], h[::89])
    w = (hi << 16) | lo
    u = ((w + 0x7FFF7FFF) ^ 0x80008000) & 0xFFFFFFFF
    assert np.array_equal(u & 0xFFFF, (lo + 0x7FFF) ^ 0x8000)
    assert np.array_equal(u >> 16, (hi + 0x7FFF) ^ 0x8000)


def test_row_blocks_spread_from_their_words():
    """_rht16_row_amax_f32 reads a row block's spread from its 8 words of two bf16 (halfword
    max / min over the words, then over the two halves, the smallest by the add-and-xor map):
    the same (exact, max |x|) as block_test's per-element view, and its f32 sums of the words'
    low halves (even elements) and high halves (odd ones) are f32_sums'."""
    x = blocks(5)
    words = x.view(torch.int16).to(torch.int64).reshape(-1, 8, 2) & 0xFFFF
    words = (words[..., 1] << 16 | words[..., 0]).numpy()  # element 2k in the low half
    m = words & 0x7FFF7FFF
    top = np.maximum((m & 0xFFFF).max(axis=1), (m >> 16).max(axis=1))
    low = ((m + 0x7FFF7FFF) ^ 0x80008000) & 0xFFFFFFFF
    emin = (np.minimum((low & 0xFFFF).min(axis=1), (low >> 16).min(axis=1)) + 1) >> 7
    emax = top >> 7
    exact = (emax - emin <= 12) & (emax <= 249) & (emin >= 25)
    want_exact, want_max = block_test(x)
    assert np.array_equal(exact, want_exact.numpy())
    assert np.array_equal(top << 16, want_max.view(torch.int32).numpy())
    lo = torch.from_numpy((words << 16) & 0xFFFFFFFF).to(torch.int32).view(torch.float32)
    hi = torch.from_numpy(words & 0xFFFF0000).to(torch.int32).view(torch.float32)
    a, b = lo * SIGNS[0::2], hi * SIGNS[1::2]  # stage 1 pairs elements 2k and 2k + 1
    s = torch.stack([a + b, a - b], dim=2).reshape(-1, 16)
    assert torch.equal(butterflies(s, 2).view(torch.int32), f32_sums(x).view(torch.int32))


def test_last_stage_as_abs_sums_gives_the_same_max_bits():
    """amax_gluon._abs_sum_stage: the max over the last stage's pairs (elements i and i + 8) of
    |a| + |b| has the bits of the max |S| over the full butterflies (RN is odd and monotone),
    for exact and inexact blocks, huge ones whose sums overflow, and non-finite ones (a NaN on
    both sides where either has one)."""
    x = torch.cat([blocks(s).float() for s in range(3)])
    x[:32] *= 2.0 ** 124  # sums past f32's range: inf, and inf - inf = NaN, in the butterflies
    x[32:36] = 3e38
    x[36:40, 5] = float("inf")
    x[40:44, 7] = float("-inf")
    x[44:48, 3] = float("nan")
    y = x * SIGNS
    full = (butterflies(y).view(torch.int32) & 0x7FFFFFFF).max(dim=1).values
    s = butterflies(y, last=8)
    short = (s[:, :8].abs() + s[:, 8:].abs()).view(torch.int32).max(dim=1).values
    nan = full > 0x7F800000
    assert nan[:36].any() and nan[44:48].all() and torch.equal(short > 0x7F800000, nan)
    assert torch.equal(short[~nan], full[~nan])
    assert (full[~nan] == 0x7F800000).any()  # an infinite max among them


# ---- the quantize pass's column RHT of 16 in f32 (rowcol_gluon._rht16_split_half)

SPREAD = 12  # a part's exponent fields within SPREAD of each other: its butterflies exact in f32
REACH = 25  # the lower part's floor: emax - REACH


def split_rht(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(y, unproven) per block of x ([blocks, 16] bf16) as _rht16_split_half computes them with
    the same f32 operations: the butterflies of x / 4 at or above field emax - SPREAD (zeros
    included) and of the others, one add where the block has both."""
    mag = x.view(torch.int16).to(torch.int32) & 0x7FFF
    emax = (mag.max(dim=1).values >> 7)[:, None]
    emin = (torch.where(mag == 0, 512, mag >> 7).min(dim=1).values)[:, None]
    proven = (emax <= 249) & (emin >= 25) & (emax - emin <= REACH)
    split = emax - emin > SPREAD
    xs = x.float() * (SIGNS * 0.25)
    edge = ((emax - SPREAD - 2) << 23).view(torch.float32)
    small = (xs.abs() < edge) & (xs != 0)
    zero = torch.zeros_like(xs)
    a = butterflies(torch.where(small, zero, xs))
    c = butterflies(torch.where(small, xs, zero))
    y = torch.where(split, a + c, a)
    unproven = ~proven | (split & (y == 0).any(dim=1, keepdim=True))
    return y, unproven[:, 0]


def wide_blocks(seed: int, n: int = 8192) -> torch.Tensor:
    """Blocks whose values sit 0-27 binades below their largest, full bf16 mantissas, a few
    near-cancellations, signed zeros and subnormals: every branch of the split."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 16, generator=g)
    drop = torch.randint(0, 28, (n, 16), generator=g).float()
    drop = torch.where(torch.rand(n, 16, generator=g) < 0.85, torch.zeros_like(drop), drop)
    x = x * 2.0 ** -drop
    x[: n // 16] = torch.where(torch.rand(n // 16, 16, generator=g) < 0.5, 0.0, -0.0)
    x[n // 16: n // 8, 5] = 1e-39
    # two large values, a pair 2^-12 below them differing by 2^-19 and that difference as a
    # small value: four outputs cancel exactly (a zero S where the block splits)
    k = slice(n // 8, n // 8 + 256)
    x[k] = 0.0
    x[k, :2] = 1.0
    x[k, 2] = 2.0 ** -12 * (1 + 2.0 ** -7)
    x[k, 4] = 2.0 ** -12
    x[k, 5] = 2.0 ** -19
    return x.bfloat16()


def aligned_blocks(seed: int, n: int = 1 << 15) -> torch.Tensor:
    """Blocks at the split's edges, their values signed to add up in output 0 (sums needing 25
    bits in f32 unless split right): half with near-maximal values and one at field emax - 13
    (the first below the upper part) and one lower; half with two large values, ten at emax -
    13, four scattered to emax - 25 and one at emax - 25 or 26 (the lower part's floor, or just
    past it). Moving either edge one field down gives wrong bits here."""
    g = torch.Generator().manual_seed(seed)
    mant = 1 + torch.randint(64, 128, (n, 16), generator=g).float() / 128
    fld = torch.zeros(n, 16)
    fld[n // 2:, 2:] = 13
    fld[n // 2:, 11:15] = torch.randint(14, 26, (n - n // 2, 4), generator=g).float()
    fld[: n // 2, 15] = torch.randint(14, 21, (n // 2,), generator=g).float()
    fld[n // 2:, 15] = torch.randint(25, 27, (n - n // 2,), generator=g).float()
    mant[:, 15] = 1 + torch.randint(0, 128, (n,), generator=g).float() / 128
    x = mant * 2.0 ** -fld * SIGNS
    k = torch.randint(0, 15, (n // 2,), generator=g)  # the first half's value at emax - 13, either sign
    x[torch.arange(n // 2), k] = mant[: n // 2, 14] * 2.0 ** -13 * (torch.randint(0, 2, (n // 2,), generator=g) * 2 - 1)
    return x.bfloat16()


def test_split_rht_gives_the_references_bits_where_proven():
    for seed in range(3):
        x = aligned_blocks(seed)
        y, unproven = split_rht(x)
        assert 0.2 * len(x) < int(unproven.sum()) < 0.3 * len(x)  # the blocks past the floor
        ok = ~unproven
        assert torch.equal(y[ok].view(torch.int32), ref.rht_lastdim(x.float(), 16, SIGNS)[ok].view(torch.int32))
        for x in (wide_blocks(seed), blocks(seed)):
            y, unproven = split_rht(x)
            want = ref.rht_lastdim(x.float(), 16, SIGNS)
            ok = ~unproven
            assert torch.equal(y[ok].view(torch.int32), want[ok].view(torch.int32))
            exact, _ = block_test(x)
            # most blocks need the second part's sums and are proven: beyond the amax pass's test
            assert int((ok & ~exact).sum()) > 0.1 * len(x)
            assert 0 < int(unproven.sum()) < 0.75 * len(x)


def test_split_rht_leaves_a_zero_sum_unproven():
    x = wide_blocks(0)[1024:1280]
    y, unproven = split_rht(x)
    assert bool((y == 0).any(dim=1).all()) and bool(unproven.all())


def test_split_rht_proves_nearly_every_gaussian_block():
    """Data: Gaussian blocks (bf16) leave about one block in 10^6 unproven (a value 2^-25 below
    its block's largest), so a program's column copy is redone in f64 about once in 10^3."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1 << 18, 16, generator=g).bfloat16()
    y, unproven = split_rht(x)
    assert int(unproven.sum()) <= 4
    want = ref.rht_lastdim(x.float(), 16, SIGNS)
    assert torch.equal(y[~unproven].view(torch.int32), want[~unproven].view(torch.int32))


def prescaled_rht(x: torch.Tensor, n: int = 16) -> torch.Tensor:
    """rowcol_gluon._rht_block's PRE form on bf16 blocks [blocks, n]: x times sign * 2^-2 in
    f32, the butterflies in f64, one rounding to f32 (no f64 multiply)."""
    y = (x.float() * (ref.rht_signs(n, "te") * (1.0 / n ** 0.5))).double()
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        y = torch.stack([y[:, :, 0, :] + y[:, :, 1, :], y[:, :, 0, :] - y[:, :, 1, :]], dim=2)
        h *= 2
    return y.reshape(-1, n).float()


def test_prescaled_rht_gives_the_reference_bits():
    """The f32 prescale gives reference.rht_lastdim's bits on bf16 blocks at both ends of bf16's
    range (subnormals down to 2^-133, the largest finite values, where f32 sums would overflow),
    spread over every binade, with signed zeros, an infinity and NaN; and the same prescale on
    f32 inputs (where the kernel keeps the f64 multiply) would not."""
    g = torch.Generator().manual_seed(3)
    bits = torch.randint(0, 1 << 16, (4096, 16), generator=g, dtype=torch.int32)
    x = (bits - (bits >= 1 << 15).int() * (1 << 16)).to(torch.int16).view(torch.bfloat16)
    tiny = torch.tensor([2.0 ** -133, -(2.0 ** -133), 3 * 2.0 ** -133, 2.0 ** -126, 0.0, -0.0, 1.0, 2.0 ** -120],
                        dtype=torch.float32)
    edges = torch.stack([tiny.repeat(2), torch.full((16,), 3.3895e38), torch.full((16,), -0.0),
                         torch.tensor([float("inf")] + [1.0] * 15), torch.tensor([float("nan")] + [-2.0] * 15)])
    x = torch.cat([x, edges.to(torch.bfloat16)])
    want = ref.rht_lastdim(x.float(), 16, ref.rht_signs(16, "te"))
    got = prescaled_rht(x)
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan) and nan.any() and want.isinf().any()  # NaN's payload is not the contract
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))
    f32 = torch.tensor([[2.0 ** -149] * 4 + [0.0] * 12])  # f32 subnormals lose their bits when scaled in f32
    assert not torch.equal(prescaled_rht(f32).view(torch.int32),
                           ref.rht_lastdim(f32, 16, ref.rht_signs(16, "te")).view(torch.int32))
