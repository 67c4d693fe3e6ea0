"""MLflow models: log a checkpoint as a run's MLflow transformers model, and register the
pipeline's best one in the model registry with its lineage and the `champion` alias."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.tasks.artifacts.store import fetch_artifact

# Trainer-only files of a checkpoint (training/checkpoint.py), left out of the MLflow model artifact.
TRAINER_FILES = ("optimizer.pt", "rng.pt", "trainer_state.json")


CHAMPION_ALIAS = "champion"
"""The registry alias of the pipeline's best checkpoint: `models:/<name>@champion` (aliases, not
the deprecated stages)."""
MODEL_REQUIREMENTS = ("torch", "transformers", "accelerate", "safetensors")
ADAPTER_MODEL = "adapter_model"
"""Where a LoRA checkpoint's adapter is logged as an MLflow model: `runs:/<run>/adapter_model`."""


@task(name="log-model", retries=2, retry_delay_seconds=5, cache_policy=NONE)
def log_model(checkpoint_uri: str, run_id: str, card: str = "", trust_remote_code: bool = False) -> None:
    """The checkpoint as an MLflow transformers model (`text-generation`) at the run's `model/`:
    `mlflow.transformers.load_model("runs:/<run>/model")` (or `models:/passband-reasoner@champion`
    once registered) returns a generation pipeline. A LoRA checkpoint's `model/` is its merged
    weights; its adapter (peft's layout) goes to the run's `adapter/` as plain files
    (`PeftModel.from_pretrained(base, <that folder>)`) and to `adapter_model/` as a second MLflow
    transformers model built from a peft `PeftModel` (`_log_adapter_model`), which stores the adapter
    alone and loads on its base. The trainer-only files stay out; `card` becomes each model's
    README.md (its model card); the tag `model.checkpoint_uri` points at the full checkpoint
    (optimizer and RNG included) for resuming. `trust_remote_code`: the model's own code allowed
    (EngineConfig.trust_remote_code): a LoRA checkpoint's base is loaded with it."""
    import shutil
    import tempfile

    import mlflow.transformers
    from mlflow import MlflowClient

    from passband.tasks.reporting import tracking
    from passband.training.checkpoint import ADAPTER_FOLDER

    with tempfile.TemporaryDirectory(prefix="passband-model-") as tmp:
        checkpoint = Path(tmp) / "checkpoint"
        checkpoint.mkdir()
        for path in sorted(fetch_artifact(checkpoint_uri).iterdir()):
            if path.is_file() and path.name not in TRAINER_FILES:
                shutil.copy2(path, checkpoint / path.name)
        (checkpoint / "README.md").write_text(card or f"passband checkpoint {checkpoint_uri}\n")
        mlflow.transformers.save_model(
            transformers_model=str(checkpoint), path=str(Path(tmp) / "model"), task="text-generation",
            signature=_signature(), pip_requirements=_pinned(MODEL_REQUIREMENTS),
        )
        MlflowClient().log_artifacts(run_id, str(Path(tmp) / "model"), "model")
        adapter = fetch_artifact(checkpoint_uri) / ADAPTER_FOLDER
        if adapter.is_dir():  # LoRA: the model above is merged; the adapter is kept as files and as a model
            MlflowClient().log_artifacts(run_id, str(adapter), ADAPTER_FOLDER)
            _log_adapter_model(adapter, checkpoint, Path(tmp) / ADAPTER_MODEL, run_id, trust_remote_code)
    tracking.set_tags({"model.checkpoint_uri": checkpoint_uri}, run_id)


def _log_adapter_model(adapter_dir: Path, checkpoint: Path, out_dir: Path, run_id: str,
                       trust_remote_code: bool = False) -> None:
    """The peft adapter in `adapter_dir` as an MLflow transformers model at the run's `adapter_model/`.

    This reads the base once, in the dtype its config names: MLflow's flavor takes a `PeftModel` (base
    plus adapter) and stores only the adapter (`peft/`) and the tokenizer (from `checkpoint`, whose
    README.md is the model card, its metadata naming the base). The base is the adapter config's
    `base_model_name_or_path`: a local directory is referenced by its absolute path (`base_model_path`;
    loading elsewhere needs that folder there, or `load_model(..., base_model_path=...)`), anything else
    is a hub id that MLflow references and `load_model` downloads."""
    import json

    import mlflow.transformers
    from huggingface_hub import ModelCard, ModelCardData
    from mlflow import MlflowClient
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from passband.training.lora.adapters import ADAPTER_CONFIG
    from passband.training.model_source import load_tokenizer

    base = json.loads((adapter_dir / ADAPTER_CONFIG).read_text())["base_model_name_or_path"]
    # the config's dtype: bf16 stays bf16
    base_model = AutoModelForCausalLM.from_pretrained(base, dtype="auto", trust_remote_code=trust_remote_code)
    # the card's metadata names the base as the hub's adapter cards do (a card without it is warned about)
    metadata = ModelCardData(library_name="peft", base_model=base).to_yaml()
    mlflow.transformers.save_model(
        transformers_model={"model": PeftModel.from_pretrained(base_model, str(adapter_dir)),
                            "tokenizer": load_tokenizer(checkpoint, trust_remote_code)},
        path=str(out_dir), task="text-generation", torch_dtype=base_model.dtype,
        model_card=ModelCard(f"---\n{metadata}\n---\n{(checkpoint / 'README.md').read_text()}"),
        signature=_signature(),
        pip_requirements=_pinned((*MODEL_REQUIREMENTS, "peft")),
        base_model_path=base if Path(base).is_dir() else None,
    )
    MlflowClient().log_artifacts(run_id, str(out_dir), ADAPTER_MODEL)


def _signature():
    """Both models' signature: a prompt string in, the generated text out."""
    from mlflow.models import infer_signature

    return infer_signature("What is 2 + 3? Answer with just the number.", "5")


def _pinned(names: tuple[str, ...]) -> list[str]:
    """`name==version` from this environment: MLflow's own inference imports torchvision, which does
    not import beside torch 2.13.0+cpu, so its inferred requirements are not used."""
    import importlib.metadata

    return [f"{name}=={importlib.metadata.version(name)}" for name in names]


@task(name="register-model", retries=2, retry_delay_seconds=2)
def register_checkpoint(name: str, stage_run_id: str, tags: dict[str, Any]) -> str:
    """A new version of registered model `name` whose source is `runs:/<stage run>/model` (the
    MLflow model log_model logged there), aliased `champion`; returns the version number."""
    from mlflow import MlflowClient

    client = MlflowClient()
    if not client.search_registered_models(filter_string=f"name = '{name}'"):
        client.create_registered_model(name, description="Best checkpoint of a passband pipeline run.")
    version = client.create_model_version(
        name, source=f"runs:/{stage_run_id}/model", run_id=stage_run_id,
        tags={key: str(value) for key, value in tags.items()},
    )
    client.set_registered_model_alias(name, CHAMPION_ALIAS, version.version)
    return version.version
