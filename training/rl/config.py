"""The settings of one RL update (docs/recipe.md sections 4-7): objective, reuse, mismatch, KL, entropy.

The flow's config holds one `RLAlgoConfig` and passes it to `training.rl.update.rl_update` each
outer iteration. Bad combinations are refused here, before any rollout is generated.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from passband.training.lora.settings import RLLoraConfig
from passband.training.optim.config import OptimizerConfig, refuse_muon_with_lora
from passband.training.rl.algebra.kl_rules import check_kl_placement, refuse_renamed_estimator
from passband.training.runtime.schedule import lr_at
from passband.training.heap import HeapSetting
from passband.training.runtime.activation_checkpointing import CheckpointingSetting
from passband.training.runtime.settings import DeviceSetting, PrecisionSetting

# What clip_low, clip_high and aggregation mean when left None, per `level`. Sequence-level ratios
# are geometric means over the response, so they move ~1/sqrt(length) as much as token ratios:
# the GSPO paper clips them to [1 - 3e-4, 1 + 4e-4], and averages sequences (seq_mean). How far
# they move depends on response length, lr and inner steps, so no range is refused or warned
# about: on the demo's short responses (scripts/sequence_clip.py, recipe preset, second inner
# step) 3e-4/4e-4 clipped 58-77% of sequences per iteration, and the recipe's 0.28/0.40 clipped
# 16% at the first iteration, 0% at the next two. The `clip_frac` metric says which it is.
LEVEL_DEFAULTS: dict[str, dict[str, Any]] = {
    "token": {"clip_low": 0.2, "clip_high": 0.28, "aggregation": "token_mean"},
    "sequence": {"clip_low": 3e-4, "clip_high": 4e-4, "aggregation": "seq_mean"},
}


class RLAlgoConfig(BaseModel):
    """How one outer iteration turns a fixed batch of scored rollouts into S optimizer steps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # Advantages (docs/recipe.md section 4, Objectives).
    scale_by_std: bool = Field(
        default=True, description="Divide group-centred rewards by the group's sample std (GRPO); False: mean-only."
    )
    eps: float = Field(default=1e-6, gt=0, description="Added to the group std before dividing.")
    drop_zero_variance_groups: bool = Field(
        default=False,
        description="Leave groups whose rewards are all equal (all-zero advantages) out of the update entirely, "
        "so they neither count in the loss normalizer nor in the KL terms. They are counted either way.",
    )
    skip_zero_gradient_rows: bool = Field(
        default=True,
        description="Do not forward or backward, in the inner steps, the trained rows whose every loss term has "
        "exactly zero gradient: advantage exactly 0 (a zero-variance group, a reward equal to its group's mean) "
        "times any correction or Clip-Cov weight is 0. The loss normalizers stay the whole batch's, so the update "
        "is the same bit for bit, only cheaper (tests/test_rl_skip_zero_gradient.py); unlike "
        "drop_zero_variance_groups, the objective does not change. Off, with the reason warned once, when a term "
        "reaches rows with A = 0: a KL loss, KL-Cov (training/rl/config.py: zero_gradient_skip_blocker).",
    )

    # Objective. clip_low, clip_high and aggregation default to None, resolved per level when the
    # config is built (`LEVEL_DEFAULTS`), so a constructed config always holds the values in use.
    level: Literal["token", "sequence"] = Field(
        default="token", description="Importance ratio per token (GRPO) or per sequence as a geometric mean (GSPO)."
    )
    clip_low: float | None = Field(
        default=None, ge=0, lt=1, description="Ratio clipped below at 1 - clip_low (binds for A < 0). None: 0.2 at "
        "token level, 3e-4 at sequence level (GSPO's; a geometric-mean ratio rarely leaves [0.8, 1.28])."
    )
    clip_high: float | None = Field(
        default=None, ge=0, description="Ratio clipped above at 1 + clip_high (binds for A > 0; clip-higher). None: "
        "0.28 at token level, 4e-4 at sequence level."
    )
    aggregation: Literal["token_mean", "seq_mean", "seq_sum"] | None = Field(
        default=None,
        description="Loss reduction over the WHOLE batch (it sets the length bias): mean over all response tokens, "
        "mean of per-sequence means, or per-sequence sums divided by max_tokens. None: token_mean at token level, "
        "seq_mean at sequence level (GSPO is defined with the sequence mean).",
    )
    max_tokens: int | None = Field(
        default=None, gt=0, description="The constant divisor of aggregation='seq_sum' (the response-length budget)."
    )
    dual_clip: float | None = Field(
        default=3.0, description="c of dual-clip PPO (Ye et al. 2020): for A < 0 the per-token objective is bounded "
        "below by c A, so a token the policy now likes c times more than pi_old did adds loss c |A| and no gradient "
        "(training.rl.algebra.objectives.policy_loss); must be > 1; None: no bound but the exp clamp. With "
        "behaviour_policy 'engine', or stale rollouts, pi_old is not theta_k, and a ratio far above 1 with A < 0 is "
        "otherwise bounded only there. It never binds on the demo: with the trainer as pi_old the first inner step's "
        "ratio is exactly 1, and the recipe preset's second inner step reached a ratio of 1.61 (docs/benchmarks.md, "
        "'Which sequence-level clip binds'); tests/test_rl_dual_clip.py shows on-policy updates bit-identical with "
        "and without it. Off under cov_method 'kl_cov', whose surrogate is unclipped. `clip_frac_dual` says how often it binds.",
    )

    # Trajectory reuse and optimization.
    num_inner_steps: int = Field(
        default=1, ge=1, description="S: optimizer steps on each fixed rollout batch (1 = on-policy; more drifts off-policy)."
    )
    micro_batch_size: int = Field(
        default=8, ge=1, description="Sequences per forward/backward pass; gradients accumulate to the full-batch loss. "
        "Unused when micro_batch_tokens is set."
    )
    micro_batch_tokens: int | None = Field(
        default=None, ge=1,
        description="Token-budget micro-batches (issue 68): instead of micro_batch_size rows, rows are packed, longest "
        "first, into micro-batches of at most this many decoder tokens (with pack_rows the pack's tokens, else rows x "
        "the longest row, rounded up to pad_to_multiple; a row over the budget alone), and under torchrun ranks "
        "dealt so that every rank runs the same number of micro-batches with about the same tokens "
        "(training/rl/batches/micro_batches.py). The loss and its normalisation do not change (tests/"
        "test_rl_token_budget.py: the same weights as micro_batch_size, and at 2 ranks as at one). The memory "
        "model sizes the trainer by it (or by max_model_len, the longest row, when that is more). None: "
        "micro_batch_size rows per micro-batch.",
    )
    fused_scoring: bool = Field(
        default=True,
        description="With num_inner_steps=1, take pi_old from the one step's own forward (detached) instead of a "
        "separate no-grad scoring pass over the trained rows, when nothing needs the whole batch's log-probs before "
        "the loss: no KL in the reward, cov_method 'none', max_vllm_kl None, correction_denominator 'all' "
        "(training.rl.update). The same loss, "
        "gradients and metrics (tests/test_rl_fused_scoring.py), one forward fewer; False forces the two passes.",
    )
    lr: float = Field(default=1e-6, gt=0, description="AdamW learning rate (the peak, reached after lr_warmup_steps).")
    lr_schedule: Literal["constant", "linear", "cosine"] = Field(
        default="constant", description="The rate after warmup: constant (the default, the demo's), or linear / "
        "cosine decay to 0 over lr_decay_steps (training.runtime.schedule.lr_at, SFT's rule). The step is the "
        "optimizer's own count (AdamW's state step), which a checkpoint keeps, so a resumed run sets the same rate at "
        "every step as an uninterrupted one; an update skipped (max_vllm_kl) takes no step and moves no rate.",
    )
    lr_warmup_steps: int = Field(
        default=0, ge=0, description="Optimizer steps (num_inner_steps per iteration) of linear warmup from "
        "lr/lr_warmup_steps to lr; 0: none.",
    )
    lr_decay_steps: int | None = Field(
        default=None, gt=0, description="Optimizer steps of linear/cosine decay after warmup (e.g. num_iterations x "
        "num_inner_steps); past them the rate stays at its last value. Required by linear/cosine, refused by constant.",
    )
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW decoupled weight decay.")
    betas: tuple[float, float] = Field(default=(0.9, 0.999), description="AdamW (beta1, beta2).")
    optimizer: OptimizerConfig = Field(
        default_factory=OptimizerConfig,
        description="'adamw' (the default: one AdamW over every trainable weight with lr, betas and weight_decay) or "
        "'muon' (Muon on the hidden matrices, AdamW on embeddings, the LM head, norms and biases; lr and "
        "weight_decay transfer: training/optim/config.py). A bare name is the whole setting (`optimizer: muon`).",
    )
    grad_clip: float | None = Field(
        default=1.0, gt=0, description="Max global L2 norm of each step's gradient; None disables clipping (the norm is still logged)."
    )
    logprob_chunk_size: int = Field(
        default=256, gt=0, description="Tokens per chunk of the LM head in log-prob and entropy passes: each chunk's "
        "[chunk, vocab] fp32 logits, their softmax and (backward) their gradient exist one chunk at a time (at 1024 "
        "tokens and SmolLM2's 49152-token vocabulary, 0.2 GB each)."
    )
    device: DeviceSetting = Field(
        default="auto",
        description="Where the trainer runs: the policy, the reference (with KL), the optimizer state and every batch "
        "tensor of the update. 'auto': CUDA when torch sees a GPU, else the CPU; 'cuda' on a machine without one is "
        "refused when the trainer opens. Torchrun ranks take their own GPU (LOCAL_RANK).",
    )
    precision: PrecisionSetting = Field(
        default="auto",
        description="Trainer forwards: 'bf16_autocast' runs the decoder's matmuls in bf16 over fp32 master weights, "
        "gradients and AdamW state (the LM head and log-softmax stay fp32); pi_old and pi_theta are both computed in "
        "it, so the first step's ratio is exactly 1. 'fp32': everything fp32. 'auto': bf16_autocast on CUDA and on "
        "CPUs with native bf16 matmul (faster there: scripts/bench_rl_vs_trl.py), else fp32.",
    )
    lora: RLLoraConfig | None = Field(
        default=None,
        description="Train low-rank adapters on the frozen policy instead of every weight (training/lora/): the "
        "optimizer holds only the adapters, and the reference for KL is the same model with its adapters off (no "
        "second copy). None: full fine-tuning. 'LoRA Without Regret' (2025) uses ~10x full fine-tuning's lr for "
        "LoRA in RL (docs/benchmarks.md, LoRA).",
    )
    attention: Literal["eager", "sdpa"] = Field(
        default="eager",
        description="The trainer's attention kernel: 'eager' forms [B, heads, T, T] scores and probabilities per "
        "layer and keeps them for backward; 'sdpa' is torch's fused scaled_dot_product_attention (same log-probs to "
        "~1e-6; with logprob_chunk_size=256 it trained slower on the 2-core CPU of scripts/bench_rl_vs_trl.py: "
        "30-34 s against 22-28 s per update).",
    )
    pad_to_multiple: int = Field(
        default=16, ge=1,
        description="Pad each micro-batch's sequence length up to a multiple of this many tokens (right padding, "
        "masked: no real token sees it). On CPU, oneDNN keeps one bf16 matmul kernel, with its buffers, per shape it "
        "has run, for the life of the process: micro-batches padded to their own longest row met a new length almost "
        "every time, and the trainer process grew ~56 MB per update without end (scripts/bench_rl_trainer_memory.py "
        "--varied-lengths: 2.66 -> 3.05 GB over 8 updates, against 2.59 flat at one length). 16 bounds the lengths "
        "to one per 16 tokens at under 16 padded tokens per row; 1 pads to the longest row.",
    )
    pack_rows: bool | Literal["auto"] = Field(
        default="auto",
        description="Packed micro-batches (issue 68): a micro-batch's rows run through the decoder as one sequence, "
        "with no padding between them, position ids restarting per row and the varlen attention kernel keeping each "
        "row's attention inside it (training/runtime/packed_rows.py, varlen_attention.py), instead of each row padded "
        "to the micro-batch's longest; the log-probs and entropy come back in the padded [rows, T] layout, so every "
        "term of the loss is computed as before (tests/test_rl_packed_rows.py: the same weights within 1e-5). "
        "pad_to_multiple then rounds the pack's length. 'auto' (the default): packed wherever it is exact, i.e. the "
        "model's attention takes transformers' attention-interface kwargs, with no sliding window or logit soft-cap "
        "(packed_rows.packing_refusal), padded elsewhere; the update logs which as `packed_rows`. true: packed or a "
        "one-line refusal naming why not; false: padded. On a long-tailed batch packed ran 3.1x padded's update "
        "tokens/s at fp32 and 3.4x at bf16 autocast (docs/benchmarks.md, \"Packed RL micro-batches\").",
    )
    trim_heap: bool = Field(
        default=True,
        description="After each update, return the heap it freed (activations, logits) to the OS with malloc_trim "
        "(training/heap.py): glibc keeps it resident otherwise, beside the weight sync and the rollouts that follow.",
    )
    trim_heap_each_micro_batch: bool = Field(
        default=True,
        description="With trim_heap, also trim after each micro-batch's backward: micro-batches of different lengths "
        "free activations of different sizes, which glibc keeps as fragments the next one cannot reuse, so the "
        "update's peak held the earlier micro-batches' leftovers. scripts/bench_rl_vs_trl.py, 2 cores: trainer peak "
        "5.28 -> 5.08 GB at the same seconds per iteration (35.1 vs 35.6, within the run-to-run spread).",
    )
    heap: HeapSetting = Field(
        default="auto",
        description="What the trainer does with the tensors it frees, on the CPU under glibc (training/heap.py): 'keep' them in the heap for "
        "reuse (glibc's default: fastest, but a backward fragments the heap and the RSS keeps pages no tensor uses, more the "
        "longer the micro-batch); 'return' them to the system (blocks of 1 MiB and more are mmapped: the RSS follows the live "
        "tensors, for a page fault per new page); 'auto': return when the batch's longest row (prompt and response) over the sequence-parallel degree is 4096 tokens or more, keep below. One "
        "SFT step at 8K tokens, every-layer: peak 6.15 GiB kept, 2.70 returned; steady 2K steps 20-45% slower returned "
        "(docs/benchmarks.md, \"Long sequences\"). MALLOC_MMAP_THRESHOLD_ in the environment overrides it.",
    )
    activation_checkpointing: CheckpointingSetting = Field(
        default="every-layer",
        description="What the update's backward recomputes instead of storing (training/runtime/activation_checkpointing.py): "
        "'every-layer': keep each decoder layer's input only and run its forward again in backward, so the "
        "micro-batch's activations shrink to one layer's plus the layer inputs, for about one more forward of compute "
        "(scripts/bench_rl_trainer_memory.py measures it); 'selective': keep the matmuls' and attention's outputs and "
        "recompute norms, activations and element-wise ops; 'none'. true/false, this setting's old values, read as "
        "every-layer/none.",
    )

    # Training-inference mismatch (docs/recipe.md section 5).
    behaviour_policy: Literal["engine", "trainer"] = Field(
        default="trainer",
        description="pi_old of the ratio: 'engine' uses the rollout engine's log-probs (saves nothing here, since the "
        "trainer pass runs for the metrics anyway, but matches recipes that trust aligned engines); 'trainer' "
        "recomputes them with the trainer before the first inner step and corrects the mismatch with `correction`.",
    )
    correction: Literal["none", "token_tis", "token_mis", "seq_tis", "seq_mis", "geo_mis"] = Field(
        default="seq_mis", description="Rollout correction weights rho = pi_trainer / pi_engine (see training.rl.algebra.mismatch)."
    )
    correction_threshold: float = Field(
        default=2.0, ge=1, description="C (C_high) of the correction: the cap, or the upper bound of the acceptance range."
    )
    correction_threshold_low: float | None = Field(
        default=None, ge=1, description="C_low of token_mis: ratios below 1/C_low are rejected (IcePop: 2 with "
        "C_high 5); None: C_low = correction_threshold, a symmetric range [1/C, C]."
    )
    geo_threshold: float = Field(
        default=1.001, gt=1, description="Upper bound of geo_mis on the per-token geometric mean of rho (typical "
        "1.0002-1.001). Not C: [1/2, 2] on the geometric mean never rejects (0% of 200-token rows at 0.3 nats of "
        "noise, where seq-MIS at C=2 rejects 43%; tests/test_rl_mismatch.py)."
    )
    geo_threshold_low: float | None = Field(
        default=None, gt=1, description="geo_mis rejects rows whose geometric mean is below 1/geo_threshold_low; "
        "None: geo_threshold (symmetric)."
    )
    correction_denominator: Literal["all", "kept"] = Field(
        default="all", description="Which tokens and rows the loss divides by (its token_mean / sequence counts): "
        "'all' the trained ones, the correction's rejected ones included (weight 0), so a batch's step shrinks by "
        "its rejected fraction; 'kept' only those the correction keeps (weight > 0), so it does not. 'kept' needs "
        "every row's correction before the first loss, so it turns the fused first step off (one more forward, "
        "~20% of training). 'all' by default, from docs/benchmarks.md ('Staleness'): on policy (k = 0, the "
        "default) seq-MIS rejected 0-4% of sequences at 128 tokens and 0% at 512, a step at most ~4% short, not "
        "worth that forward nor moving the demo; one update stale at 512 tokens it rejected 15.6%, varying by "
        "batch: with rollout.max_off_policy_steps > 0 on long responses take 'kept' (or correction 'token_mis').",
    )
    max_vllm_kl: float | None = Field(
        default=None, gt=0, description="Skip the update (report skipped=1) when the batch's vllm_kl exceeds this; None: never skip."
    )

    # KL toward the reference policy (docs/recipe.md section 6).
    kl_coef: float = Field(default=0.0, ge=0, description="KL coefficient; 0 (the default) turns KL off and needs no reference model.")
    kl_placement: Literal["reward", "loss"] = Field(
        default="reward", description="'reward': k1 per sequence subtracted from the reward; 'loss': a KL loss term."
    )
    kl_estimator: Literal["k1", "k2", "k3", "huber"] = Field(
        default="k1", description="k1 in the reward; k2 (or huber, k2 with its gradient coefficient clamped to [-1, 1], "
        "or k3 with a warning) as a loss; k1 as a loss is refused. 'mse' was renamed 'huber'."
    )
    kl_level: Literal["token", "sequence"] = Field(
        default="token", description="KL as a loss: 'sequence' = k(sum_t l_t) per response, mean over sequences (its "
        "expected gradient is the sequence reverse-KL gradient, like k1 in the reward; kl_coef is per response); "
        "'token' = sum_t k(l_t) aggregated like the policy loss (a myopic per-prefix KL, see training.rl.algebra.kl)."
    )

    # Entropy (docs/recipe.md section 7).
    cov_method: Literal["none", "clip_cov", "kl_cov"] = Field(
        default="none", description="Keep entropy alive: Clip-Cov detaches, KL-Cov penalizes, the top-covariance tokens. "
        "Under KL-Cov the surrogate is unclipped (clip_low/clip_high unused), as in the paper."
    )
    cov_fraction: float = Field(default=2e-4, ge=0, le=1, description="Fraction of response tokens Clip-Cov / KL-Cov act on.")
    cov_bounds: tuple[float, float] = Field(
        default=(1.0, 5.0), description="Clip-Cov candidates: tokens with cov strictly between these (lower, upper)."
    )
    kl_cov_coef: float = Field(default=1.0, ge=0, description="KL-Cov coefficient on |logp - old_logp| of the selected tokens.")

    @model_validator(mode="before")
    @classmethod
    def _resolve_level_defaults(cls, data: Any) -> Any:
        """Fill clip_low/clip_high/aggregation left None with the level's defaults; refuse 'mse'."""
        if not isinstance(data, dict):
            return data
        refuse_renamed_estimator(data.get("kl_estimator", "k1"))
        level = data.get("level", "token")
        if level not in LEVEL_DEFAULTS:
            return data  # the Literal check reports it
        if level == "sequence" and data.get("aggregation") in ("token_mean", "seq_sum"):
            warnings.warn(
                f"level='sequence' with aggregation={data['aggregation']!r} weights each sequence by its length (an "
                "8-token and a 2-token sequence get 0.8/0.2 of the gradient): that is not GSPO, which averages "
                "sequences; leave aggregation unset (seq_mean)",
                stacklevel=2,
            )
        return {**data, **{name: value for name, value in LEVEL_DEFAULTS[level].items() if data.get(name) is None}}

    def lr_factor(self, step: int) -> float:
        """The scheduled rate at optimizer step `step` (0-based) as a fraction of lr (training.runtime.schedule.lr_at)."""
        num_steps = self.lr_warmup_steps + (self.lr_decay_steps or 1)  # constant: 1.0 from the end of warmup on
        return lr_at(min(step, num_steps - 1), 1.0, self.lr_warmup_steps, num_steps, self.lr_schedule)

    def correction_bounds(self) -> tuple[float, float | None]:
        """(C_high, C_low) for `importance_weights`: geo_mis has its own thresholds, the others share C."""
        return self.rejection_bounds().get(self.correction, (self.correction_threshold, self.correction_threshold_low))

    def rejection_bounds(self) -> dict[str, tuple[float, float | None]]:
        """(C_high, C_low) of each rejecting correction as this config would set it, for the
        `mismatch_would_reject/*` metrics: seq_mis and token_mis share C, geo_mis has its own."""
        shared = (self.correction_threshold, self.correction_threshold_low)
        return {"seq_mis": shared, "token_mis": shared, "geo_mis": (self.geo_threshold, self.geo_threshold_low)}

    def zero_gradient_skip_blocker(self) -> str | None:
        """Why a row with advantage exactly 0 can still have gradient under this config, or None when it cannot.

        The policy surrogate's gradient is A * ratio * weight * grad logp, exactly 0 at A = 0 whatever the
        correction and Clip-Cov weights (finite; Clip-Cov only zeroes some). KL in the reward is folded into the
        advantages before they are compared with 0, and there is no entropy bonus in the loss (entropy is a
        monitor, docs/recipe.md section 7). The terms left reach rows whatever their advantage:
        """
        if self.kl_coef > 0 and self.kl_placement == "loss":
            return (f"a KL loss (kl_coef={self.kl_coef}, kl_placement='loss') gives every row gradient whatever its "
                    "advantage, so skip_zero_gradient_rows is off")
        if self.cov_method == "kl_cov":
            return ("KL-Cov's penalty |logp - old_logp| falls on the top-covariance tokens of the whole batch, rows "
                    "with zero advantage included, so skip_zero_gradient_rows is off")
        return None

    @model_validator(mode="after")
    def _check(self) -> "RLAlgoConfig":
        if self.aggregation == "seq_sum" and self.max_tokens is None:
            raise ValueError("aggregation='seq_sum' needs max_tokens (the response-length budget that divides each sum)")
        if self.cov_bounds[0] >= self.cov_bounds[1]:
            raise ValueError(f"cov_bounds must be (lower, upper) with lower < upper, got {self.cov_bounds}")
        if self.correction_threshold_low is not None and self.correction != "token_mis":
            hint = " (geo_mis: use geo_threshold / geo_threshold_low)" if self.correction == "geo_mis" else ""
            raise ValueError(
                f"correction_threshold_low is the lower bound of token_mis; correction={self.correction!r} has no "
                f"such bound: leave it None{hint}"
            )
        if self.kl_level == "sequence" and self.kl_placement != "loss":
            raise ValueError(
                "kl_level='sequence' sets the KL LOSS's level; k1 in the reward is already one penalty per sequence: "
                "leave kl_level='token' or use kl_placement='loss'"
            )
        if (self.lr_schedule == "constant") != (self.lr_decay_steps is None):
            raise ValueError(f"lr_schedule={self.lr_schedule!r} with lr_decay_steps={self.lr_decay_steps}: linear and "
                             "cosine decay over lr_decay_steps (set it, e.g. num_iterations x num_inner_steps); "
                             "constant has no decay (leave it None)")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ValueError(f"dual_clip={self.dual_clip} would bound a negative-advantage token's loss at or below its "
                             "unclipped value at ratio 1: set c > 1 (3 is usual) or None to turn it off")
        if self.lora is not None and self.lora.dropout > 0:
            raise ValueError(f"lora.dropout={self.lora.dropout}: RL needs the policy's log-probs at theta_k to be "
                             "deterministic (pi_old is scored once, then reused); set lora.dropout to 0")
        if self.lora is not None and self.lora.start == "continue" and self.kl_coef > 0:
            raise ValueError(f"lora.start=continue with kl_coef={self.kl_coef}: the reference (the policy with its adapters "
                             "off) would be the model before SFT, not the start checkpoint; set kl_coef: 0, or "
                             "lora.start: fresh (new adapters on the merged checkpoint, which is then the reference)")
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must each be in [0, 1), got {self.betas}")
        refuse_muon_with_lora(self.optimizer, self.lora)
        # Refuse k1 as a loss (zero expected gradient) and warn on k3 as a loss, even at kl_coef=0,
        # so a preset that only later raises the coefficient fails now rather than mid-run.
        check_kl_placement(self.kl_placement, self.kl_estimator)
        blocker = self.zero_gradient_skip_blocker()
        if self.skip_zero_gradient_rows and blocker is not None:
            # Python shows a warning once per message and place: once per run for one config.
            warnings.warn(f"{blocker} (set algo.skip_zero_gradient_rows=False to say so)", stacklevel=2)
        return self
