"""The scale byte stores keep their sectors in L2 (quantize.SCALE_L2: evict_last) in the
one-copy quantizer and strip.py's row+col kernel, compiled for sm_90a without a GPU from the
launches quantize and quantize_rowcol hand the launcher (rowcol_gluon's kernel:
tests/unit/test_rowcol_gluon.py). Session 28 measured why (kernels-h200.md): a tile writes a
few bytes of each scale sector, and sectors written back before they fill cost DRAM a
read-modify-write."""

import pytest

from fourcast.kernels import testing

pytest.importorskip("triton.backends.nvidia", reason="no NVIDIA backend in this Triton")

_CHILD = r"""
import json, re
import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from fourcast.kernels import quantize as qk, testing

launches = []
qk.launcher.run = lambda fn, grid, args, consts: launches.append((fn, args, dict(consts)))
qk.check_kernel_input = lambda *a, **k: None  # CPU tensors: only the launches are wanted
x = torch.zeros(256, 512, dtype=torch.bfloat16)
nv, amax = testing.FORMATS["nvfp4"], torch.tensor(1.0)
qk.quantize(x, nv, tensor_amax=amax)
qk.CONFIG_OVERRIDE["rowcol"] = "strip"
qk.quantize_rowcol(x, nv, nv, "rtne", "rtne", 0, 0, None, None, amax, amax)
TYPES = {torch.bfloat16: "*bf16", torch.float32: "*fp32", torch.uint8: "*u8", torch.int32: "*i32",
         torch.int64: "*i64"}
out = {}
for fn, args, consts in launches:
    warps = consts.pop("num_warps", 4)
    consts.pop("maxnreg", None)
    names = [p.name for p in fn.params]
    types = {n: TYPES[a.dtype] if isinstance(a, torch.Tensor) else "i64" if isinstance(a, int) else "fp32"
             for n, a in zip(names, args) if a is not None}
    consts.update({n: None for n, a in zip(names, args) if a is None})
    consts.update({p.name: p.default for p in fn.params if p.name not in types and p.name not in consts})
    sig = {n: types.get(n, "constexpr") for n in names}
    k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=consts), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=warps))
    stores = re.findall(r"st\.global\S*", k.asm["ptx"])
    out[fn.__name__] = dict(kept=sum(s.startswith("st.global.L1::evict_last.L2::cache_hint") for s in stores),
                            stores=len(stores))
print(json.dumps(out))
"""


def test_scale_byte_stores_stay_in_l2():
    """The one-copy kernel's scale bytes and both copies' in strip.py's kernel go out with the
    L2 evict_last policy; the code bytes' stores (most of them) do not."""
    k = testing.compiled_in_child(_CHILD)
    assert set(k) == {"_quantize_kernel", "_strip_kernel"}
    one, strip = k["_quantize_kernel"], k["_strip_kernel"]
    assert 1 <= one["kept"] < one["stores"]
    assert 2 <= strip["kept"] < strip["stores"]  # the row copy's and the column copy's
