"""One SFT stage under torchrun, launched by the flow: the ranks train, the flow process tracks and commits.

What must happen once stays in the flow's process: the MLflow run, the artifact store and the
checkpoint commits. The ranks run only the training loop (`python -m passband.training.sft.launch`,
FSDP2, training/runtime/distributed.py), on the examples the flow has already read, mixed,
decontaminated and encoded (written once to scratch, so every rank trains on exactly the data the
stage key fingerprints). Rank 0 prints one JSON line per step and one per checkpoint it has written;
this module reads them as they come and hands them to the same `on_metrics` / `on_checkpoint`
callbacks a one-process stage uses, so MLflow sees the same series and every checkpoint is committed
manifest-last while the ranks go on. A rank that fails makes torchrun exit non-zero: the checkpoints
committed before stay, and a rerun resumes from the newest exactly as a one-process rerun does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from passband.training.runtime.config import DistributedConfig
from passband.training.sft.config import StageConfig
from passband.training.sft.launch import LaunchConfig, save_examples
from passband.training.sft.loop import CheckpointCallback, MetricsCallback
from passband.training.sft.packing import SFTExample

# torchrun sets these for its ranks; inherited ones (a flow itself started under torchrun) would clash
RANK_ENV = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def ranks_env(nproc_per_node: int) -> dict[str, str]:
    """The environment torchrun and its ranks start with: this process's, less RANK_ENV. One rank
    (distributed.torchrun_at_one_rank) gets this process's intra-op thread count, so its float
    reductions split across threads as the in-process trainer's do and the two runs stay equal bit
    for bit (torch's default is every core; a flow may run with fewer). Several ranks keep
    torchrun's own default of one thread each unless OMP_NUM_THREADS is set."""
    import torch

    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV}
    if nproc_per_node == 1:
        env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    return env


def torchrun_stage(stage: StageConfig, examples: list[SFTExample], start_dir: str, resume_from: Path | None,
                   distributed: DistributedConfig, work_dir: Path, on_metrics: MetricsCallback,
                   on_checkpoint: CheckpointCallback, trust_remote_code: bool = False) -> None:
    """Train the stage on `distributed.nproc_per_node` ranks, from `resume_from` when given, each
    collective bounded by `distributed.collective_timeout_s`.

    Checkpoints land in work_dir/checkpoints; `on_checkpoint(path, step)` runs in this process for
    each before the next line of rank 0's output is read.
    """
    examples_file = work_dir / "examples.jsonl"
    save_examples(examples_file, examples)
    config = LaunchConfig(model=Path(start_dir), out_dir=work_dir / "checkpoints", resume_from=resume_from,
                          stage=stage, examples=examples_file, collective_timeout_s=distributed.collective_timeout_s,
                          trust_remote_code=trust_remote_code)
    nproc_per_node = distributed.nproc_per_node
    config_file = work_dir / "launch.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env = ranks_env(nproc_per_node)
    stderr_file = work_dir / "ranks.stderr"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
               str(nproc_per_node), "-m", "passband.training.sft.launch", str(config_file)]
    finished = False
    with open(stderr_file, "w") as stderr, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr,
                                                             env=env, text=True) as ranks:
        for line in ranks.stdout:
            if not line.startswith("{"):  # anything else a library prints on rank 0's stdout
                continue
            record = json.loads(line)
            if "num_steps" in record:  # the last line: the stage is done and its checkpoints reported
                finished = True
            elif "checkpoint_saved" in record:
                on_checkpoint(Path(record["checkpoint_saved"]), record["step"])
            else:
                step = record.pop("step")
                on_metrics(record, step)
    if ranks.returncode != 0 or not finished:
        raise RuntimeError(f"torchrun --nproc_per_node {nproc_per_node} for SFT stage {stage.name!r} exited with "
                           f"code {ranks.returncode}; the ranks' stderr ends:\n{stderr_file.read_text()[-4000:]}")
