"""fourcast: bit-exact 4-bit codecs, FP4 training emulation, shrinkage-bias analysis
and a cycle/throughput model of FP4 hardware.

numpy is the only required dependency; torch-based parts (kernels, nn, train) load
lazily and say how to install them when missing.
"""

from fourcast import _core
from fourcast.errors import (
    ConfigError,
    FormatError,
    FourcastError,
    HardwareError,
    MissingDependencyError,
    NonFiniteError,
    RecipeError,
    ShapeError,
    TrainError,
)

from fourcast.recipes import Recipe, recipe
from fourcast import quant
from fourcast.quant import Format, QTensor, philox, philox_uniform, quantize, rht, rht_signs
from fourcast import bias
from fourcast import hw

__version__ = _core.__version__

__all__ = [
    "ConfigError",
    "Format",
    "FormatError",
    "FourcastError",
    "HardwareError",
    "MissingDependencyError",
    "NonFiniteError",
    "QTensor",
    "Recipe",
    "RecipeError",
    "ShapeError",
    "TrainError",
    "__version__",
    "bias",
    "hw",
    "philox",
    "philox_uniform",
    "quant",
    "quantize",
    "recipe",
    "rht",
    "rht_signs",
]


def __getattr__(name: str):
    """Torch-based parts load on first use: fc.nn, fc.train, fc.convert, fc.QLinear."""
    import importlib

    if name in ("nn", "train"):
        return importlib.import_module(f"fourcast.{name}")
    if name in ("convert", "QLinear"):
        return getattr(importlib.import_module("fourcast.nn"), name)
    raise AttributeError(f"module 'fourcast' has no attribute {name!r}")
