"""One GPU shared by trainer and engine (issue 50 item 2), the RL loop's half: after its rollouts the
engine drops what the sync rebuilds and sleeps (vLLM sleep mode on CUDA), and it wakes before the
update's weights reach it. Sleep mode itself needs CUDA; here the loop's calls are recorded in order
(the rollouts and the push are replaced by recorders too: what is tested is when the loop calls what)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from passband.flows.rl import loop as rl_loop
from passband.flows.config import resolve_config
from passband.flows.rl.config import RLConfig
from passband.tasks.steps.rl import InProcessTrainer


class RecordingEngine:
    """The RolloutEngine calls the loop makes between two rollouts, in order."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls

    def release_weights(self) -> None:
        self.calls.append("release_weights")

    def sleep(self) -> None:
        self.calls.append("sleep")

    def wake(self) -> None:
        self.calls.append("wake")


def test_the_engine_sleeps_through_the_update_and_wakes_for_the_sync(monkeypatch, tmp_path: Path) -> None:
    calls: list[str] = []
    monkeypatch.setattr("passband.tasks.rollouts.collect.collect_rollouts",
                        lambda *args, **kwargs: calls.append("rollouts") or "the batch")
    monkeypatch.setattr("passband.tasks.steps.rl.push_weights", lambda *args, **kwargs: calls.append("push_weights"))
    monkeypatch.setattr("passband.tasks.steps.rl.release_for_engine", lambda trainer: calls.append("release"))
    config = resolve_config(RLConfig, "rl", "demo", (), [])
    trainer = InProcessTrainer(SimpleNamespace(tokenizer=None, model=None, state=SimpleNamespace(consumed=0)),
                               config.algo, config.engine, tmp_path, 1, False)
    engine = RecordingEngine(calls)
    assert rl_loop._take_rollouts(config, trainer, engine, {}, 1, None, None) == "the batch"
    calls.append("update")  # run_iteration's update runs here, between the two
    rl_loop._sync_weights(config, trainer, engine, 1, None)
    assert calls == ["rollouts", "release_weights", "sleep", "update", "release", "wake", "push_weights"]
