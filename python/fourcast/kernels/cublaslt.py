"""cuBLASLt GEMM whose epilogue scale lives on the GPU: D = alpha * (A @ B), bf16
operands, FP32 accumulation, alpha an FP32 device scalar (CUBLASLT_POINTER_MODE_DEVICE),
bf16 or FP32 out, split-K partial sums reduced in FP32 only.

Why: an emulated FP4 GEMM multiplies its FP32 product by alpha = (1 / ts_a) / ts_b, and
the tensor scales ts are device tensors the quantizer wrote. torch.mm takes no device
alpha, so without this the product leaves cuBLAS in FP32 and a second pass scales and
rounds it: 1.77x the time of the bf16-out GEMM at the 125M model's Fprop shape (H200,
benchmarks/results/kernels-h200.md, session 6). Blackwell's block-scaled cuBLASLt GEMMs
take the NVFP4 tensor scale the same way, as a device alpha.

Bound through ctypes on the libcublasLt that torch itself loaded: nothing to build, and
nothing to do on a machine without CUDA (`available` is then False). One plan (matmul
descriptor, layouts, heuristic algorithm) is cached per shape, strides, alignment and
output type; one 32 MiB workspace per (device, stream).

    >>> import torch
    >>> from fourcast.kernels import cublaslt
    >>> a = torch.randn(64, 32, device="cuda", dtype=torch.bfloat16)   # doctest: +SKIP
    >>> b = torch.randn(32, 16, device="cuda", dtype=torch.bfloat16)   # doctest: +SKIP
    >>> alpha = torch.tensor(0.5, device="cuda")                       # doctest: +SKIP
    >>> cublaslt.matmul(a, b, alpha, torch.bfloat16)                   # doctest: +SKIP
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os

import torch

from fourcast.errors import BackendError
from fourcast.kernels.utils import device_scalar

WORKSPACE_BYTES = 32 << 20

# cublasLt.h / library_types.h / cublas_api.h values (stable from CUDA 11 to 13)
_COMPUTE_32F = 68
_R_32F, _R_16BF = 0, 14
_DTYPES = {torch.bfloat16: _R_16BF, torch.float32: _R_32F}
_OP_N, _OP_T = 0, 1
_DESC_POINTER_MODE, _DESC_TRANSA, _DESC_TRANSB = 2, 3, 4
_POINTER_MODE_DEVICE = 1
_PREF_MAX_WORKSPACE_BYTES, _PREF_REDUCTION_SCHEME_MASK = 1, 3
_PREF_MIN_ALIGNMENT = (5, 6, 7, 8)  # A, B, C, D bytes
# Split-K partial sums may be reduced in place or in the FP32 compute type, never in the
# bf16 output type (a second rounding the emulated datapath does not have).
_REDUCTION_NOT_IN_OUTPUT_TYPE = 0x7 & ~0x4


class _Algo(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64 * 8)]


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", _Algo), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def _library_path() -> str | None:
    """The libcublasLt torch loaded (its cuBLAS links it), else one beside torch's CUDA wheels."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                if "libcublasLt.so" in line:
                    return line.split()[-1]
    except OSError:
        pass
    try:
        import nvidia  # the CUDA wheels torch depends on

        for root in nvidia.__path__:
            found = sorted(glob.glob(os.path.join(root, "*", "lib", "libcublasLt.so*")))
            if found:
                return found[-1]
    except ImportError:
        pass
    return None


@functools.lru_cache(maxsize=None)
def _lib():
    """The bound library, or None (no CUDA, or no libcublasLt to be found)."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.current_blas_handle()  # makes torch load cuBLAS, and with it cuBLASLt
    path = _library_path()
    if path is None:
        return None
    try:
        lib = ctypes.CDLL(path)
    except OSError:  # unloadable: the callers take the cuBLAS route instead
        return None
    vp, sz, i32, u64, i64 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_uint64, ctypes.c_int64
    sigs = {
        "cublasLtCreate": [ctypes.POINTER(vp)],
        "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), i32, i32],
        "cublasLtMatmulDescSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatrixLayoutCreate": [ctypes.POINTER(vp), i32, u64, u64, i64],
        "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
        "cublasLtMatmulPreferenceSetAttribute": [vp, i32, vp, sz],
        "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i32, ctypes.POINTER(_Heuristic),
                                           ctypes.POINTER(i32)],
        "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, ctypes.POINTER(_Algo), vp, sz, vp],
    }
    for name, args in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None:  # a library too old for one of the entry points
            return None
        fn.argtypes, fn.restype = args, i32
    return lib


def _check(status: int, call: str) -> None:
    if status != 0:
        raise BackendError(f"{call} failed with cublasStatus_t {status}")


def available(device: torch.device) -> bool:
    """True when `matmul` can run on this device."""
    return device.type == "cuda" and _lib() is not None


@functools.lru_cache(maxsize=None)
def _handle(index: int) -> ctypes.c_void_p:
    handle = ctypes.c_void_p()
    with torch.cuda.device(index):
        _check(_lib().cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    return handle


_WORKSPACES: dict[tuple[int, int], torch.Tensor] = {}


def _workspace(index: int, stream: int) -> torch.Tensor:
    ws = _WORKSPACES.get((index, stream))
    if ws is None:
        ws = _WORKSPACES[(index, stream)] = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=f"cuda:{index}")
    return ws


def _as_lt(t: torch.Tensor) -> tuple[int, int, int, int] | None:
    """A torch (R, C) matrix as cuBLASLt's op(L) = t^T (column-major): (op, rows, cols, ld)
    of the stored L, or None when neither stride is 1."""
    r, c = t.shape
    s0, s1 = t.stride()
    if s1 == 1 and s0 >= max(c, 1):
        return _OP_N, c, r, s0  # row-major t is column-major t^T as stored
    if s0 == 1 and s1 >= max(r, 1):
        return _OP_T, r, c, s1  # column-major t, transposed by the op
    return None


def _alignment(ptr: int) -> int:
    return min(256, ptr & -ptr) if ptr else 256


class _Plan:
    """Descriptors and algorithm of one (shapes, strides, alignments, out dtype)."""

    def __init__(self, index: int, lt_a, lt_b, m: int, n: int, out_dtype: torch.dtype, aligns: tuple[int, ...]):
        lib = _lib()
        vp = ctypes.c_void_p
        self.desc, self.a, self.b, self.d, pref = vp(), vp(), vp(), vp(), vp()
        _check(lib.cublasLtMatmulDescCreate(ctypes.byref(self.desc), _COMPUTE_32F, _R_32F), "cublasLtMatmulDescCreate")
        for attr, value in ((_DESC_POINTER_MODE, _POINTER_MODE_DEVICE), (_DESC_TRANSA, lt_a[0]), (_DESC_TRANSB, lt_b[0])):
            v = ctypes.c_int32(value)
            _check(lib.cublasLtMatmulDescSetAttribute(self.desc, attr, ctypes.byref(v), 4), "cublasLtMatmulDescSetAttribute")
        for layout, (_, rows, cols, ld), dtype in ((self.a, lt_a, _R_16BF), (self.b, lt_b, _R_16BF),
                                                    (self.d, (None, m, n, m), _DTYPES[out_dtype])):
            _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), dtype, rows, cols, ld), "cublasLtMatrixLayoutCreate")
        _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "cublasLtMatmulPreferenceCreate")
        prefs = [(_PREF_MAX_WORKSPACE_BYTES, ctypes.c_uint64(WORKSPACE_BYTES)),
                 (_PREF_REDUCTION_SCHEME_MASK, ctypes.c_uint32(_REDUCTION_NOT_IN_OUTPUT_TYPE))]
        prefs += [(attr, ctypes.c_uint32(a)) for attr, a in zip(_PREF_MIN_ALIGNMENT, aligns)]
        for attr, v in prefs:
            _check(lib.cublasLtMatmulPreferenceSetAttribute(pref, attr, ctypes.byref(v), ctypes.sizeof(v)),
                   "cublasLtMatmulPreferenceSetAttribute")
        found = ctypes.c_int(0)
        self.heuristic = _Heuristic()
        _check(lib.cublasLtMatmulAlgoGetHeuristic(_handle(index), self.desc, self.a, self.b, self.d, self.d, pref, 1,
                                                   ctypes.byref(self.heuristic), ctypes.byref(found)),
               "cublasLtMatmulAlgoGetHeuristic")
        self.ok = found.value > 0 and self.heuristic.state == 0


_PLANS: dict[tuple, _Plan] = {}


def matmul(a: torch.Tensor, b: torch.Tensor, alpha: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor | None:
    """alpha * (a @ b) rounded once to out_dtype (bf16 or f32): a (M, K), b (K, N) bf16
    CUDA matrices with a unit stride on either axis (transposed views are taken as they
    are), alpha a one-element f32 tensor on their device. Returns None when cuBLASLt has
    no algorithm for the case (the caller then takes another route)."""
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or alpha.dtype != torch.float32 or alpha.numel() != 1:
        raise BackendError(f"cublaslt.matmul takes bf16 a, b and an f32 alpha; got {a.dtype}, {b.dtype}, {alpha.dtype}")
    m, k = a.shape
    n = b.shape[1]
    lt_b, lt_a = _as_lt(a), _as_lt(b)  # column-major D^T = b^T a^T: cuBLASLt's A is our b
    if lt_a is None or lt_b is None:
        return None
    index = a.device.index if a.device.index is not None else torch.cuda.current_device()
    d = torch.empty((m, n), dtype=out_dtype, device=a.device)
    aligns = (_alignment(b.data_ptr()), _alignment(a.data_ptr()), _alignment(d.data_ptr()), _alignment(d.data_ptr()))
    key = (index, lt_a, lt_b, n, m, out_dtype, aligns)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = _Plan(index, lt_a, lt_b, n, m, out_dtype, aligns)
    if not plan.ok:
        return None
    stream = torch.cuda.current_stream(a.device).cuda_stream
    ws = _workspace(index, stream)
    beta = device_scalar(0.0, a.device)  # POINTER_MODE_DEVICE reads beta from the GPU too
    _check(_lib().cublasLtMatmul(_handle(index), plan.desc, alpha.data_ptr(), b.data_ptr(), plan.a, a.data_ptr(),
                                 plan.b, beta.data_ptr(), d.data_ptr(), plan.d, d.data_ptr(), plan.d,
                                 ctypes.byref(plan.heuristic.algo), ws.data_ptr(), WORKSPACE_BYTES, stream),
           "cublasLtMatmul")
    return d
