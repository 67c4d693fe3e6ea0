"""A reward server (curation/catalog/reward_server.py) on loopback, started by the test: scores
arrive batched and in order, a 5xx is retried, a server that goes away or hangs stops the call in
one line naming the URL within timeout_s x (retries + 1) plus the backoff, and an answer that is
not the schema is reported per row as `error`, never scored."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from passband.curation.catalog.reward_function import UserRewardError
from passband.curation.catalog.reward_server import RewardServer, RewardServerConfig, RewardServerUnreachable
from passband.curation.catalog.user import verify_user_groups

Answer = Callable[[dict, int], tuple[int, bytes]]
"""(request body, request number from 1) -> (HTTP status, answer body)."""


def exact(request: dict, number: int) -> tuple[int, bytes]:
    scores = [None if not c else float(c == r) for c, r in zip(request["completions"], request["references"])]
    return 200, json.dumps({"scores": scores}).encode()


@pytest.fixture
def serve() -> Iterator[Callable[[Answer], tuple[str, list[dict]]]]:
    """serve(answer) -> (URL, the requests it received): a server on 127.0.0.1 in this process."""
    servers = []

    def start(answer: Answer) -> tuple[str, list[dict]]:
        received: list[dict] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                received.append(request)
                status, body = answer(request, len(received))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/score", received

    start.servers = servers  # type: ignore[attr-defined]  # for a test that takes its server down
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def config(url: str, **settings: object) -> RewardServerConfig:
    # timeout_s 10 where the test times nothing: a busy shared machine must not turn a slow answer into a failure
    return RewardServerConfig(url=url, **{"timeout_s": 10.0, "retries": 2, "backoff_s": 0.1} | settings)


SLACK_S = 1.0
"""Scheduling slack on top of a bound (a 2-core machine shared with other work)."""


def test_scores_arrive_batched_and_in_order(serve) -> None:
    url, received = serve(exact)
    server = RewardServer("opposites", config(url, batch_size=2, concurrency=2))
    results = server.verify(["cold", "up", "", "down", "dark"], ["cold", "down", "x", "down", "light"])
    assert [(r.score, r.status) for r in results] == [
        (1.0, "pass"), (0.0, "fail"), (0.0, "unparsable"), (1.0, "pass"), (0.0, "fail")]
    assert sorted(len(r["completions"]) for r in received) == [1, 2, 2]
    assert {r["task"] for r in received} == {"opposites"}


def test_statuses_and_details_of_the_answer_are_kept(serve) -> None:
    url, _ = serve(lambda request, number: (200, json.dumps(
        {"scores": [0.5, None], "statuses": ["timeout", "unparsable"], "details": ["slow", "empty"]}).encode()))
    results = RewardServer("t", config(url)).verify(["a", "b"], [1, 2])
    assert [(r.score, r.status, r.detail) for r in results] == [(0.5, "timeout", "slow"), (0.0, "unparsable", "empty")]


def test_a_5xx_is_retried(serve) -> None:
    url, received = serve(lambda request, number: (503, b"busy") if number == 1 else exact(request, number))
    assert [r.status for r in RewardServer("t", config(url)).verify(["a"], ["a"])] == ["pass"]
    assert len(received) == 2


def test_a_4xx_is_one_line_at_once(serve) -> None:
    url, received = serve(lambda request, number: (404, b"no"))
    with pytest.raises(RewardServerUnreachable) as failed:
        RewardServer("t", config(url)).verify(["a"], ["a"])
    assert str(failed.value) == f"reward server {url} answered HTTP 404 Not Found" and len(received) == 1


@pytest.mark.parametrize(("body", "why"), [
    (b"<html>oops</html>", "answer is not JSON: b'<html>oops</html>'"),
    (b'{"score": [1]}', "answer has no list 'scores': {'score': [1]}"),
    (b'{"scores": [1, 0, 1]}', "answer has 3 scores for 2 completions"),
])
def test_garbage_is_reported_not_scored(serve, body: bytes, why: str) -> None:
    url, _ = serve(lambda request, number: (200, body))
    results = RewardServer("t", config(url)).verify(["a", "b"], ["a", "b"])
    assert [(r.score, r.status, r.detail) for r in results] == [(0.0, "error", f"reward server {url}: {why}")] * 2
    with pytest.raises(UserRewardError, match=r"task 't': 2 of 2 rollouts of the batch are `error`"):
        verify_user_groups(["t"], ["a"], [["a", "b"]], {"t": config(url)}, max_error_fraction=0.5)


def test_a_score_out_of_range_is_an_error_row(serve) -> None:
    url, _ = serve(lambda request, number: (200, b'{"scores": [1, "high"]}'))
    results = RewardServer("t", config(url)).verify(["a", "b"], ["a", "b"])
    assert [(r.score, r.status) for r in results] == [(1.0, "pass"), (0.0, "error")]
    assert results[1].detail == "the reward returned str 'high', not a score"


def test_a_server_killed_mid_way_stops_within_its_bound(serve) -> None:
    """The first batch is answered; then the server goes away: its listener closed and the request
    in flight dropped with no answer. timeout_s 1, retries 2, backoff 0.1: bound 1 x 3 + 0.1 + 0.2 s."""
    servers: list[ThreadingHTTPServer] = []

    def answer_once(request: dict, number: int) -> tuple[int, bytes]:
        if number > 1:
            servers[0].socket.close()  # nothing listens any more: every retry is refused
            raise ConnectionAbortedError("killed")  # this handler dies: the connection closes unanswered
        return exact(request, number)

    url, received = serve(answer_once)
    servers.extend(serve.servers)
    server = RewardServer("t", config(url, timeout_s=1.0, batch_size=2, concurrency=1))
    start = time.monotonic()
    with pytest.raises(RewardServerUnreachable) as failed:
        server.verify(["a", "b", "c", "d"], ["a", "b", "c", "d"])
    assert time.monotonic() - start < 1.0 * 3 + 0.1 + 0.2 + SLACK_S
    assert len(str(failed.value).splitlines()) == 1
    assert str(failed.value).startswith(f"reward server {url} failed 3 tries (timeout_s 1.0): ")
    assert len(received) == 2  # the answered batch and the dropped one; the retries found no one


def test_a_server_that_never_answers_stops_within_its_bound(serve) -> None:
    """Each try waits timeout_s 0.5 for an answer that does not come (the handler sleeps 3 s, then
    writes to a closed connection); retries 1, backoff 0.1."""
    url, received = serve(lambda request, number: (time.sleep(3), exact(request, number))[1])
    start = time.monotonic()
    with pytest.raises(RewardServerUnreachable) as failed:
        RewardServer("t", config(url, timeout_s=0.5, retries=1)).verify(["a"], ["a"])
    assert time.monotonic() - start < 0.5 * 2 + 0.1 + SLACK_S
    assert str(failed.value) == f"reward server {url} failed 2 tries (timeout_s 0.5): timed out"
    assert len(received) == 2


def test_nothing_listening_is_refused_in_one_line() -> None:
    with socket.socket() as probe:  # a port that was free a moment ago and that nobody listens on now
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}/score"
    with pytest.raises(RewardServerUnreachable) as failed:
        RewardServer("t", config(url, retries=1)).verify(["a"], ["a"])
    assert str(failed.value) == f"reward server {url} failed 2 tries (timeout_s 10.0): [Errno 111] Connection refused"
