"""kernels/cublaslt.py's host-side logic, which needs no GPU: how a torch matrix maps to
cuBLASLt's column-major operand (the GEMM itself is tested in tests/gpu)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

from fourcast.kernels import cublaslt  # noqa: E402

N, T = cublaslt._OP_N, cublaslt._OP_T


def test_row_major_is_its_transpose_as_stored():
    t = torch.empty(5, 7)
    assert cublaslt._as_lt(t) == (N, 7, 5, 7)  # op(L) = t^T: L stored 7 x 5, ld 7
    assert cublaslt._as_lt(torch.empty(5, 16)[:, :7]) == (N, 7, 5, 16)  # a column slice keeps ld


def test_column_major_view_is_transposed_by_the_op():
    t = torch.empty(7, 5).t()  # (5, 7) with strides (1, 5)
    assert cublaslt._as_lt(t) == (T, 5, 7, 5)


def test_no_unit_stride_is_refused():
    assert cublaslt._as_lt(torch.empty(6, 8)[::2, ::2]) is None


def test_alignment_is_the_largest_power_of_two_up_to_256():
    assert [cublaslt._alignment(p) for p in (0, 2, 48, 1024, 256 * 3)] == [256, 2, 16, 256, 256]


def test_unavailable_without_cuda():
    assert not cublaslt.available(torch.device("cpu"))


def test_the_library_binds_where_torch_ships_it(monkeypatch):
    """With CUDA present (faked here), _lib finds the libcublasLt of torch's CUDA wheels and
    binds every entry point it calls; without one it gives None (the cuBLAS route)."""
    import ctypes

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_blas_handle", lambda: 0)
    cublaslt._lib.cache_clear()
    try:
        lib, path = cublaslt._lib(), cublaslt._library_path()
        if path is None:
            assert lib is None
        else:
            assert "libcublasLt.so" in path and lib is not None
            assert lib.cublasLtMatmul.restype is ctypes.c_int and len(lib.cublasLtMatmul.argtypes) == 16
            assert len(lib.cublasLtMatmulAlgoGetHeuristic.argtypes) == 10
    finally:
        cublaslt._lib.cache_clear()
