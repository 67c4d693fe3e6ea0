"""Sleep mode's default (issue 67 item 8): on for an in-process engine sharing the trainer's GPU, off with
weights by NCCL, where the engine has a GPU of its own and each iteration would copy its weights to the host
and back for nothing; an explicit setting still wins."""

from __future__ import annotations

from passband.training.engines.config import EngineConfig


def test_an_engine_on_its_own_gpu_does_not_sleep_by_default():
    assert EngineConfig(in_process=True, weight_transfer="nccl").sleeps_while_training(cuda=True) is False
    assert EngineConfig(in_process=True, weight_transfer="memory").sleeps_while_training(cuda=True) is True
    assert EngineConfig(in_process=True, weight_transfer="disk").sleeps_while_training(cuda=True) is True
    assert EngineConfig(in_process=True, weight_transfer="nccl",
                        sleep_while_training=True).sleeps_while_training(cuda=True) is True
