"""Pass-rate arithmetic over verified attempts, and the shard keys that make estimation resumable.

The recipe estimates p_hat(x) = (1/n) * sum_j 1[rollout j solves x] from n rollouts per problem.
With top-k, rollout j is a group of k consecutive attempts and solves x if any of its k attempts
passes, so a problem with `num_samples` attempts has `num_samples // k` rollouts.
"""

import hashlib
import json

STATUSES = ("pass", "fail", "unparsable", "timeout", "error")
"""Verdicts a verified attempt can carry; only "pass" counts as solved."""


def summarize_attempts(statuses_per_problem: list[list[str]], k: int = 1) -> list[dict]:
    """Per-problem pass statistics from the verifier statuses of its attempts.

    `statuses_per_problem[i]` lists the statuses of problem i's attempts in sampling order; the
    top-k grouping takes them k at a time in that order. Returns one dict per problem with
    num_samples, pass_count, pass_rate, num_unparsable, num_timeout, num_error, num_rollouts,
    num_rollouts_solved and pass_rate_top_k (equal to pass_rate when k == 1).
    """
    if k < 1:
        raise ValueError(f"summarize_attempts: k must be >= 1, got {k}")
    summaries = []
    for index, statuses in enumerate(statuses_per_problem):
        unknown = sorted(set(statuses) - set(STATUSES))
        if unknown:
            raise ValueError(f"problem {index}: unknown statuses {unknown}; expected one of {STATUSES}")
        num_samples = len(statuses)
        if num_samples == 0:
            raise ValueError(f"problem {index}: no attempts, pass rate is undefined")
        if num_samples % k != 0:
            raise ValueError(f"problem {index}: {num_samples} attempts do not split into rollouts of k={k}")
        num_rollouts = num_samples // k
        num_rollouts_solved = sum(
            "pass" in statuses[start : start + k] for start in range(0, num_samples, k)
        )
        pass_count = statuses.count("pass")
        summaries.append(
            {
                "num_samples": num_samples,
                "pass_count": pass_count,
                "pass_rate": pass_count / num_samples,
                "num_unparsable": statuses.count("unparsable"),
                "num_timeout": statuses.count("timeout"),
                "num_error": statuses.count("error"),
                "num_rollouts": num_rollouts,
                "num_rollouts_solved": num_rollouts_solved,
                "pass_rate_top_k": num_rollouts_solved / num_rollouts,
            }
        )
    return summaries


def shard_key(problem_ids: list[str], checkpoint_id: str, sampling: dict, verifier_version: str) -> str:
    """Stable sha256 hex digest naming one shard's pass-rate result.

    Two runs share a key exactly when they would compute the same numbers: same problems in the
    same order (the stored result is aligned with that order), same checkpoint, same sampling
    settings and same verifier version. Canonical JSON (sorted keys, no spaces) makes the key
    independent of dict insertion order; `sampling` must therefore be JSON-serializable.

    The checkpoint counts by its content: of a `<ref>@<hash>` id (tasks/passrate.py:
    checkpoint_id) only the hash after the last "@". The ref of a trained checkpoint is its artifact
    URI, which holds the artifact root (e.g. file:///home/a/.passband/...); the key seeds the shard's
    sampling, so with the ref in it two runs of one config in two homes sampled differently from
    their first re-curation on (found by two fresh demo runs: curate and SFT equal, re-curate not).
    """
    payload = {
        "problem_ids": list(problem_ids),
        "checkpoint_id": checkpoint_id.rpartition("@")[2],
        "sampling": sampling,
        "verifier_version": verifier_version,
    }
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def split_into_shards(rows: list[dict], shard_size: int) -> list[list[dict]]:
    """Consecutive chunks of `shard_size` rows (the last may be shorter), in input order.

    Keeping input order means the same pool always yields the same shards, hence the same keys.
    """
    if shard_size < 1:
        raise ValueError(f"split_into_shards: shard_size must be >= 1, got {shard_size}")
    return [rows[start : start + shard_size] for start in range(0, len(rows), shard_size)]
