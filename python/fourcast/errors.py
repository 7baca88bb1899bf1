"""fourcast's exception types. The Rust core maps each of its errors to one of these."""


class FourcastError(Exception):
    """Base class of every error fourcast raises on purpose."""


class FormatError(FourcastError, ValueError):
    """A bad format, rule, rounding or block name, or a bad combination of them."""


class ShapeError(FormatError):
    """A shape that does not fit the block layout."""


class NonFiniteError(FormatError):
    """NaN or Inf given to a quantizer (fourcast refuses them rather than guess)."""


class KernelInputError(FourcastError, ValueError):
    """A tensor a GPU kernel entry cannot take: on the CPU, or not contiguous."""


class RecipeError(FourcastError, ValueError):
    """A recipe that is unknown or inconsistent."""


class HardwareError(FourcastError, ValueError):
    """An unknown GPU or an impossible hardware description."""


class ConfigError(FourcastError, ValueError):
    """A TOML/JSON file that does not parse or validate (message names file and line)."""


class MissingDependencyError(FourcastError, ImportError):
    """An optional dependency (torch, triton, matplotlib) is needed and not installed."""


def require(module: str, extra: str = "train"):
    """Import an optional dependency or say how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - exercised without torch
        raise MissingDependencyError(
            f"{module} is needed for this; install it with: pip install 'fourcast[{extra}]'"
        ) from exc


class TrainError(FourcastError, ValueError):
    """Bad training input: a missing or empty data path, an unknown model preset, a
    model too big for the device, a checkpoint that does not match the run."""


class BackendError(FourcastError, RuntimeError):
    """A GPU library call failed or was given what it cannot take (names the call)."""
