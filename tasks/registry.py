"""The MLflow model registry: register the pipeline's best checkpoint with its lineage."""

from __future__ import annotations

from typing import Any

from prefect import task


@task(name="register-model", retries=2, retry_delay_seconds=2)
def register_checkpoint(name: str, stage_run_id: str, tags: dict[str, Any]) -> str:
    """A new version of registered model `name` whose source is `runs:/<stage run>/model` (the
    checkpoint files the SFT/RL flow logged there); returns the version number."""
    from mlflow import MlflowClient

    client = MlflowClient()
    if not client.search_registered_models(filter_string=f"name = '{name}'"):
        client.create_registered_model(name, description="Best checkpoint of a passband pipeline run.")
    version = client.create_model_version(
        name, source=f"runs:/{stage_run_id}/model", run_id=stage_run_id,
        tags={key: str(value) for key, value in tags.items()},
    )
    return version.version
