"""kernels/launcher.py on the CPU: its cache key separates runtime arguments exactly
where Triton's own specialisation does (so a cached kernel is never launched with an
argument it was not compiled for), and anything that is not a JIT kernel is launched
the ordinary way. The fast launch itself runs in the GPU tier (tests/gpu)."""

import itertools

import torch
from triton.backends.compiler import GPUTarget
from triton.compiler import make_backend
from triton.runtime.jit import native_specialize_impl

from fourcast.kernels import launcher

BUF = torch.zeros(64, dtype=torch.bfloat16)
VALUES = [0, 1, 2, 15, 16, 32, -16, -1, 2**31 - 1, 2**31, 2**31 + 16, 2**32, 2**63, 2**64 - 1, -(2**31),
          -(2**31) - 1, -(2**31) - 16, True, False, 0.5, 1.0, None, BUF, BUF[1:], BUF[8:], BUF.view(torch.uint8)[3:],
          torch.zeros(4, dtype=torch.uint8), torch.zeros(4, dtype=torch.float32)]


def test_key_classes_match_triton_specialisation():
    backend = make_backend(GPUTarget("cuda", 90, 32))
    triton_spec = [native_specialize_impl(backend, v, False, True, True) for v in VALUES]
    ours = [launcher._arg_class(v) for v in VALUES]
    assert None not in ours
    for (i, a), (j, b) in itertools.combinations(enumerate(ours), 2):
        if a == b:  # one cache entry for both: Triton must compile them alike
            assert triton_spec[i] == triton_spec[j], (VALUES[i], VALUES[j], triton_spec[i], triton_spec[j])


def test_unknown_argument_types_have_no_class():
    assert launcher._arg_class("text") is None
    assert launcher._arg_class((1, 2)) is None


def test_a_non_jit_kernel_is_launched_the_ordinary_way():
    calls = []

    class Stub:
        def __getitem__(self, grid):
            return lambda *a, **k: calls.append((grid, a, k))

    launcher.run(Stub(), (2, 3), (BUF, 7), {"BM": 4, "num_warps": 1})
    launcher.run(Stub(), (2, 3), (BUF, 7), {"BM": 4, "num_warps": 1})
    assert calls == [((2, 3), (BUF, 7), {"BM": 4, "num_warps": 1})] * 2
    assert not launcher._CACHE
