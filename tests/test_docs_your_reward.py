"""docs/your-reward.md, run: its package (tests/user_package.py writes and installs it), its rows,
my-reward.yaml and my-server.yaml read as `passband run rl --config ...` reads them, the rows loaded
(ProblemSource.load, as the flow's problem_rows) and scored as the flow scores them (score_groups), my-reward-model.yaml
with a tiny random classifier in its folder, its reward_server.py started on loopback
(then killed), and its `passband verify` line.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from passband.cli.main import main
from passband.curation.catalog.reward_server import RewardServerConfig, RewardServerUnreachable
from passband.curation.catalog.user import verify_user_groups
from passband.flows.config import resolve_config
from passband.flows.rl.flow import RLConfig
from passband.training.judge.score import score_groups
from user_package import block, forget_user_code, install_user_package


@pytest.fixture
def page_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A working directory holding the page's files, its package installed."""
    install_user_package(tmp_path / "site", monkeypatch)
    (tmp_path / "data").mkdir()
    for name in ("data/opposites.jsonl", "data/capitals.jsonl"):
        (tmp_path / name).write_text(block(f"jsonl {name}"))
    for name in ("my-reward.yaml", "my-server.yaml", "my-reward-model.yaml", "my-curate.yaml", "my-combined.yaml"):
        (tmp_path / name).write_text(block(f"yaml {name}"))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    forget_user_code()


def test_the_reward_function_and_the_task_as_the_rl_flow_loads_and_scores_them(page_home: Path) -> None:
    config = resolve_config(RLConfig, "rl", config_files=Path("my-reward.yaml"))
    assert config.reward.verifiers.rewards == {"opposites": "mypkg.rewards:last_word"}
    loaded = {task: source.load() for task, source in config.datasets.items()}  # as the flow's problem_rows
    problems = {task: result.rows for task, result in loaded.items()}
    assert {task: [row["id"] for row in rows] for task, rows in problems.items()} == {
        "opposites": ["opp-1", "opp-2"], "capitals": ["cap-1", "cap-2"]}
    assert [q["row_number"] for q in loaded["capitals"].quarantined] == [3]  # cap-3's reference is not the task's
    rows = problems["opposites"] + problems["capitals"]
    completions = [["Cold.", "warm"], ["", "down"], ["Paris", "paris."], ["Milan", "It is Rome"]]
    results, _ = score_groups([row["task"] for row in rows], [row["prompt"] for row in rows],
                              [row["reference"] for row in rows], completions, config.reward.verifiers, {})
    assert [[(r.score, r.status) for r in group] for group in results] == [
        [(1.0, "pass"), (0.0, "fail")], [(0.0, "unparsable"), (1.0, "pass")],
        [(1.0, "pass"), (1.0, "pass")], [(0.0, "fail"), (1.0, "pass")]]


def test_a_dataset_key_nobody_scores_is_refused_when_the_config_is_read(page_home: Path) -> None:
    typo = block("yaml my-reward.yaml").replace("  opposites: {path: data/opposites.jsonl, task: opposites}",
                                                "  opposits: {path: data/opposites.jsonl, task: opposits}")
    Path("typo.yaml").write_text(typo)
    with pytest.raises(ValueError, match=r"datasets keys must be catalog tasks .* \(got \['capitals', 'opposits'\]\)"):
        resolve_config(RLConfig, "rl", config_files=Path("typo.yaml"))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_the_reward_server_scores_then_killed_fails_in_one_line(page_home: Path) -> None:
    port = free_port()  # the page's 8765 may be taken on a shared machine
    Path("my-server.yaml").write_text(block("yaml my-server.yaml").replace("8765", str(port)))
    config = resolve_config(RLConfig, "rl", config_files=[Path("my-reward.yaml"), Path("my-server.yaml")])
    server_config = config.reward.verifiers.rewards["opposites"]
    assert isinstance(server_config, RewardServerConfig) and server_config.batch_size == 16
    assert config.datasets["capitals"].path == "data/capitals.jsonl"  # my-reward.yaml's, kept
    Path("reward_server.py").write_text(block("python reward_server.py"))
    environment = {**os.environ, "PYTHONPATH": str(page_home / "site")}
    server = subprocess.Popen([sys.executable, "reward_server.py", str(port)], env=environment)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # bounded wait for it to listen
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        results = verify_user_groups(["opposites"], ["cold"], [["cold", "hot", ""]], config.reward.verifiers.rewards,
                                     config.reward.verifiers.max_error_fraction)
        assert [(r.score, r.status) for r in results[0]] == [(1.0, "pass"), (0.0, "fail"), (0.0, "unparsable")]
        verify_server_line(port)
    finally:
        server.kill()
        server.wait(timeout=30)
    bound = server_config.timeout_s * (server_config.retries + 1) + server_config.backoff_s * (1 + 2)
    start = time.monotonic()
    with pytest.raises(RewardServerUnreachable) as failed:
        verify_user_groups(["opposites"], ["cold"], [["cold"]], config.reward.verifiers.rewards, 0.5)
    assert time.monotonic() - start < bound + 1.0  # a second of slack on a shared machine
    assert str(failed.value) == (f"reward server http://127.0.0.1:{port}/score failed 3 tries (timeout_s 10.0): "
                                 "[Errno 111] Connection refused")


def test_the_verify_line(page_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    environment, argv = {}, shlex.split(block("bash verify"))
    while "=" in argv[0]:
        name, _, value = argv.pop(0).partition("=")
        environment[name] = value
    assert environment == {"PASSBAND_ALLOW_USER_CODE": "1"} and argv[0] == "passband"
    Path("answers.jsonl").write_text(json.dumps({"id": "a", "completion": "Rome.", "reference": {"capital": "Rome"}})
                                     + "\n" + json.dumps({"id": "b", "completion": "", "reference": {"capital": "Rome"}})
                                     + "\n")
    monkeypatch.delenv("PASSBAND_ALLOW_USER_CODE")  # the line's own assignment must be what allows it
    forget_user_code()
    result = CliRunner().invoke(main, argv[1:], env=environment)
    assert result.exit_code == 0, result.output
    assert [(row["id"], row["score"], row["status"]) for row in map(json.loads, Path("scored.jsonl").read_text().splitlines())] == [
        ("a", 1.0, "pass"), ("b", 0.0, "unparsable")]


def test_the_reward_model_config(page_home: Path) -> None:
    from passband.curation.catalog.reward_model import RewardModelConfig
    from test_reward_model import alone, build_reward_model

    config = resolve_config(RLConfig, "rl", config_files=[Path("my-reward.yaml"), Path("my-reward-model.yaml")])
    model = config.reward.verifiers.rewards["opposites"]
    assert model == RewardModelConfig(model="models/my-reward-model", batch_size=8, max_length=1024, device="auto")
    build_reward_model(Path("models/my-reward-model"))
    results, _ = score_groups(["opposites"], ["What is the opposite of hot?"], ["cold"], [["cold", "warm"]],
                              config.reward.verifiers, {})
    expected = [alone(Path("models/my-reward-model"), "What is the opposite of hot?", text) for text in ("cold", "warm")]
    assert [r.score for r in results[0]] == pytest.approx(expected, abs=1e-5)


def verify_server_line(port: int) -> None:
    """The page's `passband verify --reward-url` line against its server (on `port`)."""
    argv = shlex.split(block("bash verify-server").replace("8765", str(port)))
    Path("answers.jsonl").write_text("".join(json.dumps({"id": i, "completion": c, "reference": "cold"}) + "\n"
                                             for i, c in (("a", "Cold."), ("b", "hot"), ("c", ""))))
    result = CliRunner().invoke(main, argv[1:])
    assert result.exit_code == 0, result.output
    assert [(row["id"], row["score"], row["status"]) for row in map(json.loads, Path("scored.jsonl").read_text().splitlines())] == [
        ("a", 1.0, "pass"), ("b", 0.0, "fail"), ("c", 0.0, "unparsable")]


def test_the_curate_config_of_a_task_of_yours(page_home: Path) -> None:
    from passband.flows.curate.config import CurateConfig

    config = resolve_config(CurateConfig, "curate", config_files=Path("my-curate.yaml"))
    (pool,) = config.pools().values()
    assert list(config.pools()) == ["capitals"] and pool.eval_size == 1 and pool.band is None
    loaded = pool.source.load()  # as the flow's load_problems_task
    assert [row["id"] for row in loaded.rows] == ["cap-1", "cap-2"]
    assert [q["row_number"] for q in loaded.quarantined] == [3]


def test_the_combined_reward_config(page_home: Path) -> None:
    from passband.curation.catalog.reward_model import RewardModelConfig

    config = resolve_config(RLConfig, "rl", config_files=Path("my-combined.yaml"))
    assert config.reward.verifiers.rewards == {"math": RewardModelConfig(
        model="models/my-reward-model", combine="sum", verifier_weight=0.7, engine="vllm")}
