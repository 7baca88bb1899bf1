"""E1M2 (UFP4) on B300 vs MI355X: which datapath runs it, at what rate, and what a
native E1M2 kind (or E4M3 block scales on CDNA4) would change.

Neither part has an E1M2 MMA. Every E1M2 value is exact in FP6 E2M3, so with UE8M0/32
block scales E1M2 runs through FP6: at the FP8 rate on Blackwell (f8f6f4 kinds), at the
FP4 rate on CDNA4 (FP6 is as fast as FP4 there). The UFP4 recipe as published uses
two-level E4M3/16 scales, which neither FP6 path takes: it falls back to BF16 emulation
on both, unless the hardware gains native E1M2 (B300) or E4M3 block scales (MI355X).

    python examples/e1m2_b300_vs_mi355x.py
"""

from fourcast import hw

GPUS = ("b300", "mi355x")
M, N, K = 16384, 14336, 4096  # llama3-8b MLP up-projection, 16k tokens
MODEL = "llama3-8b"
# UFP4 with MX-style scales: E1M2 + UE8M0 per 32 (what the FP6 paths can take).
_MX = {"element": "e1m2", "scale": "ue8m0", "block": 32, "rule": "floor"}
UFP4_MX = {"x": _MX, "w": _MX, "dy": _MX}


def gemm_table() -> None:
    print(f"GEMM {M}x{N}x{K} (modelled)")
    print(f"{'GPU':<7} {'format':<12} {'native':<12} {'TFLOP/s':>8}  path")
    for gpu in GPUS:
        for fmt in ("nvfp4", "mxfp4", "mxe1m2", "ufp4"):
            for native in ([], ["e1m2"], ["e1m2", "ue4m3"]):
                if fmt in ("nvfp4", "mxfp4") and native:
                    continue
                g = hw.gemm(gpu, M, N, K, fmt, native=native)
                print(f"{gpu:<7} {fmt:<12} {'+'.join(native) or 'none':<12} {g.tflops:8.0f}  {g.path}")
    print()


def step_table() -> None:
    print(f"Training step, {MODEL}, 16384 tokens/GPU (modelled)")
    print(f"{'GPU':<7} {'recipe':<22} {'native':<12} {'step ms':>8} {'vs bf16':>8}")
    variants = [("ufp4 (E4M3/16)", "ufp4", {}), ("ufp4 (UE8M0/32)", "ufp4", UFP4_MX), ("mxfp4", "mxfp4", {})]
    for gpu in GPUS:
        bf16 = hw.step(gpu, MODEL, "bf16").step_time_s
        for label, recipe, sets in variants:
            for native in ([], ["e1m2"], ["e1m2", "ue4m3"]):
                r = hw.step(gpu, MODEL, recipe, native=native, set=sets)
                print(f"{gpu:<7} {label:<22} {'+'.join(native) or 'none':<12} {r.step_time_s * 1e3:8.1f} {bf16 / r.step_time_s:7.2f}x")
    print()
    print("Reading: on MI355X, E1M2 with UE8M0/32 scales already runs at the FP4 rate (as FP6")
    print("E2M3); the published UFP4 scales (E4M3/16) are the blocker, so native E4M3 block")
    print("scales matter more there than a native E1M2 element. On B300 the FP6 route runs at")
    print("the FP8 rate (a third of FP4), so a native E1M2 kind is what lifts UFP4.")


if __name__ == "__main__":
    gemm_table()
    step_table()
