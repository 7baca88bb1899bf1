"""Quantized linear layers: `QLinear` (a drop-in `nn.Linear`) and `convert(model, recipe)`.

A linear layer y = x W^T trains through three GEMMs, each C = A . B^T with both operands
quantized along that GEMM's reduction dimension K, as the recipe says for "gemm.role":

| GEMM  | C        | A (quantized along K)         | B (quantized along K)               | K            |
|-------|----------|-------------------------------|-------------------------------------|--------------|
| fprop | X W^T    | X, row-wise (axis -1)         | W, row-wise (axis -1)               | in_features  |
| dgrad | dY W     | dY, row-wise (axis -1)        | W, column-wise (axis 0, W^T's rows) | out_features |
| wgrad | dY^T X   | dY, column-wise (axis 0)      | X, column-wise (axis 0)             | tokens       |

Where `recipe.rht_on(gemm)`, both operands of that GEMM are rotated along K by the same
random Hadamard transform before quantization ((A R)(B R)^T = A B^T since R R^T = I).
Operands listed in `recipe.sr` round stochastically. The forward pass saves only the
packed column-wise X that Wgrad needs (not the bf16 X) and records the bytes saved.
Each tensor is read once for both of its copies (ops.quantize_rowcol): X and W in the
forward (W's column-wise copy is kept for Dgrad; with 16x16 tiles, RTNE and no RHT the
two copies are equal and W is quantized once), dY in the backward.

Seeds (reproducible end to end, so a resumed run repeats the same bits): one Philox
seed per tensor role, its two quantized copies told apart by the SR base offset:
    seed   = mix(global_seed, layer_id, step, tensor_index + 1)           (rank 0)
             mix(that, rank)                                              (rank > 0)
    tensor_index: x 0, w 1, dy 2
    offset = 0 for the row-wise copy (fprop.x, fprop.w, dgrad.dy),
             numel for the column-wise copy (wgrad.x, dgrad.w, wgrad.dy)
    RHT signs: "te" fixed; "per-layer" seed mix(rht.seed, layer_id);
               "per-step" seed mix(rht.seed, layer_id, step)
    mix(w0, w1, ...) = h >> 1 after h = splitmix64(h ^ w_i) for each word (h starts at 0);
    the shift keeps seeds in 63 bits (a signed int64 kernel argument).

Periodic tensor scale (recipe.tensor_scale_refresh = N > 1): every operand whose format
has an FP32 tensor scale keeps the tensor amax it uses in the buffer `tensor_amax`
(one slot per role). On steps that are multiples of N the quantizer measures the amax
and stores it (under torchrun `sync_amax` takes the max over ranks after the step);
on other steps the stored value is passed as `tensor_amax`, so no amax pass runs.

The trainer sets `QLinear.step` through `set_step(model, step)` before each step.
For CUDA graphs, `StepSeeds(model, device)` moves the seeds into device memory: the
kernels read them there (kernels.utils.seed_arg), `set_step` refreshes them with one
host-to-device copy per step, and a captured step replays with each step's seeds.

    >>> import torch, fourcast as fc
    >>> model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 32))
    >>> summary = fc.convert(model, fc.recipe("ue5m3"))
    >>> [row["name"] for row in summary.converted]
    ['0', '2']
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from fourcast.errors import RecipeError, ShapeError
from fourcast.recipes import Recipe
from fourcast.recipes import recipe as load_recipe

ROLES = ("fprop.x", "fprop.w", "dgrad.dy", "dgrad.w", "wgrad.dy", "wgrad.x")
ROLE_INDEX = {key: i for i, key in enumerate(ROLES)}
TENSOR_INDEX = {"x": 0, "w": 1, "dy": 2}
COLUMN_WISE = ("dgrad.w", "wgrad.dy", "wgrad.x")  # quantized along axis 0
SR_ROUNDING = {"element": "sr", "x4": "sr4", "x16": "sr16"}  # the recipe's sr_stream -> rounding
GEMM_PATHS = ("dequant", "fused", "fake", "packed")
FP4_ELEMENTS = ("e2m1", "e1m2", "int4", "int4-sm")

_MASK64 = (1 << 64) - 1


# ---------------------------------------------------------------- seeds


def _splitmix64(z: int) -> int:
    z = (z + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def mix(*words: int) -> int:
    """Hash integers into a 63-bit seed (see the module docstring)."""
    h = 0
    for w in words:
        h = _splitmix64(h ^ (int(w) & _MASK64))
    return h >> 1


def operand_seed(global_seed: int, layer_id: int, step: int, key: str, rank: int = 0) -> int:
    """The SR seed of operand `key` ("gemm.role") of one layer at one step: one seed
    per tensor (x, w, dy); its two copies differ by offset (operand_offset).

    >>> operand_seed(0, 3, 10, "wgrad.dy") == operand_seed(0, 3, 10, "dgrad.dy")
    True
    """
    h = mix(global_seed, layer_id, step, TENSOR_INDEX[key.split(".")[1]] + 1)
    return h if rank == 0 else mix(h, rank)


def operand_offset(key: str, numel: int) -> int:
    """SR base offset: 0 for the row-wise copy, numel for the column-wise copy (what
    ops.quantize_rowcol uses, so one fused call and two separate calls agree)."""
    return numel if key in COLUMN_WISE else 0


def _mix_np(*words):
    """mix() over numpy uint64 arrays (broadcast), for many seeds at once: StepSeeds fills
    48 layers x 3 seeds in 0.08 ms, where 144 operand_seed calls take 1.2 ms (dev CPU), on
    the host's path before each replayed step. test_train_graphs checks it equals mix()."""
    import numpy as np

    h = np.zeros(np.broadcast_shapes(*(np.shape(w) for w in words)), dtype=np.uint64)
    for w in words:
        z = h ^ np.asarray(w).astype(np.uint64)
        z = z + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = z ^ (z >> np.uint64(31))
    return h >> np.uint64(1)


def rht_seed(recipe_seed: int, layer_id: int, step: int, policy: str) -> int:
    """The seed `ops.rht_signs` gets for a layer's RHT signs at a step."""
    if policy == "te":
        return 0
    if policy == "per-layer":
        return mix(recipe_seed, layer_id)
    return mix(recipe_seed, layer_id, step)


# ---------------------------------------------------------------- profile / trace hooks

_TRACER: Any = None


def set_tracer(tracer: Any) -> None:
    """Install an object with `begin(kind, meta) -> token` and `end(token)` (the
    trainer's profiler); None turns tracing off. Regions cost nothing when off."""
    global _TRACER
    _TRACER = tracer


@contextlib.contextmanager
def trace_region(kind: str, **meta: Any) -> Iterator[None]:
    tracer = _TRACER
    if tracer is None:
        yield
        return
    token = tracer.begin(kind, meta)
    try:
        yield
    finally:
        tracer.end(token)


class _RegionInputs(torch.autograd.Function):
    """Identity whose backward closes a backward region (it runs last)."""

    @staticmethod
    def forward(ctx, box, *tensors):
        ctx.box = box
        out = tuple(t.view_as(t) for t in tensors)
        return out if len(out) > 1 else out[0]

    @staticmethod
    def backward(ctx, *grads):
        box = ctx.box
        if "token" in box and _TRACER is not None:
            _TRACER.end(box.pop("token"))
        return (None, *grads)


class _RegionOutput(torch.autograd.Function):
    """Identity whose backward opens a backward region (it runs first)."""

    @staticmethod
    def forward(ctx, box, tensor):
        ctx.box = box
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad):
        if _TRACER is not None:
            ctx.box["token"] = _TRACER.begin(ctx.box["kind"], ctx.box["meta"])
        return None, grad


class BackwardRegion:
    """Times the backward pass of a piece of forward code (attention, say):
    `q, k = region.inputs(q, k)` before it and `out = region.output(out)` after it."""

    def __init__(self, kind: str, **meta: Any):
        self.box = {"kind": kind, "meta": meta}
        self.on = _TRACER is not None and torch.is_grad_enabled()

    def inputs(self, *tensors: torch.Tensor):
        if not self.on:
            return tensors if len(tensors) > 1 else tensors[0]
        return _RegionInputs.apply(self.box, *tensors)

    def output(self, tensor: torch.Tensor) -> torch.Tensor:
        return _RegionOutput.apply(self.box, tensor) if self.on else tensor


# ---------------------------------------------------------------- operands


def _ops():
    from fourcast.kernels import ops  # torch + triton; imported on first use

    return ops


def has_tensor_scale(fmt: dict) -> bool:
    """True when the format carries an FP32 tensor scale that needs a tensor amax."""
    return fmt["scale"] == "fp32" or fmt["rule"] in ("te", "torchao")


def fmt_name(fmt: dict | None) -> str:
    """Short label of a format: 'e2m1/e4m3x16', 'e2m1/e4m3x16x16', 'bf16' for None."""
    if fmt is None:
        return "bf16"
    if fmt["scale"] == "fp32":
        return f"{fmt['element']}/tensor"
    tile = "x16x16" if fmt.get("tile_2d") else f"x{fmt['block']}"
    return f"{fmt['element']}/{fmt['scale']}{tile}"


@dataclasses.dataclass
class _Plain:
    """An operand that is not quantized (kept in high precision, maybe rotated)."""

    tensor: torch.Tensor

    @property
    def nbytes(self) -> int:
        return self.tensor.numel() * self.tensor.element_size()


def _packed_nbytes(p: Any) -> int:
    if isinstance(getattr(p, "values", None), torch.Tensor):  # ops.Decoded
        return p.values.numel() * p.values.element_size()
    total = 0
    for name in ("codes", "scales"):
        t = getattr(p, name, None)
        if isinstance(t, torch.Tensor):
            total += t.numel() * t.element_size()
    return total


# ---------------------------------------------------------------- the layer


class QLinear(nn.Linear):
    """`nn.Linear` whose Fprop, Dgrad and Wgrad run on quantized operands (module doc).

    gemm_path: "dequant" (default): quantize, dequantize with the FP32 tensor scale
    factored out, bf16 GEMM with FP32 accumulation, tensor scales in its epilogue:
    exact emulation. "fused": the same numbers with fewer passes on CUDA: one Triton
    pass per tensor writes both of its copies, the ones a GEMM consumes now already
    decoded (value * block scale, tensor scale factored out; ops.rowcol_operands) and
    the saved activation packed. "fake": ops.fake_quant to the compute dtype then the GEMM (one
    pass fewer; in bf16 a two-level decoded value x = q*s/S_enc is rounded to bf16, so
    it is exact only for power-of-two scales). "packed": ops.gemm on the packed
    operands (4-bit grids only).

        >>> import torch, fourcast as fc
        >>> layer = fc.nn.QLinear(64, 32, bias=False, recipe=fc.recipe("mxfp4"))
        >>> layer(torch.randn(32, 64)).shape
        torch.Size([32, 32])
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        recipe: Recipe | str,
        layer_id: int = 0,
        name: str = "",
        seed: int = 0,
        gemm_path: str = "dequant",
        device: Any = None,
        dtype: Any = None,
    ):
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self._derived: dict = {}
        self.recipe = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
        self.layer_id = layer_id
        self.layer_name = name or f"layer{layer_id}"
        self.seed = seed
        self.rank = 0
        self.step = 0
        self.gemm_path = gemm_path
        self.register_buffer("tensor_amax", torch.zeros(len(ROLES), device=device))
        self._amax_valid = [False] * len(ROLES)
        self._signs_cache: dict[tuple, torch.Tensor] = {}
        self._rht_memo: tuple = ()  # (step, device, (n, signs)) of the last _rht call
        self._seed_memo: dict[tuple, int] = {}
        self._step_seeds: StepSeeds | None = None  # device-memory seeds (CUDA graphs)
        self.saved_bytes = 0  # bytes Wgrad's operand X took in the last forward
        self.bf16_bytes = 0  # what a bf16 X would have taken
        self._check()

    @classmethod
    def from_linear(cls, linear: nn.Linear, recipe: Recipe | str, **kw: Any) -> "QLinear":
        """A QLinear sharing `linear`'s parameters (optimizer references stay valid)."""
        q = cls(
            linear.in_features,
            linear.out_features,
            linear.bias is not None,
            recipe=recipe,
            device="meta",
            **kw,
        )
        q.weight = linear.weight
        q.bias = linear.bias
        q.tensor_amax = torch.zeros(len(ROLES), device=linear.weight.device)
        return q

    @property
    def recipe(self) -> Recipe:
        return self._recipe

    @recipe.setter
    def recipe(self, value: Recipe) -> None:
        # Everything derived from the recipe is cached per layer (the hot path reads it
        # ~20 times per step); a new recipe drops the cache.
        self._recipe = value
        self._derived = {}
        self._rht_memo = ()
        self._seed_memo = {}

    def _recipe_consts(self) -> dict:
        """Per-operand formats, SR flags, RHT settings, ... of the recipe, built once."""
        d = self._derived
        if d:
            return d
        r = self._recipe
        fmts = {key: r.operand(key) for key in ROLES}
        refresh = r.tensor_scale_refresh
        d.update(
            fmts=fmts,
            sr={key: r.sr_on(key) for key in ROLES},
            sr_rounding=SR_ROUNDING[r.sr_stream],
            rht_on={g: r.rht_on(g) for g in ("fprop", "dgrad", "wgrad")},
            rht=(r.rht["size"], r.rht["signs"], r.rht["seed"]),
            refresh=refresh,
            periodic={key: f is not None and refresh > 1 and has_tensor_scale(f) for key, f in fmts.items()},
            token_multiple=self._token_multiple(),
            dgrad_w_is_fprop_w=self._dgrad_w_is_fprop_w_uncached(),
            quantized=r.is_quantized,
        )
        return d

    def reset_parameters(self) -> None:
        if self.weight.device.type != "meta":
            super().reset_parameters()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe.name}, layer={self.layer_name}, path={self.gemm_path}"

    def _load_from_state_dict(self, state_dict, prefix, *args, **kw):
        super()._load_from_state_dict(state_dict, prefix, *args, **kw)
        if prefix + "tensor_amax" in state_dict:
            self._amax_valid = [True] * len(ROLES)

    # -- checks made once, when the layer is built
    def _check(self) -> None:
        r = self.recipe
        if self.gemm_path not in GEMM_PATHS:
            raise RecipeError(f"gemm_path must be one of {', '.join(GEMM_PATHS)}, got '{self.gemm_path}'")
        if self.gemm_path == "packed":
            for key in ROLES:
                f = r.operand(key)
                if f is None or f["element"] not in FP4_ELEMENTS or f["scale"] == "fp32":
                    raise RecipeError(
                        f"gemm_path 'packed' runs block-scaled 4-bit GEMMs only; recipe '{r.name}' has "
                        f"{key} = {fmt_name(f)} (use gemm_path='dequant')"
                    )
        dims = {"fprop": self.in_features, "dgrad": self.out_features}
        for key in ROLES:
            f = r.operand(key)
            gemm = key.split(".")[0]
            if gemm not in dims:
                continue
            need = f["block"] if f is not None and f["block"] else 1
            if f is not None and f.get("tile_2d") and key.endswith(".w"):
                need = 16
                if self.in_features % 16 or self.out_features % 16:
                    raise ShapeError(
                        f"{self.layer_name}: 16x16 weight tiles need both dims multiples of 16, "
                        f"weight is {self.out_features}x{self.in_features}"
                    )
            if r.rht_on(gemm):
                need = math.lcm(need, r.rht["size"])
            if dims[gemm] % need:
                raise ShapeError(
                    f"{self.layer_name}: {key} is quantized along {gemm}'s reduction dim of "
                    f"{dims[gemm]}, not a multiple of {need} (block/RHT size); pad the layer or "
                    "keep it in high precision"
                )

    def _dgrad_w_is_fprop_w(self) -> bool:
        return self._recipe_consts()["dgrad_w_is_fprop_w"]

    def _dgrad_w_is_fprop_w_uncached(self) -> bool:
        """True when Dgrad's W operand equals Fprop's bit for bit: 16x16 tiles (W and
        W^T quantize identically), the same format, RTNE, no RHT on either GEMM. Then
        the forward's quantized W is reused (what 2D tiles are for)."""
        r = self.recipe
        f, g = r.operand("fprop.w"), r.operand("dgrad.w")
        return (
            f is not None
            and f == g
            and bool(f.get("tile_2d"))
            and not (r.sr_on("fprop.w") or r.sr_on("dgrad.w"))
            and not (r.rht_on("fprop") or r.rht_on("dgrad"))
        )

    def token_multiple(self) -> int:
        """Tokens per forward must be a multiple of this (Wgrad's reduction dim)."""
        return self._recipe_consts()["token_multiple"]

    def _token_multiple(self) -> int:
        r, need = self.recipe, 1
        for key in ("wgrad.dy", "wgrad.x"):
            f = r.operand(key)
            if f is not None and f["block"]:
                need = math.lcm(need, f["block"])
        if r.rht_on("wgrad"):
            need = math.lcm(need, r.rht["size"])
        return need

    # -- operand quantization
    def _rht(self, gemm: str, device: torch.device):
        c = self._recipe_consts()
        if not c["rht_on"][gemm]:
            return None
        memo = self._rht_memo
        if memo and memo[0] == (self.step, self.layer_id) and memo[1] == device:
            return memo[2]
        n, policy, recipe_seed = c["rht"]
        seed = rht_seed(recipe_seed, self.layer_id, self.step, policy)
        key = (n, policy, seed, str(device))
        signs = self._signs_cache.get(key)
        if signs is None:
            signs = _signs_on(_ops().rht_signs(n, policy, seed), device)
            if policy == "per-step":
                self._signs_cache.clear()
            self._signs_cache[key] = signs
        rht = (n, signs)
        self._rht_memo = ((self.step, self.layer_id), device, rht)
        return rht

    def _operand_seed(self, key: str) -> int | torch.Tensor:
        """operand_seed of this layer now, memoised for the current step; with StepSeeds
        the device cell that holds it (set_step wrote this step's value there)."""
        if self._step_seeds is not None:
            return self._step_seeds.cell(self, key)
        memo_key = (self.seed, self.layer_id, self.step, self.rank, key.split(".")[1])
        seed = self._seed_memo.get(memo_key)
        if seed is None:
            if len(self._seed_memo) > 12:
                self._seed_memo.clear()
            seed = self._seed_memo[memo_key] = operand_seed(self.seed, self.layer_id, self.step, key, self.rank)
        return seed

    def _plan(self, t: torch.Tensor, key: str, rht) -> dict:
        """How operand `key` of tensor t is quantized now: format, rounding, seed,
        offset, RHT and the tensor amax to pass (None = measure)."""
        c = self._recipe_consts()
        fmt = c["fmts"][key]
        slot = ROLE_INDEX[key]
        periodic = c["periodic"][key]
        stale = periodic and self._amax_valid[slot] and self.step % c["refresh"] != 0
        return dict(
            key=key,
            fmt=fmt,
            slot=slot,
            store=periodic and not stale,  # a refresh: keep the measured amax
            rounding=c["sr_rounding"] if c["sr"][key] else "rtne",
            seed=self._operand_seed(key),
            offset=operand_offset(key, t.numel()),
            rht=rht,
            tensor_amax=self.tensor_amax[slot] if stale else None,
        )

    def _keep_amax(self, plan: dict, packed: Any, update: bool) -> None:
        if update and plan["store"]:
            self.tensor_amax[plan["slot"]] = torch.as_tensor(packed.amax, device=self.tensor_amax.device)
            self._amax_valid[plan["slot"]] = True

    def _trace_meta(self, t: torch.Tensor, plans: list[dict], fake: bool, rowcol: bool = False) -> dict:
        rows, cols = t.shape
        return dict(
            layer=self.layer_name,
            operand="+".join(p["key"] for p in plans),
            rows=rows,
            cols=cols,
            fmt="+".join(fmt_name(p["fmt"]) for p in plans),
            rht=max((p["rht"][0] if p["rht"] else 0) for p in plans),
            sr=any(p["rounding"] != "rtne" for p in plans),
            sr4=any(p["rounding"] == "sr4" for p in plans),
            sr16=any(p["rounding"] == "sr16" for p in plans),
            amax="+".join(_amax_label(p, rowcol) for p in plans),
            bytes_in=t.numel() * t.element_size(),
            fake=fake,
        )

    def _quantize(self, t: torch.Tensor, key: str, axis: int, rht, *, fake_dtype=None, update: bool,
                  decoded=None):
        """One operand: Packed, or _Plain when the recipe leaves it unquantized (or
        the fake path returns fake-quantized values); decoded (a dtype): ops.Decoded in it."""
        plan = self._plan(t, key, rht)
        if plan["fmt"] is None:
            # Not quantized, but its GEMM partner is rotated: rotate it too (exactly
            # orthogonal in real arithmetic, so the product is unchanged).
            return _Plain(t if rht is None else _ops().rht(t, rht[0], rht[1], axis=axis))
        if plan["store"]:
            fake_dtype = None  # a refresh step needs the measured amax: quantize for real
        kwargs = {k: plan[k] for k in ("rounding", "seed", "offset", "rht", "tensor_amax")}
        tracer, meta = _TRACER, None
        if tracer is not None:
            meta = self._trace_meta(t if axis == -1 else t.t(), [plan], fake_dtype is not None)
            if decoded is not None and fake_dtype is None:
                meta["outputs"] = "decoded"  # bf16 values, not codes (train/profile.py)
            token = tracer.begin("quantize", meta)
        if fake_dtype is not None:
            out = _Plain(_ops().fake_quant(t, plan["fmt"], axis=axis, **kwargs).to(fake_dtype))
        else:
            if decoded is not None:
                out = _ops().quantize_decoded(t, plan["fmt"], axis=axis, dtype=decoded, **kwargs)
            else:
                out = _ops().quantize(t, plan["fmt"], axis=axis, **kwargs)
            self._keep_amax(plan, out, update)
        if meta is not None:
            meta["bytes_out"] = out.nbytes if isinstance(out, _Plain) else _packed_nbytes(out)
            tracer.end(token)
        return out

    def _quantize_rowcol(self, t: torch.Tensor, row_key: str, col_key: str, rht_row, rht_col, *, update: bool,
                         outputs: tuple[str, str] | None = None):
        """The row-wise and the column-wise operand of one tensor (X: fprop.x and
        wgrad.x; dY: dgrad.dy and wgrad.dy) from one read on CUDA (ops.quantize_rowcol,
        equal by contract to the two separate calls, which the seeds/offsets match).
        outputs: ("decoded" | "packed") per copy for ops.rowcol_operands (the fused path);
        None: both packed."""
        row, col = self._plan(t, row_key, rht_row), self._plan(t, col_key, rht_col)
        if row["fmt"] is None or col["fmt"] is None:
            return (
                self._quantize(t, row_key, -1, rht_row, update=update),
                self._quantize(t, col_key, 0, rht_col, update=update),
            )
        tracer, meta = _TRACER, None
        if tracer is not None:
            meta = self._trace_meta(t, [row, col], False, rowcol=t.is_cuda)
            meta["outputs"] = "+".join(outputs or ("packed", "packed"))  # what each copy wrote
            token = tracer.begin("quantize", meta)
        a, b = _ops().rowcol_operands(
            t,
            row["fmt"],
            fmt_col=col["fmt"],
            rounding=row["rounding"],
            rounding_col=col["rounding"],
            seed=row["seed"],
            offset=row["offset"],
            rht=rht_row,
            rht_col=rht_col,
            tensor_amax=row["tensor_amax"],
            tensor_amax_col=col["tensor_amax"],
            outputs=outputs or ("packed", "packed"),
            measure_amax=False,  # only tensor scales use an amax: they still measure theirs
        )
        self._keep_amax(row, a, update)
        self._keep_amax(col, b, update)
        if meta is not None:
            meta["bytes_out"] = _packed_nbytes(a) + _packed_nbytes(b)
            tracer.end(token)
        return a, b

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._recipe_consts()["quantized"]:
            return F.linear(x, self.weight, self.bias)
        return _QLinearFn.apply(x, self.weight, self.bias, self, torch.is_grad_enabled())


def _amax_label(plan: dict, rowcol: bool) -> str:
    """The trace's account of one copy's tensor amax: "given" (a stored one), "measured", or
    "none" (a CUDA row+col call for a format without a tensor scale: nothing records it)."""
    if plan["tensor_amax"] is not None:
        return "given"
    return "measured" if has_tensor_scale(plan["fmt"]) or not rowcol else "none"


def _signs_on(signs: torch.Tensor, device: torch.device) -> torch.Tensor:
    """An RHT sign vector (made on the CPU) on `device`, once per layer and sign seed:
    through pinned memory with a non-blocking copy on CUDA (a pageable host->device copy
    can stall the stream); still marked as checked (+-1 by construction)."""
    device = torch.device(device)
    if device.type == "cuda":
        moved = signs.pin_memory().to(device, non_blocking=True)
    else:
        moved = signs.to(device)
    return _ops().mark_signs_valid(moved) if moved is not signs else signs


def _as_matrix(op: Any, dtype: torch.dtype) -> tuple[torch.Tensor, Any]:
    """(dequantized values without the tensor scale, tensor scale) of an operand."""
    if isinstance(op, _Plain):
        return op.tensor.to(dtype), None
    if isinstance(getattr(op, "values", None), torch.Tensor):  # ops.Decoded: decoded by the quantizer
        return op.values.to(dtype), op.tensor_scale
    decoded = _ops().decode_unscaled(op, dtype)
    return decoded.values, decoded.tensor_scale


def _gemm(mod: QLinear, role: str, a: Any, b: Any, a_t: bool, b_t: bool, dtype: torch.dtype, out_dtype: torch.dtype):
    """C = op(A) @ op(B) for the dequant/fake paths (op = transpose when *_t), or
    ops.gemm on the packed operands; the FP32 tensor scales come out in the epilogue
    (kernels.gemm.scaled_mm: one cuBLASLt call with a device alpha on CUDA)."""
    tracer = _TRACER
    if mod.gemm_path == "packed" and not isinstance(a, _Plain) and not isinstance(b, _Plain):
        token = tracer.begin("gemm", _gemm_meta(mod, role, a)) if tracer is not None else None
        out = _ops().gemm(a, b, torch.float32).to(out_dtype)
        if tracer is not None:
            tracer.end(token)
        return out
    token = tracer.begin("dequantize", dict(layer=mod.layer_name, gemm=role, emulation=True)) if tracer is not None else None
    ma, ts_a = _as_matrix(a, dtype)
    mb, ts_b = _as_matrix(b, dtype)
    ma = ma.t() if a_t else ma
    mb = mb.t() if b_t else mb
    from fourcast.kernels import gemm as gk  # torch + triton, as _ops()

    if tracer is not None:
        tracer.end(token)
        # epilogue "fused": inside the cuBLASLt call; "pass": an FP32 product and a second pass
        token = tracer.begin("gemm", dict(_gemm_meta(mod, role, a), epilogue="fused" if gk.fused_epilogue(ma, mb) else "pass"))
    out = gk.scaled_mm(ma, mb, ts_a, ts_b, out_dtype)
    if tracer is not None:
        tracer.end(token)
    return out


def _gemm_meta(mod: QLinear, role: str, a: Any) -> dict:
    r = mod.recipe
    keys = {"fprop": ("fprop.x", "fprop.w"), "dgrad": ("dgrad.dy", "dgrad.w"), "wgrad": ("wgrad.dy", "wgrad.x")}[role]
    M, N, K = _mnk(mod, role, a)
    return dict(
        layer=mod.layer_name,
        role=role,
        M=M,
        N=N,
        K=K,
        a=fmt_name(r.operand(keys[0])),
        b=fmt_name(r.operand(keys[1])),
        rht=r.rht["size"] if r.rht_on(role) else 0,
        path=mod.gemm_path,
    )


def _mnk(mod: QLinear, role: str, a: Any) -> tuple[int, int, int]:
    rows = a.tensor.shape if isinstance(a, _Plain) else tuple(a.shape)
    tokens = rows[0]  # A is X or dY in original orientation: (tokens, features)
    if role == "fprop":
        return tokens, mod.out_features, mod.in_features
    if role == "dgrad":
        return tokens, mod.in_features, mod.out_features
    return mod.out_features, mod.in_features, tokens


class _QLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, mod: QLinear, grad_on: bool):
        # ctx.needs_input_grad ignores no_grad(); grad_on (read before apply) does not.
        need_dx = grad_on and ctx.needs_input_grad[0]
        need_dw = grad_on and ctx.needs_input_grad[1]
        device_type = x.device.type
        autocast = torch.is_autocast_enabled(device_type) if device_type == "cuda" else False
        out_dtype = torch.get_autocast_dtype(device_type) if autocast else x.dtype
        # GEMM operand dtype: bf16 holds every dequantized 4-bit / FP8 value exactly
        # (tensor scale factored out); on CPU FP32 is faster and equally exact.
        compute = torch.bfloat16 if x.is_cuda else torch.float32
        fake = compute if mod.gemm_path == "fake" else None
        x2 = x.reshape(-1, mod.in_features)
        if x2.shape[0] % mod.token_multiple() and need_dw:
            raise ShapeError(
                f"{mod.layer_name}: {x2.shape[0]} tokens per step is not a multiple of "
                f"{mod.token_multiple()} (Wgrad quantizes along tokens); use batch*seq a multiple of 128"
            )
        training = need_dx or need_dw
        with torch.autocast(device_type, enabled=False):
            rht = mod._rht("fprop", x.device)
            saved = None
            fused = mod.gemm_path == "fused"
            if need_dw and fake is None:
                a, saved = mod._quantize_rowcol(x2, "fprop.x", "wgrad.x", rht, mod._rht("wgrad", x.device), update=True,
                                                outputs=("decoded", "packed") if fused else None)
            else:
                a = mod._quantize(x2, "fprop.x", -1, rht, fake_dtype=fake, update=training)
                if need_dw:
                    saved = mod._quantize(x2, "wgrad.x", 0, mod._rht("wgrad", x.device), update=True)
            w_dgrad = None  # Dgrad's W operand, made now from the same read of W
            if need_dx and fake is None and mod.gemm_path in ("dequant", "fused") and mod._dgrad_w_is_fprop_w():
                # fused: decoded once for Fprop and Dgrad, in the quantizing pass
                b = w_dgrad = mod._quantize(weight, "fprop.w", -1, rht, update=training,
                                            decoded=compute if fused else None)
            elif need_dx and fake is None:
                b, w_dgrad = mod._quantize_rowcol(weight, "fprop.w", "dgrad.w", rht, mod._rht("dgrad", x.device),
                                                  update=True, outputs=("decoded", "decoded") if fused else None)
            else:
                b = mod._quantize(weight, "fprop.w", -1, rht, fake_dtype=fake, update=training)
            # FP32 out only when a bias is added before the one rounding to out_dtype
            y = _gemm(mod, "fprop", a, b, False, True, compute, torch.float32 if bias is not None else out_dtype)
            if bias is not None:
                y = (y + bias.float()).to(out_dtype)
            if need_dw:
                if isinstance(saved, _Plain):
                    saved = _Plain(saved.tensor.to(compute))
                mod.saved_bytes = saved.nbytes if isinstance(saved, _Plain) else _packed_nbytes(saved)
                mod.bf16_bytes = x2.numel() * 2
        ctx.mod = mod
        ctx.step = mod.step
        ctx.saved_x = saved
        ctx.w_dgrad = w_dgrad
        ctx.x_shape = x.shape
        ctx.x_dtype = x.dtype
        ctx.has_bias = bias is not None
        ctx.compute = compute
        ctx.fake = fake
        ctx.save_for_backward(weight)
        return y.view(*x.shape[:-1], mod.out_features)

    @staticmethod
    def backward(ctx, gy):
        mod: QLinear = ctx.mod
        (weight,) = ctx.saved_tensors
        compute = ctx.compute
        step_now, mod.step = mod.step, ctx.step  # seeds of this step's forward
        try:
            gy2 = gy.reshape(-1, mod.out_features)
            dx = dw = db = None
            with torch.autocast(gy.device.type, enabled=False):
                need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
                rht_d, rht_w = mod._rht("dgrad", gy.device), mod._rht("wgrad", gy.device)
                dy_row = dy_col = None
                if need_dx and need_dw and ctx.fake is None:
                    outputs = ("decoded", "decoded") if mod.gemm_path == "fused" else None
                    dy_row, dy_col = mod._quantize_rowcol(gy2, "dgrad.dy", "wgrad.dy", rht_d, rht_w, update=True,
                                                          outputs=outputs)
                if need_dx:
                    if dy_row is None:
                        dy_row = mod._quantize(gy2, "dgrad.dy", -1, rht_d, fake_dtype=ctx.fake, update=True)
                    b = ctx.w_dgrad
                    if b is None:
                        b = mod._quantize(weight, "dgrad.w", 0, rht_d, fake_dtype=ctx.fake, update=True)
                    dx = _gemm(mod, "dgrad", dy_row, b, False, False, compute, ctx.x_dtype).view(ctx.x_shape)
                if need_dw:
                    if dy_col is None:
                        dy_col = mod._quantize(gy2, "wgrad.dy", 0, rht_w, fake_dtype=ctx.fake, update=True)
                    dw = _gemm(mod, "wgrad", dy_col, ctx.saved_x, True, False, compute, weight.dtype)
                if ctx.has_bias and ctx.needs_input_grad[2]:
                    db = gy2.float().sum(0).to(weight.dtype)
        finally:
            mod.step = step_now
        ctx.saved_x = ctx.w_dgrad = None
        return dx, dw, db, None, None


# ---------------------------------------------------------------- model-level helpers


def qlinears(model: nn.Module) -> list[QLinear]:
    return [m for m in model.modules() if isinstance(m, QLinear)]


def set_step(model: nn.Module, step: int, rank: int = 0) -> None:
    """Tell every QLinear the training step (seeds, RHT signs, tensor-scale refresh), and
    write the step's seeds into the layers' StepSeeds, if they have one."""
    layers = qlinears(model)
    for m in layers:
        m.step = step
        m.rank = rank
    for table in {id(m._step_seeds): m._step_seeds for m in layers if m._step_seeds is not None}.values():
        table.fill(step, rank)


class StepSeeds:
    """The operand seeds of every QLinear of a model in one int64 device tensor (a row per
    layer: x, w, dy), for CUDA graphs. A captured kernel keeps its arguments, so a seed
    passed by value would repeat the capture step's seed on every replay; these kernels
    read the seed from the row instead, and `set_step` writes each step's values there
    (one pinned host-to-device copy on the current stream, ordered before the step's work).
    The values are operand_seed's, so the bits equal those of int seeds.
    Seeds are the current step's: run a step's forward and backward between two set_step calls.

        >>> import torch, fourcast as fc
        >>> model = torch.nn.Sequential(torch.nn.Linear(32, 32))
        >>> _ = fc.convert(model, "ue5m3")
        >>> seeds = fc.nn.StepSeeds(model, "cpu"); fc.nn.set_step(model, 7)
        >>> int(seeds.table[0, 2]) == fc.nn.operand_seed(0, 0, 7, "dgrad.dy")
        True
    """

    def __init__(self, model: nn.Module, device: Any):
        self.layers = qlinears(model)
        self.table = torch.zeros((len(self.layers), len(TENSOR_INDEX)), dtype=torch.int64, device=device)
        self._cells: dict[int, tuple[torch.Tensor, ...]] = {}
        for i, m in enumerate(self.layers):
            self._cells[id(m)] = tuple(self.table[i, j] for j in range(len(TENSOR_INDEX)))
            m._step_seeds = self
        import numpy as np

        self._seed = np.array([[m.seed & _MASK64] for m in self.layers], dtype=np.uint64)
        self._layer = np.array([[m.layer_id & _MASK64] for m in self.layers], dtype=np.uint64)
        self.step: int | None = None
        if self.layers:
            self.fill(self.layers[0].step, self.layers[0].rank)

    def cell(self, layer: QLinear, key: str) -> torch.Tensor:
        """The 0-d device tensor that holds operand `key`'s seed of `layer` this step."""
        return self._cells[id(layer)][TENSOR_INDEX[key.split(".")[1]]]

    def fill(self, step: int, rank: int = 0) -> None:
        """Write step `step`'s seeds (operand_seed for every layer and tensor)."""
        import numpy as np

        tensor = np.arange(1, len(TENSOR_INDEX) + 1)[None, :]
        h = _mix_np(self._seed, self._layer, np.uint64(step & _MASK64), tensor)
        if rank != 0:
            h = _mix_np(h, np.uint64(rank))
        host = torch.from_numpy(h.astype(np.int64))
        if self.table.is_cuda:
            host = host.pin_memory()
        self.table.copy_(host, non_blocking=True)
        self.step = step

    def detach(self) -> None:
        """Back to int seeds (the layers stop reading this table)."""
        for m in self.layers:
            if m._step_seeds is self:
                m._step_seeds = None


def sync_amax(model: nn.Module) -> None:
    """Under torch.distributed: make every rank's stored tensor amax the max over ranks
    (one all-reduce for the whole model; call after a refresh step)."""
    import torch.distributed as dist

    layers = qlinears(model)
    if not layers or not dist.is_available() or not dist.is_initialized():
        return
    flat = torch.cat([m.tensor_amax for m in layers])
    dist.all_reduce(flat, op=dist.ReduceOp.MAX)
    for m, part in zip(layers, flat.split(len(ROLES))):
        m.tensor_amax.copy_(part)


def memory_report(model: nn.Module) -> dict:
    """Bytes the saved Wgrad activations took in the last forward, against bf16."""
    layers = qlinears(model)
    saved = sum(m.saved_bytes for m in layers)
    bf16 = sum(m.bf16_bytes for m in layers)
    return {
        "layers": len(layers),
        "saved_activation_bytes": saved,
        "bf16_activation_bytes": bf16,
        "bytes_saved": bf16 - saved,
        "ratio": (saved / bf16) if bf16 else None,
    }


# ---------------------------------------------------------------- convert

# Fused projections (fourcast.train's wqkv / w_gate_up, HF's qkv_proj / gate_up_proj)
# count as their parts do.
_ATTN_WORDS = ("attn", "attention", "q_proj", "k_proj", "v_proj", "o_proj", "query", "key", "value", "out_proj", "wq", "wk", "wv", "wo", "qkv", "wqkv", "qkv_proj")
_MLP_WORDS = ("mlp", "ffn", "feed_forward", "expert", "experts", "w1", "w2", "w3", "gate_proj", "up_proj", "down_proj", "w_gate", "w_up", "w_down", "fc1", "fc2", "c_fc", "w_gate_up", "gate_up_proj")


def layer_kind(name: str) -> str:
    """'attn', 'mlp' or 'other' from a module path (any of its dotted parts)."""
    parts = name.lower().split(".")
    if any(p in _ATTN_WORDS or "attn" in p or "attention" in p for p in parts):
        return "attn"
    if any(p in _MLP_WORDS or "mlp" in p or "expert" in p for p in parts):
        return "mlp"
    return "other"


def find_blocks(model: nn.Module) -> nn.ModuleList | None:
    """The transformer block list: model.blocks / .layers / .h, .transformer.h,
    .model.layers (None if there is none)."""
    for path in ("blocks", "layers", "h", "transformer.h", "model.layers", "transformer.layers"):
        obj: Any = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if isinstance(obj, nn.ModuleList):
            return obj
    return None


@dataclasses.dataclass
class ConvertSummary:
    """What `convert` did: one row per nn.Linear (name, shape, precision, why)."""

    recipe: str
    converted: list[dict]
    kept: list[dict]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def __str__(self) -> str:
        lines = [f"recipe {self.recipe}: {len(self.converted)} linear layers quantized, {len(self.kept)} kept"]
        by_reason: dict[str, list[str]] = {}
        for row in self.kept:
            by_reason.setdefault(row["reason"], []).append(row["name"])
        for row in self.converted:
            if row["recipe"] != self.recipe:
                by_reason.setdefault(f"in {row['recipe']}: {row['note']}", []).append(row["name"])
        for reason, names in by_reason.items():
            shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
            lines.append(f"  {reason}: {shown}")
        return "\n".join(lines)


def convert(
    model: nn.Module,
    recipe: Recipe | str,
    *,
    blocks: nn.ModuleList | None = None,
    seed: int = 0,
    gemm_path: str = "dequant",
) -> ConvertSummary:
    """Swap the nn.Linear modules of `model` for QLinear, in place, as the recipe says:

    - fp4_layers (all | mlp | attn) picks the block linears in the recipe's format; the
      other block linears run in other_precision (bf16: left as nn.Linear; fp8: QLinear
      with the `fp8` preset's formats);
    - keep_bf16_first / keep_bf16_last keep whole blocks (counted in `blocks`, found as
      model.blocks / .layers / .h when not given) in high precision;
    - linears outside the blocks (the output head) stay high precision unless
      quantize_head; embeddings are not linears and always stay;
    - modules with `keep_high_precision = True` (MoE routers) always stay.
    Without a block list every linear counts as a block linear and keep_bf16_first/last
    must be 0.

        >>> import torch, fourcast as fc
        >>> s = fc.convert(torch.nn.Sequential(torch.nn.Linear(32, 32)), "nvfp4", gemm_path="dequant") # doctest: +SKIP
    """
    r = recipe if isinstance(recipe, Recipe) else load_recipe(recipe)
    blocks = blocks if blocks is not None else find_blocks(model)
    keep_first, keep_last = r.keep_bf16_first, r.keep_bf16_last
    if blocks is None and (keep_first or keep_last):
        raise RecipeError(
            f"recipe '{r.name}' keeps the first {keep_first} / last {keep_last} blocks in bf16 but "
            f"{type(model).__name__} has no block list (model.blocks/.layers); pass blocks=... "
            "or set keep_bf16_first=0 keep_bf16_last=0"
        )
    block_of: dict[int, int] = {}
    if blocks is not None:
        for i, block in enumerate(blocks):
            for m in block.modules():
                block_of[id(m)] = i
    n_blocks = len(blocks) if blocks is not None else 0
    fp8 = load_recipe("fp8") if r.other_precision == "fp8" else None
    converted, kept = [], []
    swaps = []
    linear_id = -1
    for name, module in list(model.named_modules()):
        if not isinstance(module, nn.Linear):
            continue
        linear_id += 1
        row = {"name": name, "shape": [module.out_features, module.in_features], "kind": layer_kind(name)}
        target: Recipe | None = r
        reason = ""
        if isinstance(module, QLinear):
            reason = f"already a QLinear ({module.recipe.name})"
            target = None
        elif getattr(module, "keep_high_precision", False):
            reason, target = "marked keep_high_precision (router)", None
        elif blocks is not None and id(module) not in block_of:
            if not r.quantize_head:
                reason, target = "outside the blocks (head); quantize_head=false", None
        else:
            i = block_of.get(id(module))
            if i is not None and i < keep_first:
                reason, target = f"block {i} in keep_bf16_first={keep_first}", None
            elif i is not None and i >= n_blocks - keep_last:
                reason, target = f"block {i} in keep_bf16_last={keep_last}", None
            elif r.fp4_layers != "all" and row["kind"] != r.fp4_layers:
                target = fp8
                reason = f"not in fp4_layers={r.fp4_layers}; other_precision={r.other_precision}"
        if target is not None and not target.is_quantized:
            reason, target = f"recipe {target.name} quantizes nothing", None
        if target is None:
            kept.append({**row, "reason": reason})
            continue
        q = QLinear.from_linear(module, target, layer_id=linear_id, name=name, seed=seed, gemm_path=gemm_path)
        swaps.append((name, q))
        converted.append({**row, "recipe": target.name, "layer_id": linear_id, "note": reason})
    for name, q in swaps:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, q)
    return ConvertSummary(recipe=r.name, converted=converted, kept=kept)
