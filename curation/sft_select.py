"""SFT selection: which problems and trajectories enter the SFT set, and the verification combiner.

The recipe keeps problems the model solves sometimes (0 < npass < n): never-solved problems have
no correct trace to learn from and always-solved ones teach nothing new. Of those, only
trajectories that passed and were verified by every applicable check are kept.
"""

import math

from passband.curation.hygiene import remove_exact_duplicates
from passband.curation.rows import quarantine

CHECKS = ("consistency", "execution", "math", "structure")
"""The recipe's four verification checks; row column `verdict_<check>` holds each verdict."""

VERDICTS = ("pass", "fail", "not_applicable")

APPLICABLE_CHECKS = {
    "math": {"consistency", "math", "structure"},
    "code": {"consistency", "execution", "structure"},
    "ifeval": {"consistency", "structure"},
}
"""Checks that must run for a task: a "not_applicable" verdict on one of them counts as failed,
so that a skipped check never lets a sample through. Tasks not listed accept any
"not_applicable" verdict as given."""


def combine_verdicts(row: dict, required: tuple[str, ...] = CHECKS) -> tuple[bool, list[str]]:
    """Whether a sample passed every required check, and the checks that did not.

    Each check's verdict is read from `row["verdict_<check>"]`: "pass", "fail" or
    "not_applicable" (e.g. execution for a math answer, math for code). A check fails if its
    verdict is "fail", if the column is missing ("<check>:missing", not verified is not
    passed), or if it is "not_applicable" although APPLICABLE_CHECKS says it applies to
    row["task"] ("<check>:not_applicable"). Any other value is a ValueError naming row and column.
    """
    failed = []
    applicable = APPLICABLE_CHECKS.get(row.get("task"))
    for check in required:
        column = f"verdict_{check}"
        verdict = row.get(column)
        if verdict is None:
            failed.append(f"{check}:missing")
        elif verdict not in VERDICTS:
            raise ValueError(f"combine_verdicts: row {row.get('id')!r} has {column}={verdict!r}; expected one of {VERDICTS}")
        elif verdict == "fail":
            failed.append(check)
        elif verdict == "not_applicable" and applicable is not None and check in applicable:
            failed.append(f"{check}:not_applicable")
    return not failed, failed


def filter_verified(rows: list[dict], required: tuple[str, ...] = CHECKS) -> tuple[list[dict], list[dict]]:
    """Keep fully verified samples; the rest carry "failed_checks:<check>,<check>"."""
    kept, removed = [], []
    for row in rows:
        ok, failed = combine_verdicts(row, required)
        if ok:
            kept.append(row)
        else:
            removed.append(quarantine(row, "failed_checks:" + ",".join(failed)))
    return kept, removed


def select_sft(
    problems: list[dict], num_samples: int | None = None, required: tuple[str, ...] = CHECKS
) -> tuple[list[dict], list[dict]]:
    """Apply the recipe's SFT rule to problems that each carry `samples`: a list of dicts with
    the verifier `status` ("pass", ...) and the `verdict_<check>` columns.

    npass counts samples with status "pass". A problem is kept iff 0 < npass < n (n = its number
    of samples, which must equal num_samples when given); from a kept problem, a trajectory
    enters iff its status is "pass" and combine_verdicts accepts it. Returns one row per kept
    trajectory: the problem's fields (without `samples`), the sample's fields, `npass` and
    `num_samples`. Removed rows are whole problems ("all_failed npass=0/16", "all_passed
    npass=16/16", "expected 16 samples, got 15") or single trajectories ("status=fail",
    "failed_checks:math").
    """
    kept, removed = [], []
    for problem in problems:
        samples = problem.get("samples")
        if not samples:
            removed.append(quarantine(problem, "no samples"))
            continue
        n = len(samples)
        if num_samples is not None and n != num_samples:
            removed.append(quarantine(problem, f"expected {num_samples} samples, got {n}"))
            continue
        npass = sum(sample.get("status") == "pass" for sample in samples)
        if npass == 0:
            removed.append(quarantine(problem, f"all_failed npass=0/{n}"))
            continue
        if npass == n:
            removed.append(quarantine(problem, f"all_passed npass={n}/{n}"))
            continue
        base = {key: value for key, value in problem.items() if key != "samples"}
        trajectories = [{**base, **sample, "npass": npass, "num_samples": n} for sample in samples]
        passed = [t for t in trajectories if t.get("status") == "pass"]
        removed.extend(quarantine(t, f"status={t.get('status')}") for t in trajectories if t.get("status") != "pass")
        verified, unverified = filter_verified(passed, required)
        kept.extend(verified)
        removed.extend(unverified)
    return kept, removed


def perplexity_cap(
    rows: list[dict], max_ppl: float, column: str = "perplexity"
) -> tuple[list[dict], list[dict]]:
    """Keep traces whose student perplexity is at most `max_ppl` (a distribution-alignment cap:
    a trace the student finds very unlikely is far from its own distribution).

    Rows without a perplexity (absent, None or NaN) are removed with "missing column <column>".
    """
    kept, removed = [], []
    for row in rows:
        value = row.get(column)
        if value is None or math.isnan(value):
            removed.append(quarantine(row, f"missing column {column}"))
        elif value > max_ppl:
            removed.append(quarantine(row, f"{column}={value:.3g} > max {max_ppl:g}"))
        else:
            kept.append(row)
    return kept, removed


def verified_attempts(problems: list[dict], samples: list[dict], npass: dict[str, int],
                      num_samples: int) -> tuple[list[dict], list[dict]]:
    """Teacher attempts (samples with verdicts) joined to their problems as trajectories carrying
    `npass` (the problem's passes) and `num_samples`; (the passed and fully verified ones, the rest
    with `status=<status>` or `failed_checks:<check>,...` as their reason), in sample order."""
    by_id = {row["id"]: row for row in problems}
    kept, removed = [], []
    for sample in samples:
        problem = by_id[sample["problem_id"]]
        trajectory = {**problem, **sample, "npass": npass[problem["id"]], "num_samples": num_samples}
        ok, failed = combine_verdicts(trajectory)
        if sample["status"] != "pass":
            removed.append(quarantine(trajectory, f"status={sample['status']}"))
        elif not ok:
            removed.append(quarantine(trajectory, "failed_checks:" + ",".join(failed)))
        else:
            kept.append(trajectory)
    return kept, removed


def dedupe_traces(rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """One row per distinct (prompt, completion): repeated identical answers teach nothing more;
    (kept, removed as duplicates)."""
    keyed = [{**row, "trace_text": f"{row['prompt']}\n<completion>\n{row['completion']}"} for row in rows]
    kept, out = remove_exact_duplicates(keyed, field="trace_text")
    return [{k: v for k, v in row.items() if k != "trace_text"} for row in kept], out
