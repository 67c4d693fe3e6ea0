"""Eval splits held out of a generated pool before any filtering.

Holding out first means the eval items are drawn from the same distribution as the training
pool (same generator, same difficulty), while no filter that looked at pass rates decided
which items the eval sees. The split is seeded and disjoint by id.
"""

import random


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
