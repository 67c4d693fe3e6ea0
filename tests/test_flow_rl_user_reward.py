"""The rl flow on rewards of the user's own (issue 54), with the tiny digit model of test_flow_rl
(it answers "1" or "2"), the hf engine and docs/your-reward.md's package:

1. A reward function named in reward.verifiers.rewards and an entry-point task train side by side,
   and score the held-out set: every kept rollout's reward is what the page's rule gives its text.
2. The same reward from a reward server on loopback: the same rewards arrive; the server taken down
   fails the next run in one line naming the URL, within timeout_s x (retries + 1) plus the backoff.
The runs print seconds/scoring per iteration for the built-in math verifier, the function and the
server (the cost the issue asks for; `pytest -s` shows it).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from mlflow import MlflowClient
from prefect.testing.utilities import prefect_test_harness

from passband.curation.catalog import VerifierSettings
from passband.curation.catalog.reward_server import RewardServerConfig, RewardServerUnreachable
from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.evaluate.config import EvalConfig
from passband.flows.rl.flow import RewardConfig, RLConfig, rl
from passband.tasks.steps.rollouts_log import ROLLOUTS_TAG, read_rollouts
from passband.training.rl.config import RLAlgoConfig
from test_flow_rl import EVAL_PROMPTS, TRAIN_PROMPTS, _digit_model
from user_package import forget_user_code, install_user_package

pytestmark = pytest.mark.slow  # four RL runs of the tiny model and a Prefect harness: 4-7 minutes here


@pytest.fixture(scope="module")
def harness():
    with prefect_test_harness(server_startup_timeout=300):  # the shared 2-core box can be slow to start it
        yield


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    install_user_package(tmp_path / "site", monkeypatch)
    _digit_model(tmp_path / "digits")
    for name, prompts in (("train", TRAIN_PROMPTS), ("eval", EVAL_PROMPTS)):
        (tmp_path / f"{name}_opposites.jsonl").write_text("".join(
            json.dumps({"id": p, "prompt": p, "reference": "1"}) + "\n" for p in prompts))
    (tmp_path / "train_capitals.jsonl").write_text("".join(
        json.dumps({"id": f"c-{p}", "task": "capitals", "prompt": p, "reference": {"capital": "2"}}) + "\n"
        for p in TRAIN_PROMPTS))
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-rl-user-reward")
    yield tmp_path
    forget_user_code()


def config(tmp: Path, datasets: dict[str, ProblemSource], rewards: dict, **overrides) -> RLConfig:
    verifiers = VerifierSettings(rewards=rewards)
    held_out = EvalConfig(suites={"held_out": ProblemSource(path=str(tmp / "eval_opposites.jsonl"), task="opposites")},
                          verifiers=verifiers, sampling=SamplingConfig(n=2, max_tokens=4))
    settings = {"eval": held_out, "best_metric": "held_out/pass@1"} | overrides
    return RLConfig(
        model=str(tmp / "digits"), datasets=datasets, prompts_per_step=2, num_iterations=2, seed=7,
        sampling=SamplingConfig(n=4, max_tokens=4), engine=EngineConfig(kind="hf"),
        algo=RLAlgoConfig(lr=1e-2, micro_batch_size=3), checkpoint_every=0, reward=RewardConfig(verifiers=verifiers),
        **settings)


def opposites(tmp: Path) -> ProblemSource:
    return ProblemSource(path=str(tmp / "train_opposites.jsonl"), task="opposites")


def last_word_reward(text: str, reference: str) -> float | None:
    """The page's rule, by hand: the last word against the reference; None for an empty text."""
    words = text.split()
    return None if not words else float(words[-1].rstrip(".").lower() == reference)


def by_hand(text: str, reference: str) -> tuple[float, str]:
    """(score, status) the page's rule gives `text`."""
    score = last_word_reward(text, reference)
    return (0.0, "unparsable") if score is None else (score, "pass" if score == 1.0 else "fail")


def verdict(row: dict) -> tuple[float, str]:
    return row["score"], row["status"]


def kept_rollouts(summary) -> list[dict]:
    return read_rollouts(MlflowClient().get_run(summary.mlflow_run_id).data.tags[ROLLOUTS_TAG]).to_pylist()


def scoring_seconds(summary) -> float:
    history = MlflowClient().get_metric_history(summary.mlflow_run_id, "seconds/scoring")
    return sum(m.value for m in history) / len(history)


def test_a_reward_function_and_an_entry_point_task_train_and_evaluate(harness, home) -> None:
    rewards = {"opposites": "mypkg.rewards:last_word"}  # the held-out set is an opposites set in both runs
    math_run = rl(config(home, {"math": ProblemSource(path=str(home / "train_opposites.jsonl"), task="math")}, rewards))
    summary = rl(config(home, {"opposites": opposites(home),
                               "capitals": ProblemSource(path=str(home / "train_capitals.jsonl"))}, rewards))
    assert summary.status == "completed"
    rows = kept_rollouts(summary)
    assert {row["task"] for row in rows} == {"opposites", "capitals"} and len(rows) == 2 * 2 * 4
    for row in rows:
        assert verdict(row) == by_hand(row["completion"], "1" if row["task"] == "opposites" else "2"), row
    for task in ("opposites", "capitals"):
        assert f"{task}/reward" in summary.metrics
    assert "before/held_out/pass@1" in summary.metrics and "after/held_out/pass@1" in summary.metrics
    print(f"\nseconds/scoring per iteration: built-in math {scoring_seconds(math_run):.4f}, "
          f"a reward function + an entry-point task {scoring_seconds(summary):.4f}")


def test_a_reward_server_scores_and_one_gone_fails_in_one_line(harness, home) -> None:
    class Score(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            scores = [last_word_reward(c, r) for c, r in zip(request["completions"], request["references"])]
            answer = json.dumps({"scores": scores}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Score)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/score"
    reward = RewardServerConfig(url=url, batch_size=3, timeout_s=1.0, retries=2, backoff_s=0.1)
    summary = rl(config(home, {"opposites": opposites(home)}, {"opposites": reward}))
    assert summary.status == "completed"
    for row in kept_rollouts(summary):
        assert verdict(row) == by_hand(row["completion"], "1"), row
    print(f"\nseconds/scoring per iteration: a reward server on loopback {scoring_seconds(summary):.4f}")

    server.shutdown()
    server.server_close()
    start = time.monotonic()
    with pytest.raises(RewardServerUnreachable) as failed:
        # no held-out evaluation: the first call that reaches the server is iteration 1's rollout scoring
        rl(config(home, {"opposites": opposites(home)}, {"opposites": reward}, force=True, resume=False, eval=None))
    assert str(failed.value) == f"reward server {url} failed 3 tries (timeout_s 1.0): [Errno 111] Connection refused"
    assert time.monotonic() - start < 120, "the run must fail at its first scoring, not hang"
