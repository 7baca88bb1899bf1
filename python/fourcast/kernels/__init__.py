"""Triton kernels that emulate the FP4 datapath on Hopper, one op per file, each beside
a plain PyTorch reference. Importing this package needs torch and triton."""
