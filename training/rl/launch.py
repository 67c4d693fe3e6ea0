"""The RL trainer as long-lived torchrun ranks, driven by request files: the entry point torchrun starts.

    torchrun --standalone --nproc_per_node 8 -m passband.training.rl.launch ranks.yaml   # FSDP2, 8 ranks
    python -m passband.training.rl.launch ranks.yaml                                     # one process
    torchrun --nnodes 2 --node_rank I --rdzv_backend static --rdzv_endpoint node0:29400 \
        --nproc_per_node 8 -m passband.training.rl.launch ranks.yaml        # on node I of 2, `mesh` set

The file holds a `RanksConfig`. The ranks open the trainer once (the policy, and the reference when
KL is on, sharded by FSDP2: training/rl/ranks.py), then serve requests the flow writes, in order,
as `work_dir/requests/NNNNNN.json` (written under another name and renamed, so a rank never reads
half a file; every rank reads every request):
  {"kind": "update", "batch": {RolloutBatch fields}, "seed": S, "version": V}
      one `rl_update` on the batch (Clip-Cov's generator seeded with S); the ranks gather the full
      updated weights and rank 0 publishes them as version V (the iteration) under work_dir/weights,
      as the in-process trainer does (training/weights/versions.py: the engine's dtype, an fp32 head
      when lm_head_fp32, manifest last, the `keep_versions` newest kept), and answers
      {"request": N, "metrics": {...}, "weights": path of v<V>}; with "version": null nothing is
      published (the weights go by broadcast) and "weights" is null
  {"kind": "connect_engine", "endpoint": {BroadcastEndpoint fields}}
      (EngineConfig.weight_transfer 'nccl', CUDA) open vLLM's NCCL sender over the policy in the
      engine's dtype (training/engines/vllm_broadcast.py), rank 0 meeting the flow's engine at
      `endpoint`; answers {"request": N, "update_info": what the engine is told of each round}
  {"kind": "broadcast"}   send the weights the ranks hold to the engine; answers {"request": N, "sent": true}
  {"kind": "checkpoint", "name": "iter-000003", "state": {RLState}}
      every rank writes its shards of the weights and AdamW state into work_dir/checkpoints/<name>,
      rank 0 the HF export of the weights beside them (training/runtime/checkpoint_shards.py; in one process
      the one-process layout, training/checkpoint.py), and rank 0 answers {"request": N, "checkpoint": path}
  {"kind": "stop"}   answers {"request": N, "stopped": true}; the ranks exit.
Answers are JSON lines on rank 0's stdout (tasks/steps/rl_torchrun.py reads them). Long-lived ranks
rather than one launch per iteration: the model is loaded and sharded once (built on meta, rank 0
reading the weights: training/runtime/meta_init.py), and the AdamW state never leaves its rank.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from pydantic import BaseModel, ConfigDict, Field

from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.ranks import shard_policy, unwrap
from passband.training.rl.trainer import RLState, RLTrainer, load_policy, load_reference, release_for_engine
from passband.training.runtime.distributed import (close_process_group, failure_line, open_process_group, rank,
                                                   reshard_units, world_size)
from passband.training.runtime.mesh import MeshShape


class RanksConfig(BaseModel):
    """One RL run's trainer ranks."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    model: Path
    """The run's start model (local dir): the reference policy and the tokenizer."""
    resume_from: Path | None = None
    """A checkpoint of this run to continue from, written by any number of ranks (one included)."""
    algo: RLAlgoConfig
    """The update's settings, as the flow's `algo`."""
    work_dir: Path
    """Requests in (requests/), the published weight versions and the checkpoints out (weights/v<N>, checkpoints/)."""
    engine_dtype: Literal["bfloat16", "float32"] = "bfloat16"
    """The dtype the weights are published in: the rollout engine's (the flow's `engine.dtype`)."""
    lm_head_fp32: bool = False
    """Publish the output projection in fp32 (the flow's `engine.lm_head_fp32`: the engine keeps an fp32 head)."""
    trust_remote_code: bool = False
    """Run the model's own code on every rank (the flow's `engine.trust_remote_code`)."""
    keep_versions: int = Field(1, ge=1)
    """Published weight versions kept under weights/, the newest included (older ones are deleted)."""
    poll_s: float = 0.02
    """How often a rank looks for the next request."""
    collective_timeout_s: float = Field(600.0, gt=0)
    """Seconds one collective may wait on the other ranks (the flow's `distributed.collective_timeout_s`)."""
    mesh: MeshShape | None = None
    """The trainer mesh's degrees (the flow's `distributed.mesh`); their product must be torchrun's world size.
    None: one flat shard dimension over every rank (FSDP)."""


def request_path(work_dir: Path, number: int) -> Path:
    return work_dir / "requests" / f"{number:06d}.json"


def write_request(work_dir: Path, number: int, request: dict[str, Any]) -> None:
    """Request `number` for the ranks, renamed into place once complete."""
    path = request_path(work_dir, number)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    partial.write_text(json.dumps(request))
    partial.rename(path)


def batch_request(batch: RolloutBatch, seed: int, version: int | None) -> dict[str, Any]:
    """The update on `batch` (Clip-Cov seeded with `seed`), its weights to be published as
    `version` (None: not published; they go by broadcast)."""
    return {"kind": "update", "batch": dataclasses.asdict(batch), "seed": seed, "version": version}


def open_rank_trainer(config: RanksConfig) -> RLTrainer:
    """The trainer on this rank: sharded when WORLD_SIZE > 1 (the optimizer over the shards), the
    weights, AdamW state and RNG of `resume_from` loaded whatever rank count wrote it.

    Under ranks the policy (and the reference) is built on meta and sharded before any weight is
    read: rank 0 reads them and each rank keeps its shard (training/runtime/meta_init.py), or each rank
    loads its shards of a sharded checkpoint; no rank but 0 holds a full copy."""
    from passband.training.runtime.checkpoint_shards import restore_training_state
    from passband.training.runtime.meta_init import fill_weights
    from passband.training.model_source import load_tokenizer
    from passband.training.rl.update import build_optimizer
    from passband.training.runtime.device import resolve_device
    from passband.training.runtime.precision import resolve_precision

    open_process_group(config.collective_timeout_s, config.mesh)
    weights_dir = config.resume_from or config.model
    device = resolve_device(config.algo.device)  # this rank's GPU under CUDA
    precision = resolve_precision(config.algo.precision, device)  # bf16: the layers' FSDP2 mixed precision
    sharded = world_size() > 1
    lm = load_policy(weights_dir, config.algo, on_meta=sharded, trust_remote_code=config.trust_remote_code)
    if not sharded:
        lm.to(device)  # one rank is not sharded; FSDP2 allocates the shards of more on the device
    policy = shard_policy(lm, device, precision)
    if sharded:
        fill_weights(lm, weights_dir, device)
    optimizer = build_optimizer(lm, config.algo)  # over the filled parameters
    state = RLState()
    if config.resume_from is not None:
        state = RLState.from_json(restore_training_state(config.resume_from, lm, optimizer))
    ref_model = None
    if config.algo.kl_coef > 0:
        reference = load_reference(config.model, config.algo, on_meta=sharded,
                                   trust_remote_code=config.trust_remote_code)
        ref_model = shard_policy(reference if sharded else reference.to(device), device, precision)
        if sharded:
            fill_weights(reference, config.model, device)
    return RLTrainer(policy, optimizer, ref_model, load_tokenizer(config.model, config.trust_remote_code), weights_dir,
                     state)


def full_model_state(trainer: RLTrainer) -> dict[str, torch.Tensor] | None:
    """The policy's full weights on rank 0 ({} on the others); None in one process (the model's own).
    A collective under ranks: every rank calls it."""
    if world_size() == 1:
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    from passband.training.checkpoint import tied_parameter_aliases

    lm = unwrap(trainer.model)
    state = get_model_state_dict(lm, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    aliases = tied_parameter_aliases(lm)  # the tied head is written once, as one process writes it
    return {name: tensor for name, tensor in state.items() if name not in aliases}


def publish_weights(trainer: RLTrainer, config: RanksConfig, version: int) -> Path:
    """The policy's full weights published as `version` under work_dir/weights, the in-process
    trainer's way (publish_state_dict: the engine's dtype, manifest last); the version's folder.
    Every rank gathers, rank 0 writes."""
    from passband.training.weights.engine_dtype import head_name
    from passband.training.weights.versions import publish_state_dict

    lm = unwrap(trainer.model)
    state = full_model_state(trainer)
    root = config.work_dir / "weights"
    if rank() == 0:
        publish_state_dict(lm.state_dict() if state is None else state, head_name(lm), root, version,
                           config.engine_dtype, config.lm_head_fp32, config.keep_versions)
    return root / f"v{version}"


def save_rank_checkpoint(trainer: RLTrainer, out_dir: Path, name: str) -> Path:
    """Checkpoint `out_dir/name`: sharded under ranks (every rank writes its shards, a collective),
    the one-process layout in one process."""
    from passband.training.checkpoint import save_checkpoint
    from passband.training.runtime.checkpoint_shards import save_sharded_checkpoint

    lm, state = unwrap(trainer.model), trainer.state.to_json()
    if world_size() == 1:
        return save_checkpoint(out_dir, name, lm, trainer.tokenizer, trainer.optimizer, state)
    return save_sharded_checkpoint(out_dir, name, lm, trainer.tokenizer, trainer.optimizer, state)


@dataclasses.dataclass
class EngineLink:
    """The ranks' end of the NCCL weight broadcast, once a connect_engine request opened it."""

    sender: Any = None
    """vLLM's NCCLTrainerWeightTransferEngine on this rank (broadcast.open_sender)."""


def connect_engine(trainer: RLTrainer, config: RanksConfig, endpoint: dict[str, Any], link: EngineLink) -> dict[str, Any]:
    """Open this rank's NCCL sender over the policy in the engine's dtype (rank 0 meets the
    engine's workers at `endpoint`); the update info the flow gives the engine each round."""
    from passband.training.engines.vllm_broadcast import BroadcastEndpoint, EngineDtypeSource, open_sender, update_info

    lm, dtype = unwrap(trainer.model), getattr(torch, config.engine_dtype)
    link.sender = open_sender(lm, dtype, BroadcastEndpoint(**endpoint), rank())
    return {"update_info": update_info(EngineDtypeSource(lm, dtype).metadata())}


def answer(trainer: RLTrainer, config: RanksConfig, request: dict[str, Any], link: EngineLink) -> dict[str, Any]:
    """Carry out one request on this rank; what rank 0 reports."""
    from passband.training.rl.update import rl_update

    if request["kind"] == "update":
        batch = RolloutBatch(**request["batch"])
        generator = torch.Generator().manual_seed(request["seed"])
        metrics = rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, config.algo, generator)
        reshard_units(trainer.model)  # the root's gathered copy predates the step (reshard_units says why)
        release_for_engine(trainer)  # a rank beside the flow's engine on its GPU hands its cached blocks back
        if request["version"] is None:  # the flow has them broadcast next
            return {"metrics": metrics, "weights": None}
        return {"metrics": metrics, "weights": str(publish_weights(trainer, config, request["version"]))}
    if request["kind"] == "publish":  # the weights they hold now (the start of a run with rollouts ahead)
        return {"weights": str(publish_weights(trainer, config, request["version"]))}
    if request["kind"] == "connect_engine":
        return connect_engine(trainer, config, request["endpoint"], link)
    if request["kind"] == "broadcast":
        if link.sender is None:
            raise RuntimeError("a broadcast request before connect_engine: the ranks have no sender open")
        link.sender.send_weights()
        return {"sent": True}
    if request["kind"] == "checkpoint":
        trainer.state = RLState.from_json(request["state"])
        return {"checkpoint": str(save_rank_checkpoint(trainer, config.work_dir / "checkpoints", request["name"]))}
    if request["kind"] == "stop":
        return {"stopped": True}
    raise ValueError(f"request kind {request['kind']!r}: expected update, publish, connect_engine, broadcast, "
                     "checkpoint or stop")


def answered(trainer: RLTrainer, config: RanksConfig, request: dict[str, Any], number: int,
             link: EngineLink) -> dict[str, Any]:
    """`answer`, then a barrier (rank 0 has written what the reply names before the flow reads it).
    A collective that fails (gloo and NCCL raise once `collective_timeout_s` passes, or when a peer
    dies) fails this rank with an error naming it and the request: torchrun then stops the rest."""
    try:
        reply = answer(trainer, config, request, link)
        if world_size() > 1:
            torch.distributed.barrier()
    except RuntimeError as error:  # torch.distributed's errors among them (DistError is one)
        raise RuntimeError(failure_line(f"request {number} ({request['kind']})", error,
                                        config.collective_timeout_s)) from error
    return reply


def serve(config: RanksConfig) -> int:
    """Open the trainer and answer requests 1, 2, ... until a stop; the number answered."""
    trainer, link = open_rank_trainer(config), EngineLink()
    if rank() == 0:
        print(json.dumps({"ready": True}), flush=True)
    number = 1
    while True:
        path = request_path(config.work_dir, number)
        while not path.exists():
            time.sleep(config.poll_s)
        request = json.loads(path.read_text())
        reply = answered(trainer, config, request, number, link)
        if rank() == 0:
            print(json.dumps({"request": number, **reply}), flush=True)
        if request["kind"] == "stop":
            return number
        number += 1


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m passband.training.rl.launch", description=__doc__.split("\n")[0])
    parser.add_argument("config", type=Path, help="YAML file holding a RanksConfig")
    args = parser.parse_args(argv)
    serve(RanksConfig.model_validate(yaml.safe_load(args.config.read_text())))
    close_process_group()


if __name__ == "__main__":
    main()
