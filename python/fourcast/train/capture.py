"""Tensor capture for the bias study: every K steps, each linear layer's input X,
weight W and output gradient dY are saved as float32 .npy files:

    run_dir/tensors/step{S:06d}/{layer}.{role}.npy      role = x | w | dy

S is the 0-based step index. X and dY are flattened to (tokens, features) and W is
(out_features, in_features); each keeps its first `rows` rows (whole rows, so the
row-wise blocks along K are intact, and contiguous tokens, so column-wise blocks are
too). The tensors are the high-precision ones the quantizer sees (before any RHT).
run_dir/tensors/index.json lists each layer's class and operand formats.
Only rank 0 captures.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
from torch import nn

from fourcast import nn as fcnn


class TensorCapture:
    def __init__(self, run_dir: pathlib.Path, model: nn.Module, every: int, rows: int):
        self.root = pathlib.Path(run_dir) / "tensors"
        self.every = every
        self.rows = rows
        self.layers = [(_clean(name), m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
        self._handles: list = []
        self._folder: pathlib.Path | None = None

    def due(self, step: int) -> bool:
        return self.every > 0 and step % self.every == 0

    def write_index(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        index = {}
        for name, m in self.layers:
            entry = {"class": type(m).__name__, "shape": [m.out_features, m.in_features]}
            if isinstance(m, fcnn.QLinear):
                entry["recipe"] = m.recipe.name
                entry["formats"] = {key: fcnn.fmt_name(m.recipe.operand(key)) for key in fcnn.ROLES}
            index[name] = entry
        (self.root / "index.json").write_text(json.dumps(index, indent=2))

    def arm(self, step: int) -> None:
        self._folder = self.root / f"step{step:06d}"
        self._folder.mkdir(parents=True, exist_ok=True)
        for name, m in self.layers:
            self._handles.append(m.register_forward_hook(self._hook(name)))

    def disarm(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def _save(self, name: str, role: str, t: torch.Tensor) -> None:
        t = t.detach()
        t = t.reshape(-1, t.shape[-1])[: self.rows]
        np.save(self._folder / f"{name}.{role}.npy", t.float().cpu().numpy())

    def _hook(self, name: str):
        def hook(module: nn.Linear, inputs, output):
            if not torch.is_grad_enabled():
                return  # evaluation passes are not captured
            self._save(name, "x", inputs[0])
            self._save(name, "w", module.weight)
            if output.requires_grad:
                output.register_hook(lambda g: self._save(name, "dy", g))

        return hook


def _clean(name: str) -> str:
    for prefix in ("module.", "_orig_mod."):
        while name.startswith(prefix):
            name = name[len(prefix):]
    return name
