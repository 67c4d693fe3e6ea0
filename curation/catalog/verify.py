"""Grouped verification: the samples of many rows, of mixed tasks, each task's verifier called once.

Passrate estimation, RL scoring and evaluation all hold rows of several tasks with a group of
completions per row; batching per task lets a verifier parallelize (code runs sandboxes in a
pool) and keeps the per-task loop in one place.
"""

from typing import Any

from passband.curation.catalog import VerifierSettings, task
from passband.curation.verifiers.result import VerifyResult


def verify_groups(
    tasks_of_rows: list[str], references: list[Any], completions: list[list[str]], settings: VerifierSettings,
) -> list[list[VerifyResult]]:
    """results[i][j] is completion j of row i verified against references[i] by row i's task.

    `settings.<task name>` are the settings that task's verifier gets.
    Unknown task names raise ValueError before anything is verified.
    """
    if not len(tasks_of_rows) == len(references) == len(completions):
        raise ValueError(f"{len(tasks_of_rows)} task names, {len(references)} references and "
                         f"{len(completions)} completion groups; need one of each per row")
    by_task = {name: task(name) for name in dict.fromkeys(tasks_of_rows)}
    results: list[list[VerifyResult | None]] = [[None] * len(group) for group in completions]
    for name, verifying in by_task.items():
        pairs = [(i, j) for i, row_task in enumerate(tasks_of_rows) if row_task == name
                 for j in range(len(completions[i]))]
        verdicts = verifying.verify([completions[i][j] for i, j in pairs], [references[i] for i, _ in pairs],
                                    getattr(settings, name))
        for (i, j), verdict in zip(pairs, verdicts, strict=True):
            results[i][j] = verdict
    return results  # type: ignore[return-value]  # every slot was filled above
