"""Nothing hangs: the RL trainer ranks (2 gloo ranks, tasks/steps/rl_torchrun.py) fail within their
timeouts when a rank stops answering, with errors that name the rank and the request.

A rank is made to hang for real: SIGSTOP, as a stuck kernel or a frozen host would leave it.
- One rank stopped: the other's next collective (FSDP2's all-gather in the update's forward)
  raises after `collective_timeout_s`, that rank exits naming itself and the request, torchrun
  stops the rest, and the flow's `update` raises with the ranks' stderr.
- Every rank stopped: no collective can notice; the flow's wait for the answer ends after
  `reply_timeout_s` with a TimeoutError naming the request, and the ranks are killed.
Each bounds its own wait: a broken timeout fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from killrun import alive, rank_pids
from passband.tasks.steps.rl_torchrun import trainer_ranks
from passband.training.engines.config import EngineConfig
from passband.training.rl.config import RLAlgoConfig
from passband.training.runtime.config import DistributedConfig
from test_rl_ranks import _batch
from tiny_chat_model import tiny_llama, tiny_tokenizer

ALGO = RLAlgoConfig(lr=3e-3, precision="fp32", micro_batch_size=5)
COLLECTIVE_TIMEOUT_S = 5.0
# torchrun gives a failed rank's peers 30 s to exit after SIGTERM before it kills them (a stopped
# process never handles SIGTERM), and this process gives the group 15 s (terminate_group)
BOUND_S = 90.0


@pytest.fixture
def model_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    path = tmp_path / "model"
    tiny_llama(seed=0, hidden=32).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.mark.slow  # two 2-rank torchrun launches and their timeouts: about 2 min on the 2-core box
def test_a_hung_rank_fails_the_update_within_the_collective_timeout(model_dir, tmp_path):
    import torch

    from passband.training.model_source import load_causal_lm

    batch = _batch(load_causal_lm(model_dir).eval(), 1)
    distributed = DistributedConfig(nproc_per_node=2, collective_timeout_s=COLLECTIVE_TIMEOUT_S, reply_timeout_s=600)
    start = time.monotonic()
    with pytest.raises(RuntimeError) as failure:
        with trainer_ranks(model_dir, ["math"], ALGO, None, distributed, tmp_path / "ranks", EngineConfig()) as ranks:
            metrics = ranks.update(batch, 11, 1)  # both ranks answer: the ranks work before one is stopped
            assert torch.isfinite(torch.tensor(metrics["loss"]))
            os.kill(rank_pids(ranks.ranks.pid)[1], signal.SIGSTOP)
            start = time.monotonic()
            ranks.update(batch, 12, 2)
    waited = time.monotonic() - start
    message = str(failure.value)
    assert "rank 0 of 2: request 2 (update) failed" in message, message[-2000:]
    assert "collective_timeout_s = 5 s" in message
    assert COLLECTIVE_TIMEOUT_S <= waited < BOUND_S, waited


@pytest.mark.slow
def test_ranks_that_all_hang_are_stopped_after_the_reply_timeout(model_dir, tmp_path):
    from passband.training.model_source import load_causal_lm

    batch = _batch(load_causal_lm(model_dir).eval(), 1)
    distributed = DistributedConfig(nproc_per_node=2, collective_timeout_s=600, reply_timeout_s=5)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"did not answer request 1 \(update\) within distributed.reply_timeout_s "
                                           r"= 5 s") as failure:
        with trainer_ranks(model_dir, ["math"], ALGO, None, distributed, tmp_path / "ranks", EngineConfig()) as ranks:
            torchrun = ranks.ranks
            pids = rank_pids(torchrun.pid)
            assert sorted(pids) == [0, 1]
            for pid in pids.values():
                os.kill(pid, signal.SIGSTOP)
            start = time.monotonic()
            ranks.update(batch, 11, 1)
    assert time.monotonic() - start < BOUND_S
    assert "Their stderr ends" in str(failure.value)
    assert torchrun.poll() is not None and not any(alive(pid) for pid in pids.values())  # the whole group is gone

