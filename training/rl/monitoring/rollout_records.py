"""What the policy wrote: one record per RL rollout, and a readable sample of an iteration's.

Reward curves alone hide reward hacking, truncation creep and format collapse; the rollouts
show them. Each record is flat (strings, numbers, None) so an iteration's records are one
Parquet part of the run's rollouts artifact (tasks/steps/rollouts_log.py), readable with pandas,
pyarrow or DuckDB.
"""

from __future__ import annotations

import random
from typing import Any

import torch

from passband.training.rl.algebra.advantages import group_advantages

ROLLOUT_COLUMNS = ("iteration", "weight_version", "prompt_id", "task", "sample_index", "completion", "num_tokens",
                   "finish_reason", "reward", "score", "status", "detail", "valid", "advantage", "engine_logp_mean",
                   "num_turns", "first_weight_version")
"""The record's fields, in the artifact's column order (docs/rl-rollouts.md says what each holds)."""


def model_turns(loss_mask: list[int] | None) -> int:
    """The model's turns in a sample: the runs of sampled tokens in its loss mask (None: one turn)."""
    if loss_mask is None:
        return 1
    return sum(1 for i, m in enumerate(loss_mask) if m and (i == 0 or not loss_mask[i - 1]))


def rollout_records(iteration: int, weight_version: int, rows: list[dict[str, Any]], samples: list[list[Any]],
                    scores: list[list[float]], statuses: list[list[str]], details: list[list[str]],
                    batch_rewards: list[float], batch_valid: list[bool], scale_by_std: bool,
                    eps: float) -> list[dict[str, Any]]:
    """One record per (prompt, sample), in the batch's row order (prompt by prompt). `scores`,
    `statuses`, `details` are the verifier's per prompt; `batch_rewards` and `batch_valid` the
    RolloutBatch's rows (valid: the rollout enters the gradient, else its `reward` is None: not a
    verdict, or truncated under reward.mask_truncated); `advantage` is the group advantage of those
    rewards as the update computes it (training/rl/algebra/advantages.py; an in-reward KL penalty, when on,
    is subtracted later, in the update)."""
    group_size = len(samples[0]) if samples else 0
    rewards = torch.tensor([reward if ok else 0.0 for reward, ok in zip(batch_rewards, batch_valid)], dtype=torch.float32)
    advantages = group_advantages(rewards, group_size, scale_by_std, eps,
                                  torch.tensor(batch_valid, dtype=torch.float32)).tolist() if batch_rewards else []
    records = []
    for i, (row, group) in enumerate(zip(rows, samples, strict=True)):
        for j, sample in enumerate(group):
            index = i * group_size + j
            records.append({
                "iteration": iteration, "weight_version": weight_version, "prompt_id": str(row["id"]),
                "task": row["task"], "sample_index": j, "completion": sample.text, "num_tokens": len(sample.token_ids),
                "finish_reason": sample.finish_reason,
                "reward": float(batch_rewards[index]) if batch_valid[index] else None,
                "score": float(scores[i][j]), "status": statuses[i][j], "detail": details[i][j],
                "valid": bool(batch_valid[index]), "advantage": advantages[index] + 0.0,  # no -0.0 for a masked row
                "engine_logp_mean": sum(sample.logprobs) / len(sample.logprobs) if sample.logprobs else None,
                "num_turns": model_turns(sample.loss_mask),
                # a partial rollout's first token may come from older weights (training/rl/batches/partial.py)
                "first_weight_version": sample.token_versions[0] if sample.token_versions else weight_version,
            })
    return records


def iteration_sample(records: list[dict[str, Any]], num_random: int,
                     seed: int) -> dict[str, list[tuple[str, dict[str, Any]]]]:
    """Per task: the best and the worst rollout by score (the longest first among equals: a long
    rollout at the extremes is the one worth reading) and `num_random` others drawn with `seed`."""
    chosen: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for task in sorted({record["task"] for record in records}):
        rows = [record for record in records if record["task"] == task]
        best = max(rows, key=lambda r: (r["score"], r["num_tokens"]))
        worst = min(rows, key=lambda r: (r["score"], -r["num_tokens"]))
        rest = [r for r in rows if r is not best and r is not worst]
        chosen[task] = [("best", best), *([("worst", worst)] if worst is not best else []),
                        *(("random", r) for r in random.Random(seed).sample(rest, min(num_random, len(rest))))]
    return chosen


def sample_markdown(iteration: int, sample: dict[str, list[tuple[str, dict[str, Any]]]], max_chars: int = 600) -> str:
    """The sample as markdown: one section per task, each rollout's verdict line and its text."""
    lines = [f"# RL rollouts, iteration {iteration}", ""]
    for task, records in sample.items():
        lines += [f"## {task}", ""]
        for label, record in records:
            text = record["completion"] if len(record["completion"]) <= max_chars else \
                record["completion"][:max_chars] + " [...]"
            lines += [f"**{label}**: `{record['prompt_id']}` sample {record['sample_index']}, {record['status']}, "
                      f"score {record['score']:.2f}, advantage {record['advantage']:+.2f}, {record['num_tokens']} "
                      f"tokens ({record['finish_reason']})", "", "```text", text.replace("```", "'''"), "```", ""]
    return "\n".join(lines)
