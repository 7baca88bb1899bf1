"""Kernel launches with Triton's per-launch binding done once.

`fn[grid](*args, **constexprs)` binds every argument again on each call: it specialises
each of the 50-60 parameters, builds a cache key from them and the options, and checks the
kernel's globals. A dense FP4 training step makes a few hundred such launches, and the
125M step is host-bound on the H200 machine: skipping the binding took 17 ms off its 166 ms
(training-h200.md, run 12). `run` does the same launch through Triton's path the
first time and remembers the compiled kernel under a key that holds everything Triton
specialises on (device, constexprs and options, each runtime argument's type class,
16-byte alignment of pointers and of integers, integers equal to 1); later launches with
the same key call the compiled kernel's launcher directly.

The fast call is Triton's own (`JITFunction.run` ends in the same `kernel.run(...)`, on
3.6 as on 3.9). It is skipped, so the launch goes through Triton, under the interpreter,
for anything that is not a JITFunction (benchmarks stub kernels), when a launch hook is
installed (profilers), and for argument types the key does not know.
FOURCAST_FAST_LAUNCH=0 turns it off (benchmarks time both).
"""

from __future__ import annotations

import os

import torch

try:
    from triton import knobs as _knobs
    from triton.runtime.jit import JITFunction
except ImportError:  # older Triton: always Triton's path
    _knobs = None
    JITFunction = ()

ENABLED = os.environ.get("FOURCAST_FAST_LAUNCH", "1") != "0"
STATS = {"fast": 0, "triton": 0}
_CACHE: dict[tuple, tuple] = {}
_I32 = (-(2**31), 2**31 - 1)


def _arg_class(a):
    """What Triton's specialisation sees in one runtime argument (None: unknown type)."""
    if isinstance(a, torch.Tensor):
        return a.dtype, a.data_ptr() % 16 == 0
    if isinstance(a, bool):
        return "u1"
    if isinstance(a, int):
        kind = "i32" if _I32[0] <= a <= _I32[1] else ("u64" if a >= 2**63 else "i64")
        return kind, a == 1, a % 16 == 0
    if isinstance(a, float):
        return "fp32"
    if a is None:
        return "none"
    return None


def _hooked() -> bool:
    """A launch hook is installed (Triton's default is an empty HookChain)."""
    rt = _knobs.runtime
    return any(h is not None and getattr(h, "calls", True) for h in (rt.launch_enter_hook, rt.launch_exit_hook))


def run(fn, grid: tuple, args: tuple, consts: dict) -> None:
    """fn[grid](*args, **consts): args are the kernel's leading (runtime) parameters in
    order, consts the constexprs after them by name plus launch options (num_warps)."""
    if not (ENABLED and isinstance(fn, JITFunction)) or _hooked():
        fn[grid](*args, **consts)
        return
    classes = tuple(_arg_class(a) for a in args)
    if None in classes:
        STATS["triton"] += 1
        fn[grid](*args, **consts)
        return
    device = torch.cuda.current_device()
    key = (fn, device, classes, tuple(consts.items()))
    hit = _CACHE.get(key)
    if hit is None:
        kernel = fn[grid](*args, **consts)
        tail = tuple(consts[p.name] if p.name in consts else p.default for p in fn.params[len(args):])
        _CACHE[key] = (kernel, tail)
        STATS["triton"] += 1
        return
    kernel, tail = hit
    g1 = grid[1] if len(grid) > 1 else 1
    g2 = grid[2] if len(grid) > 2 else 1
    stream = torch._C._cuda_getCurrentRawStream(device)
    kernel.run(grid[0], g1, g2, stream, kernel.function, kernel.packed_metadata, None, None, None, *args, *tail)
    STATS["fast"] += 1
