"""How fast must a native UE5M3 path be to beat NVFP4 (with RHT) on a Blackwell part?

The UE5M3 recipe (E2M1 + UE5M3 block-16 scales, periodic tensor scale, SR on gradients,
no RHT, no BF16-kept blocks) against the Transformer Engine NVFP4 recipe (E4M3 block-16,
RHT-16 on Wgrad, SR on gradients, last two blocks in BF16), llama3-8b, one GPU.

Shipped Blackwell parts have no UE5M3 scale type. The model then re-encodes UE5M3
scales as E4M3 under a new tensor scale (exact unless a tensor's block scales span more
than E4M3's ~17.8 binades). If that conversion is ruled out (it is lossy exactly when
UE5M3 matters), UE5M3 needs a native MMA kind: this script finds the rate, as a fraction
of the part's FP4 rate, at which that native kind breaks even with NVFP4.

    python examples/ue5m3_native_rate.py
"""

from fourcast import hw

MODEL = "llama3-8b"


def no_e4m3_conversion(gpu: str) -> hw.Hardware:
    """The GPU with E4M3 block scales removed from its FP4 kind, so UE5M3 cannot be
    re-encoded: UE5M3 runs natively (what-if kind) or emulated."""
    h = hw.load(gpu)
    return h.set("mma.mxf4nvf4.scales", ["ue8m0/32", "ue8m0/16"])


def ue5m3_time(h: hw.Hardware, rate: float | None) -> float:
    native = [] if rate is None else [f"ue5m3@{rate:g}"]
    return hw.step(h, MODEL, "ue5m3", native=native).step_time_s


def break_even(gpu: str) -> tuple[float, float, float, float]:
    nvfp4 = hw.step(gpu, MODEL, "nvfp4").step_time_s
    converted = ue5m3_time(hw.load(gpu), None)
    strict = no_e4m3_conversion(gpu)
    lo, hi = 0.05, 2.0
    if ue5m3_time(strict, hi) > nvfp4:
        return nvfp4, converted, float("nan"), ue5m3_time(strict, 1.0)
    for _ in range(30):  # bisection on the native rate
        mid = (lo + hi) / 2
        if ue5m3_time(strict, mid) <= nvfp4:
            hi = mid
        else:
            lo = mid
    return nvfp4, converted, hi, ue5m3_time(strict, 1.0)


def main() -> None:
    print(f"{MODEL}, 16384 tokens/GPU/step (modelled, not measured)\n")
    print(f"{'GPU':<7} {'NVFP4 ms':>9} {'UE5M3 via E4M3 ms':>18} {'native UE5M3 @1.0 ms':>21} {'break-even rate':>16}")
    for gpu in ("b200", "b300", "gb300", "rubin"):
        nvfp4, converted, rate, native_full = break_even(gpu)
        print(f"{gpu:<7} {nvfp4 * 1e3:9.1f} {converted * 1e3:18.1f} {native_full * 1e3:21.1f} {rate:16.2f}")
    print("\nbreak-even rate: the native UE5M3 MMA rate, as a fraction of the part's FP4 rate, at")
    print("which the UE5M3 recipe matches NVFP4's step time when E4M3 re-encoding is not allowed.")
    print("Below 1.0 means UE5M3's lighter recipe (no RHT, no amax pass, no BF16 blocks) pays for")
    print("a slower MMA. Rubin numbers are preliminary (hwmodels/rubin.toml).")


if __name__ == "__main__":
    main()
