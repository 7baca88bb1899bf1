"""The short round-to-nearest-even forms of quantize.py against the textbook one and the
reference, under TRITON_INTERPRET=1, bit for bit, for every element grid: _rtne_aligned
(the codes path: a fused a * 2^K + big' rounds once) and _round_elem's (the x_hat path: a
+ big - big), against _round_grid and reference.round_grid, at every grid point, every
midpoint (where ties to even decide) and its two float neighbours, and random magnitudes.
The GPU runs the same arithmetic (its add-then-max in inline PTX: one VIADDMNMX)."""

import numpy as np
import pytest
import torch
import triton
import triton.language as tl

from fourcast.kernels import quantize as qk
from fourcast.kernels import reference, testing

pytestmark = pytest.mark.interpret


@triton.jit
def _forms_kernel(A, CODE_AL, VAL_AL, CODE_P, VAL_P, CODE_G, VAL_G, N, EMIN: tl.constexpr, MBITS: tl.constexpr,
                  FIXED: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = i < N
    a = tl.load(A + i, mask=ok, other=0.0)
    if not FIXED:
        code_al, v_al = qk._rtne_aligned(a, EMIN, MBITS)
        tl.store(CODE_AL + i, code_al, mask=ok)
        tl.store(VAL_AL + i, v_al * (2.0 ** (126 + EMIN)), mask=ok)
    code_p, val_p = qk._round_elem(a, a, EMIN, MBITS, FIXED, 0)
    code_g, val_g = qk._round_grid(a, a, EMIN, MBITS, FIXED, 0)
    tl.store(CODE_P + i, code_p, mask=ok)
    tl.store(VAL_P + i, val_p, mask=ok)
    tl.store(CODE_G + i, code_g, mask=ok)
    tl.store(VAL_G + i, val_g, mask=ok)


def _magnitudes(emin: int, mbits: int, fixed: bool, top: float, gmax: float, seed: int = 0):
    """Grid points and midpoints below `top`, each with its float neighbours, random
    magnitudes up to gmax, and 0, the smallest subnormal, gmax; and which are midpoints."""
    pts, mids, v = [], [], 0.0
    while v < top:
        step = 1.0 if fixed else 2.0 ** (max(int(np.floor(np.log2(v))) if v > 0 else emin, emin) - mbits)
        mids.append(np.float32(v + step / 2))
        for t in (np.float32(v), mids[-1]):
            pts += [t, np.nextafter(t, np.float32(0)), np.nextafter(t, np.float32(np.inf))]
        v += step
    a = torch.tensor(np.clip(np.array(pts, dtype=np.float32), 0, gmax))
    g = torch.Generator().manual_seed(seed)
    rand = torch.rand(8192, generator=g) * gmax
    edges = torch.tensor([0.0, float(np.float32(2.0**-149)), gmax], dtype=torch.float32)
    a = torch.cat([a, rand, edges])
    return a, torch.isin(a, torch.tensor(np.array(mids, dtype=np.float32)))


GRIDS = sorted({(f["element"], name) for name, f in testing.FORMATS.items()}, key=lambda p: p[0])
GRIDS = list({e: n for e, n in GRIDS}.items())  # one format per element grid


@pytest.mark.parametrize("element,fmt", GRIDS)
def test_short_rtne_forms_equal_the_textbook_form_and_the_reference(element, fmt):
    spec = qk.parse_fmt(testing.FORMATS[fmt])
    c = qk._make_constexprs(spec, "rtne")
    fp8 = element in ("e4m3", "e5m2")  # midpoints of the subnormal and first binades; random above
    top = 2.0 ** (c["EMIN"] + 2) if fp8 else c["GMAX"]
    a, mid = _magnitudes(c["EMIN"], c["MBITS"], c["FIXED"], top, c["GMAX"])
    n = a.numel()
    out = [torch.zeros(n, dtype=d) for d in (torch.int32, torch.float32) * 3]
    _forms_kernel[(triton.cdiv(n, 1024),)](a, *out, n, EMIN=c["EMIN"], MBITS=c["MBITS"], FIXED=c["FIXED"],
                                           BLOCK=1024)
    code_al, val_al, code_p, val_p, code_g, val_g = out
    code_ref, val_ref = reference.round_grid(a, spec.grid, "rtne")
    assert torch.equal(code_g, code_ref) and torch.equal(val_g.view(torch.int32), val_ref.view(torch.int32))
    assert torch.equal(code_p, code_ref), element
    assert torch.equal(val_p.view(torch.int32), val_ref.view(torch.int32)), element
    if not c["FIXED"]:
        bad = (code_al != code_ref).nonzero().flatten()[:5].tolist()
        assert not bad, (f"{element}: _rtne_aligned's codes differ at a = {a[bad].tolist()} (an interpreter whose "
                         "tl.fma rounds twice, as Triton 3.6's does, gives this)")
        assert torch.equal(val_al.view(torch.int32), val_ref.view(torch.int32)), element
    # the ties are there, and ties to even send them both ways
    assert (val_ref[mid] > a[mid]).any() and (val_ref[mid] < a[mid]).any()
