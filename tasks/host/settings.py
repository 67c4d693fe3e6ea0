"""Where the stack lives: the artifact root, MLflow, S3 and Prefect endpoints, read from env vars.

The embedded default needs no services: everything goes under `PASSBAND_HOME`, which defaults to
`./.passband` in the directory the command runs from (resolved to an absolute path when read), so
two checkouts never share state by accident. Point `PASSBAND_HOME` at a fixed folder to share one
MLflow database and artifact store between working directories.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict

DEFAULT_HOME = ".passband"
DEFAULT_EXPERIMENT = "passband"


class StackSettings(BaseModel):
    """The resolved stack settings; build with `StackSettings.from_env()`."""

    model_config = ConfigDict(frozen=True, use_attribute_docstrings=True)

    home: Path
    """Folder for local state (env PASSBAND_HOME, default ./.passband in the current directory)."""

    artifact_root: str
    """URI root of every artifact: `file:///abs/path`, a plain path, or `s3://bucket/prefix`
    (env PASSBAND_ARTIFACT_ROOT, default file://<home>/artifacts)."""

    cache_dir: Path
    """Where artifacts fetched from S3 are downloaded (always <home>/cache)."""

    mlflow_uri: str
    """MLflow tracking URI (env PASSBAND_MLFLOW_URI, default sqlite:///<home>/mlflow.db)."""

    mlflow_artifact_root: str | None
    """Artifact location of experiments this stack creates (env PASSBAND_MLFLOW_ARTIFACT_ROOT;
    default file://<home>/mlflow-artifacts with the default SQLite tracking URI, and None, i.e.
    the tracking server's own default, when PASSBAND_MLFLOW_URI is set)."""

    experiment: str
    """MLflow experiment that runs go to (env PASSBAND_EXPERIMENT, default "passband")."""

    s3_endpoint_url: str | None
    """S3 endpoint, e.g. http://127.0.0.1:9000 for MinIO (env PASSBAND_S3_ENDPOINT_URL, else
    AWS_ENDPOINT_URL; None = AWS itself). Credentials come from the usual AWS env vars/files."""

    prefect_api_url: str | None
    """Prefect server API (env PREFECT_API_URL; None = Prefect's ephemeral in-process API)."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> StackSettings:
        """Read the settings from `environ` (default: os.environ), filling the defaults above."""
        env = os.environ if environ is None else environ

        def get(*names: str) -> str | None:
            # An empty variable counts as unset, as `export PASSBAND_X=` is how shells clear one.
            return next((env[name] for name in names if env.get(name)), None)

        home = Path(get("PASSBAND_HOME") or DEFAULT_HOME).expanduser().resolve()
        mlflow_uri = get("PASSBAND_MLFLOW_URI")
        default_mlflow_artifacts = None if mlflow_uri else (home / "mlflow-artifacts").as_uri()
        return cls(
            home=home,
            artifact_root=get("PASSBAND_ARTIFACT_ROOT") or (home / "artifacts").as_uri(),
            cache_dir=home / "cache",
            mlflow_uri=mlflow_uri or f"sqlite:///{home / 'mlflow.db'}",
            mlflow_artifact_root=get("PASSBAND_MLFLOW_ARTIFACT_ROOT") or default_mlflow_artifacts,
            experiment=get("PASSBAND_EXPERIMENT") or DEFAULT_EXPERIMENT,
            s3_endpoint_url=get("PASSBAND_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL"),
            prefect_api_url=get("PREFECT_API_URL"),
        )
