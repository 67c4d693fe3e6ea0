"""Which prompts each RL iteration trains on: a seeded, resumable cursor over per-task datasets.

Each task's rows are visited in a seeded permutation per epoch (seed, task, epoch), without
replacement inside an epoch; when a task's rows run out, the next epoch's permutation starts.
The cursor's whole state is the number of prompts drawn so far from each task, so a checkpoint
that stores those counts resumes exactly where the run stopped: no prompt replayed, none skipped.

Mixing (docs/recipe.md section 4, multi-task batches): each of an iteration's P slots goes to the task furthest
behind its weight's share of all prompts drawn so far (smooth weighted round robin). Every batch
then mixes the tasks in proportion to their weights, and the long-run shares match the weights
to within one prompt, with no randomness to store.
"""

from __future__ import annotations

import random


def allocate_slots(weights: dict[str, float], consumed: dict[str, int], num_prompts: int) -> list[str]:
    """The task of each of `num_prompts` slots, given the prompts drawn per task so far.

    Slot j goes to argmax over tasks of (share_t * total_after_j - drawn_t), ties to the task
    name that sorts first; share_t = weight_t / sum of weights.
    """
    if not weights or any(w <= 0 for w in weights.values()):
        raise ValueError(f"task weights must be positive and non-empty, got {weights}")
    missing = sorted(set(weights) - set(consumed))
    if missing:
        raise ValueError(f"cursor has no count for task(s) {missing}")
    total_weight = sum(weights.values())
    counts = {task: consumed[task] for task in weights}
    total = sum(counts.values())
    slots = []
    for _ in range(num_prompts):
        total += 1
        task = max(sorted(weights), key=lambda t: weights[t] / total_weight * total - counts[t])
        counts[task] += 1
        slots.append(task)
    return slots


def epoch_order(num_rows: int, seed: int, task: str, epoch: int) -> list[int]:
    """The permutation of row indices `task` is read in during `epoch` (seeded by all three)."""
    order = list(range(num_rows))
    # A string seed is hashed with SHA-512 by `random`: the same order in every process.
    random.Random(f"{seed}:{task}:{epoch}").shuffle(order)
    return order


def draw_prompts(
    num_rows: dict[str, int], weights: dict[str, float], consumed: dict[str, int], num_prompts: int, seed: int
) -> tuple[list[tuple[str, int]], dict[str, int]]:
    """([(task, row index)] for one iteration in slot order, the counts after drawing them)."""
    empty = sorted(task for task in weights if num_rows.get(task, 0) < 1)
    if empty:
        raise ValueError(f"task(s) {empty} have no rows to draw prompts from")
    counts = dict(consumed)
    picks = []
    for task in allocate_slots(weights, consumed, num_prompts):
        epoch, position = divmod(counts[task], num_rows[task])
        picks.append((task, epoch_order(num_rows[task], seed, task, epoch)[position]))
        counts[task] += 1
    return picks, counts
