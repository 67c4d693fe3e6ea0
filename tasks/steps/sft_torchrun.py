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
import subprocess
from pathlib import Path

import yaml

from passband.tasks.steps.trainer_nodes import announced, rank_failure, ranks_env, torchrun_command
from passband.training.runtime.config import DistributedConfig
from passband.training.sft.config import StageConfig
from passband.training.sft.launch import LaunchConfig, save_examples
from passband.training.sft.loop import CheckpointCallback, MetricsCallback
from passband.training.sft.packing import SFTExample


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
                          mesh=distributed.mesh, trust_remote_code=trust_remote_code)
    nproc_per_node = distributed.nproc_per_node
    config_file = work_dir / "launch.yaml"
    config_file.write_text(yaml.safe_dump(config.model_dump(mode="json")))
    env = ranks_env(nproc_per_node)
    stderr_file = work_dir / "ranks.stderr"
    command = torchrun_command(distributed, "passband.training.sft.launch", config_file)
    finished = False
    with (announced(distributed, "passband.training.sft.launch", config_file),
          open(stderr_file, "w") as stderr,
          subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, env=env, text=True) as ranks):
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
        stderr_text = stderr_file.read_text()
        failed = rank_failure(stderr_text)
        raise RuntimeError(f"torchrun --nproc_per_node {nproc_per_node} for SFT stage {stage.name!r} exited with "
                           f"code {ranks.returncode}{': ' + failed if failed else ''}; the ranks' stderr ends:\n"
                           f"{stderr_text[-4000:]}")
