"""Teacher-written tool traces for math with the Python tool (issue 55): every kind's program
prints the answer the problem maker computed another way; an episode's tokens are the chat
template's rendering of the whole conversation, its mask 1 exactly on the teacher's two turns; a
program that prints something else is quarantined with what it printed; and the SFT flow commits
the traces and trains on them token-exact."""

import contextlib
import io
import random
from fractions import Fraction

import pytest
from prefect.testing.utilities import prefect_test_harness

from passband.curation.hygiene import question_key
from passband.curation.suites.math_problems import MAX_DIFFICULTY, SUBDOMAINS, MathProblem, make_problem
from passband.curation.suites.math_suite import generate_math
from passband.curation.tool_math import answer_turn, call_turn, printed_answer, tool_program
from passband.curation.worked_math import draw_math_problems
from passband.training.episodes.math_python import MathToolConfig
from passband.training.episodes.teacher import math_tool_traces
from passband.training.episodes.tokens import render
from passband.training.episodes.python_tool import PYTHON_TOOL
from passband.training.episodes.tool_calls import parse_tool_calls, with_tool_instructions
from episode_fixtures import smollm2_tokenizer


def _printed(program: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(program, {})  # noqa: S102 - our own template programs, no sandbox needed to read their output
    return out.getvalue()


def test_every_kind_has_a_program_that_prints_the_makers_answer():
    kinds = set()
    for subdomain in SUBDOMAINS:
        for difficulty in range(MAX_DIFFICULTY + 1):
            for integer_only in (True, False):
                rng = random.Random(f"{subdomain}:{difficulty}:{integer_only}")
                for _ in range(30):
                    problem = make_problem(subdomain, rng, difficulty, integer_only)
                    program = tool_program(problem)
                    assert program is not None, problem.kind
                    assert printed_answer(_printed(program), problem), (problem, program)
                    kinds.add(problem.kind)
    assert len(kinds) >= 30  # every kind the maker draws, each checked against its own answer


def test_printed_answer_reads_the_last_line_as_a_number():
    problem = MathProblem("remainder", "q", Fraction(7, 2), {})
    assert printed_answer("working\n7/2\n", problem) and printed_answer("3.5", problem)
    assert not printed_answer("7", problem) and not printed_answer("", problem)
    assert not printed_answer("Traceback ...\nNameError: x", problem)


def test_the_call_turn_parses_as_one_python_call():
    problem = MathProblem("gcd", "What is the greatest common divisor of 12 and 18?", Fraction(6), {"numbers": [12, 18]})
    (call,) = parse_tool_calls(call_turn(tool_program(problem)))
    assert call.name == "python" and _printed(call.arguments["code"]).strip() == "6"
    assert answer_turn(problem, "plain").endswith("The answer is 6.")
    assert answer_turn(problem, "boxed").endswith("The answer is \\boxed{6}.")


def test_teacher_episode_tokens_are_the_templates_rendering_and_the_mask_is_the_teachers_turns(smollm2_dir):
    tokenizer = smollm2_tokenizer(smollm2_dir)
    drawn = draw_math_problems(6, 0, [0, 1], ["arithmetic", "number_theory", "geometry"], "plain", frozenset(), True,
                               namespace="tool")
    kept, quarantined = math_tool_traces(tokenizer, drawn, 0, "plain", MathToolConfig())
    assert quarantined == [] and len(kept) == 6
    for row, (_, problem) in zip(kept, drawn):
        assert row["num_turns"] == 2 and row["num_tool_calls"] == 1
        program = tool_program(problem)
        conversation = [{"role": "system", "content": row["system"]}, {"role": "user", "content": row["prompt"]},
                        {"role": "assistant", "content": call_turn(program)},
                        {"role": "tool", "content": _printed(program).strip()},
                        {"role": "assistant", "content": answer_turn(problem, "plain")}]
        # the whole conversation as the template writes it, our tool instructions in the system message
        # (SmolLM2's template ignores tools=), the episode ending at its last <|im_end|>
        rendered = render(tokenizer, with_tool_instructions(tokenizer, conversation, [PYTHON_TOOL]), [PYTHON_TOOL],
                          add_generation_prompt=False)
        assert tokenizer.decode(row["input_ids"]) + "\n" == rendered
        taught = tokenizer.decode([i for i, m in zip(row["input_ids"], row["loss_mask"]) if m])
        assert taught == call_turn(program) + "<|im_end|>" + answer_turn(problem, "plain") + "<|im_end|>"
        assert row["completion"] == answer_turn(problem, "plain")


def test_a_program_that_prints_another_number_is_quarantined_with_what_it_printed(smollm2_dir):
    tokenizer = smollm2_tokenizer(smollm2_dir)
    # the answer is wrong on purpose (7 % 3 is 1): the answer turn says 5, the program prints 1
    wrong = MathProblem("remainder", "What is the remainder when 7 is divided by 3?", Fraction(5), {"a": 7, "m": 3})
    kept, quarantined = math_tool_traces(tokenizer, [((0, "number_theory"), wrong)], 0, "plain", MathToolConfig())
    assert kept == [] and quarantined[0]["removed_reason"] == "the program printed '1', not 5"


@pytest.mark.slow
def test_sft_commits_tool_traces_and_trains_on_their_tokens(smollm2_dir, tmp_path, monkeypatch):
    from passband.flows.sft import SFTConfig, sft
    from passband.flows.common_config import ProblemSource
    from passband.tasks.artifacts.datasets import read_table
    from passband.training.sft.data import episode_mismatch

    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-sft-tool-traces")
    held_out = ProblemSource(suite="math", num_problems=60, seed=7, difficulty=0, answer_format="plain")
    keys = {question_key(row["prompt"]) for row in generate_math(60, seed=7, difficulty=0, answer_format="plain")}
    config = SFTConfig.model_validate({
        "model": str(smollm2_dir), "eval": None, "generated": {}, "held_out": {"eval_math": held_out},
        "tool_traces": {"tools": {"num_examples": 12, "difficulties": [0]}},
        "stages": [{"name": "tools", "datasets": {"tools": 1.0}, "max_length": 512, "num_steps": 1, "lr": 1e-5,
                    "batch_tokens": 1024, "micro_batch_tokens": 512}]})
    with prefect_test_harness(server_startup_timeout=300):
        summary = sft(config)
    rows = read_table(summary.outputs["data_tools"]).to_pylist()
    assert len(rows) == 12 and not {question_key(row["prompt"]) for row in rows} & keys
    tokenizer = smollm2_tokenizer(smollm2_dir)
    assert all(episode_mismatch(tokenizer, row["input_ids"], row["loss_mask"], row["completion"]) is None for row in rows)
    assert summary.metrics["tools/num_steps"] == 1 and summary.metrics["tools/tokens_per_s"] > 0
