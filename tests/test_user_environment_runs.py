"""A user's environment (`environments:`) is opened by every flow that has the setting, as a user
runs it (issue 66 item 1): `passband run rl` and `passband run evaluate` on the tiny digit model of
test_flow_rl, curation's pass-rate sampling on a scripted policy. The environment asks for a second
turn on every episode (tests/two_turn_environment.py), so a flow that opened it counts exactly two
turns per episode, and one that rolled its rows out single-turn counts none."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from episode_fixtures import ScriptedPolicy
from passband.curation.catalog import VerifierSettings
from passband.flows.curate.config import CurateConfig
from passband.tasks.sampling.passrate_job import sample_shard
from test_flow_rl import EVAL_PROMPTS, TRAIN_PROMPTS, _digit_model, _rows_file
from tiny_chat_model import IM_END, tiny_tokenizer

BIN = Path(sys.executable).parent / "passband"
TESTS = Path(__file__).resolve().parent
ENVIRONMENTS = {"math": {"environment": "two_turn_environment:AskTwice", "budget": {"max_turns": 3}}}
PROMPTS_PER_STEP, N = 2, 2


def passband(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PASSBAND_HOME": str(home / "home"), "PASSBAND_ALLOW_USER_CODE": "1",
           "PYTHONPATH": str(TESTS), "PASSBAND_EXPERIMENT": "test-user-environment-runs"}
    return subprocess.run([str(BIN), *args], cwd=home, capture_output=True, text=True, timeout=900, env=env)


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("environments")
    _digit_model(root / "digits")
    _rows_file(root / "train.jsonl", TRAIN_PROMPTS)
    _rows_file(root / "eval.jsonl", EVAL_PROMPTS)
    return root


def run_with(home: Path, flow: str, config: dict) -> dict:
    path = home / f"{flow}.yaml"
    path.write_text(yaml.safe_dump(config))
    result = passband("run", flow, "--config", str(path), home=home)
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = result.stdout.splitlines()
    return json.loads(line)


def test_rl_rolls_out_the_users_environment(home: Path) -> None:
    summary = run_with(home, "rl", {
        "model": str(home / "digits"), "datasets": {"math": {"path": str(home / "train.jsonl"), "task": "math"}},
        "prompts_per_step": PROMPTS_PER_STEP, "num_iterations": 1, "seed": 7,
        "sampling": {"n": N, "max_tokens": 4}, "engine": {"kind": "hf"},
        "algo": {"lr": 1e-2, "micro_batch_size": 4}, "checkpoint_every": 0, "eval": None,
        "environments": ENVIRONMENTS})
    metrics = summary["metrics"]
    assert metrics["math/num_episodes"] == PROMPTS_PER_STEP * N
    assert metrics["math/num_turns"] == 2 * PROMPTS_PER_STEP * N
    shown = passband("rollouts", summary["mlflow_run_id"], home=home)
    assert shown.returncode == 0, shown.stderr[-2000:]
    headers = [line for line in shown.stdout.splitlines() if line.startswith("iteration ")]
    assert len(headers) == PROMPTS_PER_STEP * N and all(line.endswith(", 2 turns") for line in headers), shown.stdout


def test_evaluate_runs_the_users_environment(home: Path) -> None:
    summary = run_with(home, "evaluate", {
        "model": str(home / "digits"), "engine": {"kind": "hf"}, "perplexity_samples": 2,
        "suites": {"math": {"path": str(home / "eval.jsonl"), "task": "math"}},
        "sampling": {"n": N, "max_tokens": 4}, "environments": ENVIRONMENTS})
    assert summary["metrics"]["math/mean_turns"] == 2.0


def test_curation_samples_pass_rates_over_the_users_episodes(monkeypatch) -> None:
    monkeypatch.setenv("PASSBAND_ALLOW_USER_CODE", "1")
    monkeypatch.syspath_prepend(str(TESTS))
    sampling = CurateConfig.model_validate({"environments": ENVIRONMENTS,
                                            "pass_rate": {"sampling": {"n": 3, "max_tokens": 8}}}).pass_rate_sampling()
    row = {"id": "m0", "task": "math", "prompt": "What is 3 + 4?", "reference": "7"}
    # first turns say 6, 7, 6; the environment asks again; second turns say 7, 6, 7
    policy = ScriptedPolicy({f"0/m0/{member}": [list(first.encode()) + [IM_END], list(second.encode()) + [IM_END]]
                             for member, (first, second) in enumerate(zip("676", "767"))})
    summaries, samples = sample_shard.fn([row], policy, tiny_tokenizer(), sampling.for_task("math"),
                                         VerifierSettings(), None)
    assert [(s["num_turns"], s["completion"], s["status"]) for s in samples] == \
        [(2, "7", "pass"), (2, "6", "fail"), (2, "7", "pass")]  # graded on the second turn
    assert (summaries[0]["pass_count"], summaries[0]["num_samples"]) == (2, 3)
