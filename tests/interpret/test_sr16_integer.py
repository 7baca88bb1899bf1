"""quantize._round_sr16, the integer form of "sr16" rounding, against the float form
(_round_elem's SR with u = (byte + 0.5) / 256) under TRITON_INTERPRET=1: codes and
values bit for bit for every element grid, at every threshold u * step above each grid
point (where the strict compare decides), one float either side, and random magnitudes."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from fourcast.kernels import quantize as qk
from fourcast.kernels import testing

pytestmark = pytest.mark.interpret


@triton.jit
def _both_forms_kernel(A, BYTES, CODE_I, VAL_I, CODE_F, VAL_F, N, EMIN: tl.constexpr, MBITS: tl.constexpr,
                       FIXED: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    a = tl.load(A + i, mask=ok, other=0.0)
    byte = tl.load(BYTES + i, mask=ok, other=0)
    code_i, val_i = qk._round_elem(a, byte, EMIN, MBITS, FIXED, 4)
    code_f, val_f = qk._round_elem(a, (byte.to(tl.float32) + 0.5) * (1.0 / 256.0), EMIN, MBITS, FIXED, 2)
    tl.store(CODE_I + i, code_i, mask=ok)
    tl.store(VAL_I + i, val_i, mask=ok)
    tl.store(CODE_F + i, code_f, mask=ok)
    tl.store(VAL_F + i, val_f, mask=ok)


def _grid_points(emin: int, mbits: int, fixed: bool, gmax: float) -> list[tuple[float, float]]:
    """(grid point, step to the next one) for every non-negative point below gmax."""
    if fixed:
        return [(float(n), 1.0) for n in range(int(gmax))]
    pts, v = [], 0.0
    while v < gmax:
        e = max(int(np.floor(np.log2(v))) if v > 0 else emin, emin)
        step = 2.0 ** (e - mbits)
        pts.append((v, step))
        v += step
    return pts


def _magnitudes(emin, mbits, fixed, gmax, seed=0):
    """Each threshold lo + (2 b + 1) / 512 * step with its byte b, its two float
    neighbours with the same byte, and random magnitudes with random bytes."""
    a, byte = [], []
    for lo, step in _grid_points(emin, mbits, fixed, gmax):
        for b in range(256):
            t = np.float32(lo + (2 * b + 1) / 512 * step)
            for v in (t, np.nextafter(t, np.float32(0)), np.nextafter(t, np.float32(np.inf))):
                a.append(min(v, np.float32(gmax)))
                byte.append(b)
    g = torch.Generator().manual_seed(seed)
    a += (torch.rand(4096, generator=g) * gmax).tolist()
    byte += torch.randint(0, 256, (4096,), generator=g).tolist()
    a += [0.0, float(np.float32(1e-40)), gmax]
    byte += [0, 255, 255]
    return torch.tensor(a, dtype=torch.float32), torch.tensor(byte, dtype=torch.int32)


GRIDS = sorted({(f["element"], name) for name, f in testing.FORMATS.items()}, key=lambda p: p[0])
GRIDS = list({e: n for e, n in GRIDS}.items())  # one format per element grid


@pytest.mark.parametrize("element,fmt", GRIDS)
def test_integer_sr16_equals_float_sr16(element, fmt):
    c = qk._make_constexprs(qk.parse_fmt(testing.FORMATS[fmt]), "sr16")
    if element in ("e4m3", "e5m2"):  # FP8 grids: thresholds of the subnormal and first binades
        gmax = 2.0 ** (c["EMIN"] + 2)
    else:
        gmax = c["GMAX"]
    a, byte = _magnitudes(c["EMIN"], c["MBITS"], c["FIXED"], gmax)
    if element in ("e4m3", "e5m2"):
        a = torch.cat([a, torch.rand(4096, generator=torch.Generator().manual_seed(1)) * c["GMAX"]])
        byte = torch.cat([byte, torch.randint(0, 256, (4096,), generator=torch.Generator().manual_seed(2),
                                              dtype=torch.int32)])
    n = a.numel()
    out = [torch.empty(n, dtype=d) for d in (torch.int32, torch.float32, torch.int32, torch.float32)]
    _both_forms_kernel[(triton.cdiv(n, 1024),)](a, byte, *out, n, EMIN=c["EMIN"], MBITS=c["MBITS"],
                                                FIXED=c["FIXED"], BLOCK=1024)
    code_i, val_i, code_f, val_f = out
    assert torch.equal(code_i, code_f), element
    assert torch.equal(val_i.view(torch.int32), val_f.view(torch.int32)), element
    # the thresholds do decide: both directions occur
    assert 0 < int((val_f > a).sum()) < n
