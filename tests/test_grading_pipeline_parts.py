"""The parts the grading preset adds to the pipeline (issue 31 item 5): grading prompts compared by
their problem and content, not their shared rubric; SFT analyses that never grade a held-out problem;
the verifier's score error with its interval; the table's "-" for a checkpoint without a value."""

import math

import numpy as np
import pytest

from passband.curation.grading.analyses import worked_analysis, worked_analysis_rows
from passband.curation.grading.texts import RUBRIC, compared_text, grading_prompt, problem_of
from passband.curation.grading.triples import generate_triples
from passband.curation.hygiene import (HygieneConfig, asks_held_out, clean_pool, decontaminate, held_out_keys,
                                       jaccard, question_key, remove_near_duplicates, shingles, tokenize)
from passband.curation.suites.math_suite import render_prompt
from passband.training.evaluation.grading import score_error_metrics
from passband.training.evaluation.intervals import student_t_quantile
from passband.training.evaluation.results import format_table, score_error_markdown

SOLUTION = "Step 1: Add the two numbers: the result = 4 + 7 = 11.\nStep 2: So the answer is \\boxed{11}."


def test_a_grading_prompt_reads_back_its_problem_and_asks_it():
    prompt = grading_prompt("What is 4 + 7?", SOLUTION)
    assert problem_of(prompt) == "What is 4 + 7?"
    assert compared_text(prompt) == f"What is 4 + 7?\n\nSolution:\n{SOLUTION}"
    assert problem_of("What is 4 + 7?") is None and compared_text("What is 4 + 7?") == "What is 4 + 7?"
    # grading a worked solution of a question asks that question, in whatever answer format it is held out
    assert question_key(prompt) == question_key(render_prompt("What is 4 + 7?", "plain")) == "what is 4 + 7?"
    assert asks_held_out(prompt, held_out_keys([render_prompt("What is 4 + 7?", "boxed")]))
    assert not asks_held_out(prompt, held_out_keys([render_prompt("What is 4 + 8?", "boxed")]))


def test_the_shared_rubric_makes_no_two_grading_prompts_near_duplicates():
    first = grading_prompt("What is 4 + 7?", SOLUTION)
    second = grading_prompt("What is 9 × 6?", "Step 1: Multiply the two numbers: the result = 9 × 6 = 54.\n"
                                              "Step 2: So the answer is \\boxed{54}.")
    whole = jaccard(shingles(tokenize(first), 3), shingles(tokenize(second), 3))
    content = jaccard(shingles(tokenize(compared_text(first)), 3), shingles(tokenize(compared_text(second)), 3))
    assert whole >= 0.8 > content  # the rubric alone would have removed the second
    kept, removed = remove_near_duplicates([{"id": "a", "prompt": first}, {"id": "b", "prompt": second}])
    assert [row["id"] for row in kept] == ["a", "b"] and removed == []
    # the same problem and solution under the rubric is still caught, against the pool and the eval set
    kept, removed = remove_near_duplicates([{"id": "a", "prompt": first}, {"id": "c", "prompt": first + " "}])
    assert [row["id"] for row in kept] == ["a"] and removed[0]["removed_reason"] == "near_duplicate_of:a jaccard=1.00"
    kept, removed = decontaminate([{"id": "b", "prompt": second}, {"id": "x", "prompt": RUBRIC + " 12 + 3"}],
                                  [{"id": "e", "prompt": first}], ngram=10, threshold=0.6)
    assert [row["id"] for row in kept] == ["b", "x"]


def test_a_curated_grading_pool_keeps_most_of_its_triples():
    rows = generate_triples(240, 0, 0, balanced=False)
    kept, removed = clean_pool(rows[120:], rows[:120], HygieneConfig())
    # before the rubric was left out of the comparison every one of the 120 was a near duplicate
    assert len(kept) >= 100 and len(kept) + len(removed) == 120
    assert {problem_of(row["prompt"]) for row in kept}.isdisjoint({problem_of(row["prompt"]) for row in rows[:120]})


def test_worked_analyses_are_verified_and_grade_no_held_out_problem():
    held = generate_triples(120, 0, 0, balanced=False)
    keys = held_out_keys([row["prompt"] for row in held])
    rows, failed = worked_analysis_rows(200, 100, 0, balanced=False, excluded=lambda q: question_key(q) in keys)
    assert failed == [] and len(rows) == 200
    assert not any(asks_held_out(row["prompt"], keys) for row in rows)
    assert all(row["completion"] == worked_analysis(row["reference"]) for row in rows)
    assert {row["id"] for row in rows} == {f"worked-{row['id']}" for row in generate_triples(
        200, 100, 0, balanced=False, excluded=lambda q: question_key(q) in keys)}
    # without the exclusion the same seed does grade held-out problems: the test would see a leak
    unexcluded, _ = worked_analysis_rows(200, 100, 0, balanced=False)
    assert any(asks_held_out(row["prompt"], keys) for row in unexcluded)


def _analysis(score: str) -> str:
    return ("Here is my evaluation of the solution:\nNo issues found.\n"
            f"Based on my evaluation, the final overall score should be: \\boxed{{{score}}}")


def test_score_error_by_hand():
    sets = {"grading": [{"id": "p1", "task": "proof_grading", "reference": {"score": 1}},
                        {"id": "p2", "task": "proof_grading", "reference": {"score": 0.5}},
                        {"id": "p3", "task": "proof_grading", "reference": {"score": 0}}],
            "math": [{"id": "m1", "task": "math", "reference": "3"}]}
    texts = {"p1": [_analysis("1"), _analysis("0")],        # errors 0 and 1: problem mean 0.5
             "p2": [_analysis("1"), "I think it is fine."],  # 0.5, and one unreadable: 0.5
             "p3": ["no score", "none either"],              # nothing read: no error to count
             "m1": ["3", "4"]}
    rows = [{"eval_set": "math" if pid == "m1" else "grading", "problem_id": pid, "text": text}
            for pid, group in texts.items() for text in group]
    metrics = score_error_metrics(rows, sets)
    assert set(metrics) == {"grading/score_error", "grading/score_error_ci_low", "grading/score_error_ci_high",
                            "grading/parsed_rate"}
    assert metrics["grading/parsed_rate"] == 3 / 6
    assert metrics["grading/score_error"] == 0.5
    # two problems at 0.5 each: no spread between problems, so the interval is the point
    assert metrics["grading/score_error_ci_low"] == metrics["grading/score_error_ci_high"] == 0.5
    # a spread: problem errors 0 and 1 -> the Wilson interval on P_eff = 2 * 0.25 / 0.5 = 1 problem
    rows[1]["text"] = _analysis("1")   # p1: errors 0 and 0
    rows[2]["text"] = "unreadable"      # p2: nothing read
    rows[4]["text"] = _analysis("1")   # p3: error 1, and one unreadable
    metrics = score_error_metrics(rows, sets)
    shrink = student_t_quantile(0.95, 1) ** 2 * (0.5 / 0.25) / 2
    center, half = (0.5 + shrink / 2) / (1 + shrink), math.sqrt(shrink * 0.25 + shrink ** 2 / 4) / (1 + shrink)
    assert metrics["grading/score_error"] == 0.5 and metrics["grading/parsed_rate"] == 3 / 6
    assert metrics["grading/score_error_ci_low"] == pytest.approx(max(center - half, 0.0))
    assert metrics["grading/score_error_ci_high"] == pytest.approx(min(center + half, 1.0))
    assert score_error_metrics(rows, {"math": sets["math"]}) == {}


def test_score_error_section_and_a_checkpoint_without_a_value():
    by_checkpoint = {"base": {"grading/parsed_rate": 0.0, "grading/pass@1": 0.0},
                     "sft": {"grading/parsed_rate": 1.0, "grading/score_error": 0.25,
                             "grading/score_error_ci_low": 0.2, "grading/score_error_ci_high": 0.3},
                     "rl": {"grading/parsed_rate": 0.9, "grading/score_error": 0.125,
                            "grading/score_error_ci_low": 0.1, "grading/score_error_ci_high": 0.15}}
    markdown, metrics = score_error_markdown(by_checkpoint)
    assert "| grading | - | 0.250 [0.200, 0.300] | 0.125 [0.100, 0.150] |" in markdown
    assert markdown.endswith("could be read: grading: base 0.000, sft 1.000, rl 0.900.")
    assert metrics["sft/grading/score_error"] == 0.25 and metrics["base/grading/parsed_rate"] == 0.0
    assert "base/grading/score_error" not in metrics
    assert score_error_markdown({"base": {"math/pass@1": 0.5}}) == ("", {})
    assert format_table({"base/math/pass@1": np.float64(0.5), "base/math/pass@1_ci_low": 0.4,
                         "base/math/pass@1_ci_high": 0.6}, "pass@1").splitlines()[2] == \
        "| math | 0.500 [0.400, 0.600] | - | - |"

