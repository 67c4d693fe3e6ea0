"""What every flow returns; the CLI prints it as the one JSON line on stdout."""

from __future__ import annotations

from pydantic import BaseModel


class RunSummary(BaseModel):
    """The machine-readable result of a flow run, for scripts that chain runs."""

    flow: str
    """Flow name."""
    status: str = "completed"
    """'completed' or 'failed'."""
    mlflow_run_id: str | None = None
    """The MLflow (parent) run of this flow run."""
    outputs: dict[str, str] = {}
    """Artifact URIs by what they are (e.g. samples, rl_math, checkpoint)."""
    metrics: dict[str, float] = {}
    """Final metric values (e.g. vllm_kl, math/pass@1)."""
