"""One checkpoint's evaluation report from its verified samples (RECIPE section 8).

Input rows are per-sample verdicts `{problem_id, task, subdomain, sample_index, status, score}`
with n samples per problem; a sample counts as correct when its status is "pass". Each task and
each (task, subdomain) gets the whole pass@k curve k = 1..n (mean over problems of the unbiased
estimator), the mean score and the fraction of unparsable samples. Every problem of a task must
have the same n, so that pass@k at every k averages over the same problems.
"""

from __future__ import annotations

from dataclasses import dataclass

from passband.curation.verifiers.result import STATUSES
from passband.training.evaluation.pass_at_k import mean_pass_at_k

ROW_FIELDS = ("problem_id", "task", "subdomain", "sample_index", "status", "score")


@dataclass(frozen=True)
class GroupStats:
    """Evaluation figures of one task, or of one sub-domain of a task."""

    task: str
    subdomain: str | None
    """None for the figures of the whole task."""
    num_problems: int
    n: int
    """Samples per problem."""
    pass_at_k: list[float]
    """[pass@1, ..., pass@n]: entry k-1 is the mean over problems of the unbiased pass@k."""
    score_mean: float
    """Mean verifier score over all samples, in [0, 1]."""
    unparsable_frac: float
    """Fraction of samples whose status is "unparsable"."""


@dataclass(frozen=True)
class EvalReport:
    """One checkpoint's figures per task and per (task, subdomain)."""

    tasks: dict[str, GroupStats]
    subdomains: dict[tuple[str, str], GroupStats]
    """Keyed by (task, subdomain)."""

    def metrics(self) -> dict[str, float]:
        """Flat metrics: `{task}/pass@{k}`, `{task}/score_mean`, `{task}/unparsable_frac`,
        `{task}/num_problems`, `{task}/n`, and the same under `{task}/{subdomain}/`."""
        metrics: dict[str, float] = {}
        for group in [*self.tasks.values(), *self.subdomains.values()]:
            prefix = group.task if group.subdomain is None else f"{group.task}/{group.subdomain}"
            for k, value in enumerate(group.pass_at_k, start=1):
                metrics[f"{prefix}/pass@{k}"] = value
            metrics[f"{prefix}/score_mean"] = group.score_mean
            metrics[f"{prefix}/unparsable_frac"] = group.unparsable_frac
            metrics[f"{prefix}/num_problems"] = float(group.num_problems)
            metrics[f"{prefix}/n"] = float(group.n)
        return metrics

    def table(self) -> list[dict]:
        """Long-format rows, one per (task, subdomain, k), for Parquet/CSV: {task, subdomain
        (None on the whole-task rows), k, pass_at_k, num_problems, n, score_mean, unparsable_frac}."""
        return [
            {
                "task": group.task,
                "subdomain": group.subdomain,
                "k": k,
                "pass_at_k": value,
                "num_problems": group.num_problems,
                "n": group.n,
                "score_mean": group.score_mean,
                "unparsable_frac": group.unparsable_frac,
            }
            for group in [*self.tasks.values(), *self.subdomains.values()]
            for k, value in enumerate(group.pass_at_k, start=1)
        ]

    def curves(self) -> dict[str, list[float]]:
        """{task: [pass@1, ..., pass@n]}."""
        return {task: list(group.pass_at_k) for task, group in self.tasks.items()}


@dataclass
class _Problem:
    """Running tallies of one problem's samples."""

    task: str
    subdomain: str
    sample_indices: set
    num_pass: int = 0
    num_unparsable: int = 0
    score_sum: float = 0.0


def _collect_problems(rows: list[dict]) -> dict[tuple[str, str], _Problem]:
    """Tally rows per (task, problem_id), refusing malformed or contradictory rows by index."""
    problems: dict[tuple[str, str], _Problem] = {}
    for index, row in enumerate(rows):
        missing = [field for field in ROW_FIELDS if field not in row]
        if missing:
            raise ValueError(f"eval row {index}: missing field(s) {missing}; rows need {list(ROW_FIELDS)}")
        if row["status"] not in STATUSES:
            raise ValueError(f"eval row {index}: status {row['status']!r} is not one of {STATUSES}")
        if not isinstance(row["subdomain"], str) or not row["subdomain"]:
            raise ValueError(f"eval row {index}: subdomain must be a non-empty string, got {row['subdomain']!r}")
        if not 0.0 <= row["score"] <= 1.0:
            raise ValueError(f"eval row {index}: score {row['score']!r} is outside [0, 1]")
        key = (row["task"], row["problem_id"])
        problem = problems.setdefault(key, _Problem(row["task"], row["subdomain"], set()))
        if row["subdomain"] != problem.subdomain:
            raise ValueError(
                f"eval row {index}: problem {row['problem_id']!r} of task {row['task']!r} has subdomain "
                f"{row['subdomain']!r} here but {problem.subdomain!r} in an earlier row"
            )
        if row["sample_index"] in problem.sample_indices:
            raise ValueError(
                f"eval row {index}: problem {row['problem_id']!r} of task {row['task']!r} repeats "
                f"sample_index {row['sample_index']!r}"
            )
        problem.sample_indices.add(row["sample_index"])
        problem.num_pass += row["status"] == "pass"
        problem.num_unparsable += row["status"] == "unparsable"
        problem.score_sum += row["score"]
    return problems


def _group_stats(task: str, subdomain: str | None, problems: list[_Problem], n: int) -> GroupStats:
    counts = [(n, problem.num_pass) for problem in problems]
    num_samples = n * len(problems)
    return GroupStats(
        task=task,
        subdomain=subdomain,
        num_problems=len(problems),
        n=n,
        pass_at_k=[mean_pass_at_k(counts, k) for k in range(1, n + 1)],
        score_mean=sum(problem.score_sum for problem in problems) / num_samples,
        unparsable_frac=sum(problem.num_unparsable for problem in problems) / num_samples,
    )


def build_report(rows: list[dict]) -> EvalReport:
    """The EvalReport of one checkpoint's per-sample rows (see the module docstring)."""
    if not rows:
        raise ValueError("build_report needs at least one eval row")
    problems = _collect_problems(rows)
    by_task: dict[str, list[tuple[str, _Problem]]] = {}
    for (task, problem_id), problem in problems.items():
        by_task.setdefault(task, []).append((problem_id, problem))

    tasks: dict[str, GroupStats] = {}
    subdomains: dict[tuple[str, str], GroupStats] = {}
    for task, members in by_task.items():
        first_id, first = members[0]
        n = len(first.sample_indices)
        for problem_id, problem in members:
            if len(problem.sample_indices) != n:
                raise ValueError(
                    f"task {task!r}: problem {problem_id!r} has {len(problem.sample_indices)} samples but "
                    f"problem {first_id!r} has {n}; pass@k needs the same n for every problem of a task"
                )
        task_problems = [problem for _, problem in members]
        tasks[task] = _group_stats(task, None, task_problems, n)
        for subdomain in sorted({problem.subdomain for problem in task_problems}):
            in_subdomain = [problem for problem in task_problems if problem.subdomain == subdomain]
            subdomains[(task, subdomain)] = _group_stats(task, subdomain, in_subdomain, n)
    return EvalReport(tasks=tasks, subdomains=subdomains)


def sampling_efficiency_gap(base: EvalReport, candidate: EvalReport, k: int) -> dict[str, float]:
    """pass@k(base) - pass@1(candidate) per task present in both reports.

    Positive: drawing k samples from the base still solves more than one sample of the candidate,
    i.e. the candidate (typically RL) has not caught up with what the base can reach.
    """
    if k < 1:
        raise ValueError(f"sampling_efficiency_gap: k must be >= 1, got {k}")
    gap: dict[str, float] = {}
    for task in base.tasks.keys() & candidate.tasks.keys():
        base_n = base.tasks[task].n
        if k > base_n:
            raise ValueError(
                f"sampling_efficiency_gap: k={k} exceeds the base report's n={base_n} samples per problem "
                f"for task {task!r}; use k <= {base_n} or evaluate the base with more samples"
            )
        gap[task] = base.tasks[task].pass_at_k[k - 1] - candidate.tasks[task].pass_at_k[0]
    return dict(sorted(gap.items()))


def pass_at_k_curves(reports: dict[str, EvalReport]) -> dict[str, dict[str, list[float]]]:
    """{task: {checkpoint label: [pass@1..pass@n]}} from reports keyed by label, for plotting."""
    curves: dict[str, dict[str, list[float]]] = {}
    for label, report in reports.items():
        for task, curve in report.curves().items():
            curves.setdefault(task, {})[label] = curve
    return curves
