"""Per-task rollout metrics of one batch (docs/recipe.md section 4: tasks differ a lot, so watch each one).

Conventions, stated once:
- reward: mean over ALL rows with an invalid (unparsable/truncated) row counted as 0, the score
  an evaluator would give it; the gradient never sees that 0 (the row is masked out).
- pass_rate: fraction of all rows that are valid with reward >= 1.0 (a verifier's full pass).
- unparsable_frac: fraction of rows without a verdict: the invalid ones, and under invalid_reward 'zero'
  the unscored ones (trained on with reward 0); num_masked_unparsable counts the invalid ones only.
- response_len_mean / _max: response tokens, over all rows.
- truncated_frac: rows that hit max_tokens (only when the batch knows it).
Keys are `{task}/{name}`, plus the same names without a prefix for the whole batch.
"""

from __future__ import annotations

from passband.training.rl.batches.batching import RolloutBatch

PASS_REWARD = 1.0


def _summary(batch: RolloutBatch, rows: list[int]) -> dict[str, float]:
    num_rows = max(len(rows), 1)
    lengths = [len(batch.response_ids[i]) for i in rows]
    rewards = [batch.rewards[i] if batch.valid[i] else 0.0 for i in rows]
    unscored = batch.unscored or [False] * batch.num_rows
    summary = {
        "reward": sum(rewards) / num_rows,
        "pass_rate": sum(batch.valid[i] and batch.rewards[i] >= PASS_REWARD for i in rows) / num_rows,
        "unparsable_frac": sum(not batch.valid[i] or unscored[i] for i in rows) / num_rows,
        "response_len_mean": sum(lengths) / num_rows,
        "response_len_max": float(max(lengths, default=0)),
    }
    if batch.truncated is not None:
        summary["truncated_frac"] = sum(batch.truncated[i] for i in rows) / num_rows
    return summary


def rollout_metrics(batch: RolloutBatch) -> dict[str, float]:
    """Reward, pass rate, unparsable fraction, lengths, truncation: per task and overall."""
    metrics = _summary(batch, list(range(batch.num_rows)))
    metrics["num_masked_unparsable"] = float(sum(not v for v in batch.valid))
    for task in sorted(set(batch.tasks)):
        rows = [i for i, t in enumerate(batch.tasks) if t == task]
        metrics.update({f"{task}/{name}": value for name, value in _summary(batch, rows).items()})
    return metrics


def zero_variance_flags(batch: RolloutBatch) -> list[bool]:
    """Per group, in batch order: its valid rewards are all equal, so it carries no learning signal
    (docs/recipe.md section 4; dynamic sampling keeps the others)."""
    import torch

    from passband.training.rl.algebra.advantages import zero_variance_groups

    rewards = torch.tensor(batch.rewards, dtype=torch.float32)
    return [bool(z) for z in zero_variance_groups(rewards, batch.group_size, torch.tensor(batch.valid))]


def zero_variance_fractions(batch: RolloutBatch) -> dict[str, float]:
    """`{task}/zero_variance_group_frac`: the fraction of the task's groups that are zero_variance_flags."""
    group_tasks = batch.tasks[:: batch.group_size]
    flags = zero_variance_flags(batch)
    fractions = {}
    for task in sorted(set(group_tasks)):
        task_flags = [z for z, t in zip(flags, group_tasks) if t == task]
        fractions[f"{task}/zero_variance_group_frac"] = sum(task_flags) / len(task_flags)
    return fractions
