"""A model's shape for the memory model (training/memory_model.py), found without loading its weights.

Where a shape comes from, first found wins: the model's own config.json (a local checkpoint dir),
the Hugging Face cache (a hub model downloaded before), the shapes below (the models our presets
name, so a preset is checked on a machine that has never downloaded it), then the hub itself
(config.json only, a few KB; `passband doctor` asks it, the preflight does not wait on a network).
Without any of them there is no estimate, and the caller says so.
"""

from __future__ import annotations

import json
from pathlib import Path

from passband.training.memory_model import ModelShape
from passband.training.model_source import SMOLLM2_NAME

PRESET_MODEL_SHAPES = {
    # the shipped model, as its GGUF's metadata says (tests/test_memory_model.py reads it back)
    SMOLLM2_NAME: ModelShape(hidden=576, layers=30, intermediate=1536, heads=9, kv_heads=3, vocab=49152, head_dim=64,
                             tied_embeddings=True),
    # the gpu presets' models, from their config.json on the hub
    "Qwen/Qwen2.5-1.5B-Instruct": ModelShape(hidden=1536, layers=28, intermediate=8960, heads=12, kv_heads=2,
                                             vocab=151936, head_dim=128, tied_embeddings=True, attention_bias=True),
    "Qwen/Qwen2.5-7B-Instruct": ModelShape(hidden=3584, layers=28, intermediate=18944, heads=28, kv_heads=4,
                                           vocab=152064, head_dim=128, tied_embeddings=False, attention_bias=True),
}
"""Hub name -> shape, for the models the shipped presets train."""


def model_shape(model: str, ask_hub: bool = False) -> ModelShape | str:
    """The shape of `model` (a checkpoint dir, a hub name or the shipped model's name), or why it
    cannot be known here; `ask_hub`: download a hub model's config.json when nothing local has it."""
    local = Path(model) / "config.json"
    if local.is_file():
        return ModelShape.from_hf_config(json.loads(local.read_text()))
    if model in PRESET_MODEL_SHAPES:
        return PRESET_MODEL_SHAPES[model]
    if model.startswith(("file://", "s3://")):
        return f"{model} is a committed checkpoint, read when its stage starts"
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(model, "config.json")
    if isinstance(cached, str):
        return ModelShape.from_hf_config(json.loads(Path(cached).read_text()))
    if not ask_hub:
        return f"{model}'s config.json is not in the Hugging Face cache (`passband doctor` downloads it)"
    return _from_hub(model)


def _from_hub(model: str) -> ModelShape | str:
    from huggingface_hub import hf_hub_download

    try:  # only config.json; a machine without the network is told so, not stopped
        return ModelShape.from_hf_config(json.loads(Path(hf_hub_download(model, "config.json")).read_text()))
    except OSError as err:  # huggingface_hub's HTTP, offline and not-found errors are all OSErrors
        return f"no config.json for {model} here or on the hub ({type(err).__name__})"
