"""The task catalog: one registration, helpers derived from it, each task's typed settings,
bands and suites, and the dispatch of load_problems / verify through it."""

import typing

import pydantic
import pytest

from passband.curation.bands import BandFilter
from passband.curation.catalog import TASKS, TaskName, VerifierSettings, task
from passband.curation.suites.source import load_problems
from passband.curation.verifiers import verify


def test_every_registered_task_is_in_the_helpers():
    assert list(TASKS) == ["math", "code", "ifeval", "structured", "proof_grading"]
    assert typing.get_args(TaskName) == ("math", "code", "ifeval", "structured", "proof_grading")
    # a task per field, then the user's rewards (docs/your-reward.md), left out of a default dump so
    # that no stored shard's key moves
    assert list(VerifierSettings.model_fields) == ["math", "code", "ifeval", "structured", "proof_grading",
                                                   "rewards", "max_error_fraction"]
    assert list(VerifierSettings().model_dump()) == ["math", "code", "ifeval", "structured"]
    assert all(t.name == name for name, t in TASKS.items())


def test_task_names_are_checked():
    assert task("structured") is TASKS["structured"]
    with pytest.raises(ValueError, match="unknown task 'chess'; valid tasks: math, code, ifeval, structured, proof_grading"):
        task("chess")

    class Config(pydantic.BaseModel):
        task: TaskName

    assert Config(task="structured").task == "structured"
    with pytest.raises(pydantic.ValidationError):
        Config(task="chess")


def test_verifier_settings_defaults_and_validation():
    settings = VerifierSettings()
    assert settings.math.answer_format == "plain" and settings.math.rule == "last_number"
    assert VerifierSettings(math={"answer_format": "boxed"}).math.rule == "boxed"
    assert settings.ifeval.mode == "strict"
    assert settings.code.extract == "entry_block" and settings.code.limits.wall_timeout_s == 10.0
    with pytest.raises(pydantic.ValidationError):
        VerifierSettings(ifeval={"mode": "lenient"})
    with pytest.raises(pydantic.ValidationError):
        VerifierSettings(math={"rule": "boxed"})  # extra keys are refused, not ignored
    with pytest.raises(pydantic.ValidationError):
        VerifierSettings(poetry={})


def test_a_task_registered_after_the_shard_keys_leaves_their_settings_dump_alone():
    # pass-rate and eval shard keys hash this dump and seed their sampling from the key: the four
    # tasks' dump is what it was before proof_grading was registered, unless its settings are set
    assert list(VerifierSettings().model_dump(mode="json")) == ["math", "code", "ifeval", "structured"]
    assert VerifierSettings().model_dump(mode="json")["math"] == {"answer_format": "plain", "timeout_s": 5}
    meta = VerifierSettings(proof_grading={"meta": "defect_check"})
    assert meta.model_dump(mode="json")["proof_grading"] == {"meta": "defect_check", "unformatted": "unparsable"}
    assert VerifierSettings.model_validate(meta.model_dump(mode="json")) == meta
    assert VerifierSettings.model_validate(VerifierSettings().model_dump(mode="json")).proof_grading.meta == "off"


def test_default_bands_are_the_recipes():
    assert {name: str(t.default_band) for name, t in TASKS.items()} == {
        "math": "(0, 0.8]", "code": "(0, 0.8]", "ifeval": "(0, 0.4]", "structured": "(0, 0.8]",
        "proof_grading": "(0, 0.8]"}
    assert all(isinstance(t.default_band, BandFilter) for t in TASKS.values())
    assert not TASKS["ifeval"].default_band.contains(0.5) and TASKS["math"].default_band.contains(0.5)


@pytest.mark.parametrize("name", ["math", "code", "ifeval", "structured", "proof_grading"])
def test_each_suite_through_load_problems_matches_its_task_and_eval_defaults_generate(name):
    defaults = TASKS[name].eval_defaults
    rows = load_problems(suite=name, num_problems=defaults.num_problems, seed=defaults.seed,
                         difficulty=defaults.difficulty).rows
    assert len(rows) == defaults.num_problems
    assert {row["task"] for row in rows} == {name}
    assert all(TASKS[name].reference_error(row["reference"]) is None for row in rows)


def test_load_problems_passes_suite_options_only_to_suites_that_have_them():
    boxed = load_problems(suite="math", num_problems=2, answer_format="boxed").rows
    assert all(row["prompt"].endswith("Put the final answer in \\boxed{}.") for row in boxed)
    plain = load_problems(suite="math", num_problems=2, subdomains=["arithmetic"]).rows
    assert all(row["prompt"].endswith("Answer with just the number.") for row in plain)
    assert {row["subdomain"] for row in plain} == {"arithmetic"}
    # ProblemSource sends answer_format for every suite; code has no such option and ignores it
    assert load_problems(suite="code", num_problems=2, answer_format="plain").rows == \
        load_problems(suite="code", num_problems=2).rows
    one = load_problems(suite="ifeval", num_problems=5, options={"max_constraints": 1}).rows
    assert all(len(row["reference"]["instructions"]) == 1 for row in one)
    with pytest.raises(pydantic.ValidationError):
        load_problems(suite="code", num_problems=2, options={"max_constraints": 1})
    with pytest.raises(ValueError, match="unknown suite 'chess': expected one of math, code, ifeval, structured, proof_grading"):
        load_problems(suite="chess")


def test_humaneval_stays_a_code_suite():
    rows = load_problems(suite="humaneval", num_problems=3).rows
    assert [row["id"] for row in rows] == ["HumanEval/0", "HumanEval/1", "HumanEval/2"]
    assert {row["task"] for row in rows} == {"code"}


def test_math_renders_its_answer_format_instruction():
    math = task("math")
    assert math.render_prompt("What is 2 + 3?", "plain") == "What is 2 + 3? Answer with just the number."
    assert math.render_prompt("What is 2 + 3?", "boxed") == "What is 2 + 3? Put the final answer in \\boxed{}."


def test_legacy_verify_dispatches_through_the_catalog():
    [result] = verify("structured", ['{"a": "x"}'], [{"fields": {"a": "X"}}])
    assert (result.status, result.score) == ("pass", 1.0)
    with pytest.raises(ValueError, match="unknown task 'chess'"):
        verify("chess", [], [])
