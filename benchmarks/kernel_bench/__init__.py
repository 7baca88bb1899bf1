"""The sections of benchmarks/kernels.py, one module per area (see its docstring)."""
