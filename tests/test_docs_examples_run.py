"""The docs' examples run end to end as a user runs them (issue 66): docs/your-reward.md's
my-reward.yaml with its own small shape (2 prompts x 4 samples x 16 tokens, on the shipped model and
vLLM: the batch whose KV cache once came out a block short), and docs/multi-turn.md's own-environment
example (`environments: {math: {environment: "mypkg.envs:SayTheAnswer", ...}}`) in RL, whose episodes
must be counted. Each is `passband run rl --config FILE` in a subprocess, with the opt-in."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from doc_blocks import fenced_blocks
from user_package import block, install_user_package

pytestmark = pytest.mark.slow  # two RL runs of SmolLM2 on vLLM: minutes on a CPU
BIN = Path(sys.executable).parent / "passband"
TESTS = Path(__file__).resolve().parent
MULTI_TURN = TESTS.parent / "docs" / "multi-turn.md"


def run_rl(root: Path, config: str) -> dict:
    env = {**os.environ, "PASSBAND_HOME": str(root / "home"), "PASSBAND_ALLOW_USER_CODE": "1",
           "PYTHONPATH": str(root / "site")}
    result = subprocess.run([str(BIN), "run", "rl", "--config", config], cwd=root, capture_output=True, text=True,
                            timeout=3000, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    (line,) = result.stdout.splitlines()
    summary = json.loads(line)
    print(f"\n{config}: {summary['status']}, " + ", ".join(
        f"{k} {v:.3g}" for k, v in sorted(summary["metrics"].items()) if k.split("/")[0] in ("math", "opposites", "capitals")
        or k in ("wall_s", "reward_mean")))
    return summary


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_user_package(tmp_path / "site", monkeypatch,
                         extra={"envs": (TESTS / "user_environment_fixture.py").read_text()})
    (tmp_path / "data").mkdir()
    for name in ("data/opposites.jsonl", "data/capitals.jsonl"):
        (tmp_path / name).write_text(block(f"jsonl {name}"))
    (tmp_path / "my-reward.yaml").write_text(block("yaml my-reward.yaml"))
    return tmp_path


def test_your_reward_rl_example_runs_as_written(root: Path) -> None:
    summary = run_rl(root, "my-reward.yaml")
    assert summary["status"] == "completed"
    assert "opposites/reward" in summary["metrics"] and "capitals/reward" in summary["metrics"]


def test_multi_turn_own_environment_example_runs_in_rl(root: Path) -> None:
    (snippet,) = [body for kind, body in fenced_blocks(MULTI_TURN.read_text()) if kind == "yaml"
                  and "environments:" in body]
    # RL's default datasets, as the example keeps them: 3 prompts take one of each of math, code, ifeval
    settings = yaml.safe_load(snippet) | {"prompts_per_step": 3, "num_iterations": 1, "eval": None,
                                          "sampling": {"n": 2, "max_tokens": 16}}
    (root / "env.yaml").write_text(yaml.safe_dump(settings))
    summary = run_rl(root, "env.yaml")
    assert summary["metrics"]["math/num_episodes"] == 1 * 2
    assert 1 * 2 <= summary["metrics"]["math/num_turns"] <= 3 * 1 * 2
