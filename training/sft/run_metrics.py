"""The SFT flow's run metrics: per stage its loss, steps and throughput, over the run the mean
throughput and the peak memory of the stages that trained (a skipped stage ran no step to measure)."""

from __future__ import annotations


def stage_metrics(name: str, total_steps: int, steps_run: int, final_loss: float,
                  tokens_per_s: float) -> dict[str, float]:
    """`{stage}/final_loss`, `{stage}/num_steps` (all runs together) and, when this call ran steps,
    `{stage}/tokens_per_s` (their median)."""
    metrics = {f"{name}/final_loss": final_loss, f"{name}/num_steps": float(total_steps)}
    if steps_run:
        metrics[f"{name}/tokens_per_s"] = tokens_per_s
    return metrics


def throughput_metrics(trained: list[tuple[float, float]]) -> dict[str, float]:
    """(tokens_per_s, peak_memory_mb) of each stage that ran steps -> `train/tokens_per_s` (their
    mean) and `train/peak_memory_mb` (their max, 0 where none was measured); {} when none trained.
    "train/" keeps them apart from the per-step series of the same names."""
    if not trained:
        return {}
    peak = 0.0
    for _, memory_mb in trained:
        peak = max(peak, memory_mb)  # a NaN (memory not measured) never wins
    return {"train/tokens_per_s": sum(t for t, _ in trained) / len(trained), "train/peak_memory_mb": peak}
