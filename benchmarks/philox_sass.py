"""Philox4x32-10 word 0 two ways, for the SR quantizer's instruction budget (no GPU needed):
Triton's `tl.randint`, whose 32x32 -> 64 products compile to an IMAD.HI + IMAD pair, and
`philox_wide`, the same rounds written with u64 products, which ptxas turns into one
IMAD.WIDE.U32 each. The bits are the same by construction; `--check` runs both under the
Triton interpreter and compares them word for word (64-bit offsets included). The table
is sm_90a SASS per draw (Triton's bundled ptxas + nvdisasm). Fewer instructions was not
faster: timed in the strip kernel's SR calls on the H200 (kernels-h200.md, session 6),
philox_wide ran 1.19x slower at the default SR tile (724 vs 608 us at 8192^2, with 106
registers against 78), so the kernels keep tl.rand; what cut the draws' cost was
rounding "sr4" (one Philox per four elements).

    python benchmarks/philox_sass.py            # SASS per draw
    python benchmarks/philox_sass.py --check    # bit-equality under TRITON_INTERPRET=1
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile

ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ap.add_argument("--check", action="store_true", help="compare the two under the interpreter instead")
ARGS = ap.parse_args()
if ARGS.check:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BLOCK = 1024


KEY_A = tl.constexpr(0x9E3779B9)
KEY_B = tl.constexpr(0xBB67AE85)
ROUND_A = tl.constexpr(0xD2511F53)
ROUND_B = tl.constexpr(0xCD9E8D57)


@triton.jit
def philox_wide(seed, offset):
    """Word 0 of Philox4x32-10 at counter (offset lo, offset hi, 0, 0), key (seed lo, seed hi):
    tl.randint's stream, each round's products taken whole from one u64 multiply."""
    offset = offset.to(tl.uint64)
    seed = tl.to_tensor(seed).to(tl.uint64)
    c0 = offset.to(tl.uint32)
    c1 = (offset >> 32).to(tl.uint32)
    c2 = tl.zeros_like(c0)
    c3 = tl.zeros_like(c0)
    k0 = seed.to(tl.uint32) + c2
    k1 = (seed >> 32).to(tl.uint32) + c2
    for _ in tl.static_range(10):
        pa = c0.to(tl.uint64) * ROUND_A
        pb = c2.to(tl.uint64) * ROUND_B
        c0, c1, c2, c3 = (pb >> 32).to(tl.uint32) ^ c1 ^ k0, pb.to(tl.uint32), (pa >> 32).to(tl.uint32) ^ c3 ^ k1, \
            pa.to(tl.uint32)
        k0 = k0 + KEY_A
        k1 = k1 + KEY_B
    return c0


@triton.jit
def _tl_kernel(OUT, seed, offset, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(OUT + i, tl.randint(seed, i.to(tl.int64) + offset), mask=i < N)


@triton.jit
def _wide_kernel(OUT, seed, offset, N, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(OUT + i, philox_wide(seed, i.to(tl.int64) + offset), mask=i < N)


def check() -> int:
    import torch

    bad = 0
    for seed, offset in ((0, 0), (42, 0), (0x1234_5678_9ABC_DEF0, 3 << 32), (7, (1 << 33) + 5)):
        a = torch.empty(BLOCK, dtype=torch.int32)
        b = torch.empty(BLOCK, dtype=torch.int32)
        _tl_kernel[(1,)](a, seed, offset, BLOCK, BLOCK=BLOCK)
        _wide_kernel[(1,)](b, seed, offset, BLOCK, BLOCK=BLOCK)
        same = torch.equal(a, b)
        bad += not same
        print(f"seed {seed:#x} offset {offset:#x}: {'same bits' if same else 'DIFFERENT'}")
    return bad


def sass_per_draw(fn) -> tuple[float, collections.Counter]:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig = dict(OUT="*i32", seed="i64", offset="i64", N="i32", BLOCK="constexpr")
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=dict(BLOCK=BLOCK)),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4))
    nvdisasm = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        sass = subprocess.run([nvdisasm, "-c", f.name], capture_output=True, text=True, check=True).stdout
    ops = collections.Counter(m.group(1) for line in sass.splitlines()
                              if (m := re.match(r"\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_.]+)", line)))
    return sum(ops.values()) / (BLOCK / (32 * 4)), ops


def main() -> None:
    if ARGS.check:
        sys.exit(check())
    print("| draw | SASS per draw | IMAD | IMAD.HI.U32 | IMAD.WIDE.U32 | LOP3 |\n|---|---|---|---|---|---|")
    for name, fn in (("tl.randint", _tl_kernel), ("philox_wide", _wide_kernel)):
        per, ops = sass_per_draw(fn)
        per_draw = BLOCK / (32 * 4)
        print(f"| {name} | {per:.1f} | {ops['IMAD'] / per_draw:.1f} | {ops['IMAD.HI.U32'] / per_draw:.1f} | "
              f"{ops['IMAD.WIDE.U32'] / per_draw:.1f} | {ops['LOP3.LUT'] / per_draw:.1f} |")


if __name__ == "__main__":
    main()
