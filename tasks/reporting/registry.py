"""MLflow models: log a checkpoint as a run's MLflow transformers model, and register the
pipeline's best one in the model registry with its lineage and the `champion` alias."""

from __future__ import annotations

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


@task(name="log-model", retries=2, retry_delay_seconds=5, cache_policy=NONE)
def log_model(checkpoint_uri: str, run_id: str, card: str = "") -> None:
    """The checkpoint as an MLflow transformers model (`text-generation`) at the run's `model/`:
    `mlflow.transformers.load_model("runs:/<run>/model")` (or `models:/passband-reasoner@champion`
    once registered) returns a generation pipeline; a LoRA checkpoint's model is its merged weights, its
    adapter goes to the run's `adapter/` (`PeftModel.from_pretrained(base, <that folder>)`). The
    trainer-only files stay out; `card`
    becomes the model's README.md (its model card); the tag `model.checkpoint_uri` points at
    the full checkpoint (optimizer and RNG included) for resuming."""
    import importlib.metadata
    import shutil
    import tempfile
    from pathlib import Path

    import mlflow.transformers
    from mlflow import MlflowClient
    from mlflow.models import infer_signature

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
            signature=infer_signature("What is 2 + 3? Answer with just the number.", "5"),
            # Pinned from this environment: MLflow's own inference imports torchvision, which does
            # not import beside torch 2.13.0+cpu.
            pip_requirements=[f"{name}=={importlib.metadata.version(name)}" for name in MODEL_REQUIREMENTS],
        )
        MlflowClient().log_artifacts(run_id, str(Path(tmp) / "model"), "model")
    adapter = fetch_artifact(checkpoint_uri) / ADAPTER_FOLDER
    if adapter.is_dir():  # LoRA: the model above is merged; the adapter (peft's layout) is kept as well
        MlflowClient().log_artifacts(run_id, str(adapter), "adapter")
    tracking.set_tags({"model.checkpoint_uri": checkpoint_uri}, run_id)


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
