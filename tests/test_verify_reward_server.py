"""`passband verify --reward-url`: a file scored by a reward server on loopback (test_reward_server's
`serve`), the verdicts its answers give, in order; the server gone is one line naming the URL, exit 1
and nothing written; an answer that is not the schema is written as `error` rows, not scores."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from click.testing import CliRunner

from passband.cli.main import main
from test_reward_server import exact, serve  # noqa: F401  # serve: the fixture

ROWS = [("a", "cold", "cold"), ("b", "warm", "cold"), ("c", "", "up"), ("d", "down", "down")]


def answers(folder: Path) -> Path:
    path = folder / "answers.jsonl"
    path.write_text("".join(json.dumps({"id": i, "completion": c, "reference": r}) + "\n" for i, c, r in ROWS))
    return path


def run(folder: Path, *options: str):
    return CliRunner().invoke(main, ["verify", "--task", "opposites", str(answers(folder)),
                                     "-o", str(folder / "scored.jsonl"), *options])


def test_a_reward_server_scores_the_file(serve, tmp_path: Path) -> None:
    url, received = serve(exact)
    result = run(tmp_path, "--reward-url", url)
    assert result.exit_code == 0, result.output
    scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    # exact(): 1.0 for the reference itself, 0.0 for another word, null (unparsable) for nothing
    assert [(row["id"], row["score"], row["status"]) for row in scored] == [
        ("a", 1.0, "pass"), ("b", 0.0, "fail"), ("c", 0.0, "unparsable"), ("d", 1.0, "pass")]
    assert [request["task"] for request in received] == ["opposites"]
    assert received[0]["references"] == ["cold", "cold", "up", "down"]
    assert "pass=2 fail=1 unparsable=1" in result.output


def test_garbage_is_written_as_error_rows(serve, tmp_path: Path) -> None:
    url, _ = serve(lambda request, number: (200, b"<html>oops</html>"))
    result = run(tmp_path, "--reward-url", url)
    assert result.exit_code == 0, result.output
    scored = [json.loads(line) for line in (tmp_path / "scored.jsonl").read_text().splitlines()]
    assert {(row["score"], row["status"], row["detail"]) for row in scored} == {
        (0.0, "error", f"reward server {url}: answer is not JSON: b'<html>oops</html>'")}


def test_a_server_down_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/score"
    result = run(tmp_path, "--reward-url", url, "--reward-timeout-s", "1", "--reward-retries", "1")
    assert result.exit_code == 1
    assert result.output == f"Error: reward server {url} failed 2 tries (timeout_s 1.0): [Errno 111] Connection refused\n"
    assert not (tmp_path / "scored.jsonl").exists()


def test_bad_server_options_are_refused(tmp_path: Path) -> None:
    result = run(tmp_path, "--reward-url", "ftp://example/score")
    assert result.exit_code == 2 and "--reward-url: String should match pattern '^https?://'" in result.output
    result = run(tmp_path, "--reward-url", "http://127.0.0.1:9/score", "--rule", "boxed")
    assert result.exit_code == 2
    assert "answer_format: verifier settings, but a reward server scores these rows; drop them" in result.output
