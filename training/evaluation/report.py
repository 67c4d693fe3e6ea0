"""One checkpoint's evaluation report from its verified samples (docs/recipe.md section 8).

Input rows are per-sample verdicts `{problem_id, task, subdomain, sample_index, status, score}`
with n samples per problem; a sample counts as correct when its status is "pass". Each task and
each (task, subdomain) gets the whole pass@k curve k = 1..n (mean over problems of the unbiased
estimator) with a 95% interval over problems at every k (intervals.py), the mean score and the
fraction of unparsable samples. Every problem of a task must have the same n, so that pass@k at
every k averages over the same problems. `compare_rows` sets two checkpoints' rows on the same
problems side by side: paired deltas with intervals and p-values (paired.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from passband.curation.verifiers.result import STATUSES
from passband.training.evaluation.intervals import CONFIDENCE, pass_at_k_intervals
from passband.training.evaluation.paired import NUM_PERMUTATIONS, paired_delta_curve
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
    ci_low: list[float]
    """Entry k-1: lower end of the interval of pass@k over problems (intervals.mean_interval)."""
    ci_high: list[float]
    """Entry k-1: upper end of that interval."""
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
        """Flat metrics: `{task}/pass@{k}`, `{task}/pass@{k}_ci_low`, `{task}/pass@{k}_ci_high`, `{task}/score_mean`, `{task}/unparsable_frac`,
        `{task}/num_problems`, `{task}/n`, and the same under `{task}/{subdomain}/`."""
        metrics: dict[str, float] = {}
        for group in [*self.tasks.values(), *self.subdomains.values()]:
            prefix = group.task if group.subdomain is None else f"{group.task}/{group.subdomain}"
            for k, value in enumerate(group.pass_at_k, start=1):
                metrics[f"{prefix}/pass@{k}"] = value
                metrics[f"{prefix}/pass@{k}_ci_low"] = group.ci_low[k - 1]
                metrics[f"{prefix}/pass@{k}_ci_high"] = group.ci_high[k - 1]
            metrics[f"{prefix}/score_mean"] = group.score_mean
            metrics[f"{prefix}/unparsable_frac"] = group.unparsable_frac
            metrics[f"{prefix}/num_problems"] = float(group.num_problems)
            metrics[f"{prefix}/n"] = float(group.n)
        return metrics

    def table(self) -> list[dict]:
        """Long-format rows, one per (task, subdomain, k), for Parquet/CSV: {task, subdomain
        (None on the whole-task rows), k, pass_at_k, ci_low, ci_high, num_problems, n, score_mean,
        unparsable_frac}."""
        return [
            {
                "task": group.task,
                "subdomain": group.subdomain,
                "k": k,
                "pass_at_k": value,
                "ci_low": group.ci_low[k - 1],
                "ci_high": group.ci_high[k - 1],
                "num_problems": group.num_problems,
                "n": group.n,
                "score_mean": group.score_mean,
                "unparsable_frac": group.unparsable_frac,
            }
            for group in [*self.tasks.values(), *self.subdomains.values()]
            for k, value in enumerate(group.pass_at_k, start=1)
        ]

    def intervals(self) -> dict[str, tuple[list[float], list[float]]]:
        """{task: ([ci_low of pass@1..pass@n], [ci_high of pass@1..pass@n])}."""
        return {task: (list(group.ci_low), list(group.ci_high)) for task, group in self.tasks.items()}

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


def _group_stats(task: str, subdomain: str | None, problems: list[_Problem], n: int, confidence: float) -> GroupStats:
    counts = [(n, problem.num_pass) for problem in problems]
    intervals = pass_at_k_intervals(n, np.array([problem.num_pass for problem in problems]), confidence)
    num_samples = n * len(problems)
    return GroupStats(
        task=task,
        subdomain=subdomain,
        num_problems=len(problems),
        n=n,
        pass_at_k=[mean_pass_at_k(counts, k) for k in range(1, n + 1)],
        ci_low=intervals.ci_low,
        ci_high=intervals.ci_high,
        score_mean=sum(problem.score_sum for problem in problems) / num_samples,
        unparsable_frac=sum(problem.num_unparsable for problem in problems) / num_samples,
    )


def _problems_by_task(rows: list[dict]) -> dict[str, list[tuple[str, _Problem]]]:
    """{task: [(problem_id, tallies)]} with the same number of samples for every problem of a task."""
    by_task: dict[str, list[tuple[str, _Problem]]] = {}
    for (task, problem_id), problem in _collect_problems(rows).items():
        by_task.setdefault(task, []).append((problem_id, problem))
    for task, members in by_task.items():
        first_id, first = members[0]
        n = len(first.sample_indices)
        for problem_id, problem in members:
            if len(problem.sample_indices) != n:
                raise ValueError(
                    f"task {task!r}: problem {problem_id!r} has {len(problem.sample_indices)} samples but "
                    f"problem {first_id!r} has {n}; pass@k needs the same n for every problem of a task"
                )
    return by_task


def build_report(rows: list[dict], confidence: float = CONFIDENCE) -> EvalReport:
    """The EvalReport of one checkpoint's per-sample rows (see the module docstring)."""
    if not rows:
        raise ValueError("build_report needs at least one eval row")
    by_task = _problems_by_task(rows)

    tasks: dict[str, GroupStats] = {}
    subdomains: dict[tuple[str, str], GroupStats] = {}
    for task, members in by_task.items():
        n = len(members[0][1].sample_indices)
        task_problems = [problem for _, problem in members]
        tasks[task] = _group_stats(task, None, task_problems, n, confidence)
        for subdomain in sorted({problem.subdomain for problem in task_problems}):
            in_subdomain = [problem for problem in task_problems if problem.subdomain == subdomain]
            subdomains[(task, subdomain)] = _group_stats(task, subdomain, in_subdomain, n, confidence)
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


def pass_at_k_intervals_by_task(reports: dict[str, EvalReport]) -> dict[str, dict[str, tuple[list[float], list[float]]]]:
    """{task: {checkpoint label: ([ci_low...], [ci_high...])}}, shaped like pass_at_k_curves, for the bands."""
    bands: dict[str, dict[str, tuple[list[float], list[float]]]] = {}
    for label, report in reports.items():
        for task, band in report.intervals().items():
            bands.setdefault(task, {})[label] = band
    return bands


def compare_rows(
    rows_a: list[dict], rows_b: list[dict], *, confidence: float = CONFIDENCE,
    num_permutations: int = NUM_PERMUTATIONS, seed: int = 0,
) -> list[dict]:
    """Paired pass@k deltas (b - a) per task in both and k = 1..min(n_a, n_b), from two checkpoints'
    per-sample rows on the same problems: rows {task, k, num_problems, n_a, n_b, pass_at_k_a,
    pass_at_k_b, delta, ci_low, ci_high, p_value, excludes_zero}, ordered by task then k.

    Problems pair by (task, problem_id); a task in both must hold the same problem ids in both.
    """
    problems_a, problems_b = _problems_by_task(rows_a), _problems_by_task(rows_b)
    table: list[dict] = []
    for task in sorted(problems_a.keys() & problems_b.keys()):
        counts_a = {problem_id: problem for problem_id, problem in problems_a[task]}
        counts_b = {problem_id: problem for problem_id, problem in problems_b[task]}
        if counts_a.keys() != counts_b.keys():
            only_a, only_b = sorted(counts_a.keys() - counts_b.keys()), sorted(counts_b.keys() - counts_a.keys())
            raise ValueError(
                f"compare_rows: task {task!r} needs the same problems in both; only in a: {only_a[:5]} "
                f"({len(only_a)}), only in b: {only_b[:5]} ({len(only_b)})"
            )
        problem_ids = sorted(counts_a)
        n_a = len(counts_a[problem_ids[0]].sample_indices)
        n_b = len(counts_b[problem_ids[0]].sample_indices)
        deltas = paired_delta_curve(
            np.array([counts_a[problem_id].num_pass for problem_id in problem_ids]),
            np.array([counts_b[problem_id].num_pass for problem_id in problem_ids]),
            n_a, list(range(1, min(n_a, n_b) + 1)), n_b=n_b, confidence=confidence,
            num_permutations=num_permutations, seed=seed,
        )
        table.extend(
            {"task": task, "k": d.k, "num_problems": d.num_problems, "n_a": n_a, "n_b": n_b,
             "pass_at_k_a": d.pass_at_k_a, "pass_at_k_b": d.pass_at_k_b, "delta": d.delta,
             "ci_low": d.ci_low, "ci_high": d.ci_high, "p_value": d.p_value, "excludes_zero": d.excludes_zero}
            for d in deltas
        )
    return table


def delta_markdown(table: list[dict], label_a: str, label_b: str, ks: list[int] | None = None) -> str:
    """A markdown table of compare_rows output: one line per (task, k), `delta [lo, hi]` with a `*`
    where the interval excludes 0; ks keeps only those k (default: all)."""
    lines = [
        f"| task | k | {label_a} | {label_b} | delta ({label_b} - {label_a}) [CI] | p |",
        "|---|---|---|---|---|---|",
    ]
    for row in table:
        if ks is not None and row["k"] not in ks:
            continue
        marker = " *" if row["excludes_zero"] else ""
        lines.append(
            f"| {row['task']} | {row['k']} | {row['pass_at_k_a']:.3f} | {row['pass_at_k_b']:.3f} | "
            f"{row['delta']:+.3f} [{row['ci_low']:+.3f}, {row['ci_high']:+.3f}]{marker} | {row['p_value']:.3g} |"
        )
    lines.append("")
    lines.append("`*`: the interval of the delta excludes 0.")
    return "\n".join(lines)
