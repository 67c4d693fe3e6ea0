"""Run one SFT stage from a YAML file: the entry point torchrun starts on every rank.

    torchrun --standalone --nproc_per_node 8 -m passband.training.sft.launch stage.yaml   # FSDP2, 8 ranks
    python -m passband.training.sft.launch stage.yaml                                     # one process
    torchrun --nnodes 2 --node_rank I --rdzv_backend static --rdzv_endpoint node0:29400 \
        --nproc_per_node 8 -m passband.training.sft.launch stage.yaml        # on node I of 2, `mesh` set

The file holds a `LaunchConfig`, e.g.
    model: /data/ckpt/format          # local checkpoint dir (safetensors + tokenizer)
    out_dir: /data/ckpt/reasoning     # step_NNNNNN checkpoints land here (each rank writes its shards)
    stage: {name: reasoning, datasets: {/data/sft_stage2.jsonl: 1.0}, max_length: 2048,
            num_epochs: 2, lr: 1.0e-5, batch_tokens: 65536, micro_batch_tokens: 8192}
`stage` is one entry of the sft flow's `stages`, and its datasets are read, mixed and encoded as
the flow does for a dataset named by a local .jsonl/.parquet chat file (training.sft.sources,
training.sft.data). What the flow adds and this leaves out, so that every rank runs the same
plain code: artifact URIs and generated data (fetch or export them to local files first),
eval decontamination, MLflow and the artifact store; metrics are JSON lines on rank 0's stdout.

The sft flow launches this module itself when `distributed.nproc_per_node > 1` (tasks/steps/sft_torchrun.py):
it passes the examples it has already read, mixed, decontaminated and encoded as an `examples`
file, and reads rank 0's stdout: one line per step (`{"step": 3, "loss": ...}`), one per checkpoint
written (`{"checkpoint_saved": path, "step": 2}`), and the last (`{"checkpoint": path, "num_steps": 4}`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field

from passband.training.runtime.meta_init import empty_causal_lm
from passband.training.model_source import load_causal_lm, load_tokenizer
from passband.training.sft.config import StageConfig
from passband.training.sft.data import encode_rows, mix_stage_rows
from passband.training.runtime.distributed import (close_process_group, failure_line, open_process_group, rank,
                                                   world_size)
from passband.training.runtime.mesh import MeshShape
from passband.training.sft.loop import CheckpointCallback, MetricsCallback, TrainResult, train_stage
from passband.training.sft.packing import SFTExample
from passband.training.sft.sources import read_chat_rows


class LaunchConfig(BaseModel):
    """One stage to train, from a local checkpoint, on local chat files."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    model: Path
    """Local checkpoint dir to start from (model.safetensors, config.json, tokenizer files)."""
    out_dir: Path
    """Where the stage's checkpoints are written, as out_dir/step_NNNNNN."""
    resume_from: Path | None = None
    """A checkpoint of this same stage (same name, seed and data) to continue from."""
    stage: StageConfig
    """The stage; its `datasets` keys are local .jsonl/.parquet chat files (unless `examples` is set)."""
    examples: Path | None = None
    """Already-encoded examples to train on (JSON lines written by `save_examples`) instead of reading
    `stage.datasets`: the flow reads, mixes and decontaminates its data once and hands every rank the same."""
    collective_timeout_s: float = Field(600.0, gt=0)
    """Seconds one collective may wait on the other ranks (the flow's `distributed.collective_timeout_s`)."""
    mesh: MeshShape | None = None
    """The trainer mesh's degrees (the flow's `distributed.mesh`); their product must be torchrun's world size.
    None: one flat shard dimension over every rank (FSDP)."""
    trust_remote_code: bool = False
    """Run the model's own code on every rank (the flow's `engine.trust_remote_code`)."""


def save_examples(path: Path, examples: list[SFTExample]) -> None:
    """One JSON line per example: {"input_ids": [...], "loss_mask": [...]}."""
    path.write_text("".join(json.dumps({"input_ids": e.input_ids, "loss_mask": e.loss_mask}) + "\n" for e in examples))


def load_examples(path: Path) -> list[SFTExample]:
    return [SFTExample(**json.loads(line)) for line in path.read_text().splitlines()]


def local_stage_examples(stage: StageConfig, tokenizer) -> list[SFTExample]:
    """The stage's encoded examples from its local files (left-out rows are counted on stderr)."""
    datasets, num_left_out = {}, 0
    for name in stage.datasets:
        datasets[name], bad = read_chat_rows(Path(name))
        num_left_out += len(bad)
    mixed, not_mixed = mix_stage_rows(datasets, stage.datasets, stage.bands, stage.seed)
    examples, too_long = encode_rows(tokenizer, mixed, stage.max_length)
    if rank() == 0:
        print(f"stage {stage.name}: {len(examples)} examples, "
              f"{num_left_out + len(not_mixed) + len(too_long)} rows left out", file=sys.stderr)
    return examples


def print_metrics(metrics: dict[str, float], step: int) -> None:
    print(json.dumps({"step": step, **metrics}), flush=True)


def print_checkpoint(path: Path, step: int) -> None:
    print(json.dumps({"checkpoint_saved": str(path), "step": step}), flush=True)


def run(config: LaunchConfig, on_metrics: MetricsCallback | None = print_metrics,
        on_checkpoint: CheckpointCallback | None = print_checkpoint) -> TrainResult:
    """Load, encode and train; under torchrun every rank calls this with the same config."""
    tokenizer = load_tokenizer(config.model, config.trust_remote_code)
    if config.examples is not None:
        examples = load_examples(config.examples)
    else:
        examples = local_stage_examples(config.stage, tokenizer)
    # Under ranks no rank loads the weights here: the model is built on meta and, once sharded, filled
    # from rank 0's read of them (training/runtime/meta_init.py).
    trust = config.trust_remote_code
    model = (load_causal_lm(config.model, trust_remote_code=trust) if world_size() == 1
             else empty_causal_lm(config.model, trust))
    open_process_group(config.collective_timeout_s, config.mesh)  # before the loop shards: its collectives are bounded
    return train_stage(model, tokenizer, examples, config.stage, config.out_dir,
                       resume_from=config.resume_from, on_metrics=on_metrics, on_checkpoint=on_checkpoint,
                       start_weights=config.model)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m passband.training.sft.launch", description=__doc__.split("\n")[0])
    parser.add_argument("config", type=Path, help="YAML file holding a LaunchConfig")
    args = parser.parse_args(argv)
    config = LaunchConfig.model_validate(yaml.safe_load(args.config.read_text()))
    try:
        result = run(config)
    except RuntimeError as error:  # torch.distributed's errors among them (DistError is one)
        if world_size() == 1:
            raise
        raise RuntimeError(failure_line(f"SFT stage {config.stage.name!r}", error, config.collective_timeout_s)) from error
    if rank() == 0:
        print(json.dumps({"checkpoint": str(result.last_checkpoint), "num_steps": result.num_steps}), flush=True)
    close_process_group()


if __name__ == "__main__":
    main()
