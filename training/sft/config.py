"""The settings of one SFT stage (the flow runs a list of them in order)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from passband.training.lora.settings import LoraConfig
from passband.training.optim.config import OptimizerConfig, refuse_muon_with_lora
from passband.training.heap import HeapSetting
from passband.training.runtime.activation_checkpointing import CheckpointingSetting
from passband.training.runtime.settings import DeviceSetting, PrecisionSetting


class StageConfig(BaseModel):
    """One curriculum stage: which data, how long the sequences, how it is optimized."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="Stage name, e.g. 'foundation' or 'deep_reasoning'; tags metrics and checkpoints.")
    datasets: dict[str, float] = Field(
        description="Dataset name -> mix weight (> 0). Weights are relative: each dataset supplies "
        "weight/sum(weights) of the stage's examples."
    )
    bands: list[str] = Field(
        default_factory=list,
        description="Difficulty bands to keep (the curation flow's band labels); empty keeps every band.",
    )
    max_length: int = Field(gt=0, description="Longest packed row in tokens; longer examples are quarantined.")
    num_steps: int | None = Field(default=None, gt=0, description="Optimizer steps; exactly one of num_steps, num_epochs.")
    num_epochs: int | None = Field(default=None, gt=0, description="Passes over the data; exactly one of num_steps, num_epochs.")
    lr: float = Field(gt=0, description="Peak learning rate (AdamW), reached at the end of warmup.")
    warmup_steps: int = Field(default=0, ge=0, description="Steps of linear warmup from lr/warmup_steps to lr.")
    schedule: Literal["cosine", "constant", "linear"] = Field(
        default="cosine", description="Decay after warmup: cosine to 0, constant, or linear to 0 over the remaining steps."
    )
    weight_decay: float = Field(default=0.0, ge=0, description="AdamW decoupled weight decay.")
    optimizer: OptimizerConfig = Field(
        default_factory=OptimizerConfig,
        description="'adamw' (the default: one AdamW over every trainable weight, betas (0.9, 0.999)) or 'muon' "
        "(Muon on the hidden matrices, AdamW on embeddings, the LM head, norms and biases; lr and weight_decay "
        "transfer: training/optim/config.py). A bare name is the whole setting (`optimizer: muon`).",
    )
    batch_tokens: int = Field(gt=0, description="Real (unpadded) tokens per optimizer step, at most; gradients accumulate over micro-batches up to it.")
    micro_batch_tokens: int = Field(gt=0, description="Padded tokens (rows x longest row) per forward/backward pass; bounds activation memory.")
    loss_chunk_size: int = Field(default=1024, gt=0, description="Tokens per chunk of the LM head + cross-entropy (memory O(chunk x vocab)).")
    lm_head_fp32: bool = Field(
        default=True,
        description="The LM head and its cross-entropy in fp32 with autocast off, on every device (the CPU's chunked "
        "loss and Liger's fused kernel on CUDA alike), so a config computes the same loss on both. false: under "
        "bf16_autocast Liger's matmuls run in bf16 (faster on CUDA; the loss then differs from the CPU's).",
    )
    grad_clip: float | None = Field(default=1.0, gt=0, description="Max global L2 norm of the gradient; None disables clipping (the norm is still logged).")
    attention: Literal["auto", "varlen_sdpa", "flash_attention_2"] = Field(
        default="auto",
        description="Kernel that keeps packed documents apart without a [T, T] mask (training/runtime/varlen_attention.py): "
        "'flash_attention_2' (CUDA, flash-attn's varlen kernel), 'varlen_sdpa' (one causal SDPA per document, "
        "any device); 'auto' takes flash_attention_2 on CUDA when flash_attn is installed, else varlen_sdpa.",
    )
    device: DeviceSetting = Field(
        default="auto",
        description="Where the stage trains: the model, its AdamW state and every micro-batch. 'auto': CUDA when "
        "torch sees a GPU, else the CPU; 'cuda' on a machine without one is refused when the stage starts. Torchrun "
        "ranks take their own GPU (LOCAL_RANK).",
    )
    precision: PrecisionSetting = Field(
        default="auto",
        description="'bf16_autocast': forward matmuls in bf16, fp32 master weights, gradients and AdamW state, "
        "fp32 loss; 'fp32': everything fp32; 'auto': bf16_autocast on CUDA and on CPUs with native bf16 "
        "(measured faster there: scripts/bench_sft.py), else fp32.",
    )
    lora: LoraConfig | None = Field(
        default=None,
        description="Train low-rank adapters on the stage's frozen start model instead of every weight "
        "(training/lora/): AdamW holds only the adapters. The stage's checkpoints hold the merged weights (what "
        "the next stage, evaluation and RL load, as from any stage) and the adapter beside them (`adapter/`, "
        "peft's layout); a resumed stage trains on from the adapter. None: full fine-tuning.",
    )
    activation_checkpointing: CheckpointingSetting = Field(
        default="none",
        description="What the backward recomputes instead of storing (training/runtime/activation_checkpointing.py): "
        "'none'; 'selective': keep the matmuls' and attention's outputs, recompute norms, activations and "
        "element-wise ops from them (same gradients, fewer activations, little extra compute); 'every-layer': keep "
        "each decoder layer's input only and run its forward again in backward (the least memory, about one more "
        "forward). true/false, this setting's old values, read as every-layer/none.",
    )
    heap: HeapSetting = Field(
        default="auto",
        description="What the trainer does with the tensors it frees, on the CPU under glibc (training/heap.py): 'keep' them in the heap for "
        "reuse (glibc's default: fastest, but a backward fragments the heap and the RSS keeps pages no tensor uses, more the "
        "longer the micro-batch); 'return' them to the system (blocks of 1 MiB and more are mmapped: the RSS follows the live "
        "tensors, for a page fault per new page); 'auto': return when micro_batch_tokens over the sequence-parallel degree is 4096 or more, keep below. One "
        "SFT step at 8K tokens, every-layer: peak 6.15 GiB kept, 2.70 returned; steady 2K steps 20-45% slower returned "
        "(docs/benchmarks.md, \"Long sequences\"). MALLOC_MMAP_THRESHOLD_ in the environment overrides it.",
    )
    checkpoint_every: int = Field(default=0, ge=0, description="Save a checkpoint every this many steps (0: only at the stage end).")
    seed: int = Field(default=0, description="Seeds the data order (one permutation per epoch) and torch/python/numpy RNGs.")

    @model_validator(mode="after")
    def _check(self) -> "StageConfig":
        if (self.num_steps is None) == (self.num_epochs is None):
            raise ValueError(f"stage {self.name!r}: set exactly one of num_steps and num_epochs")
        if not self.datasets:
            raise ValueError(f"stage {self.name!r}: datasets is empty")
        bad = {name: w for name, w in self.datasets.items() if w <= 0}
        if bad:
            raise ValueError(f"stage {self.name!r}: mix weights must be > 0, got {bad}")
        if self.micro_batch_tokens < self.max_length:
            raise ValueError(
                f"stage {self.name!r}: micro_batch_tokens={self.micro_batch_tokens} < max_length={self.max_length}; "
                "one full row must fit in a micro-batch"
            )
        if self.batch_tokens < self.max_length:
            raise ValueError(
                f"stage {self.name!r}: batch_tokens={self.batch_tokens} < max_length={self.max_length}; "
                "the longest example must fit in a step"
            )
        refuse_muon_with_lora(self.optimizer, self.lora)
        return self
