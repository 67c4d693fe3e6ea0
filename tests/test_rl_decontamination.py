"""RL never trains on a question of its held-out sets, whatever answer format either asks for."""

from __future__ import annotations

import pytest

from passband.curation.hygiene import held_out_keys
from passband.curation.suites.source import ProblemSource
from passband.tasks.steps.rl import load_rl_problems


def _sums(answer_format: str) -> ProblemSource:
    return ProblemSource(suite="math", num_problems=20, seed=3, difficulty=0, subdomains=["arithmetic"],
                         answer_format=answer_format)


def test_an_eval_question_asked_for_a_boxed_answer_drops_its_plain_twin():
    boxed, _, _ = load_rl_problems({"math": _sums("boxed")}, frozenset())
    held_out = held_out_keys([row["prompt"] for row in boxed["math"][:7]])
    problems, dropped, _ = load_rl_problems({"math": _sums("plain")}, held_out)
    assert dropped == {"math": 7} and len(problems["math"]) == 13
    # the same 20 questions in the other format: the 13 kept are exactly the boxed rows not held out
    kept = {row["prompt"].removesuffix(" Answer with just the number.") for row in problems["math"]}
    assert kept == {row["prompt"].removesuffix(" Put the final answer in \\boxed{}.") for row in boxed["math"][7:]}


def test_every_question_held_out_is_an_error_that_names_the_set():
    boxed, _, _ = load_rl_problems({"math": _sums("boxed")}, frozenset())
    with pytest.raises(ValueError, match="datasets.math: every one of its 20 prompts is an eval prompt"):
        load_rl_problems({"math": _sums("plain")}, held_out_keys([row["prompt"] for row in boxed["math"]]))
