"""Type stub of the Rust extension ``fourcast._core`` (rust/py/src).

Arrays are numpy arrays; inputs must be C-contiguous (the Python wrappers in
fourcast.quant / fourcast.bias / fourcast.recipes make them so)."""

from typing import Any

import numpy as np
import numpy.typing as npt

__version__: str

# formats.rs
def format_catalogue() -> list[dict[str, Any]]: ...

# recipe.rs
def recipe_names() -> list[str]: ...
def recipe_preset(name: str) -> str: ...
def recipe_parse(text: str, kind: str, origin: str) -> str: ...
def recipe_set(json: str, path: str, value: str) -> str: ...

# bias.rs
def bias_stats(x: npt.NDArray[np.float32], q: npt.NDArray[np.float32], block: int = 0) -> dict[str, Any]: ...
def code_histogram(codes: npt.NDArray[np.uint8], count: int) -> list[int]: ...
def depth_product(biases: list[float]) -> list[float]: ...
def geometric_rate(ratios: list[float]) -> float: ...

# codecs.rs
def quantize(
    x: npt.NDArray[np.float32],
    element: str,
    scale: str,
    block: int,
    tile: bool,
    rule: str | None,
    rounding: str,
    seed: int,
    offset: int,
    tensor_amax: float | None,
    axis0: bool,
    scale_max: float | None,
    ue5m3_finite_ff: bool,
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8], float, float]:
    """(codes (R, C/2), scales, tensor_scale, amax) in the quantized orientation."""

def dequantize(
    codes: npt.NDArray[np.uint8],
    scales: npt.NDArray[np.uint8],
    tensor_scale: float,
    element: str,
    scale: str,
    block: int,
    tile: bool,
    rule: str | None,
    axis0: bool,
    scale_max: float | None,
    ue5m3_finite_ff: bool,
) -> npt.NDArray[np.float32]:
    """float32 in the original orientation."""

def encode(
    x: npt.NDArray[np.float32], codec: str, rounding: str = "rtne", seed: int = 0, offset: int = 0
) -> npt.NDArray[np.uint8]: ...
def decode(codes: npt.NDArray[np.uint8], codec: str) -> npt.NDArray[np.float32]: ...
def pack_codes(codes: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]: ...
def unpack_codes(packed: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint8]: ...
def philox(seed: int, offsets: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint32]: ...
def philox4x32_10(counter: tuple[int, int, int, int], key: tuple[int, int]) -> list[int]: ...
def philox_uniform(seed: int, offsets: npt.NDArray[np.uint64]) -> npt.NDArray[np.float32]: ...
def rht_signs(n: int, policy: str, seed: int) -> npt.NDArray[np.float64]: ...
def rht_f32(
    x: npt.NDArray[np.float32], n: int, signs: npt.NDArray[np.float64], axis0: bool
) -> npt.NDArray[np.float32]: ...
def rht_f64(
    x: npt.NDArray[np.float64], n: int, signs: npt.NDArray[np.float64], axis0: bool
) -> npt.NDArray[np.float64]: ...
def format_preset(name: str) -> dict[str, Any]: ...
def format_check(
    element: str,
    scale: str,
    block: int,
    tile: bool,
    rule: str | None,
    scale_max: float | None,
    ue5m3_finite_ff: bool,
) -> str:
    """Validate a format; returns the scale rule it resolves to."""

def codec_names() -> dict[str, list[str]]: ...
def codec_threads() -> int: ...
