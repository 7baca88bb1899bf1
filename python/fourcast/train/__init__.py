"""LLM pretraining with any recipe: models (model.py), data (data.py), the loop
(loop.py), run folders (run.py), checkpoints, profiles, tensor capture and run
comparison (compare.py). Needs torch; `fourcast.train.config` alone does not.

    >>> from fourcast.train import MODEL_PRESETS
    >>> "tiny" in MODEL_PRESETS and "350m" in MODEL_PRESETS
    True
"""

from fourcast.train.config import MODEL_PRESETS, DataConfig, ModelConfig, RunConfig, TrainConfig, model_config


def train(*args, **kwargs):
    """fourcast.train.loop.train (imported on first use: it needs torch)."""
    from fourcast.train.loop import train as _train

    return _train(*args, **kwargs)


__all__ = ["MODEL_PRESETS", "DataConfig", "ModelConfig", "RunConfig", "TrainConfig", "model_config", "train"]
