"""Is a bf16 tensor-core MMA's f32 accumulation exact for the RHT's sums? (kernels-h200.md's
lead for cheaper RHTs: the quantizer's f64 butterflies as one MMA a tile.)

For 16-row column blocks of a bf16 x, S = (H16 . diag(signs)) @ x_block: every product is
+-x (exact), and where the block's nonzero exponents lie within 12 binades (amax_gluon's
test) every partial sum fits f32's 24 bits, so an exact accumulation gives f64's S bit for
bit. This probe runs S through tl.dot (bf16 operands, f32 accumulator; the Hadamard
block-diagonal in a 64 x 64 A so that Hopper takes wgmma, and a 16 x 16 one) and counts the
f32 results that differ from f64's, over the blocks the test calls exact and over the rest,
on normal, heavy-tailed and adversarial (12 binades apart, full mantissas) inputs.

Usage (GPU): python benchmarks/rht_mma_probe.py   -> prints a table, writes $OUT/rht_mma_probe.json
CPU smoke (script bugs only; the interpreter's dot is numpy's): TRITON_INTERPRET=1 BENCH_SMOKE=1 ...
"""

from __future__ import annotations

import json
import os

import torch
import triton
import triton.language as tl

SMOKE = os.environ.get("BENCH_SMOKE") == "1"
DEV = "cpu" if SMOKE else "cuda"


@triton.jit
def _hadamard_dot_kernel(h_ptr, x_ptr, s_ptr, C, BM: tl.constexpr, BN: tl.constexpr, UPCAST: tl.constexpr):
    """S[BM rows, BN cols] of one tile = H (BM x BM, bf16) @ x tile (bf16), f32 accumulator.
    UPCAST (the CPU smoke only: the interpreter's bf16 dot reads raw bits): f32 operands."""
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    r = tl.arange(0, BM)
    c = pid_n * BN + tl.arange(0, BN)
    h = tl.load(h_ptr + r[:, None] * BM + r[None, :])
    x = tl.load(x_ptr + (pid_m * BM + r)[:, None] * C + c[None, :])
    if UPCAST:
        h, x = h.to(tl.float32), x.to(tl.float32)
    s = tl.dot(h, x, out_dtype=tl.float32)
    tl.store(s_ptr + (pid_m * BM + r)[:, None] * C + c[None, :], s)


def signed_hadamard(n: int, signs: torch.Tensor) -> torch.Tensor:
    """H_n . diag(signs), entries +-1 (Sylvester order, as the FWHT butterflies of reference.rht_lastdim)."""
    h = torch.ones((1, 1), dtype=torch.float64)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h * signs.double()[None, :]


def exact_blocks(x: torch.Tensor) -> torch.Tensor:
    """Per 16-row column block: True where amax_gluon's test proves f32 sums exact."""
    e = (x.view(torch.int16).int() >> 7) & 0xFF  # bf16 exponent fields
    nz = (x != 0)
    R, C = x.shape
    e = e.reshape(R // 16, 16, C)
    nz = nz.reshape(R // 16, 16, C)
    emax = torch.where(nz, e, torch.zeros_like(e)).amax(1)
    emin = torch.where(nz, e, torch.full_like(e, 512)).amin(1)
    return ((emax - emin <= 12) & (emax <= 249) & (emin >= 25)) | (~nz.any(1))


def inputs(R: int, C: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
    normal = torch.randn((R, C), generator=gen).to(torch.bfloat16)
    heavy = (torch.randn((R, C), generator=gen) / torch.rand((R, C), generator=gen).clamp_min(1e-3)).to(torch.bfloat16)
    # 12 binades apart with full 8-bit significands: the sums' widest exact case
    mant = 1 + torch.randint(0, 128, (R, C), generator=gen).double() / 128
    expo = torch.randint(-6, 7, (R, C), generator=gen).double()
    sign = torch.randint(0, 2, (R, C), generator=gen).double() * 2 - 1
    adversarial = (sign * mant * torch.pow(2.0, expo)).to(torch.bfloat16)
    wide = (torch.randn((R, C), generator=gen) * torch.pow(2.0, torch.randint(-20, 21, (R, C), generator=gen).float()))
    return dict(normal=normal, heavy_tailed=heavy, adversarial_12_binades=adversarial, wide_40_binades=wide.to(torch.bfloat16))


def probe(x: torch.Tensor, signs: torch.Tensor, bm: int) -> dict:
    R, C = x.shape
    h16 = signed_hadamard(16, signs)
    hb = torch.block_diag(*[h16] * (bm // 16)).to(torch.bfloat16).to(DEV)
    xd = x.to(DEV)
    s = torch.empty((R, C), dtype=torch.float32, device=DEV)
    bn = 64 if SMOKE else 128
    _hadamard_dot_kernel[(R // bm, C // bn)](hb, xd, s, C, BM=bm, BN=bn, UPCAST=SMOKE)
    ref = (h16[None] @ x.double().reshape(R // 16, 16, C)).reshape(R, C)  # f64, exact for bf16 x
    ref32 = ref.float()
    differ = (s.cpu().view(torch.int32) != ref32.view(torch.int32)).reshape(R // 16, 16, C).any(1)
    exact = exact_blocks(x)
    return dict(blocks=int(exact.numel()), exact_blocks=int(exact.sum()),
                differ_in_exact=int((differ & exact).sum()), differ_elsewhere=int((differ & ~exact).sum()))


def main():
    gen = torch.Generator().manual_seed(0)
    R, C = (64, 64) if SMOKE else (4096, 4096)
    signs = (torch.randint(0, 2, (16,), generator=gen) * 2 - 1).double()
    rows = []
    for name, x in inputs(R, C, gen).items():
        for bm in (64, 16):
            row = dict(input=name, a_rows=bm, **probe(x, signs, bm))
            rows.append(row)
            print(row, flush=True)
    meta = dict(gpu=torch.cuda.get_device_name() if not SMOKE else "cpu-smoke", torch=torch.__version__,
                triton=triton.__version__, shape=[R, C])
    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "rht_mma_probe.json"), "w") as fh:
        json.dump(dict(meta=meta, rows=rows), fh, indent=1)
    print("\n| input | A rows | blocks | exact by the test | differ there | differ elsewhere |")
    for r in rows:
        print(f"| {r['input']} | {r['a_rows']} | {r['blocks']} | {r['exact_blocks']} | {r['differ_in_exact']} |"
              f" {r['differ_elsewhere']} |")


if __name__ == "__main__":
    main()
