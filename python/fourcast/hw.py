"""The hardware model: how fast a training recipe runs on a GPU, which MMA path each GEMM
takes, and what native UE5M3 / E1M2 / INT4 / SR / RHT / fused-quantization support would
gain. The model lives in the Rust core (rust/core/src/hw); everything here is a thin,
typed face over it. numpy-free and torch-free.

    >>> from fourcast import hw
    >>> b200 = hw.load("b200")
    >>> g = hw.gemm(b200, 8192, 6144, 4096, "nvfp4")
    >>> g.kind
    'mxf4nvf4'
    >>> s = hw.step(b200, "llama3-8b", "ue5m3", native=["ue5m3"])
    >>> s.tokens_per_s_per_gpu > 0 and "gemm" in s.breakdown
    True
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from fourcast import _core
from fourcast.recipes import Recipe, recipe as _recipe

DEFAULT_HW = ("b200", "b300", "rubin", "mi355x")
DEFAULT_RECIPES = ("bf16", "nvfp4", "mxfp4", "ue5m3", "ufp4")
DEFAULT_NATIVES = ("none", "ue5m3", "e1m2")
DEFAULT_MODEL = "llama3-8b"


def names() -> list[str]:
    """Names of the built-in GPUs (hwmodels/*.toml)."""
    return list(_core.hw_names())


def models() -> list[str]:
    """Names of the model presets."""
    return list(_core.hw_model_names())


def natives() -> list[str]:
    """What-if features `native=` accepts (MMA natives take a rate: "ue5m3@0.5")."""
    return list(_core.hw_native_names())


def formats() -> list[str]:
    """Short GEMM format names `gemm()` accepts."""
    return list(_core.hw_format_names())


class _Result:
    def to_dict(self) -> dict:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


@dataclass(frozen=True)
class Hardware(_Result):
    """A GPU description. `data` is the whole file (every number with source and
    confidence); `set()` returns a copy with one value changed."""

    name: str
    display: str
    vendor: str
    arch: str
    preliminary: bool
    data: dict = field(repr=False, compare=True)

    def to_dict(self) -> dict:
        return json.loads(self.to_json())

    def to_json(self) -> str:
        return json.dumps(self.data)

    def set(self, path: str, value: Any) -> "Hardware":
        """Copy with one value changed: `hw.set("memory.hbm_tbs", 10)`,
        `hw.set("mma.mxf4nvf4.tflops", 20000)` (marked confidence "preliminary")."""
        raw = value if isinstance(value, str) else json.dumps(value)
        return Hardware._from_json(_core.hw_set(self.to_json(), path, raw))

    @property
    def kinds(self) -> dict[str, float]:
        """Dense TFLOP/s of each MMA kind."""
        return {k["name"]: k["tflops"]["value"] for k in self.data["mma"]}

    @staticmethod
    def _from_json(text: str) -> "Hardware":
        d = json.loads(text)
        return Hardware(d["name"], d["display"], d["vendor"], d["arch"], d["preliminary"], d)


def load(spec: "str | pathlib.Path | Hardware", set: Mapping[str, Any] | None = None) -> Hardware:
    """A built-in GPU by name (`names()`) or a .toml/.json file by path, then
    `set={"field.path": value}` overrides.

    >>> load("mi355x").kinds["f6f4"]
    10066.3
    """
    if isinstance(spec, Hardware):
        hw = spec
    else:
        hw = Hardware._from_json(_core.hw_load(str(spec)))
    for key, value in (set or {}).items():
        hw = hw.set(key, value)
    return hw


@dataclass(frozen=True)
class Model(_Result):
    """Transformer shape for the step model."""

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    gated: bool
    vocab: int
    seq_len: int
    experts: int
    top_k: int
    expert_ffn: int
    tied_embeddings: bool

    def to_json(self) -> str:
        return json.dumps(self.to_dict())


def model(spec: "str | pathlib.Path | Mapping[str, Any] | Model") -> Model:
    """A preset (`models()`), a .json/.toml file, or a dict with the Model fields."""
    if isinstance(spec, Model):
        return spec
    if isinstance(spec, Mapping):
        text = _core.hw_model_parse(json.dumps(dict(spec)), "model dict")
    else:
        text = _core.hw_model(str(spec))
    return Model(**json.loads(text))


_load_model = model


def _hw(spec: "str | pathlib.Path | Hardware") -> Hardware:
    return spec if isinstance(spec, Hardware) else load(spec)


def _natives(native: "str | Iterable[str] | None") -> list[str]:
    if native is None:
        return []
    if isinstance(native, str):
        return [n for n in native.split(",") if n.strip() and n.strip() != "none"]
    return [n for n in native if n and n != "none"]


def _fmt_json(fmt: Any) -> str:
    if fmt is None:
        return json.dumps("bf16")
    if isinstance(fmt, Mapping):
        return json.dumps(dict(fmt))
    return json.dumps(str(fmt))


@dataclass(frozen=True)
class GemmResult(_Result):
    """One GEMM: time, TFLOP/s, what bound it, the MMA kind and path chosen (and every
    kind that could run it, fastest first)."""

    time_s: float
    tflops: float
    bound: str
    kind: str
    path: str
    gemm_s: float
    conversion_s: float
    tile: list
    split: int
    candidates: list


def gemm(
    hw: "str | Hardware",
    m: int,
    n: int,
    k: int,
    fmt: "str | Mapping | None" = "bf16",
    fmt_b: "str | Mapping | None" = None,
    *,
    native: "str | Iterable[str] | None" = None,
    groups: int = 1,
    out_bytes: float = 2.0,
) -> GemmResult:
    """Cost C[m,n] = A[m,k] B[k,n]. `fmt` (and `fmt_b` for B, default the same) is a name
    from `formats()` or a recipe tensor format dict.

    >>> gemm("b300", 8192, 8192, 8192, "mxe1m2").kind
    'mxf8f6f4'
    >>> gemm("mi355x", 8192, 8192, 8192, "mxe1m2").kind
    'f6f4'
    """
    a = _fmt_json(fmt)
    b = _fmt_json(fmt if fmt_b is None else fmt_b)
    text = _core.hw_gemm(_hw(hw).to_json(), int(m), int(n), int(k), a, b, _natives(native), int(groups), float(out_bytes))
    return GemmResult(**json.loads(text))


@dataclass(frozen=True)
class OpResult(_Result):
    """One op's cost; `detail` splits it (gemm_s/conversion_s, amax_s/quantize_s/rht_s/sr_s, fwd_s/bwd_s)."""

    op: str
    time_s: float
    bound: str
    detail: dict
    kind: str | None = None
    path: str | None = None
    tflops: float | None = None


def op_time(hw: "str | Hardware", op: Mapping[str, Any], native: "str | Iterable[str] | None" = None) -> OpResult:
    """Cost one op given as a dict tagged by "op":

    - gemm: m, n, k, [groups], format | a, b (names or tensor-format dicts), [out_bytes]
    - memory: read_bytes, write_bytes, [ops], [exps], [launches]
    - copy: bytes (read once, written once)
    - quantize: numel, outputs=[{format, [rht], [sr], [transposed_copy], [container]}], [refresh], [src_bytes]
    - attention: batch, seq, heads, kv_heads, head_dim, [causal], [backward], [precision: bf16|fp8]

    >>> op_time("h200", {"op": "copy", "bytes": 2**31}).bound
    'memory'
    """
    text = _core.hw_op_time(_hw(hw).to_json(), json.dumps(dict(op)), _natives(native))
    return OpResult(**json.loads(text))


def op_times(hw: "str | Hardware", ops: Iterable[Mapping[str, Any]], native: "str | Iterable[str] | None" = None) -> list[OpResult]:
    """Cost a list of ops (as `op_time` takes them) in one call, e.g. a measured op list.

    >>> sum(r.time_s for r in op_times("b200", [{"op": "copy", "bytes": 1e9}] * 2)) > 0
    True
    """
    text = _core.hw_op_times(_hw(hw).to_json(), json.dumps([dict(o) for o in ops]), _natives(native))
    return [OpResult(**r) for r in json.loads(text)]


@dataclass(frozen=True)
class StepResult(_Result):
    """One training step per GPU: time, tokens/s, MFU (model FLOPs over the dense BF16
    peak, so FP8/FP4 recipes can exceed 1), seconds by category, every GEMM with its path,
    and notes (emulated paths, lossy conversions, memory). `gain` and `speedup_vs_bf16`
    are set by `whatif`."""

    hw: str
    model: str
    recipe: str
    native: list
    step_time_s: float
    tokens_per_s_per_gpu: float
    mfu: float
    breakdown: dict
    gemms: list = field(repr=False)
    quant_kernels_per_step: float
    memory_gb: float
    fits_memory: bool
    tokens_per_gpu: int
    seq_len: int
    dp: int
    notes: list = field(repr=False)
    gain: float | None = None
    speedup_vs_bf16: float | None = None


def _recipe_of(spec: "str | pathlib.Path | Recipe", fp4_layers: str | None, sets: Mapping[str, Any] | None) -> Recipe:
    overrides = dict(sets or {})
    if fp4_layers is not None:
        overrides["fp4_layers"] = fp4_layers
    return _recipe(spec, overrides)


def _config(tokens_per_gpu: int, seq_len: int | None, microbatches: int, dp: int, comm_overlap: float) -> str:
    return json.dumps(
        {
            "tokens_per_gpu": int(tokens_per_gpu),
            "seq_len": int(seq_len or 0),
            "microbatches": int(microbatches),
            "dp": int(dp),
            "comm_overlap": float(comm_overlap),
        }
    )


def step(
    hw: "str | Hardware",
    model: "str | Mapping | Model",
    recipe: "str | pathlib.Path | Recipe",
    native: "str | Iterable[str] | None" = None,
    *,
    tokens_per_gpu: int = 16384,
    seq_len: int | None = None,
    microbatches: int = 1,
    dp: int = 1,
    comm_overlap: float = 0.8,
    fp4_layers: str | None = None,
    set: Mapping[str, Any] | None = None,
) -> StepResult:
    """Model one training step of `model` with `recipe` (preset, file or Recipe, plus
    `set={"rht": "none"}` overrides) on `hw`, with what-if `native` features.

    >>> r = step("b300", "llama3-8b", "nvfp4", set={"keep_bf16_last": 0})
    >>> r.breakdown["gemm_hp"] < step("b300", "llama3-8b", "nvfp4").breakdown["gemm_hp"]
    True
    """
    m = _load_model(model)
    r = _recipe_of(recipe, fp4_layers, set)
    text = _core.hw_step(_hw(hw).to_json(), m.to_json(), r.to_json(), _natives(native), _config(tokens_per_gpu, seq_len, microbatches, dp, comm_overlap))
    return StepResult(**json.loads(text))


def whatif(
    hw: "str | Hardware | Sequence[str | Hardware]" = DEFAULT_HW,
    model: "str | Mapping | Model" = DEFAULT_MODEL,
    recipe: "str | Recipe | Sequence[str | Recipe]" = DEFAULT_RECIPES,
    native: "str | Sequence[str | Sequence[str]]" = DEFAULT_NATIVES,
    *,
    tokens_per_gpu: int = 16384,
    seq_len: int | None = None,
    microbatches: int = 1,
    dp: int = 1,
    comm_overlap: float = 0.8,
    fp4_layers: str | None = None,
    set: Mapping[str, Any] | None = None,
) -> list[StepResult]:
    """The grid hw x recipe x native on one model: one StepResult per combination, with
    `gain` (over the same recipe without natives) and `speedup_vs_bf16`. Each entry of
    `native` is one set: "none", "ue5m3", "ue5m3,e1m2" or a list.

    >>> rows = whatif("b200", recipe=["nvfp4", "ue5m3"], native=["none", "ue5m3"])
    >>> [(r.recipe, r.native) for r in rows]
    [('nvfp4', []), ('nvfp4', ['ue5m3']), ('ue5m3', []), ('ue5m3', ['ue5m3'])]
    """
    hws = [hw] if isinstance(hw, (str, Hardware, pathlib.Path)) else list(hw)
    recipes = [recipe] if isinstance(recipe, (str, Recipe, pathlib.Path)) else list(recipe)
    sets_of_natives = [native] if isinstance(native, str) else list(native)
    m = _load_model(model)
    text = _core.hw_whatif(
        [_hw(h).to_json() for h in hws],
        m.to_json(),
        [_recipe_of(r, fp4_layers, set).to_json() for r in recipes],
        [_natives(n) for n in sets_of_natives],
        _config(tokens_per_gpu, seq_len, microbatches, dp, comm_overlap),
    )
    return [StepResult(**row) for row in json.loads(text)]


__all__ = [
    "DEFAULT_HW",
    "DEFAULT_MODEL",
    "DEFAULT_NATIVES",
    "DEFAULT_RECIPES",
    "GemmResult",
    "Hardware",
    "Model",
    "OpResult",
    "StepResult",
    "formats",
    "gemm",
    "load",
    "model",
    "models",
    "names",
    "natives",
    "op_time",
    "op_times",
    "step",
    "whatif",
]
