"""Run under `torchrun --nproc_per_node 2` by tests/test_rank_checkpoints.py: the RL trainer opened
two ways on the same ranks, each then updated on the same 3 batches. Today's init (every rank loads
the full model, then FSDP2 shards it: `load_policy` + `shard_policy`) and the meta-device init
(`open_rank_trainer`: built on meta, sharded, rank 0's read broadcast). Rank 0 writes both final
weights (gathered, fp32) to the safetensors files named on the command line."""

import json
import sys
from pathlib import Path

import torch
import yaml
from safetensors.torch import save_file

from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.launch import RanksConfig, full_model_state, open_rank_trainer
from passband.training.rl.ranks import shard_policy
from passband.training.rl.trainer import RLState, RLTrainer, load_policy, load_reference
from passband.training.rl.update import build_optimizer, rl_update
from passband.training.runtime.distributed import close_process_group, rank

config_file, batches_file, today_out, meta_out = (Path(arg) for arg in sys.argv[1:5])
config = RanksConfig.model_validate(yaml.safe_load(config_file.read_text()))
batches = [RolloutBatch(**batch) for batch in json.loads(batches_file.read_text())]

meta = open_rank_trainer(config)  # opens the process group
assert not any(parameter.is_meta for parameter in meta.model.parameters())
lm = load_policy(config.model, config.algo)  # today's: the full model on every rank, then sharded
policy = shard_policy(lm, torch.device("cpu"))
reference = None
if config.algo.kl_coef > 0:
    reference = shard_policy(load_reference(config.model, config.algo), torch.device("cpu"))
today = RLTrainer(policy, build_optimizer(lm, config.algo), reference, None, config.model, RLState())

for trainer, out in ((today, today_out), (meta, meta_out)):
    for seed, batch in zip((11, 12, 13), batches):
        rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, config.algo,
                  torch.Generator().manual_seed(seed))
    state = full_model_state(trainer)  # a collective; rank 0 holds the weights
    if rank() == 0:
        save_file({name: tensor.contiguous() for name, tensor in state.items()}, str(out))
del meta, today, policy, reference, lm
close_process_group()
