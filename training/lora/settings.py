"""The `lora` setting of the SFT stages and the RL trainer, as a type only: configs name it without
loading torch or peft (what each field does is training/lora/adapters.py's)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

HEAD_MODULES = frozenset({"lm_head", "embed_tokens"})
"""Module names an adapter may not target: the published weights keep the base's (tied) head and
embedding, and the engine's LoRA serves linear projections only."""


class LoraConfig(BaseModel):
    """Low-rank adapters (LoRA) trained on a frozen base: W' = W + (alpha / rank) B A, with A `[rank, in]`
    Kaiming-uniform and B `[out, rank]` zero at the start, so the adapted model starts as the base exactly."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rank: int = Field(default=16, ge=1, description="r: the adapters' inner dimension. 'LoRA Without Regret' (2025) "
                      "finds rank 1 enough for RL and larger ranks for SFT on large data.")
    alpha: float = Field(default=32.0, gt=0, description="Scaling numerator: the update is (alpha / rank) B A. "
                         "Keep alpha fixed when you change rank and the best learning rate barely moves.")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the adapter's input in training. RL "
                           "needs deterministic log-probs at theta_k, so RL refuses anything but 0.")
    target_modules: list[str] | Literal["all-linear"] = Field(
        default="all-linear",
        description="Which linear layers get adapters: module name suffixes (e.g. [q_proj, v_proj]) or "
        "'all-linear' (every linear layer of the decoder, not the LM head: what the anchor found best).")
    seed: int = Field(default=0, description="Seeds the draw of the A matrices (B starts at zero), apart from "
                      "the run's other random draws.")
    @field_validator("target_modules")
    @classmethod
    def _no_head(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list):
            if not value:
                raise ValueError("lora.target_modules is empty: name module suffixes such as [q_proj, v_proj], or 'all-linear'")
            named = sorted(HEAD_MODULES & set(value))
            if named:
                raise ValueError(f"lora.target_modules names {named}: adapters go on the decoder's linear layers, "
                                 "not the LM head or embedding (the published weights keep those as the base's)")
        return value


class RLLoraConfig(LoraConfig):
    """RL's adapters: LoRA's settings and how each weight version reaches the rollout engine."""

    engine_weights: Literal["merged", "adapter"] = Field(
        default="merged",
        description="How each RL weight version reaches the rollout engine: 'merged' publishes W + (alpha/r) B A "
        "in the engine's dtype, loaded as full weights are today (any engine); 'adapter' publishes only the "
        "adapter (a few MB) and vLLM serves it with enable_lora and one LoRARequest per version "
        "(docs/benchmarks.md, LoRA: which is faster).")
    start: Literal["fresh", "continue"] = Field(
        default="fresh",
        description="What RL's adapters start from. 'fresh': new adapters (B = 0) on the start model as loaded; "
        "a LoRA checkpoint (SFT with lora) is its merged weights, so the KL reference is the SFT model. "
        "'continue': the start model must be a LoRA checkpoint (its adapter/ folder): RL trains that adapter "
        "further on the base it was trained on, so the run ends with one adapter on the original base (the "
        "pipeline hands SFT's adapter to RL). rank, alpha and target_modules must equal the checkpoint's; "
        "the base with adapters off is then the model before SFT, so kl_coef must be 0.")
