"""Which optimizer trains a model's weights, and Muon's settings (training/optim/optimizer.py builds it).

`name: adamw` is today's single AdamW over every trainable weight. `name: muon` splits the weights in two
groups (training/optim/groups.py): Muon on the 2-D hidden matrices (attention and MLP projections), AdamW on
the rest (embeddings, the LM head, norms, biases), each group with its own rate and weight decay.

The rates transfer from AdamW: Muon's orthogonalised update O (singular values near 1) of an [A, B] matrix
has an RMS of about 1/sqrt(max(A, B)), while AdamW's updates measure an RMS of about 0.2-0.4; Moonlight
(Liu et al. 2025, "Muon is Scalable for LLM Training", arXiv:2502.16982, section 2.2) scales O by
0.2 * sqrt(max(A, B)) so that its RMS is 0.2, AdamW's, and reuses AdamW's lr and weight decay unchanged
(torch.optim.Muon's adjust_lr_fn="match_rms_adamw"). That is `update_scale: match_adamw_rms`, the default;
`keller` is the original Muon's sqrt(max(1, A/B)), for rates tuned on Keller Jordan's Muon (lr ~0.02).
A setting left None takes the trainer's own (the stage's lr, weight_decay, betas), so switching a stage from
AdamW to Muon is `optimizer: muon` and nothing else.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

KELLER_COEFFICIENTS = (3.4445, -4.7750, 2.0315)
"""The quintic Newton-Schulz coefficients (a, b, c) of Keller Jordan's Muon (kellerjordan.github.io/posts/muon,
also Moonlight's and torch.optim.Muon's): x -> a x + b x^3 + c x^5 on the singular values, its slope at 0 (a)
as large as still drives every singular value into about [0.68, 1.13] in 5 steps."""

MUON_FIELDS = ("lr", "weight_decay", "momentum", "nesterov", "newton_schulz_steps", "newton_schulz_coefficients",
               "newton_schulz_dtype", "update_scale", "adamw_lr", "adamw_betas", "adamw_weight_decay",
               "matrices_per_rank")
"""The settings only `name: muon` reads: set away from their defaults with `name: adamw` they are refused rather
than ignored."""


class OptimizerConfig(BaseModel):
    """The optimizer of a trainer: AdamW everywhere, or Muon on the hidden matrices with AdamW on the rest.
    A bare string is accepted for the whole config (`optimizer: muon`, `--set optimizer=muon`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Literal["adamw", "muon"] = Field(
        default="adamw",
        description="'adamw': one AdamW over every trainable weight (the stage's lr, betas and weight decay). "
        "'muon': Muon (momentum, then the update orthogonalised by Newton-Schulz) on the 2-D hidden matrices, "
        "AdamW on embeddings, the LM head (tied or not), norms and biases.",
    )
    lr: float | None = Field(
        default=None, gt=0,
        description="Muon group's peak learning rate; None: the trainer's lr (the AdamW rate, which transfers under "
        "update_scale match_adamw_rms). The trainer's schedule scales it as it scales the AdamW group's.",
    )
    weight_decay: float | None = Field(
        default=None, ge=0,
        description="Muon group's decoupled weight decay (p <- p (1 - lr wd), with the unscaled lr, as Moonlight "
        "and torch.optim.Muon do); None: the trainer's weight_decay.",
    )
    momentum: float = Field(
        default=0.95, ge=0, lt=1,
        description="mu of Muon's momentum buffer B <- mu B + g (one buffer per matrix, fp32 like the weight).",
    )
    nesterov: bool = Field(
        default=True, description="Orthogonalise g + mu B (Nesterov, the published default) rather than B itself."
    )
    newton_schulz_steps: int = Field(
        default=5, ge=1, le=20,
        description="Iterations of the quintic Newton-Schulz map; 5 is Keller Jordan's and Moonlight's.",
    )
    newton_schulz_coefficients: tuple[float, float, float] = Field(
        default=KELLER_COEFFICIENTS,
        description="(a, b, c) of the map X <- a X + b (X X^T) X + c (X X^T)^2 X; the default is Keller Jordan's "
        "published quintic (3.4445, -4.7750, 2.0315), which leaves singular values in about [0.68, 1.13].",
    )
    newton_schulz_dtype: Literal["bfloat16", "float32"] = Field(
        default="bfloat16",
        description="The dtype Newton-Schulz runs in (and the gathered matrices travel in under ranks): bfloat16 "
        "as published (Keller Jordan, Moonlight, torch.optim.Muon); float32 to compare runs to float rounding "
        "(one process against ranks, a hand-written reference), or on a CPU without native bf16.",
    )
    update_scale: Literal["match_adamw_rms", "keller"] = Field(
        default="match_adamw_rms",
        description="The factor on an [A, B] matrix's orthogonalised update: 'match_adamw_rms' 0.2 sqrt(max(A, B)), "
        "Moonlight's, so the update's RMS is AdamW's and AdamW's lr and weight decay transfer; 'keller' "
        "sqrt(max(1, A/B)), the original Muon's (its rates are ~0.02).",
    )
    adamw_lr: float | None = Field(
        default=None, gt=0,
        description="Peak learning rate of the AdamW group (embeddings, LM head, norms, biases); None: the trainer's lr.",
    )
    adamw_betas: tuple[float, float] | None = Field(
        default=None, description="(beta1, beta2) of the AdamW group; None: the trainer's betas ((0.9, 0.999) in SFT)."
    )
    adamw_weight_decay: float | None = Field(
        default=None, ge=0, description="Decoupled weight decay of the AdamW group; None: the trainer's weight_decay."
    )
    matrices_per_rank: int = Field(
        default=1, ge=1,
        description="Under sharded ranks, whole matrices one rank gathers and orthogonalises per round (each "
        "rank owns about the same Newton-Schulz work; training/optim/parallel.py): the bound on whole "
        "matrices a rank holds at once. More means fewer rounds of collectives and more memory.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _check(self) -> "OptimizerConfig":
        # by value, not by model_fields_set: a dumped config (torchrun's yaml, Prefect's parameters) sets every field
        muon_only = sorted(name for name in MUON_FIELDS if getattr(self, name) != type(self).model_fields[name].default)
        if self.name == "adamw" and muon_only:
            raise ValueError(f"optimizer settings {muon_only} are Muon's and name is 'adamw': set name: muon, or "
                             "remove them (AdamW's lr, betas and weight decay are the trainer's own settings)")
        if self.adamw_betas is not None and not all(0.0 <= beta < 1.0 for beta in self.adamw_betas):
            raise ValueError(f"adamw_betas must each be in [0, 1), got {self.adamw_betas}")
        return self


def refuse_muon_with_lora(optimizer: OptimizerConfig, lora: object | None) -> None:
    """Muon on LoRA is refused rather than run: orthogonalising each adapter factor (A [r, in], B [out, r]) is not
    Muon's update of the adapted matrix B A, and no published recipe says what is (the trainers' configs call this)."""
    if optimizer.name == "muon" and lora is not None:
        raise ValueError("optimizer: muon with lora: Muon orthogonalises whole weight matrices, not adapter factors; "
                         "set optimizer: adamw to train adapters, or remove lora to train every weight with Muon")
