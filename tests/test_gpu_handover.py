"""The trainer hands the GPU back before an engine takes it (issue 67 item 1), checked on the CPU with a
recording fake of torch.cuda: every release is an `empty_cache` call in the fake's log, and the log puts
it before the engine wakes or measures the device.

torch keeps freed CUDA blocks reserved, and vLLM refuses to start (or fails to wake from sleep mode)
when the device's free memory is below total x memory_fraction, so each hand-over must release:
after an RL update (before the engine wakes), at the trainer's close, and at an engine's start-up,
which then says in one line what still holds the memory.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from test_rl_update import REWARDS, _batch, _tiny_model
from passband.tasks.steps.rl import InProcessTrainer
from passband.training.engines.config import EngineConfig
from passband.training.engines.vllm_engine import check_device_room
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.trainer import RLState, RLTrainer, close_trainer
from passband.training.rl.update import build_optimizer, rl_update

GIB = 2**30


@pytest.fixture
def cuda_log(monkeypatch) -> list[str]:
    """torch.cuda on an 80 GiB GPU whose free memory is 12 GiB until the cache is emptied, then 40:
    the calls, in order."""
    log: list[str] = []
    emptied = {"done": False}

    def empty_cache() -> None:
        log.append("empty_cache")
        emptied["done"] = True

    def mem_get_info(device=None):
        log.append("mem_get_info")
        return ((40 if emptied["done"] else 12) * GIB, 80 * GIB)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.setattr(torch.cuda, "mem_get_info", mem_get_info)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 25 * GIB)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 28 * GIB)
    return log


class RecordingEngine:
    """The two calls of a weight sync from disk: wake, then load the published version."""

    def __init__(self, log: list[str]):
        self.log = log

    def wake(self) -> None:
        self.log.append("engine.wake")

    def load_weights(self, path: Path) -> None:
        self.log.append("engine.load_weights")


def _trained_trainer(tmp_path: Path) -> RLTrainer:
    model = _tiny_model()
    cfg = RLAlgoConfig(micro_batch_size=4, trim_heap=False)
    optimizer = build_optimizer(model, cfg)
    rl_update(model, None, optimizer, _batch(model, REWARDS), cfg, torch.Generator().manual_seed(0))
    for parameter in model.parameters():  # a gradient left behind, as a micro-batch's accumulation would
        parameter.grad = torch.ones_like(parameter)
    return RLTrainer(model, optimizer, None, None, tmp_path, RLState())


def test_the_update_releases_the_device_before_the_engine_wakes(cuda_log, tmp_path):
    from passband.flows.rl.loop import _sync_weights

    trainer = _trained_trainer(tmp_path)
    in_process = InProcessTrainer(trainer, RLAlgoConfig(), EngineConfig(dtype="float32"), tmp_path / "scratch",
                                  keep_versions=1, adapter_only=False)
    _sync_weights(SimpleNamespace(), in_process, RecordingEngine(cuda_log), 1, None)
    assert cuda_log == ["empty_cache", "engine.wake", "engine.load_weights"]
    assert all(p.grad is None for p in trainer.model.parameters())  # the gradients went with it


def test_closing_the_in_process_trainer_releases(cuda_log, tmp_path):
    trainer = _trained_trainer(tmp_path)
    InProcessTrainer(trainer, RLAlgoConfig(), EngineConfig(dtype="float32"), tmp_path / "scratch",
                     keep_versions=1, adapter_only=False).close()
    assert not trainer.optimizer.state and cuda_log == ["empty_cache"]


def test_closing_the_trainer_drops_adamw_and_releases(cuda_log, tmp_path):
    trainer = _trained_trainer(tmp_path)
    assert trainer.optimizer.state  # AdamW's moments, 8 bytes a parameter
    close_trainer(trainer)
    assert not trainer.optimizer.state and cuda_log == ["empty_cache"]


def test_an_engine_start_releases_first_then_fits(cuda_log):
    check_device_room(0.45)  # 36 GiB asked; 40 free once the cache is emptied
    assert cuda_log == ["empty_cache", "mem_get_info"]


def test_an_engine_that_would_not_fit_says_what_holds_the_memory(cuda_log):
    with pytest.raises(ValueError) as refused:
        check_device_room(0.85)  # 68 GiB of 80 asked, 40 free
    assert str(refused.value) == (
        "engine.memory_fraction 0.85 asks vLLM for 68.0 GiB of cuda:0's 80.0 GiB, but 40.0 GiB is free: this "
        "process's live tensors hold 25.0 GiB (a trainer's weights, AdamW state or autograd graph still "
        "referenced), torch's cache 3.0 GiB more, other processes 12.0 GiB; free those or set "
        "engine.memory_fraction at most 0.50")
    assert cuda_log == ["empty_cache", "mem_get_info"]
