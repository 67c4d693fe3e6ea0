"""Selective activation checkpointing (training/runtime/activation_checkpointing.py) computes what no
checkpointing computes, and keeps less than it: the loss and every gradient the same within 1e-6 in fp32
(a tiny Llama and the shipped SmolLM2-135M), SFT's stage and the RL update the same, and what a forward
leaves alive for its backward counted storage by storage against the memory model's formula."""

from __future__ import annotations

import copy
import weakref

import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from passband.training.memory_model import ModelShape, activation_bytes_per_token, selective_layer_bytes_per_token
from passband.training.rl.config import RLAlgoConfig
from passband.training.runtime.activation_checkpointing import enable_checkpointing
from passband.training.sft.config import StageConfig

MODES = ("none", "selective", "every-layer")
SHAPES = [(64, 128, 4, 2, 2), (64, 96, 4, 1, 3), (192, 320, 6, 3, 2), (576, 1536, 9, 3, 2)]


def tiny(hidden: int, mlp: int, heads: int, kv: int, layers: int, qwen: bool = False, attn: str = "sdpa"):
    config_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if qwen else (LlamaConfig, LlamaForCausalLM)
    config = config_cls(hidden_size=hidden, intermediate_size=mlp, num_attention_heads=heads, num_key_value_heads=kv,
                        num_hidden_layers=layers, vocab_size=256, attn_implementation=attn)
    torch.manual_seed(0)
    return model_cls(config)


def checkpointed(model, mode: str):
    """A copy of `model` in train mode (transformers checkpoints only there), checkpointed as `mode`."""
    model = copy.deepcopy(model).train()
    enable_checkpointing(model, mode)
    return model


def loss_and_grads(model, ids: torch.Tensor) -> tuple[float, dict[str, torch.Tensor]]:
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.item(), {name: p.grad for name, p in model.named_parameters()}


def assert_same_as_none(model, ids: torch.Tensor, tolerance: float) -> None:
    reference_loss, reference = loss_and_grads(checkpointed(model, "none"), ids)
    for mode in ("selective", "every-layer"):
        loss, grads = loss_and_grads(checkpointed(model, mode), ids)
        assert abs(loss - reference_loss) <= tolerance, mode
        diff = max(float((grads[name] - reference[name]).abs().max()) for name in reference)
        assert diff <= tolerance, (mode, diff)


class _Created(TorchDispatchMode):
    """Weak references to the storage of every tensor an op makes (recompute included, which never runs here)."""

    def __init__(self) -> None:
        super().__init__()
        self.storages: list[weakref.ref] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.storages += [weakref.ref(t.untyped_storage()) for t in pytree.tree_leaves(out)
                          if isinstance(t, torch.Tensor)]
        return out


def kept(model, tokens: int, autocast: bool = False) -> tuple[int, int]:
    """(bytes, storages) a forward of `tokens` tokens made and left alive for the backward (while its
    output is held), each storage once, views of the parameters left out: what the activations hold
    between the forward and the backward, whatever holds them (autograd's saved tensors, the
    checkpoints' inputs, selective checkpointing's cache)."""
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), generator=torch.Generator().manual_seed(0))
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    created = _Created()
    with created, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = model.model(input_ids=ids, use_cache=False).last_hidden_state
    alive = {}
    for ref in created.storages:
        storage = ref()
        if storage is not None and storage.data_ptr() not in params:
            alive[storage.data_ptr()] = storage.nbytes()
    assert out.requires_grad  # the graph, and so everything it holds, is alive while the count is taken
    return sum(alive.values()), len(alive)


def test_selective_gives_none_s_loss_and_gradients_on_tiny_models() -> None:
    for dims in SHAPES:
        ids = torch.randint(0, 256, (2, 48), generator=torch.Generator().manual_seed(1))
        assert_same_as_none(tiny(*dims), ids, tolerance=1e-6)
    assert_same_as_none(tiny(64, 128, 4, 2, 2, qwen=True), ids, tolerance=1e-6)  # q/k/v biases: addmm
    assert_same_as_none(tiny(64, 128, 4, 2, 2, attn="eager"), ids, tolerance=1e-6)  # bmm attention


@pytest.mark.slow  # the shipped model, three forward and backward passes: past 30 s on this box
def test_selective_gives_none_s_loss_and_gradients_on_the_shipped_model(smollm2_dir) -> None:
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(smollm2_dir)
    model.set_attn_implementation("sdpa")
    ids = torch.randint(0, model.config.vocab_size, (1, 192), generator=torch.Generator().manual_seed(2))
    assert_same_as_none(model, ids, tolerance=1e-6)


@pytest.mark.parametrize("precision", ["fp32", "bf16_autocast"])
def test_selective_keeps_what_the_formula_says_and_less_than_none(precision: str) -> None:
    """Per token (the difference between 128 and 64 tokens, over 64), exactly, on four shapes:
    selective keeps each layer's input and the outputs of its matmuls and attention kernel, every-layer
    each layer's input; both keep besides what the memory model counts outside the layers (8 h + 8 head_dim
    + 12 bytes: the final norm's input and normalised input, RoPE's cos and sin, the norm's rsqrt and the
    position ids) and the forward's output (4 h), which the LM head's chunks hold in training. Fewer
    storages than none, and fewer bytes."""
    autocast = precision == "bf16_autocast"
    for dims in SHAPES:
        model = tiny(*dims).train()
        shape = ModelShape.from_hf_config(model.config.to_dict())
        shared = 8 * shape.hidden + 8 * shape.head_dim + 12 + 4 * shape.hidden
        per_token, storages = {}, {}
        for mode in MODES:
            copy_ = checkpointed(model, mode)
            (big, count), (small, _) = kept(copy_, 128, autocast), kept(copy_, 64, autocast)
            per_token[mode], storages[mode] = (big - small) / 64, count
        assert per_token["selective"] == shape.layers * selective_layer_bytes_per_token(shape, precision) + shared, dims
        assert per_token["every-layer"] == shape.layers * 4 * shape.hidden + shared, dims
        assert per_token["none"] > per_token["selective"] > per_token["every-layer"], (dims, per_token)
        assert storages["none"] > storages["selective"] > storages["every-layer"], (dims, storages)
        # the memory model's peak adds the one layer that is recomputed at a time in backward, and leaves the
        # output to the LM head's term
        layer = (activation_bytes_per_token(shape, precision) - (shared - 4 * shape.hidden)) // shape.layers
        assert (activation_bytes_per_token(shape, precision, "selective")
                == per_token["selective"] + layer - 4 * shape.hidden), dims


def test_eager_attention_keeps_its_scores_and_its_mask() -> None:
    """Eager attention under selective checkpointing keeps the [heads, T] scores' row of each token (its first
    matmul's output) instead of the log-sum-exp, and under either checkpointing the fp32 [T, T] causal mask
    once: whole sequences of 64 and 128 tokens, exactly, against the memory model less its recomputed layer."""
    for dims in SHAPES[:2]:
        model = tiny(*dims, attn="eager").train()
        shape = ModelShape.from_hf_config(model.config.to_dict())
        outside = 8 * shape.hidden + 8 * shape.head_dim + 12
        for tokens in (64, 128):
            layer = (activation_bytes_per_token(shape, "fp32", eager_sequence_tokens=tokens) - outside) // shape.layers
            for mode in ("selective", "every-layer"):
                measured, _ = kept(checkpointed(model, mode), tokens)
                model_bytes = activation_bytes_per_token(shape, "fp32", mode, eager_sequence_tokens=tokens)
                assert measured == tokens * (model_bytes - layer + 4 * shape.hidden), (dims, tokens, mode)


def test_shipped_shape_by_hand() -> None:
    """SmolLM2-135M, fp32 (h 576, q 576, kv 192, I 1536, 9 heads, 30 layers), per token and layer: selective
    keeps 4 x (576 + 576 + 192 + 192 + 576 + 9 + 576 + 1536 + 1536 + 576) = 25,380 bytes (input, q, k, v,
    attention out, its log-sum-exp, o, gate, up, down), none 32 x 576 + 16 x 1536 + 8 x 192 + 4 x 9 + 8 = 44,588."""
    from passband.training.model_shapes import PRESET_MODEL_SHAPES
    from passband.training.model_source import SMOLLM2_NAME

    shape = PRESET_MODEL_SHAPES[SMOLLM2_NAME]
    assert selective_layer_bytes_per_token(shape, "fp32") == 25_380
    shared = 8 * 576 + 8 * 64 + 12
    assert activation_bytes_per_token(shape, "fp32") == 30 * 44_588 + shared
    assert activation_bytes_per_token(shape, "fp32", "selective") == 30 * 25_380 + 44_588 + shared
    assert activation_bytes_per_token(shape, "fp32", "every-layer") == 30 * 4 * 576 + 44_588 + shared


def test_the_setting_reads_its_old_booleans() -> None:
    assert StageConfig.model_fields["activation_checkpointing"].default == "none"
    assert RLAlgoConfig().activation_checkpointing == "every-layer"
    assert RLAlgoConfig(activation_checkpointing=True).activation_checkpointing == "every-layer"
    assert RLAlgoConfig(activation_checkpointing=False).activation_checkpointing == "none"
    assert RLAlgoConfig(activation_checkpointing="selective").activation_checkpointing == "selective"
    with pytest.raises(ValueError, match="'none', 'selective' or 'every-layer'"):
        RLAlgoConfig(activation_checkpointing="some")


def _sft_stage(mode: str) -> StageConfig:
    return StageConfig(name="foundation", datasets={"math": 1.0}, max_length=96, num_steps=3, lr=3e-3, warmup_steps=1,
                       batch_tokens=300, micro_batch_tokens=192, grad_clip=0.5, activation_checkpointing=mode, seed=5,
                       precision="fp32", device="cpu")


def test_sft_stage_trains_the_same_with_selective(tmp_path) -> None:
    """Three steps of SFT's own loop (packed rows, the varlen kernel, the chunked loss, AdamW): per-step
    loss and gradient norm, and the weights after, the same as without checkpointing."""
    from test_sft_resume import _examples
    from tiny_chat_model import tiny_llama, tiny_tokenizer

    from passband.training.sft.loop import train_stage

    tokenizer = tiny_tokenizer()
    examples = _examples(tokenizer)
    runs = {}
    for mode in MODES:
        metrics: dict[int, dict] = {}
        model = tiny_llama(seed=0)
        train_stage(model, tokenizer, examples, _sft_stage(mode), tmp_path / mode,
                    on_metrics=lambda m, s, metrics=metrics: metrics.__setitem__(s, dict(m)))
        runs[mode] = (metrics, {k: v.detach().clone() for k, v in model.state_dict().items()})
        if mode != "none":
            assert model.is_gradient_checkpointing
    reference_metrics, reference_weights = runs["none"]
    assert sorted(reference_metrics) == [1, 2, 3]
    for mode in ("selective", "every-layer"):
        metrics, weights = runs[mode]
        for step, values in reference_metrics.items():
            for key in ("loss", "grad_norm"):
                assert metrics[step][key] == pytest.approx(values[key], rel=1e-6, abs=1e-6), (mode, step, key)
        assert max(float((weights[k] - reference_weights[k]).abs().max()) for k in weights) < 1e-6, mode


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_rl_update_is_the_same_with_selective(tmp_path, attention: str) -> None:
    """The RL update (the trainer as open_trainer builds it, plain SGD so the step is the gradient) with
    selective checkpointing gives the update without it, on both attention kernels."""
    from test_rl_trainer_memory import _saved_tiny, _update

    model_dir = _saved_tiny(tmp_path)
    _, plain, delta_plain = _update(model_dir, attention=attention, activation_checkpointing="none")
    trainer, selective, delta_selective = _update(model_dir, attention=attention, activation_checkpointing="selective")
    assert trainer.model.is_gradient_checkpointing and trainer.model.training
    assert delta_plain.abs().max() > 1e-4  # a real update
    assert float((delta_selective - delta_plain).abs().max()) < 1e-6
    assert selective["loss"] == pytest.approx(plain["loss"], abs=1e-6)
