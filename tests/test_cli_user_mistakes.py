"""Mistakes a user can make, each refused by the CLI in one `Error:` line with exit 2, never a
traceback, before any model or engine is touched (issue 66 items 2 and 4): their own code without
PASSBAND_ALLOW_USER_CODE, in every place a config can name it, and a device this machine has not.
The configs are docs/your-reward.md's own (tests/user_package.py writes its package and files)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import yaml

from test_cli_errors import fails_in_one_line  # one `Error:` line, exit 2, no traceback
from user_package import block, forget_user_code, install_user_package

OPT_IN_LINE = "set PASSBAND_ALLOW_USER_CODE=1 to allow it"


@pytest.fixture
def page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """docs/your-reward.md's package installed but NOT opted in, its data files and configs, a home."""
    install_user_package(tmp_path / "site", monkeypatch, allow=False)
    (tmp_path / "data").mkdir()
    for name in ("data/opposites.jsonl", "data/capitals.jsonl"):
        (tmp_path / name).write_text(block(f"jsonl {name}"))
    (tmp_path / "my-reward.yaml").write_text(block("yaml my-reward.yaml"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    yield tmp_path
    forget_user_code()


OPPOSITES = {"path": "data/opposites.jsonl", "task": "opposites"}
SERVER = {"url": "http://127.0.0.1:9/score"}  # a reward server: no opt-in needed (only JSON crosses)
LAST_WORD = "mypkg.rewards:last_word"
# (flow, its config file, the setting and name the refusal names)
USES = [
    ("rl", {"datasets": {"opposites": OPPOSITES}, "reward": {"verifiers": {"rewards": {"opposites": LAST_WORD}}}},
     f"reward.verifiers.rewards.opposites: {LAST_WORD}"),
    ("rl", {"datasets": {"opposites": OPPOSITES}, "reward": {"verifiers": {"rewards": {"opposites": SERVER}}},
            "eval": {"suites": {"held_out": OPPOSITES}, "verifiers": {"rewards": {"opposites": LAST_WORD}}}},
     f"eval.verifiers.rewards.opposites: {LAST_WORD}"),
    ("rl", {"datasets": {"capitals": {"path": "data/capitals.jsonl"}}}, "datasets.capitals: capitals"),
    ("rl", {"datasets": {LAST_WORD: {"path": "data/opposites.jsonl", "task": LAST_WORD}}},
     f"datasets.{LAST_WORD}: {LAST_WORD}"),
    ("rl", {"datasets": {"opposites": OPPOSITES}, "reward": {"verifiers": {"rewards": {"opposites": SERVER}}},
            "environments": {"opposites": {"environment": "mypkg.envs:Hints"}}},
     "environments.opposites.environment: mypkg.envs:Hints"),
    ("pipeline", {"rl": {"reward": {"verifiers": {"rewards": {"math": LAST_WORD}}}}},
     f"rl.reward.verifiers.rewards.math: {LAST_WORD}"),
    ("evaluate", {"suites": {"mine": {"path": "data/capitals.jsonl", "task": "capitals"}}}, "suites.mine.task: capitals"),
]


@pytest.mark.parametrize("flow,settings,named", USES, ids=[named.split(":")[0] for _, _, named in USES])
@pytest.mark.parametrize("command", ["config", "run"])
def test_own_code_without_the_opt_in_is_refused_at_once(page: Path, command: str, flow: str, settings: dict,
                                                        named: str) -> None:
    path = page / "mine.yaml"
    path.write_text(yaml.safe_dump({"eval": None} | settings if flow == "rl" else settings))
    start = time.perf_counter()
    line = fails_in_one_line(command, flow, "--config", str(path))
    assert line.startswith("preflight: your own code would run inside passband's process (") and named in line, line
    assert line.endswith(OPT_IN_LINE)
    assert time.perf_counter() - start < 30, "refused before any model or engine is touched"


def test_the_pages_rl_example_without_the_opt_in(page: Path) -> None:
    for command in ("config", "run"):
        line = fails_in_one_line(command, "rl", "--config", "my-reward.yaml")
        assert line == ("preflight: your own code would run inside passband's process (datasets.capitals: capitals, "
                        "reward.verifiers.rewards.opposites: mypkg.rewards:last_word): " + OPT_IN_LINE)


@pytest.mark.skipif(torch.cuda.is_available(), reason="asks for a device this machine has not")
def test_a_device_this_machine_has_not(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / "home"))
    line = fails_in_one_line("run", "sft", "--preset", "smoke", "--set", "stages.0.device=cuda")
    assert line.startswith("preflight: sft.stages.0: device='cuda' but torch sees no CUDA device"), line
