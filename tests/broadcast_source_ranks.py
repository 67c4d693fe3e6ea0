"""Run under `torchrun --nproc_per_node 2` by tests/test_weight_broadcast.py: the broadcast's
source over a policy sharded by FSDP2 (gloo ranks on CPU); rank 0 writes what it yielded, in
order, to the safetensors file named on the command line."""

import json
import sys

import torch
from safetensors.torch import save_file
from torch.distributed.tensor import DTensor

from tiny_chat_model import tiny_llama
from passband.training.rl.ranks import shard_policy, unwrap
from passband.training.runtime.distributed import close_process_group, open_process_group, rank
from passband.training.engines.vllm_broadcast import EngineDtypeSource, update_info

open_process_group(60.0)
lm = unwrap(shard_policy(tiny_llama(seed=0, hidden=32), torch.device("cpu")))
assert all(isinstance(parameter, DTensor) for parameter in lm.parameters())  # sharded: a gather per tensor
source = EngineDtypeSource(lm, torch.bfloat16)
pairs = list(source)  # a collective: every rank iterates, in the same order
if rank() == 0:
    save_file(dict(pairs), sys.argv[1])
    with open(sys.argv[1] + ".json", "w") as out:
        json.dump({"order": [name for name, _ in pairs], "update_info": update_info(source.metadata())}, out)
close_process_group()
