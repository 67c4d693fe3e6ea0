"""Eval sets cut into shards of whole problems, for evaluation on task workers.

Concatenating the rows of `evaluate()` on each shard, in shard order, gives the rows of one
`evaluate()` on the whole sets: the shards keep the sets' order and the problems' order, and a
problem's samples depend only on its key (`evaluate.problem_key`), not on the shard it lands in.
"""

from __future__ import annotations

from typing import Any

from passband.curation.passrate import split_into_shards


def cut_eval_sets(sets: dict[str, list[dict[str, Any]]], shard_size: int) -> list[dict[str, list[dict[str, Any]]]]:
    """Consecutive runs of `shard_size` problems across the sets, each as {set name: its rows};
    a shard may span the end of one set and the start of the next."""
    problems = [{"eval_set": name, "row": row} for name, rows in sets.items() for row in rows]
    shards = []
    for chunk in split_into_shards(problems, shard_size):
        shard: dict[str, list[dict[str, Any]]] = {}
        for problem in chunk:
            shard.setdefault(problem["eval_set"], []).append(problem["row"])
        shards.append(shard)
    return shards
