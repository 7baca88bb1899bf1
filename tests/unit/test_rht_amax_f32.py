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
    y = x.float() * SIGNS
    h = 1
    while h < 16:
        y = y.reshape(-1, 16 // (2 * h), 2, h)
        y = torch.stack([y[:, :, 0, :] + y[:, :, 1, :], y[:, :, 0, :] - y[:, :, 1, :]], dim=2)
        h *= 2
    return y.reshape(-1, 16)


def block_test(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(exact, max |x|) per block, as _rht16_amax_f32 decides them from the exponent fields:
    the largest at most 249, the smallest nonzero at least 25 and within 12 of the largest (an
    all-zero block: its smallest taken as 512, exact)."""
    mag = x.view(torch.int16).to(torch.int32) & 0x7FFF
    e = mag >> 7
    emax = e.max(dim=1).values
    emin = torch.where(mag == 0, 512, e).min(dim=1).values
    exact = (emax - emin <= 12) & (emax <= 249) & (emin >= 25)
    return exact, (mag.max(dim=1).values << 16).view(torch.float32)


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
