"""Where does an FP4 training step's time go, and what would hardware help buy back?

For each recipe on B300, the step's quantization work (amax passes, row/column copies,
transposed copies for the TN-only MMA, RHT, stochastic rounding) next to its GEMM time,
then the gain from each what-if: hardware random bits for SR ("sr"), a quantizer that
rotates on the fly ("rht"), quantization fused into the producing kernel
("fused-quant"), and all three.

    python examples/quantization_budget.py [gpu]
"""

import sys

from fourcast import hw

MODEL = "llama3-8b"
RECIPES = ("fp8", "mxfp8", "nvfp4", "mxfp4", "ue5m3", "ufp4")
NATIVES = (["sr"], ["rht"], ["fused-quant"], ["sr", "rht", "fused-quant"])
QUANT = ("quantize", "amax", "rht", "sr")


def main(gpu: str) -> None:
    print(f"{hw.load(gpu).display}, {MODEL}, 16384 tokens/GPU/step (modelled, not measured)\n")
    head = f"{'recipe':<8} {'step ms':>8} {'GEMM ms':>8} {'quant ms':>9} {'quant %':>8} " + " ".join(f"{'+'.join(n):>18}" for n in NATIVES)
    print(head)
    for recipe in RECIPES:
        rows = hw.whatif(gpu, MODEL, recipe, [[]] + [list(n) for n in NATIVES])
        base = rows[0]
        quant = sum(base.breakdown[c] for c in QUANT)
        gemm = base.breakdown["gemm"] + base.breakdown["gemm_hp"]
        gains = " ".join(f"{r.gain:17.3f}x" for r in rows[1:])
        print(f"{recipe:<8} {base.step_time_s * 1e3:8.1f} {gemm * 1e3:8.1f} {quant * 1e3:9.1f} {quant / base.step_time_s:8.1%} {gains}")
    nv = hw.step(gpu, MODEL, "nvfp4")
    print("\nNVFP4 quantization by category (ms):", {c: round(nv.breakdown[c] * 1e3, 1) for c in QUANT})
    print(f"quantization kernel launches per step: {nv.quant_kernels_per_step:.0f}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "b300")
