"""A reward server: completions scored over HTTP by a service of the user's (OpenRLHF's
`--remote_rm_url`), batched JSON, each request bounded in time and retried a bounded number of times.

Request, one per batch of at most `batch_size` rows: `POST <url>` with `Content-Type:
application/json` and the body
    {"task": "<the rows' task>", "completions": ["...", ...], "references": [<row reference>, ...]}
Response: `200` with the body
    {"scores": [<number in [0, 1]> or null, ...]}          one per completion, in order
and optionally `"statuses": ["pass" | "fail" | "unparsable" | "timeout" | "error", ...]` and
`"details": ["...", ...]` of the same length. null is `unparsable` (masked in RL).

A request that cannot connect, times out (`timeout_s`, connect and each read) or answers 5xx
is retried `retries` times after `backoff_s`, 2 x backoff_s, ...; when the last try fails the
batch raises RewardServerUnreachable in one line naming the URL, so a server that stays down
stops the iteration within timeout_s x (retries + 1) plus the backoff, never hangs and never
scores 0. An answer that is not that schema (not JSON, no `scores`, the wrong length, a score of
"high") is not retried: its rows are `error` with what was wrong, which the error-fraction
check (max_error_fraction) turns into a stop when it is most of the batch.
"""

from __future__ import annotations

import http.client
import json
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from pydantic import Field

from passband.curation.catalog.reward_function import NoSettings, as_result
from passband.curation.catalog.task import Options, Task
from passband.curation.verifiers.result import VerifyResult


class RewardServerConfig(Options):
    """Where and how to reach a reward server (module docstring: the request and response schema)."""

    url: str = Field(pattern=r"^https?://")
    """The endpoint that takes the POST, e.g. http://127.0.0.1:8000/score."""
    batch_size: int = Field(64, ge=1)
    """Completions per request."""
    timeout_s: float = Field(30.0, gt=0)
    """Seconds one request may take to connect, and to deliver each read of its answer."""
    retries: int = Field(2, ge=0)
    """Further tries of a request that failed to connect, timed out or got a 5xx answer."""
    backoff_s: float = Field(0.5, ge=0)
    """Wait before the first retry, doubling before each next one."""
    concurrency: int = Field(4, ge=1)
    """Requests in flight at once."""


class RewardServerUnreachable(RuntimeError):
    """The server failed every try of a request: the iteration stops, naming the URL."""


def post_batch(config: RewardServerConfig, task: str, completions: list[str], references: list[Any]) -> list[VerifyResult]:
    """One request's results (module docstring), with its retries."""
    body = json.dumps({"task": task, "completions": completions, "references": references}).encode()
    request = urllib.request.Request(config.url, data=body, headers={"Content-Type": "application/json"})
    last = ""
    for attempt in range(config.retries + 1):
        if attempt:
            time.sleep(config.backoff_s * 2 ** (attempt - 1))
        try:
            with urllib.request.urlopen(request, timeout=config.timeout_s) as response:
                return parse_answer(config.url, response.read(), len(completions))
        except urllib.error.HTTPError as error:
            if error.code < 500:  # the server refused this request: asking again gets the same answer
                raise RewardServerUnreachable(f"reward server {config.url} answered HTTP {error.code} {error.reason}") from None
            last = f"HTTP {error.code} {error.reason}"
        except (urllib.error.URLError, TimeoutError, ConnectionError, http.client.HTTPException) as error:
            last = str(getattr(error, "reason", error))
    raise RewardServerUnreachable(f"reward server {config.url} failed {config.retries + 1} tries "
                                  f"(timeout_s {config.timeout_s}): {last}")


def parse_answer(url: str, body: bytes, count: int) -> list[VerifyResult]:
    """The `count` results an answer holds; every row `error` naming what is wrong when it does
    not follow the schema."""
    def garbage(why: str) -> list[VerifyResult]:
        return [VerifyResult(0.0, "error", f"reward server {url}: {why}")] * count

    try:
        answer = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return garbage(f"answer is not JSON: {body[:80]!r}")
    if not isinstance(answer, dict) or not isinstance(answer.get("scores"), list):
        return garbage(f"answer has no list 'scores': {str(answer)[:80]}")
    scores = answer["scores"]
    statuses = answer.get("statuses")
    details = answer.get("details") or [""] * len(scores)
    if len(scores) != count or (statuses is not None and len(statuses) != count) or len(details) != count:
        return garbage(f"answer has {len(scores)} scores for {count} completions")
    if statuses is None:
        return [as_result(score) for score in scores]
    return [as_result((score, status, detail)) if score is not None or status != "unparsable"
            else VerifyResult(0.0, "unparsable", str(detail)) for score, status, detail in zip(scores, statuses, details)]


class RewardServer(Task):
    """A task whose rows are scored by a reward server."""

    Settings: ClassVar[type[Options]] = NoSettings
    text_reference: ClassVar[bool] = True  # a reference is sent as the row stores it

    def __init__(self, name: str, config: RewardServerConfig) -> None:
        self.name = name  # type: ignore[misc]  # an instance's name: the one its rows carry
        self.config = config

    def verify(self, completions: list[str], references: list[Any], settings: Options | None = None) -> list[VerifyResult]:
        size = self.config.batch_size
        starts = range(0, len(completions), size)
        with ThreadPoolExecutor(self.config.concurrency) as pool:
            batches = pool.map(lambda start: post_batch(self.config, self.name, completions[start:start + size],
                                                         references[start:start + size]), starts)
            return [result for batch in batches for result in batch]

    def reference_error(self, reference: Any) -> str | None:
        return None  # any reference is the server's business
