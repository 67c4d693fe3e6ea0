"""verify_file: rows in, verdicts out, malformed rows quarantined with line number and reason."""

import json

import pytest

from passband.cli.verify_cmd import verify_file


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


def _read(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_math_file_with_malformed_rows(tmp_path):
    source = tmp_path / "in.jsonl"
    _write(source, [
        json.dumps({"id": "a", "completion": r"\boxed{\frac12}", "reference": "0.5"}),
        json.dumps({"id": "b", "completion": r"\boxed{3}", "reference": "4"}),
        "{not json",
        "",  # blank lines are skipped, not quarantined
        json.dumps({"id": "c", "completion": "no answer"}),
        json.dumps({"id": "d", "completion": "I give up", "reference": "7"}),
        json.dumps(["a", "list"]),
        json.dumps({"id": "e", "completion": r"\boxed{1}", "reference": {"x": 1}}),
    ])
    output = tmp_path / "out.jsonl"
    counts = verify_file("math", source, output, {"answer_format": "boxed"})

    assert counts == {"pass": 1, "fail": 1, "unparsable": 1, "quarantined": 4}
    rows = _read(output)
    assert [(r["id"], r["status"], r["score"]) for r in rows] == [
        ("a", "pass", 1.0), ("b", "fail", 0.0), ("d", "unparsable", 0.0)]
    assert rows[0]["reference"] == "0.5" and rows[0]["detail"]
    quarantined = _read(tmp_path / "out.quarantine.jsonl")
    assert [q["line"] for q in quarantined] == [3, 5, 7, 8]
    assert quarantined[0]["reason"].startswith("bad JSON") and quarantined[0]["raw"] == "{not json"
    assert quarantined[1]["reason"] == "missing keys: reference"
    assert quarantined[2]["reason"] == "row must be a JSON object, got list"
    assert quarantined[3]["reason"].startswith("math reference must be a non-empty str")
    assert not (tmp_path / "out.jsonl.tmp").exists()


def test_code_file_and_stale_quarantine_removed(tmp_path):
    source = tmp_path / "in.jsonl"
    tests = {"tests": "assert double(4) == 8\n"}
    _write(source, [
        json.dumps({"id": 1, "completion": "```python\ndef double(x):\n    return 2 * x\n```",
                    "reference": tests}),
        json.dumps({"id": 2, "completion": "```python\nprint(input()[::-1])\n```",
                    "reference": {"cases": [{"input": "abc", "output": "cba"}]}}),
        json.dumps({"id": 3, "completion": "no code", "reference": tests}),
    ])
    output = tmp_path / "out.jsonl"
    (tmp_path / "out.quarantine.jsonl").write_text("stale\n")
    counts = verify_file("code", source, output)
    assert counts == {"pass": 2, "unparsable": 1}
    assert [r["status"] for r in _read(output)] == ["pass", "pass", "unparsable"]
    assert not (tmp_path / "out.quarantine.jsonl").exists()


def test_unknown_task_is_refused(tmp_path):
    with pytest.raises(ValueError, match="'chess'"):
        verify_file("chess", tmp_path / "in.jsonl", tmp_path / "out.jsonl")


def test_ifeval_file_goes_through_the_dispatcher(tmp_path):
    source = tmp_path / "in.jsonl"
    lowercase = {"instructions": [{"id": "change_case:english_lowercase", "kwargs": {}}]}
    _write(source, [
        json.dumps({"id": "x", "completion": "all quiet here", "reference": lowercase}),
        json.dumps({"id": "y", "completion": "Not Quiet", "reference": lowercase}),
        json.dumps({"id": "z", "completion": "fine", "reference": {"instructions": "lowercase"}}),
    ])
    counts = verify_file("ifeval", source, tmp_path / "out.jsonl")
    assert counts == {"pass": 1, "fail": 1, "quarantined": 1}
    assert [r["status"] for r in _read(tmp_path / "out.jsonl")] == ["pass", "fail"]


def test_math_reads_the_last_number_by_default_as_the_flows_do(tmp_path):
    """RewardConfig, EvaluateConfig and curate default to answer_format plain: the last number."""
    source = tmp_path / "in.jsonl"
    _write(source, [
        json.dumps({"id": "a", "completion": "6 x 7 = 42. The answer is 42.", "reference": "42"}),
        json.dumps({"id": "b", "completion": r"\boxed{42}, or rather 41", "reference": "42"}),
        json.dumps({"id": "c", "completion": "no number", "reference": "42"}),
    ])
    verify_file("math", source, tmp_path / "plain.jsonl")
    assert [r["status"] for r in _read(tmp_path / "plain.jsonl")] == ["pass", "fail", "unparsable"]
    verify_file("math", source, tmp_path / "boxed.jsonl", {"answer_format": "boxed"})
    assert [r["status"] for r in _read(tmp_path / "boxed.jsonl")] == ["unparsable", "pass", "unparsable"]


def test_bad_settings_and_output_folder_are_refused_before_reading(tmp_path):
    from passband.flows.config import ConfigError

    source = tmp_path / "in.jsonl"
    _write(source, [json.dumps({"id": "a", "completion": "1", "reference": "1"})])
    with pytest.raises(ConfigError, match=r"^math verifier answer_format: Input should be 'plain' or 'boxed'"):
        verify_file("math", source, tmp_path / "out.jsonl", {"answer_format": "last_number"})
    with pytest.raises(ConfigError, match="^the code verifier has no setting answer_format"):
        verify_file("code", source, tmp_path / "out.jsonl", {"answer_format": "plain"})
    with pytest.raises(ConfigError, match=f"^-o {tmp_path}/no/out.jsonl: no folder {tmp_path}/no$"):
        verify_file("math", source, tmp_path / "no" / "out.jsonl")
    assert not (tmp_path / "out.jsonl").exists()
