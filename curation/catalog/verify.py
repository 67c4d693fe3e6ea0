"""Grouped verification: the samples of many rows, of mixed tasks, each task's verifier called once.

Passrate estimation, RL scoring and evaluation all hold rows of several tasks with a group of
completions per row; batching per task lets a verifier parallelize (code runs sandboxes in a
pool) and keeps the per-task loop in one place. A task of the user's, or one that
`settings.rewards` scores, goes through the user contract (catalog/user.py verify_user_groups).
"""

from typing import Any

from passband.curation.catalog import TASKS, VerifierSettings, task
from passband.curation.verifiers.result import VerifyResult


def verify_groups(
    tasks_of_rows: list[str], references: list[Any], completions: list[list[str]], settings: VerifierSettings,
) -> list[list[VerifyResult]]:
    """results[i][j] is completion j of row i verified against references[i] by row i's task.

    `settings.<task name>` are the settings a built-in task's verifier gets; a row whose task is the
    user's (an entry point or import path) or that `settings.rewards` names is scored by that code
    under the verifier contract, and UserRewardError stops the call when more than
    `settings.max_error_fraction` of one such task's samples are `error`.
    Unknown task names raise ValueError before anything is verified.
    """
    if not len(tasks_of_rows) == len(references) == len(completions):
        raise ValueError(f"{len(tasks_of_rows)} task names, {len(references)} references and "
                         f"{len(completions)} completion groups; need one of each per row")
    ours = {name: task(name) for name in dict.fromkeys(tasks_of_rows) if name in TASKS and name not in settings.rewards}
    yours = [i for i, name in enumerate(tasks_of_rows) if name not in ours]
    for name in dict.fromkeys(tasks_of_rows[i] for i in yours):
        if name not in settings.rewards:
            task(name)  # an unknown name is refused here, before any verifier runs
    results: list[list[VerifyResult | None]] = [[None] * len(group) for group in completions]
    if yours:
        from passband.curation.catalog.user import verify_user_groups

        scored = verify_user_groups([tasks_of_rows[i] for i in yours], [references[i] for i in yours],
                                    [completions[i] for i in yours], settings.rewards, settings.max_error_fraction)
        for i, group in zip(yours, scored, strict=True):
            results[i] = list(group)
    for name, verifying in ours.items():
        pairs = [(i, j) for i, row_task in enumerate(tasks_of_rows) if row_task == name
                 for j in range(len(completions[i]))]
        verdicts = verifying.verify([completions[i][j] for i, j in pairs], [references[i] for i, _ in pairs],
                                    getattr(settings, name))
        for (i, j), verdict in zip(pairs, verdicts, strict=True):
            results[i][j] = verdict
    return results  # type: ignore[return-value]  # every slot was filled above
