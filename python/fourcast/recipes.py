"""Training recipes. The definition lives in the Rust core (rust/core/src/recipe.rs);
this is a read-only view of it shared by training (fourcast.nn, fourcast.train) and the
hardware model (fourcast.hw), so a recipe file means the same thing to both.

    >>> import fourcast as fc
    >>> r = fc.recipe("nvfp4", **{"rht": "none", "keep_bf16_last": 0})
    >>> r.rht["size"], r.operand("wgrad.x")["element"]
    (0, 'e2m1')
"""

from __future__ import annotations

import json
import pathlib
from typing import Any, Mapping

from fourcast import _core


def names() -> list[str]:
    """Names of the preset recipes."""
    return list(_core.recipe_names())


class Recipe:
    """A validated recipe. Fields read as attributes (`r.x`, `r.rht`, `r.sr`, ...)."""

    __slots__ = ("_data", "_json")

    def __init__(self, json_text: str):
        object.__setattr__(self, "_json", json_text)
        object.__setattr__(self, "_data", json.loads(json_text))

    def __getattr__(self, name: str) -> Any:
        try:
            return self._data[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("Recipe is read-only; use .set(field, value)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Recipe) and self._data == other._data

    def __repr__(self) -> str:
        return f"Recipe({self._data['name']!r})"

    def to_dict(self) -> dict:
        return json.loads(self._json)

    def to_json(self) -> str:
        return self._json

    def set(self, path: str, value: Any) -> "Recipe":
        """A copy with one field changed: `r.set("rht.size", 0)`, `r.set("rht", "none")`."""
        raw = value if isinstance(value, str) else json.dumps(value)
        return Recipe(_core.recipe_set(self._json, path, raw))

    def operand(self, key: str) -> dict | None:
        """Format of one GEMM operand, "fprop.x" ... "wgrad.x" (None = not quantized)."""
        override = self._data["overrides"].get(key)
        if override is not None:
            return override
        gemm, _, role = key.partition(".")
        if gemm not in ("fprop", "dgrad", "wgrad") or role not in ("x", "w", "dy"):
            from fourcast.errors import RecipeError

            raise RecipeError(f"unknown operand '{key}'; valid: fprop.x, fprop.w, dgrad.dy, dgrad.w, wgrad.dy, wgrad.x")
        return self._data[role]

    def rht_on(self, gemm: str) -> bool:
        return self._data["rht"]["size"] > 0 and gemm in self._data["rht"]["gemms"]

    def sr_on(self, key: str) -> bool:
        return key in self._data["sr"]

    @property
    def is_quantized(self) -> bool:
        return any(self._data[r] is not None for r in ("x", "w", "dy"))


def recipe(spec: "str | pathlib.Path | Recipe", overrides: Mapping[str, Any] | None = None, **kw: Any) -> Recipe:
    """A preset name, a path to a .toml/.json file (optionally `base = "preset"`), or a
    Recipe; then `field=value` overrides by dotted path."""
    if isinstance(spec, Recipe):
        r = spec
    else:
        path = pathlib.Path(str(spec))
        if path.suffix in (".toml", ".json"):
            if not path.is_file():
                from fourcast.errors import RecipeError

                raise RecipeError(f"recipe file not found: {path}")
            kind = "toml" if path.suffix == ".toml" else "json"
            r = Recipe(_core.recipe_parse(path.read_text(), kind, str(path)))
        else:
            r = Recipe(_core.recipe_preset(str(spec)))
    for key, value in {**(overrides or {}), **kw}.items():
        r = r.set(key, value)
    return r


def parse_sets(items: list[str] | None) -> dict[str, str]:
    """CLI `--set field=value` pairs into a dict (values parsed by the core)."""
    out: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            from fourcast.errors import RecipeError

            raise RecipeError(f"--set takes field=value, got '{item}'")
        out[key.strip()] = value.strip()
    return out
