"""A user's reward function or task (curation/catalog/user.py, reward_function.py): found by import
path or entry point only with the opt-in, scored under the verifier contract (statuses, `error`
for what raises or is malformed, quarantined references, the error fraction that stops a run),
beside the built-in tasks in one grouped scoring. The package is docs/your-reward.md's."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from passband.cli.main import main
from passband.curation.catalog import VerifierSettings, task
from passband.curation.catalog.reward_function import UserRewardError, as_result
from passband.curation.catalog.user import verify_user_groups
from passband.curation.suites.loaders import load_rows
from passband.curation.verifiers.result import VerifyResult
from passband.training.judge.score import score_groups
from user_package import block, forget_user_code, install_user_package

BROKEN = '''
def boom(completions, references):
    raise ValueError("no reference x\\nsecond line")


def half(completions, references):
    return [1.0 if i % 2 == 0 else "high" for i in range(len(completions))]


def short(completions, references):
    return [1.0]
'''


@pytest.fixture
def mypkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield install_user_package(tmp_path / "site", monkeypatch, {"broken": BROKEN})
    forget_user_code()


def statuses(results: list[VerifyResult]) -> list[tuple[float, str]]:
    return [(r.score, r.status) for r in results]


def test_the_items_a_reward_may_return() -> None:
    assert as_result(1.0) == VerifyResult(1.0, "pass")
    assert as_result(0.25) == VerifyResult(0.25, "fail")
    assert as_result(None) == VerifyResult(0.0, "unparsable", "the reward returned None")
    assert as_result((0.5, "timeout")) == VerifyResult(0.5, "timeout")
    assert as_result((None, "unparsable", "no answer")) == VerifyResult(0.0, "unparsable", "no answer")
    assert as_result({"score": 1, "detail": "ok"}) == VerifyResult(1.0, "pass", "ok")
    assert as_result("high") == VerifyResult(0.0, "error", "the reward returned str 'high', not a score")
    assert as_result(1.7) == VerifyResult(0.0, "error", "the reward returned score 1.7, not a number in [0, 1]")
    assert as_result(math.nan).status == "error"
    assert as_result(True) == VerifyResult(0.0, "error", "the reward returned score True, not a number in [0, 1]")
    assert as_result((0.5, "maybe")).detail.startswith("the reward returned status 'maybe', not one of")


def test_user_code_is_imported_only_with_the_opt_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install_user_package(tmp_path, monkeypatch, allow=False)
    try:
        for name in ("mypkg.rewards:last_word", "capitals"):
            with pytest.raises(ValueError) as refused:
                task(name)
            assert str(refused.value) == (f"task {name!r} is your own code, which would run inside passband's "
                                          "process: set PASSBAND_ALLOW_USER_CODE=1 to allow it")
        assert "mypkg" not in sys.modules
        with pytest.raises(ValueError, match="unknown task 'capitols'; valid tasks: math, code, ifeval, structured, "
                                             "proof_grading, an entry point of the passband.tasks group or an import"):
            task("capitols")
    finally:
        forget_user_code()


def test_a_reward_function_by_import_path(mypkg: Path) -> None:
    results = task("mypkg.rewards:last_word").verify(["The opposite is cold.", "hot", ""], ["cold", "cold", "cold"])
    assert statuses(results) == [(1.0, "pass"), (0.0, "fail"), (0.0, "unparsable")]


def test_an_entry_point_task_with_its_settings_and_quarantine(mypkg: Path) -> None:
    capitals = task("capitals")
    references = [{"capital": "Paris"}, {"capital": "Rome"}, {"capital": "Rome"}]
    completions = ["Paris", "It is rome.", " "]
    assert statuses(capitals.verify(completions, references)) == [(1.0, "pass"), (1.0, "pass"), (0.0, "unparsable")]
    strict = capitals.Settings(ignore_case=False)
    assert statuses(capitals.verify(completions, references, strict)) == [
        (1.0, "pass"), (0.0, "fail"), (0.0, "unparsable")]
    (mypkg / "capitals.jsonl").write_text(block("jsonl data/capitals.jsonl"))
    loaded = load_rows(str(mypkg / "capitals.jsonl"))
    assert [row["id"] for row in loaded.rows] == ["cap-1", "cap-2"]
    assert [(q["row_number"], q["reason"]) for q in loaded.quarantined] == [
        (3, 'row 3: a capitals reference is {"capital": "<city>"}')]


def test_rows_of_a_reward_named_in_config_are_taken_where_their_source_declares_them(mypkg: Path) -> None:
    path = mypkg / "opposites.jsonl"
    path.write_text(block("jsonl data/opposites.jsonl"))
    assert load_rows(str(path)).rows == []  # "opposites" is no task anyone declared
    loaded = load_rows(str(path), task="opposites")
    assert [(row["id"], row["reference"]) for row in loaded.rows] == [("opp-1", "cold"), ("opp-2", "down")]


def test_a_reward_that_raises_makes_its_rows_error_and_stops_the_run(mypkg: Path) -> None:
    boom = "mypkg.broken:boom"
    assert task(boom).verify(["a", "b"], ["x", "y"]) == [VerifyResult(0.0, "error", "ValueError: no reference x")] * 2
    assert task("mypkg.broken:short").verify(["a", "b"], ["x", "y"]) == [
        VerifyResult(0.0, "error", "the reward returned 1 results for 2 completions")] * 2
    with pytest.raises(UserRewardError) as stopped:
        verify_user_groups([boom], ["x"], [["a", "b"]], {}, max_error_fraction=0.5)
    assert str(stopped.value) == (f"task {boom!r}: 2 of 2 rollouts of the batch are `error` (over "
                                  "max_error_fraction 0.5); first: ValueError: no reference x")
    # half of the batch errs: masked at 0.5, a stop at 0.4
    (results,) = verify_user_groups(["mypkg.broken:half"], ["x"], [["a", "b", "c", "d"]], {}, 0.5)
    assert [r.status for r in results] == ["pass", "error", "pass", "error"]
    with pytest.raises(UserRewardError, match="2 of 4 rollouts"):
        verify_user_groups(["mypkg.broken:half"], ["x"], [["a", "b", "c", "d"]], {}, 0.4)


def test_ours_and_the_users_scored_in_one_grouped_call(mypkg: Path) -> None:
    verifiers = VerifierSettings(rewards={"opposites": "mypkg.rewards:last_word"})
    results, judged = score_groups(
        ["math", "opposites", "capitals", "mypkg.rewards:last_word"], ["2+2?", "hot?", "Italy?", "up?"],
        ["4", "cold", {"capital": "Rome"}, "down"], [["4", "5"], ["cold", ""], ["Rome", "Paris"], ["Down."]],
        verifiers, {})
    assert judged == {}
    assert [statuses(group) for group in results] == [
        [(1.0, "pass"), (0.0, "fail")], [(1.0, "pass"), (0.0, "unparsable")], [(1.0, "pass"), (0.0, "fail")],
        [(1.0, "pass")]]


def test_verify_a_file_with_a_users_task(mypkg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    answers, out = tmp_path / "answers.jsonl", tmp_path / "scored.jsonl"
    answers.write_text(json.dumps({"id": "a", "completion": "Paris.", "reference": {"capital": "Paris"}}) + "\n"
                       + json.dumps({"id": "b", "completion": "Lyon", "reference": {"capital": "Paris"}}) + "\n"
                       + json.dumps({"id": "c", "completion": "Lyon", "reference": "Paris"}) + "\n")
    result = CliRunner().invoke(main, ["verify", "--task", "capitals", str(answers), "-o", str(out)])
    assert result.exit_code == 3, result.output  # row c quarantined
    assert [(row["id"], row["status"]) for row in map(json.loads, out.read_text().splitlines())] == [
        ("a", "pass"), ("b", "fail")]
    assert result.stderr.strip().startswith("pass=1 fail=1 quarantined=1")
    monkeypatch.delenv("PASSBAND_ALLOW_USER_CODE")
    forget_user_code()
    refused = CliRunner().invoke(main, ["verify", "--task", "capitals", str(answers), "-o", str(out)])
    assert refused.exit_code == 2 and refused.stderr.splitlines() == [
        "Error: --task 'capitals': task 'capitals' is your own code, which would run inside passband's process: "
        "set PASSBAND_ALLOW_USER_CODE=1 to allow it"]


def test_a_reward_named_for_a_built_in_task_replaces_its_verifier(mypkg: Path) -> None:
    completions = [["The answer is 4", "4 apples"]]
    ours, _ = score_groups(["math"], ["2+2?"], ["4"], completions, VerifierSettings(), {})
    assert [r.status for r in ours[0]] == ["pass", "pass"]  # math's rule: the last number
    theirs, _ = score_groups(["math"], ["2+2?"], ["4"], completions,
                             VerifierSettings(rewards={"math": "mypkg.rewards:last_word"}), {})
    assert [r.status for r in theirs[0]] == ["pass", "fail"]  # the page's rule: the last word


def test_a_data_row_alone_never_names_an_import_path(mypkg: Path) -> None:
    """Only the config declares an import path: a file's row naming one is quarantined, unimported."""
    path = mypkg / "rows.jsonl"
    path.write_text("".join(json.dumps({"id": name, "task": name, "subdomain": "s", "prompt": "p", "reference": "r",
                                        "source": "elsewhere"}) + "\n"
                            for name in ("subprocess:call", "mypkg.broken:boom")))
    loaded = load_rows(str(path))
    assert loaded.rows == [] and [q["reason"] for q in loaded.quarantined] == [
        "row 1: task 'subprocess:call' is not one of ['math', 'code', 'ifeval', 'structured', 'proof_grading']",
        "row 2: task 'mypkg.broken:boom' is not one of ['math', 'code', 'ifeval', 'structured', 'proof_grading']"]
    assert "mypkg.broken" not in sys.modules
    declared = load_rows(str(path), task="mypkg.broken:boom")
    assert [row["id"] for row in declared.rows] == ["mypkg.broken:boom"]
    assert [q["reason"] for q in declared.quarantined] == [
        "row 1: task 'subprocess:call' differs from requested 'mypkg.broken:boom'"]
