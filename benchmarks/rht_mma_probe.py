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

from fourcast.kernels import reference as ref

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


@triton.jit
def _amax_mma_tile(X, C, rows, c, h, m_row, m_exact, m_bound, BM: tl.constexpr, BN: tl.constexpr,
                   UPCAST: tl.constexpr, PART: tl.constexpr):
    """One 64-row tile into _amax_mma_kernel's running maxima. PART (timing only, the words then
    wrong): 1 the MMA and max |S| alone, 2 the exactness test and row amax alone."""
    x = tl.load(X + rows[:, None] * C + c[None, :])
    mag = x.to(tl.int16, bitcast=True).to(tl.int32) & 0x7FFF
    m_row = tl.maximum(m_row, tl.max(mag, axis=0))
    if PART != 2:
        # a non-finite x to 0: H's zeros would spread its NaN into the other blocks' sums (its
        # own block is not exact: the bound sends it to the fallback)
        x = tl.where((mag >> 7) == 255, 0.0, x.to(tl.float32)).to(tl.bfloat16)
        s = tl.dot(h, x.to(tl.float32) if UPCAST else x, out_dtype=tl.float32)
        s_bits = tl.max(tl.reshape(s.to(tl.int32, bitcast=True) & 0x7FFFFFFF, (BM // 16, 16, BN)), axis=1)
    else:
        s_bits = tl.zeros((BM // 16, BN), tl.int32)
    if PART == 1:
        m_exact = tl.maximum(m_exact, s_bits)
    else:
        e = tl.reshape(mag >> 7, (BM // 16, 16, BN))
        nz = tl.reshape(mag != 0, (BM // 16, 16, BN))
        emax = tl.max(e, axis=1)
        emin = tl.min(tl.where(nz, e, 512), axis=1)
        exact = (emax - emin <= 12) & (emax <= 249) & (emin >= 25)
        xmax = tl.max(tl.reshape(mag, (BM // 16, 16, BN)), axis=1)
        bound = (s_bits.to(tl.float32, bitcast=True) + (xmax << 16).to(tl.float32, bitcast=True) * (2.0 ** -14))
        bound = tl.where(emax == 255, 0x7FFFFFFF, bound.to(tl.int32, bitcast=True))
        m_exact = tl.maximum(m_exact, tl.where(exact, s_bits, 0))
        m_bound = tl.maximum(m_bound, tl.where(exact, 0, bound))
    return m_row, m_exact, m_bound


@triton.jit
def _amax_mma_kernel(X, AMAX_BITS, SIGNS_C, C, BM: tl.constexpr, BN: tl.constexpr, ITERS: tl.constexpr,
                     UPCAST: tl.constexpr, PART: tl.constexpr = 0, STAGES: tl.constexpr = 0):
    """amax_gluon._amax_kernel's RHT_MODE 1 words for a bf16 x with a column RHT of 16 (TE's X and
    dY), the column RHT as one MMA a tile: [0] the row copy's amax (f32 bits of max |x|), [1]
    max |y| = |S| / 4 over the blocks amax_gluon's test calls exact, [2] the bound on the others
    (0x7FFFFFFF for a non-finite x). amax_gluon's RHT_MODE 2 launch then settles [1] as before.
    H: 4 blocks of H16 . diag(signs) down the diagonal of a 64 x 64 bf16 A (+-1 and 0, exact).
    STAGES: 0 the ITERS tiles unrolled; else a tl.range loop software-pipelined over that many."""
    gl_r = tl.arange(0, BM)
    i, j = gl_r[:, None], gl_r[None, :]
    p = i & j & 15
    parity = (p ^ (p >> 1) ^ (p >> 2) ^ (p >> 3)) & 1
    sign = tl.load(SIGNS_C + (j & 15))
    h = tl.where((i // 16) == (j // 16), tl.where(parity == 1, -sign, sign), 0.0).to(tl.bfloat16)
    if UPCAST:
        h = h.to(tl.float32)
    c = tl.program_id(1) * BN + tl.arange(0, BN)
    m_row = tl.zeros((BN,), tl.int32)
    m_exact = tl.zeros((BM // 16, BN), tl.int32)
    m_bound = tl.zeros((BM // 16, BN), tl.int32)
    if STAGES == 0:
        for it in tl.static_range(ITERS):
            rows = (tl.program_id(0) * ITERS + it) * BM + gl_r
            m_row, m_exact, m_bound = _amax_mma_tile(X, C, rows, c, h, m_row, m_exact, m_bound, BM, BN, UPCAST, PART)
    else:
        for it in tl.range(0, ITERS, num_stages=STAGES):
            rows = (tl.program_id(0) * ITERS + it) * BM + gl_r
            m_row, m_exact, m_bound = _amax_mma_tile(X, C, rows, c, h, m_row, m_exact, m_bound, BM, BN, UPCAST, PART)
    col = tl.max(tl.max(m_exact, axis=1), axis=0).to(tl.float32, bitcast=True) * 0.25  # |y| = |S| / 4, exact
    bound = tl.max(tl.max(m_bound, axis=1), axis=0).to(tl.float32, bitcast=True) * 0.25
    tl.atomic_max(AMAX_BITS, tl.max(m_row, axis=0) << 16)
    tl.atomic_max(AMAX_BITS + 1, col.to(tl.int32, bitcast=True))
    tl.atomic_max(AMAX_BITS + 2, bound.to(tl.int32, bitcast=True))


def signed_hadamard(n: int, signs: torch.Tensor) -> torch.Tensor:
    """H_n . diag(signs), entries +-1 (reference.hadamard_matrix: the FWHT butterflies' order)."""
    return ref.hadamard_matrix(n, torch.float64) * signs.double()[None, :]


def exact_blocks(x: torch.Tensor) -> torch.Tensor:
    """Per 16-row column block of x (R/16, C): True where the amax pass's test proves f32 sums
    exact (reference.rht16_f32_exact)."""
    R, C = x.shape
    blocks = x.reshape(R // 16, 16, C).permute(0, 2, 1).reshape(-1, 16)
    return ref.rht16_f32_exact(blocks)[0].reshape(R // 16, C)


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


def amax_pass_ab(shapes, reps: int) -> list[dict]:
    """The TE column-RHT16 amax pass of a bf16 x: amax_gluon's (RHT_MODE 1, then 2) against the MMA
    pass above (then amax_gluon's RHT_MODE 2 likewise); the four words compared, each pass timed
    (do_bench medians, in turns)."""
    from fourcast.kernels import amax_gluon as ag
    from fourcast.kernels import launcher

    signs = ref.rht_signs(16, "te").to(DEV).float()
    dummy = torch.zeros(1, device=DEV)
    rows = []
    gen = torch.Generator().manual_seed(1)
    for (R, C) in shapes:
        for name, x in inputs(R, C, gen).items():
            x = x.to(DEV)
            g1, k1 = ag.launch(R, C, 16, rht_mode=1)
            g2, k2 = ag.launch(R, C, 16, rht_mode=2)

            def gluon_pass():
                bits = torch.zeros(4, dtype=torch.int32, device=DEV)
                launcher.run(ag._amax_kernel, g1, (x, bits, dummy, signs, R, C), k1)
                launcher.run(ag._amax_kernel, g2, (x, bits, dummy, signs, R, C), k2)
                return bits

            def mma_pass(bm=64, bn=128, iters=4, part=0, stages=0, warps=4):
                bits = torch.zeros(4, dtype=torch.int32, device=DEV)
                _amax_mma_kernel[(R // (bm * iters), C // bn)](x, bits, signs, C, BM=bm, BN=bn, ITERS=iters,
                                                                UPCAST=SMOKE, PART=part, STAGES=stages,
                                                                num_warps=warps)
                if part == 0:
                    launcher.run(ag._amax_kernel, g2, (x, bits, dummy, signs, R, C), k2)
                return bits

            a, b = gluon_pass(), mma_pass()
            # the amaxes after the fallback (words 0, 1) must agree; the bounds (word 2) come from
            # differently rounded sums of the blocks that are not exact, so may differ
            row = dict(shape=f"{R}x{C}", input=name, same_words=bool(torch.equal(a[:2], b[:2])),
                       fallback=(bool(int(a[2]) > int(a[1])), bool(int(b[2]) > int(b[1]))))
            if not SMOKE:
                runs = {"gluon": gluon_pass, "mma": mma_pass, "mma iters 2": lambda: mma_pass(iters=2),
                        "mma iters 8, 3 stages": lambda: mma_pass(iters=8, stages=3),
                        "mma iters 8, 3 stages, 8 warps": lambda: mma_pass(iters=8, stages=3, warps=8)}
                row["same_words_variants"] = all(torch.equal(a[:2], f()[:2]) for f in runs.values())
                # the parts alone (timing only: their words are not the pass's)
                runs.update({"part: MMA + max |S| only": lambda: mma_pass(iters=8, stages=3, part=1),
                             "part: exactness test + row amax only": lambda: mma_pass(iters=8, stages=3, part=2),
                             "part: MMA only, unrolled": lambda: mma_pass(iters=2, part=1)})
                t = {k: [] for k in runs}
                for _ in range(reps):
                    for k, f in runs.items():
                        t[k].append(triton.testing.do_bench(f, rep=50))
                med = {k: sorted(v)[len(v) // 2] * 1e3 for k, v in t.items()}
                row.update(us=med, gluon_us=med["gluon"],
                           mma_us=min(v for k, v in med.items() if k != "gluon" and not k.startswith("part")))
                row["ratio"] = row["mma_us"] / row["gluon_us"]
            rows.append(row)
            print(row, flush=True)
    return rows


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
    ab = [] if SMOKE else amax_pass_ab([(8192, 4096), (8192, 8192)], reps=3)
    meta = dict(gpu=torch.cuda.get_device_name() if not SMOKE else "cpu-smoke", torch=torch.__version__,
                triton=triton.__version__, shape=[R, C])
    out = os.environ.get("OUT", ".")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "rht_mma_probe.json"), "w") as fh:
        json.dump(dict(meta=meta, rows=rows, amax_pass=ab), fh, indent=1)
    print("\n| input | A rows | blocks | exact by the test | differ there | differ elsewhere |")
    for r in rows:
        print(f"| {r['input']} | {r['a_rows']} | {r['blocks']} | {r['exact_blocks']} | {r['differ_in_exact']} |"
              f" {r['differ_elsewhere']} |")
    print("\n| shape | input | same words | fallback ran | gluon us | mma us | ratio |")
    for r in ab:
        print(f"| {r['shape']} | {r['input']} | {r['same_words']} | {r['fallback']} | {r['gluon_us']:.1f} |"
              f" {r['mma_us']:.1f} | {r['ratio']:.2f} |")


if __name__ == "__main__":
    main()
