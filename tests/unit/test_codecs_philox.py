"""Philox4x32-10: Random123 known-answer vectors, and bit equality with Triton's
tl.randint4x / tl.rand run by Triton's interpreter (TRITON_INTERPRET=1, on CPU)."""

import os

import numpy as np
import pytest

import fourcast as fc

torch = pytest.importorskip("torch")

# The interpreter is chosen when a kernel is decorated: switch it on for this
# module's kernel only, then restore (a CUDA run of other tiers keeps its setting).
_previous = os.environ.get("TRITON_INTERPRET")
os.environ["TRITON_INTERPRET"] = "1"
triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402


@triton.jit
def _philox_kernel(words_ptr, uniform_ptr, offsets_ptr, seed, N: tl.constexpr):
    i = tl.arange(0, N)
    off = tl.load(offsets_ptr + i)
    w0, w1, w2, w3 = tl.randint4x(seed, off)
    tl.store(words_ptr + i * 4 + 0, w0)
    tl.store(words_ptr + i * 4 + 1, w1)
    tl.store(words_ptr + i * 4 + 2, w2)
    tl.store(words_ptr + i * 4 + 3, w3)
    tl.store(uniform_ptr + i, tl.rand(seed, off))


if _previous is None:
    del os.environ["TRITON_INTERPRET"]
else:
    os.environ["TRITON_INTERPRET"] = _previous


def test_triton_version_is_pinned():
    # Triton before mid-2025 used Philox4x64 for 64-bit offsets (numerics.md section 4).
    major, minor = (int(v) for v in triton.__version__.split(".")[:2])
    assert (major, minor) >= (3, 4), triton.__version__


RANDOM123 = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]


@pytest.mark.parametrize("counter,key,expected", RANDOM123)
def test_random123_known_answer_vectors(counter, key, expected):
    assert tuple(fc._core.philox4x32_10(counter, key)) == expected


def test_seed_offset_mapping_and_triton_vector():
    # counter = (offset lo, offset hi, 0, 0), key = (seed lo, seed hi).
    assert tuple(fc.philox(0, [0])[0]) == RANDOM123[0][2]
    seed, offset = 0x299F31D0A4093822, 0x85A308D3243F6A88
    expected = fc._core.philox4x32_10((0x243F6A88, 0x85A308D3, 0, 0), (0xA4093822, 0x299F31D0))
    assert fc.philox(seed, np.array([offset], np.uint64))[0].tolist() == list(expected)
    assert hex(int(fc.philox(42, [0])[0, 0])) == "0x9ceaf053"
    assert fc.philox_uniform(42, [0])[0] == np.float32(0.77408016)


@pytest.mark.parametrize(
    "seed,dtype",
    [(0, torch.int32), (42, torch.int32), (2**40 + 7, torch.int64), (2**63 + 5, torch.int64)],
)
def test_equal_to_triton_randint4x_and_rand(seed, dtype):
    n = 512
    gen = torch.Generator().manual_seed(seed % 1000)
    offsets = torch.randint(0, 2**31 - 1, (n,), generator=gen, dtype=torch.int64)
    if dtype == torch.int64:
        offsets = offsets * 2_654_435_761  # exercise the high counter word
    offsets[0] = 0
    offsets = offsets.to(dtype)
    words = torch.zeros(n * 4, dtype=torch.int32)
    uniform = torch.zeros(n, dtype=torch.float32)
    # Triton takes the seed as a 64-bit int (signed): pass seeds >= 2^63 as negatives.
    tseed = seed - 2**64 if seed >= 2**63 else seed
    _philox_kernel[(1,)](words, uniform, offsets, tseed, N=n)
    offs = offsets.numpy().astype(np.uint64)
    np.testing.assert_array_equal(words.numpy().view(np.uint32).reshape(n, 4), fc.philox(seed, offs))
    np.testing.assert_array_equal(uniform.numpy(), fc.philox_uniform(seed, offs))


def test_uniform_range_and_shape():
    u = fc.philox_uniform(3, np.arange(100_000, dtype=np.uint64))
    assert u.dtype == np.float32 and 0 <= u.min() and u.max() < 1
    assert abs(float(u.mean()) - 0.5) < 0.01
    assert fc.philox(1, np.zeros((2, 3), np.int64)).shape == (2, 3, 4)


def test_bad_seeds_and_offsets():
    with pytest.raises(TypeError):
        fc.philox(1.5, [0])
    with pytest.raises(fc.FormatError):
        fc.philox(-1, [0])
    with pytest.raises(fc.FormatError):
        fc.philox(0, [-3])
    with pytest.raises(TypeError):
        fc.philox(0, [0.5])
