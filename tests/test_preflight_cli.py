"""User mistakes in `passband verify` and `passband runs` (issue 52): each gives one stderr line,
never a traceback, with its exit code, and loses nothing.

Each row of CASES is (setup, argv, expected exit, a substring of stderr): `setup(tmp)` writes the
input files under `tmp` (the command's working folder) and returns extra environment variables;
`argv` follows `passband`. The rows run the installed `passband` in a real process, as a user
would, so they can move as they are into tests/test_preflight.py's table.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent / "passband"
# Against the code before issue 52, `runs` on a closed port retried for about 4 minutes: a row
# that takes longer than this fails instead of hanging the suite.
TIMEOUT_S = 90

IFEVAL_GOOD = {"id": "good", "completion": "one two three",
               "reference": {"instructions": [{"id": "length_constraints:number_words",
                                               "kwargs": {"num_words": 5, "relation": "less than"}}]}}
# One valid row and one with a reference the task cannot use, per task: the valid row is scored,
# the other quarantined.
GOOD_AND_BAD = {
    "math": ({"id": "good", "completion": "6 x 7 = 42", "reference": "42"},
             {"id": "bad", "completion": "42", "reference": {"answer": 42}}),
    "code": ({"id": "good", "completion": "```python\ndef f():\n    return 1\n```",
              "reference": {"tests": "assert f() == 1", "entry_point": "f"}},
             {"id": "bad", "completion": "x", "reference": {"tests": 5}}),
    "ifeval": (IFEVAL_GOOD,
               {"id": "bad", "completion": "x", "reference": {"instructions": [
                   {"id": "length_constraints:number_words", "kwargs": {"num_wordz": 3}}]}}),
    "structured": ({"id": "good", "completion": '{"a": 1}', "reference": {"fields": {"a": 1}}},
                   {"id": "bad", "completion": "{}", "reference": {"fields": []}}),
    "proof_grading": ({"id": "good", "completion": "Here is my evaluation of the solution:\nNo issues found.\n"
                       "Based on my evaluation, the final overall score should be: \\boxed{1}", "reference": {"score": 1}},
                      {"id": "bad", "completion": "x", "reference": {"score": 2}}),
}


def jsonl(*lines: dict | bytes) -> bytes:
    return b"".join((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n" for line in lines)


def input_file(content: bytes) -> Callable[[Path], dict[str, str]]:
    """Setup: write `content` to in.jsonl; no extra environment."""
    def setup(tmp: Path) -> dict[str, str]:
        (tmp / "in.jsonl").write_bytes(content)
        return {}
    return setup


def mlflow_db(content: bytes) -> Callable[[Path], dict[str, str]]:
    """Setup: the default store's mlflow.db holds `content`."""
    def setup(tmp: Path) -> dict[str, str]:
        (tmp / "home").mkdir()
        (tmp / "home" / "mlflow.db").write_bytes(content)
        return {}
    return setup


def mlflow_server(uri: str) -> Callable[[Path], dict[str, str]]:
    return lambda tmp: {"PASSBAND_MLFLOW_URI": uri}


def ifeval_reference(instruction: dict) -> bytes:
    return jsonl(IFEVAL_GOOD, {"id": "bad", "completion": "x", "reference": {"instructions": [instruction]}})


# Lines 2-5: bad JSON, a missing key, a non-UTF-8 line, binary junk.
MIXED = jsonl(IFEVAL_GOOD, b'{"id": "x", "completion": ', {"id": "y", "completion": "z"},
              b'{"id": "caf\xe9", "completion": "x", "reference": {}}', b"\x00\xff\xfe\x89PNG")
VERIFY = ["verify", "-o", "out.jsonl", "in.jsonl", "--task"]
QUARANTINED_ONE = "pass=1 quarantined=1; line numbers and reasons in out.quarantine.jsonl"

CASES = [
    pytest.param(input_file(ifeval_reference({"id": "length_constraints:number_words", "kwargs": {"num_wordz": 3}})),
                 [*VERIFY, "ifeval"], 3, QUARANTINED_ONE, id="verify-ifeval-unknown-kwarg"),
    pytest.param(input_file(ifeval_reference({"id": "no:such", "kwargs": {}})),
                 [*VERIFY, "ifeval"], 3, QUARANTINED_ONE, id="verify-ifeval-unknown-id"),
    pytest.param(input_file(ifeval_reference({"id": "length_constraints:number_words",
                                              "kwargs": {"num_words": "3", "relation": "less than"}})),
                 [*VERIFY, "ifeval"], 3, QUARANTINED_ONE, id="verify-ifeval-kwarg-of-the-wrong-type"),
    *(pytest.param(input_file(jsonl(*rows)), [*VERIFY, task], 3, QUARANTINED_ONE, id=f"verify-{task}-bad-reference")
      for task, rows in GOOD_AND_BAD.items() if task != "ifeval"),
    pytest.param(input_file(MIXED), [*VERIFY, "ifeval"], 3, "pass=1 quarantined=4; line numbers and reasons in out.quarantine.jsonl",
                 id="verify-bad-json-missing-keys-non-utf8-junk"),
    pytest.param(input_file(b""), [*VERIFY, "math"], 4, "Error: in.jsonl: no rows to verify", id="verify-empty-file"),
    pytest.param(input_file(b"\n  \n\t\n"), [*VERIFY, "ifeval"], 4, "Error: in.jsonl: no rows to verify",
                 id="verify-blank-lines-only"),
    pytest.param(input_file(bytes(range(256)) * 8), [*VERIFY, "math"], 3,
                 "no row could be verified (is it JSONL in UTF-8?); line numbers and reasons in out.quarantine.jsonl",
                 id="verify-binary-junk-file"),
    pytest.param(input_file(json.dumps({"id": "a", "completion": "42", "reference": "42"}).encode("utf-16")),
                 [*VERIFY, "math"], 3, "no row could be verified (is it JSONL in UTF-8?)", id="verify-utf16-file"),
    pytest.param(mlflow_db(b"SQLite format 2\x00" + bytes(range(256)) * 16), ["runs"], 1,
                 "file is not a database; if the file is damaged, move it aside", id="runs-corrupt-mlflow-db"),
    pytest.param(mlflow_server("http://127.0.0.1:9"), ["runs"], 1,
                 "Error: cannot read MLflow runs from http://127.0.0.1:9: [Errno 111] Connection refused; "
                 "is the server up?", id="runs-unreachable-mlflow"),
]


def run_passband(tmp: Path, argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    # The developer's own stack settings must not leak into the case.
    base = {name: value for name, value in os.environ.items() if not name.startswith(("PASSBAND_", "MLFLOW_"))}
    return subprocess.run([str(BIN), *argv], cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S,
                          env={**base, "PASSBAND_HOME": str(tmp / "home"), **env})


@pytest.mark.parametrize(("setup", "argv", "expected_exit", "substring"), CASES)
def test_a_mistake_gives_one_line_and_its_exit_code(tmp_path: Path, setup: Callable[[Path], dict[str, str]],
                                                    argv: list[str], expected_exit: int, substring: str) -> None:
    result = run_passband(tmp_path, argv, setup(tmp_path))
    assert "Traceback" not in result.stdout + result.stderr, result.stderr[-3000:]
    assert result.returncode == expected_exit, result.stderr[-3000:]
    assert len(result.stderr.splitlines()) == 1 and substring in result.stderr, result.stderr


@pytest.mark.parametrize("task", GOOD_AND_BAD)
def test_verify_scores_the_valid_rows_and_quarantines_the_bad_reference(tmp_path: Path, task: str) -> None:
    good, bad = GOOD_AND_BAD[task]
    (tmp_path / "in.jsonl").write_bytes(jsonl(good, bad))
    result = run_passband(tmp_path, [*VERIFY, task], {})
    assert result.returncode == 3, result.stderr[-3000:]
    scored = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert [(row["id"], row["status"]) for row in scored] == [("good", "pass")]
    (entry,) = [json.loads(line) for line in (tmp_path / "out.quarantine.jsonl").read_text().splitlines()]
    assert entry["line"] == 2 and json.loads(entry["raw"]) == bad and entry["reason"]


def test_verify_quarantines_each_bad_line_with_its_number_and_reason(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(MIXED)
    result = run_passband(tmp_path, [*VERIFY, "ifeval"], {})
    assert result.returncode == 3, result.stderr[-3000:]
    assert [json.loads(line)["id"] for line in (tmp_path / "out.jsonl").read_text().splitlines()] == ["good"]
    quarantined = [json.loads(line) for line in (tmp_path / "out.quarantine.jsonl").read_text().splitlines()]
    assert [(q["line"], q["reason"].split(":")[0]) for q in quarantined] == [
        (2, "bad JSON"), (3, "missing keys"), (4, "not valid UTF-8"), (5, "not valid UTF-8")]


def test_verify_on_an_empty_file_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "in.jsonl").write_bytes(b"")
    assert run_passband(tmp_path, [*VERIFY, "math"], {}).returncode == 4
    assert sorted(path.name for path in tmp_path.iterdir()) == ["in.jsonl"]
