"""Checkpoints: one safetensors file per run folder (no pickle anywhere), replaced
atomically, holding the model (parameters and buffers such as QLinear's stored tensor
amax), the AdamW state, the RNG states and, in the file's metadata, the step and the
optimizer's hyper-parameters. Works for a plain, DDP or FSDP2 model through
torch.distributed.checkpoint's full (unsharded) state dicts.

    >>> import torch, tempfile, pathlib
    >>> m = torch.nn.Linear(4, 4); opt = torch.optim.AdamW(m.parameters())
    >>> d = pathlib.Path(tempfile.mkdtemp()); save(d, m, opt, step=3, extra={"tokens": 96})
    >>> load(d, m, opt)["step"]
    3
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict

from fourcast.errors import TrainError

FILE = "checkpoint.safetensors"


def path_of(run_dir: str | os.PathLike) -> pathlib.Path:
    return pathlib.Path(run_dir) / FILE


def save(run_dir: str | os.PathLike, model: torch.nn.Module, opt: torch.optim.Optimizer, *, step: int, extra: dict | None = None, rank: int = 0) -> None:
    """Write the checkpoint (every rank takes part in gathering; rank 0 writes)."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    model_sd, opt_sd = get_state_dict(model, opt, options=options)
    if rank != 0:
        return
    tensors: dict[str, torch.Tensor] = {}
    for k, v in model_sd.items():
        tensors[f"model/{k}"] = v.detach().contiguous().clone()
    for fqn, state in opt_sd["state"].items():
        for name, v in state.items():
            tensors[f"optim/{fqn}/{name}"] = torch.as_tensor(v).detach().contiguous().clone()
    tensors["rng/torch"] = torch.get_rng_state()
    groups = [{k: _json_value(v) for k, v in g.items()} for g in opt_sd["param_groups"]]
    meta = {"step": str(step), "param_groups": json.dumps(groups), "extra": json.dumps(extra or {}), "format": "fourcast.checkpoint/1"}
    target = path_of(run_dir)
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    save_file(tensors, str(tmp), metadata=meta)
    os.replace(tmp, target)


def _json_value(v: Any) -> Any:
    """A param-group value as JSON holds it (a CUDA run's learning rate is a 0-d tensor)."""
    if isinstance(v, tuple):
        return list(v)
    if isinstance(v, torch.Tensor):
        return v.item()
    return v


def read_meta(run_dir: str | os.PathLike) -> dict:
    """The step and extras of a run folder's checkpoint, without loading tensors."""
    from safetensors import safe_open

    target = path_of(run_dir)
    if not target.is_file():
        raise TrainError(f"no checkpoint in {run_dir} to resume from (expected {FILE}); run without --resume first")
    with safe_open(str(target), framework="pt") as f:
        meta = f.metadata()
    return {"step": int(meta["step"]), "extra": json.loads(meta["extra"])}


def load(run_dir: str | os.PathLike, model: torch.nn.Module, opt: torch.optim.Optimizer) -> dict:
    """Load the checkpoint into model and optimizer; returns read_meta's dict."""
    from safetensors import safe_open

    target = path_of(run_dir)
    info = read_meta(run_dir)
    with safe_open(str(target), framework="pt") as f:
        groups = json.loads(f.metadata()["param_groups"])
    tensors = load_file(str(target))
    model_sd: dict[str, Any] = {}
    opt_state: dict[str, dict[str, torch.Tensor]] = {}
    for key, v in tensors.items():
        section, _, rest = key.partition("/")
        if section == "model":
            model_sd[rest] = v
        elif section == "optim":
            fqn, _, name = rest.rpartition("/")
            opt_state.setdefault(fqn, {})[name] = v
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    try:
        set_state_dict(
            model,
            opt,
            model_state_dict=model_sd,
            optim_state_dict={"state": opt_state, "param_groups": groups},
            options=StateDictOptions(full_state_dict=True),
        )
    except (RuntimeError, KeyError, ValueError) as exc:
        raise TrainError(f"checkpoint in {run_dir} does not fit this model ({str(exc).splitlines()[0]})") from exc
    torch.set_rng_state(tensors["rng/torch"])
    return info
