"""Weights by NCCL broadcast (EngineConfig.weight_transfer 'nccl', training/engines/vllm_broadcast.py):
its bookkeeping, on CPU. The broadcast itself needs CUDA and is measured by scripts/gpu_check.py
where a GPU is lent; here, against vLLM's own checks and by hand:

1. The source yields exactly the disk path's tensors (engine_tensors: the same names, order and
   bf16 bits, the tied head once), agrees with its metadata by vLLM's own order and shape checks,
   and the update info it gives the engine passes vLLM's validation.
2. Sharded by FSDP2 over 2 gloo ranks, iterating it gathers the full tensors: rank 0 yields the
   unsharded model's bits.
3. The engine's calls come in vLLM's order, the receive running while the ranks send (it waits on
   the send, so a serial order would time out), and a failed send fails the round without waiting
   on the engine's stuck receive.
4. The settings it needs are refused by name when missing; the ranks' GPUs skip the engine's.
5. The ranks' side: an update told no version publishes nothing; a broadcast before the link is
   opened is an error naming it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tiny_chat_model import tiny_llama, tiny_tokenizer
from passband.training.engines.vllm_broadcast import (BroadcastEndpoint, EngineDtypeSource, connect_engine,
                                                 receive_broadcast, update_info)
from passband.training.weights.engine_dtype import engine_tensors, head_name

REPO = Path(__file__).resolve().parents[1]


def _disk_path_tensors(model):
    return list(engine_tensors(model.state_dict(), head_name(model), torch.bfloat16, lm_head_fp32=False))


def test_the_source_yields_what_the_disk_path_writes():
    from vllm.distributed.weight_transfer.nccl_engine import (NCCLTrainerWeightTransferEngine,
                                                              NCCLWeightTransferUpdateInfo)

    model = tiny_llama(seed=0, hidden=32)
    source = EngineDtypeSource(model, torch.bfloat16)
    pairs, expected = list(source), _disk_path_tensors(model)
    assert [name for name, _ in pairs] == [name for name, _ in expected]
    assert all(torch.equal(a, b) and a.dtype == torch.bfloat16 for (_, a), (_, b) in zip(pairs, expected))
    # by hand: the embedding (the tied head, sent once), 9 tensors per layer x 2 layers, the final norm
    assert len(pairs) == 1 + 9 * 2 + 1 and "lm_head.weight" not in dict(pairs)
    # vLLM's own checks that iteration matches the declared metadata (order, dtype, shape)
    meta = source.metadata()
    assert len(list(NCCLTrainerWeightTransferEngine._checked_iter(source, meta))) == len(meta)
    assert sum(len(names) for names, _ in source.iter_groups()) == len(meta)
    info = update_info(meta)
    NCCLWeightTransferUpdateInfo(**info)  # vLLM's validation of what the engine is told
    assert info["names"][0] == "model.embed_tokens.weight" and info["shapes"][0] == [model.config.vocab_size, 32]
    assert set(info["dtype_names"]) == {"bfloat16"} and getattr(torch, info["dtype_names"][0]) == torch.bfloat16


def test_sharded_source_gathers_the_full_tensors(tmp_path):
    out = tmp_path / "sent.safetensors"
    env = {k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env |= {"OMP_NUM_THREADS": "1", "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{env.get('PYTHONPATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           str(REPO / "tests" / "broadcast_source_ranks.py"), str(out)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    sent, record = load_file(out), json.loads(Path(f"{out}.json").read_text())
    expected = _disk_path_tensors(tiny_llama(seed=0, hidden=32))
    assert record["order"] == [name for name, _ in expected]
    assert all(torch.equal(sent[name], tensor) for name, tensor in expected)
    assert record["update_info"] == update_info(EngineDtypeSource(tiny_llama(seed=0, hidden=32), torch.bfloat16).metadata())


class _Engine:
    """Records the calls an engine's collective_rpc gets; its update_weights (or init) waits for
    the ranks' side to start, as the NCCL receive does, up to `wait_s`."""

    def __init__(self, wait_s: float = 10.0):
        self.calls: list[tuple[str, dict]] = []
        self.ranks_started = threading.Event()
        self.wait_s = wait_s

    def rpc(self, method, kwargs=None):
        self.calls.append((method, kwargs))
        if method in ("update_weights", "init_weight_transfer_engine"):
            if not self.ranks_started.wait(self.wait_s):
                raise TimeoutError(f"{method} waited for the ranks' side, which never started")


def test_the_engine_calls_come_in_vllm_order():
    engine = _Engine()
    endpoint = BroadcastEndpoint("127.0.0.1", 29555, world_size=2)

    def ranks_side(answer):
        def run():
            engine.ranks_started.set()
            time.sleep(0.05)
            return answer
        return run

    assert connect_engine(engine.rpc, endpoint, ranks_side({"update_info": "x"})) == {"update_info": "x"}
    assert engine.calls == [("init_weight_transfer_engine", {"init_info": {
        "master_address": "127.0.0.1", "master_port": 29555, "rank_offset": 1, "world_size": 2, "packed": True,
        "packed_buffer_size_bytes": endpoint.worker_init_info()["packed_buffer_size_bytes"],
        "packed_num_buffers": endpoint.worker_init_info()["packed_num_buffers"]}})]
    engine.calls.clear()
    engine.ranks_started.clear()
    info = {"names": ["a"], "dtype_names": ["bfloat16"], "shapes": [[2]]}
    assert receive_broadcast(engine.rpc, info, ranks_side({"sent": True})) == {"sent": True}
    assert engine.calls == [("start_weight_update", None), ("update_weights", {"update_info": info}),
                            ("finish_weight_update", None)]


def test_a_failed_send_fails_the_round_without_waiting_on_the_engine():
    engine = _Engine(wait_s=30.0)  # its receive would wait 30 s for a send that never comes

    def failing_send():
        raise RuntimeError("rank 0 of 2: request 7 (broadcast) failed")

    started = time.monotonic()
    with pytest.raises(RuntimeError, match="request 7"):
        receive_broadcast(engine.rpc, {"names": []}, failing_send)
    assert time.monotonic() - started < 5
    assert [method for method, _ in engine.calls] == ["start_weight_update", "update_weights"]  # no finish
    engine.ranks_started.set()  # let the stuck receive go


def test_the_settings_it_needs_are_named():
    from passband.flows.rl.config import RLConfig, RolloutConfig
    from passband.training.engines.config import EngineConfig
    from passband.training.runtime.config import DistributedConfig

    nccl = EngineConfig(weight_transfer="nccl", kv_cache_gib="batch", in_process=True)
    with pytest.raises(ValueError, match="nccl needs torchrun ranks") as refused:
        RLConfig(model="m", datasets={"math": "d"}, engine=nccl)
    assert "max_off_policy_steps" not in str(refused.value)
    with pytest.raises(ValueError) as refused:
        RLConfig(model="m", datasets={"math": "d"}, engine=nccl.model_copy(update={"lm_head_fp32": True}),
                 rollout=RolloutConfig(max_off_policy_steps=1, workers="task_workers"))
    for named in ("torchrun ranks", "rollout.workers: local", "max_off_policy_steps: 0", "lm_head_fp32: false"):
        assert named in str(refused.value)
    RLConfig(model="m", datasets={"math": "d"}, engine=nccl, distributed=DistributedConfig(nproc_per_node=2))


def test_the_ranks_gpus_skip_the_engines():
    from passband.tasks.steps.rl_torchrun import ranks_devices

    assert ranks_devices("0,1,2", 2) == "1,2"
    assert ranks_devices("3,5,6", 1) == "5"
    with pytest.raises(ValueError, match="2 GPUs needed, 1 visible"):
        ranks_devices("4", 1)


def test_an_update_without_a_version_publishes_nothing(tmp_path, monkeypatch):
    from passband.training.rl.config import RLAlgoConfig
    from passband.training.rl.launch import EngineLink, RanksConfig, answer, batch_request, open_rank_trainer
    from test_rl_ranks import _batch

    for name in ("WORLD_SIZE", "RANK", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    model_dir = tmp_path / "model"
    start = tiny_llama(seed=0, hidden=32).eval()
    start.save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    config = RanksConfig(model=model_dir, algo=RLAlgoConfig(lr=1e-3, precision="fp32"), work_dir=tmp_path / "ranks")
    trainer, link = open_rank_trainer(config), EngineLink()
    reply = answer(trainer, config, batch_request(_batch(start, 1), 11, None), link)
    assert reply["weights"] is None and reply["metrics"]["grad_norm"] > 0
    assert not (tmp_path / "ranks" / "weights").exists()
    with pytest.raises(RuntimeError, match="before connect_engine"):
        answer(trainer, config, {"kind": "broadcast"}, link)
