"""What every flow returns; the CLI prints it as the one JSON line on stdout."""

from __future__ import annotations

from pydantic import BaseModel


class RunSummary(BaseModel):
    """The machine-readable result of a flow run, for scripts that chain runs."""

    flow: str
    """Flow name."""
    status: str = "completed"
    """'completed'; 'partial' (the run ended without doing all it was asked: `message` says what is
    missing; nothing is cached); 'failed' (the CLI's line for a run that raised)."""
    message: str | None = None
    """Why the status is not 'completed', in one line (None when it is)."""
    mlflow_run_id: str | None = None
    """The MLflow (parent) run of this flow run."""
    outputs: dict[str, str] = {}
    """Artifact URIs by what they are (e.g. samples, rl_math, checkpoint)."""
    metrics: dict[str, float] = {}
    """Final metric values (e.g. vllm_kl, math/pass@1)."""
