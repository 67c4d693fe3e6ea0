"""MLflow models: log a checkpoint's loadable files as a run's `model/` artifacts, and register
the pipeline's best one in the model registry with its lineage."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NONE

from passband.tasks.store import fetch_artifact

# Trainer-only files of a checkpoint (training/checkpoint.py), left out of the MLflow model artifact.
TRAINER_FILES = ("optimizer.pt", "rng.pt", "trainer_state.json")


@task(name="log-model", retries=2, retry_delay_seconds=5, cache_policy=NONE)
def log_model(checkpoint_uri: str, run_id: str) -> None:
    """The final checkpoint's loadable files (weights, config, tokenizer) as MLflow artifacts `model/`.

    Plain files rather than mlflow.transformers (needs a pipeline object and re-saves the model)
    or mlflow.pyfunc (needs a wrapper class): the directory loads as is with transformers'
    from_pretrained and vLLM, and the tag `model.checkpoint_uri` points at the full checkpoint.
    """
    from mlflow import MlflowClient

    from passband.tasks import tracking

    client = MlflowClient()
    for path in sorted(fetch_artifact(checkpoint_uri).iterdir()):
        if path.is_file() and path.name not in TRAINER_FILES:
            client.log_artifact(run_id, str(path), "model")
    tracking.set_tags({"model.checkpoint_uri": checkpoint_uri}, run_id)


@task(name="register-model", retries=2, retry_delay_seconds=2)
def register_checkpoint(name: str, stage_run_id: str, tags: dict[str, Any]) -> str:
    """A new version of registered model `name` whose source is `runs:/<stage run>/model` (the
    checkpoint files log_model logged there); returns the version number."""
    from mlflow import MlflowClient

    client = MlflowClient()
    if not client.search_registered_models(filter_string=f"name = '{name}'"):
        client.create_registered_model(name, description="Best checkpoint of a passband pipeline run.")
    version = client.create_model_version(
        name, source=f"runs:/{stage_run_id}/model", run_id=stage_run_id,
        tags={key: str(value) for key, value in tags.items()},
    )
    return version.version
