"""How much device memory a trainer and a colocated engine take: the written memory model (issue 50 item 5).

Pure arithmetic over a model's shape and the run's settings, so `passband run` and `passband doctor`
can say before anything loads whether a setup fits its device.

Trainer state, bytes per parameter: fp32 weights (4), their gradients (4) and AdamW's two moments
(8): 16 in full fine-tuning, in fp32 and under bf16 autocast alike (autocast keeps fp32 master
weights). Autocast casts each decoder weight to bf16 when its matmul runs, and the backward keeps
that copy (2 bytes per decoder parameter) until it has used it; with activation checkpointing only
the layer being recomputed holds its copies. The gradients are freed after each optimizer step, so
between updates (while the engine samples) the trainer holds its weights, AdamW and reference. A
KL reference is a second fp32 copy (4) with no gradients or optimizer. LoRA freezes the base (4 per
base parameter; 2 for the adapted linear weights under bf16 autocast, which casts them to bf16 for
every matmul anyway: training/lora/adapters.py base_weights_in_bf16) and trains the adapters at 16
bytes each. `optimizer: muon` keeps one fp32 momentum buffer (4) on each hidden matrix instead of AdamW's
two moments (8), and AdamW's two on the embeddings, head, norms and biases (training/optim/memory.py
`optimizer_state_bytes`, by parameter shape): SmolLM2-135M's 28.3M-weight embedding stays at 8 bytes, its
106.2M layer matrices drop to 4.

Activations, bytes per token: what autograd keeps for the backward pass of a Hugging Face
Llama/Qwen2 decoder with SDPA attention (no [T, T] tensor), counted tensor by tensor with
`torch.autograd.graph.saved_tensors_hooks` on models of many shapes (tests/test_memory_model.py
holds the count against the formula):

    fp32:          L * (32 h + 16 I + 8 kv + 4 heads + 8) + 8 h + 8 head_dim + 12
    bf16 autocast: L * (30 h +  8 I + 4 kv + 4 heads + 8) + 8 h + 8 head_dim + 12

(h hidden, I the MLP's width, kv = kv_heads * head_dim, L layers: per layer eight fp32 vectors of
the hidden size, four of the MLP's, K and V, and one log-sum-exp per head; under autocast the
matmuls' saved inputs are bf16 while the norms and residuals stay fp32). Eager attention (RL's
`algo.attention` default, for its CPU speed) keeps each layer's fp32 [heads, T, T] probabilities
besides: heads x T x 4 more bytes per token of a T-token sequence and layer (6 under autocast,
which adds a bf16 copy), and K and V repeated to every query head. With activation checkpointing
(training/runtime/activation_checkpointing.py) "every-layer" keeps each layer's fp32 input only (4 h) and
one layer's activations exist again while it is recomputed. "selective" keeps the layer input and the outputs
of the matmuls and the attention kernel (q, k, v, attention output and log-sum-exp, o, gate, up, down) and
recomputes the rest one layer at a time in backward; counted after the forward with every tensor the forward
left alive (tests/test_activation_checkpointing.py holds the count against the formula):

    fp32:          L * (12 h + 8 q + 8 kv + 8 I + 4 heads) + the one layer recomputed
    bf16 autocast: L * ( 8 h + 4 q + 4 kv + 4 I + 4 heads) + the one layer recomputed

(q = heads x head_dim; the matmuls' outputs in bf16 under autocast, the residual stream in fp32). Eager
attention keeps its [heads, T, T] scores (the first matmul's output) in place of the log-sum-exp, and
under either checkpointing its fp32 [T, T] causal mask once (4 T bytes a token), the layers' argument.
The LM head runs in chunks of `logprob_chunk_size` tokens (training/logprobs.py):
a chunk's fp32 logits, their log-softmax and, backward, their gradient (3 x chunk x vocab x 4 bytes).

Per rank (`per_rank`): FSDP2 splits the weights, gradients, optimizer state and reference over the mesh's
shard x sequence_parallel ranks (replicas hold copies) and gathers one layer whole while it computes and
the next ahead of it, plus one layer's whole gradient before its reduce-scatter. Ulysses sequence parallelism
(degree sp) gives each rank 1/sp of every sequence's tokens for the norms, the MLP and the projections, and
1/sp of the heads over the whole sequence inside attention: 1/sp of the activations either way, and 1/sp of
the tokens for the LM head's chunks.

Engine (vLLM): `memory_fraction` of the device for its weights, activations and KV cache together
(its `gpu_memory_utilization`), or its weights plus `kv_cache_gib`. Put to sleep while the trainer
updates (vLLM sleep mode, level 1: weights offloaded to host memory, KV cache freed) it holds
nothing on the device during the update. Beside the sampling engine the trainer holds its persistent
state where it empties its CUDA cache at the hand-over (the synchronous loop does), else its peak:
torch keeps freed blocks reserved (`colocated_fit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from passband.training.optim.config import OptimizerConfig
from passband.training.runtime.activation_checkpointing import Checkpointing
from passband.training.optim.memory import optimizer_state_bytes

GIB = 2**30

STATE_BYTES_PER_PARAMETER = 16
"""fp32 weights, gradients and AdamW's two moments."""
AUTOCAST_COPY_BYTES = 2
"""The bf16 copy of a decoder weight that autocast makes for its matmul and the backward keeps."""
FROZEN_BYTES_PER_PARAMETER = 4
"""An fp32 weight with no gradient or optimizer state: the KL reference, LoRA's frozen base."""
LOGIT_BUFFERS = 3
"""fp32 [chunk, vocab] tensors alive at once in the chunked LM head: logits, log-softmax, gradient."""
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}
GATHERED_LAYERS = 2
"""Decoder layers FSDP2 holds whole on a rank at once: the one computing and the one prefetched."""


@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a Llama-family decoder (Llama, Qwen2, Mistral, SmolLM2) that memory depends on."""

    hidden: int
    layers: int
    intermediate: int
    heads: int
    kv_heads: int
    vocab: int
    head_dim: int
    tied_embeddings: bool
    attention_bias: bool = False

    @classmethod
    def from_hf_config(cls, config: dict[str, Any]) -> ModelShape:
        """From a Hugging Face config.json's fields."""
        hidden, heads = config["hidden_size"], config["num_attention_heads"]
        return cls(hidden=hidden, layers=config["num_hidden_layers"], intermediate=config["intermediate_size"],
                   heads=heads, kv_heads=config.get("num_key_value_heads") or heads, vocab=config["vocab_size"],
                   head_dim=config.get("head_dim") or hidden // heads,
                   tied_embeddings=bool(config.get("tie_word_embeddings", False)),
                   # Qwen2 has q/k/v biases and no attention_bias field
                   attention_bias=bool(config.get("attention_bias", config.get("model_type") == "qwen2")))

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    @property
    def layer_parameters(self) -> int:
        """One decoder layer's weights: attention (q, k, v, o, biases), MLP and two norms."""
        q_dim = self.heads * self.head_dim
        attention = self.hidden * (q_dim + 2 * self.kv_dim) + q_dim * self.hidden
        if self.attention_bias:
            attention += q_dim + 2 * self.kv_dim
        return attention + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def linear_parameters(self) -> int:
        """One decoder layer's matmul weights (no biases or norms): what LoRA's 'all-linear' adapts."""
        q_dim = self.heads * self.head_dim
        return self.hidden * (q_dim + 2 * self.kv_dim) + q_dim * self.hidden + 3 * self.hidden * self.intermediate

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every weight's shape by its Llama name (a tied head once, as the embedding): what the optimizer's
        state is counted from (training/optim/memory.py reads the names to tell Muon's matrices from AdamW's)."""
        q_dim = self.heads * self.head_dim
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab, self.hidden)}
        for layer in range(self.layers):
            prefix = f"model.layers.{layer}."
            shapes |= {prefix + "self_attn.q_proj.weight": (q_dim, self.hidden),
                       prefix + "self_attn.k_proj.weight": (self.kv_dim, self.hidden),
                       prefix + "self_attn.v_proj.weight": (self.kv_dim, self.hidden),
                       prefix + "self_attn.o_proj.weight": (self.hidden, q_dim),
                       prefix + "mlp.gate_proj.weight": (self.intermediate, self.hidden),
                       prefix + "mlp.up_proj.weight": (self.intermediate, self.hidden),
                       prefix + "mlp.down_proj.weight": (self.hidden, self.intermediate),
                       prefix + "input_layernorm.weight": (self.hidden,),
                       prefix + "post_attention_layernorm.weight": (self.hidden,)}
            if self.attention_bias:
                shapes |= {prefix + f"self_attn.{name}_proj.bias": (size,)
                           for name, size in (("q", q_dim), ("k", self.kv_dim), ("v", self.kv_dim))}
        shapes["model.norm.weight"] = (self.hidden,)
        if not self.tied_embeddings:
            shapes["lm_head.weight"] = (self.vocab, self.hidden)
        return shapes

    @property
    def parameters(self) -> int:
        """Every weight: embedding, the layers, the final norm and an untied LM head."""
        head = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.vocab * self.hidden + self.layers * self.layer_parameters + self.hidden + head


Precision = Literal["fp32", "bf16_autocast"]


def activation_bytes_per_token(shape: ModelShape, precision: Precision, checkpointing: Checkpointing = "none",
                               eager_sequence_tokens: int | None = None) -> int:
    """Bytes autograd keeps per token of a micro-batch for the decoder's backward (module docstring);
    `eager_sequence_tokens`: eager attention over sequences of that length (None: SDPA or flash)."""
    if precision == "fp32":
        layer = 32 * shape.hidden + 16 * shape.intermediate + 8 * shape.kv_dim + 4 * shape.heads + 8
    else:
        layer = 30 * shape.hidden + 8 * shape.intermediate + 4 * shape.kv_dim + 4 * shape.heads + 8
    if eager_sequence_tokens is not None:
        # the probabilities' row of this token (fp32, and under autocast a bf16 copy for the matmul
        # with V besides), K and V copied to every query head (SDPA takes them grouped; one KV head is
        # repeated as a view), and no log-sum-exp
        repeated = shape.heads * shape.head_dim - shape.kv_dim if shape.kv_heads > 1 else 0
        row_bytes, kv_bytes = (4, 8) if precision == "fp32" else (6, 4)
        layer += shape.heads * eager_sequence_tokens * row_bytes + kv_bytes * repeated - 4 * shape.heads
    shared = 8 * shape.hidden + 8 * shape.head_dim + 12
    if checkpointing == "none":
        return shape.layers * layer + shared
    # eager attention's fp32 [T, T] causal mask is every checkpointed layer's argument: kept once until backward
    shared += 4 * eager_sequence_tokens if eager_sequence_tokens is not None else 0
    if checkpointing == "every-layer":  # each layer's fp32 input, plus the one layer being recomputed
        return shape.layers * 4 * shape.hidden + layer + shared
    # selective: the kept outputs of every layer, plus the one layer being recomputed
    return shape.layers * selective_layer_bytes_per_token(shape, precision, eager_sequence_tokens) + layer + shared


def selective_layer_bytes_per_token(shape: ModelShape, precision: Precision,
                                    eager_sequence_tokens: int | None = None) -> int:
    """What one decoder layer keeps per token under selective checkpointing: its fp32 input and the outputs of
    its matmuls and attention kernel (module docstring). Eager attention keeps the scores' row of the token
    (its first matmul's output, [heads, T] per token) instead of SDPA's log-sum-exp."""
    q_dim = shape.heads * shape.head_dim
    # q, k, v, the attention output, o, gate, up, down: in bf16 under autocast (the matmuls' dtype)
    matmul_outputs = 2 * q_dim + 2 * shape.kv_dim + 2 * shape.hidden + 2 * shape.intermediate
    element = 4 if precision == "fp32" else 2
    attention = 4 * shape.heads if eager_sequence_tokens is None else element * shape.heads * eager_sequence_tokens
    return 4 * shape.hidden + element * matmul_outputs + attention


@dataclass(frozen=True)
class TrainerMemory:
    """A trainer's device memory by part, bytes. `persistent` stays between updates (weights,
    AdamW, the reference); the rest exists only while an update runs."""

    weights: int
    gradients: int
    optimizer: int
    reference: int
    autocast_copies: int
    activations: int
    logits: int
    gathered: int = 0
    """FSDP2's whole layers on this rank during the update: `GATHERED_LAYERS` layers' weights and one layer's
    gradient before its reduce-scatter (0 in one process)."""

    @property
    def persistent(self) -> int:
        return self.weights + self.optimizer + self.reference

    @property
    def peak(self) -> int:
        return self.persistent + self.gradients + self.autocast_copies + self.activations + self.logits + self.gathered

    def lines(self) -> list[str]:
        parts = {"weights": self.weights, "gradients": self.gradients, "optimizer state": self.optimizer,
                 "KL reference": self.reference, "autocast bf16 copies": self.autocast_copies,
                 "FSDP2 gathered layers": self.gathered, "activations": self.activations, "LM-head chunk": self.logits}
        return [f"{name:22s} {gib(value):8.2f} GiB" for name, value in parts.items() if value]


def trainer_memory(shape: ModelShape, precision: Precision, tokens_per_micro_batch: int, logprob_chunk: int,
                   kl_reference: bool = False, lora_parameters: int | None = None,
                   checkpointing: Checkpointing = "none", eager_sequence_tokens: int | None = None,
                   optimizer: OptimizerConfig | None = None, sequence_parallel: int = 1) -> TrainerMemory:
    """The trainer's peak during one micro-batch's forward and backward (module docstring), in one process
    or on one rank of a sequence-parallel group of `sequence_parallel` ranks, which holds 1/sp of the
    micro-batch's `tokens_per_micro_batch` (`per_rank` splits the state besides).
    `lora_parameters`: the adapters' parameter count (None: every weight trains); `optimizer`: the
    trainer's (None: AdamW; Muon refuses LoRA, so its state is counted for full fine-tuning only)."""
    local_tokens = -(-tokens_per_micro_batch // sequence_parallel)
    n = shape.parameters
    trained = n if lora_parameters is None else lora_parameters
    frozen = 0
    if lora_parameters is not None:  # under autocast the adapted linear weights are kept in bf16 (adapters.py)
        linear = shape.layers * shape.linear_parameters if precision == "bf16_autocast" else 0
        frozen = 2 * linear + FROZEN_BYTES_PER_PARAMETER * (n - linear)
    return TrainerMemory(
        weights=4 * trained + frozen,
        gradients=4 * trained,
        optimizer=(optimizer_state_bytes(shape.parameter_shapes(), optimizer)
                   if optimizer is not None and lora_parameters is None else 8 * trained),
        # with adapters the reference is the same model, adapters off: no second copy
        reference=FROZEN_BYTES_PER_PARAMETER * n if kl_reference and lora_parameters is None else 0,
        # checkpointed layers (selective too) cast their weights again when recomputed: one layer's copies at a time
        autocast_copies=(AUTOCAST_COPY_BYTES * shape.layer_parameters * (1 if checkpointing != "none" else shape.layers)
                         if precision == "bf16_autocast" else 0),
        activations=local_tokens * activation_bytes_per_token(shape, precision, checkpointing, eager_sequence_tokens),
        logits=LOGIT_BUFFERS * min(logprob_chunk, local_tokens) * shape.vocab * 4,
    )


def per_rank(memory: TrainerMemory, shape: ModelShape, precision: Precision, state_shards: int) -> TrainerMemory:
    """One rank's part of `memory` when FSDP2 shards the state over `state_shards` ranks (the mesh's shard x
    sequence_parallel; 1: one process, unchanged): weights, gradients, optimizer state and reference split that
    many ways (rounded up), and the whole layers it gathers (module docstring; their weights in bf16 under
    bf16 autocast, FSDP2's param_dtype there, and their gradient in fp32, its reduce_dtype)."""
    if state_shards == 1:
        return memory
    weight_bytes = 2 if precision == "bf16_autocast" else 4
    gathered = shape.layer_parameters * (GATHERED_LAYERS * weight_bytes + 4)

    def split(value: int) -> int:
        return -(-value // state_shards)

    return TrainerMemory(split(memory.weights), split(memory.gradients), split(memory.optimizer),
                         split(memory.reference), memory.autocast_copies, memory.activations, memory.logits, gathered)


def lora_parameters(shape: ModelShape, rank: int) -> int:
    """Adapter parameters of rank `rank` on every decoder linear layer (LoraConfig's 'all-linear')."""
    q_dim = shape.heads * shape.head_dim
    pairs = [(shape.hidden, q_dim), (shape.hidden, shape.kv_dim), (shape.hidden, shape.kv_dim), (q_dim, shape.hidden),
             (shape.hidden, shape.intermediate), (shape.hidden, shape.intermediate), (shape.intermediate, shape.hidden)]
    return shape.layers * sum(rank * (fan_in + fan_out) for fan_in, fan_out in pairs)


def engine_bytes(shape: ModelShape, dtype: str, device_bytes: int, memory_fraction: float,
                 kv_cache_gib: float | None) -> int:
    """What a vLLM engine takes on its device: `memory_fraction` of it, or with a fixed KV cache
    its weights plus that cache."""
    if kv_cache_gib is None:
        return int(memory_fraction * device_bytes)
    return shape.parameters * DTYPE_BYTES[dtype] + int(kv_cache_gib * GIB)


def kv_bytes_per_token(shape: ModelShape, dtype: str) -> int:
    """One token's K and V over every layer."""
    return 2 * shape.layers * shape.kv_dim * DTYPE_BYTES[dtype]


@dataclass(frozen=True)
class DeviceFit:
    """Peak device memory per phase of a run on one device, against what the device holds."""

    device: str
    device_bytes: int
    phases: dict[str, int]

    @property
    def peak_phase(self) -> str:
        return max(self.phases, key=self.phases.get)

    @property
    def fits(self) -> bool:
        return self.phases[self.peak_phase] <= self.device_bytes

    def line(self) -> str:
        phase = self.peak_phase
        return (f"{gib(self.phases[phase]):.1f} GiB at its peak ({phase}) of the {self.device}'s "
                f"{gib(self.device_bytes):.1f} GiB")


def colocated_fit(trainer: TrainerMemory, engine: int, device: str, device_bytes: int, engine_sleeps: bool,
                  trainer_releases: bool = True) -> DeviceFit:
    """Trainer and engine on one device: the update with the engine asleep (nothing of it on the
    device) or awake beside it, and the rollout with what the trainer still holds beside the engine: its
    persistent state where it releases its cached blocks at the hand-over (`trainer_releases`: the
    synchronous loop's release_device_memory before the engine wakes), else its peak, which torch's
    allocator keeps reserved (vLLM's sleep mode takes its memory from the driver, not from that cache)."""
    held = trainer.persistent if trainer_releases else trainer.peak
    return DeviceFit(device, device_bytes, {"training": trainer.peak + (0 if engine_sleeps else engine),
                                            "rollout": held + engine})


def gib(num_bytes: float) -> float:
    return num_bytes / GIB
