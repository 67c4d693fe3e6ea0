"""Eval splits held out of a generated pool before any filtering.

Holding out first means the eval items are drawn from the same distribution as the training
pool (same generator, same difficulty), while no filter that looked at pass rates decided
which items the eval sees. The split is seeded and disjoint by id.
"""

import random

from passband.curation.suites.source import ProblemSource


def hold_out(rows: list[dict], num_eval: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """(train, eval): `num_eval` rows drawn at random (seeded) for eval, the rest for training.

    Both parts keep input order. Ids must be unique, since disjointness is by id.
    """
    if not 0 <= num_eval <= len(rows):
        raise ValueError(f"hold_out: num_eval must be in 0..{len(rows)} (the pool size), got {num_eval}")
    ids = [row["id"] for row in rows]
    if len(set(ids)) != len(ids):
        duplicated = sorted({i for i in ids if ids.count(i) > 1})[:5]
        raise ValueError(f"hold_out: ids must be unique, repeated: {duplicated}")
    chosen = set(random.Random(f"holdout:{seed}").sample(range(len(rows)), num_eval))
    train = [row for index, row in enumerate(rows) if index not in chosen]
    held = [row for index, row in enumerate(rows) if index in chosen]
    return train, held


def generator_name(source: ProblemSource) -> str:
    """Where a pool's rows came from, as the `generator` provenance of rows that carry none."""
    if source.path:
        return f"file:{source.path}"
    return f"suite:{source.suite} seed={source.seed} difficulty={source.difficulty}"


def split_pool(task_name: str, rows: list[dict], eval_size: int, seed: int,
               generator: str) -> tuple[list[dict], list[dict]]:
    """One task's loaded pool -> (train, eval) by hold_out; train rows without a `generator` get
    `generator`. Refuses rows of another task, naming a few."""
    wrong = [row["id"] for row in rows if row["task"] != task_name]
    if wrong:
        raise ValueError(f"{task_name} pool holds rows of another task, e.g. {wrong[:3]}")
    train, held = hold_out(rows, eval_size, seed)
    return [row if "generator" in row else {**row, "generator": generator} for row in train], held
