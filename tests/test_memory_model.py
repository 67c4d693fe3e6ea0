"""The memory model (training/memory_model.py) against what torch itself holds: parameter counts of
real models, the bytes autograd saves per token (counted tensor by tensor), the trainer's state after
a real AdamW step, LoRA's adapter count from peft, and the refusal of a config that cannot fit."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from passband.training.memory_model import (DeviceFit, ModelShape, TrainerMemory, activation_bytes_per_token,
                                            colocated_fit, lora_parameters, trainer_memory)

SHAPES = [  # hidden, MLP, heads, kv heads, layers: GQA, MHA, MQA, SmolLM2's and Qwen2.5-1.5B's widths
    (64, 128, 4, 2, 2), (64, 128, 4, 4, 1), (64, 96, 4, 1, 3), (192, 320, 6, 3, 2), (576, 1536, 9, 3, 2),
    (1536, 8960, 12, 2, 1),
]


def tiny(hidden: int, mlp: int, heads: int, kv: int, layers: int, qwen: bool = False, tied: bool = True):
    config_cls, model_cls = (Qwen2Config, Qwen2ForCausalLM) if qwen else (LlamaConfig, LlamaForCausalLM)
    config = config_cls(hidden_size=hidden, intermediate_size=mlp, num_attention_heads=heads, num_key_value_heads=kv,
                        num_hidden_layers=layers, vocab_size=256, tie_word_embeddings=tied, attn_implementation="sdpa")
    torch.manual_seed(0)
    return model_cls(config)


def saved_bytes(model, tokens: int, autocast: bool) -> int:
    """Bytes of the tensors autograd saves for backward in one forward of `tokens` tokens, each
    storage once, the model's own parameters excluded (they exist whatever the batch)."""
    storages: dict[int, int] = {}

    def pack(tensor):
        storages[tensor.untyped_storage().data_ptr()] = tensor.untyped_storage().nbytes()
        return tensor

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    ids = torch.randint(0, model.config.vocab_size, (1, tokens))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            model.model(input_ids=ids)
    return sum(size for ptr, size in storages.items() if ptr not in params)


@pytest.mark.parametrize("qwen", [False, True], ids=["llama", "qwen2"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_parameter_count_is_the_models(qwen: bool, tied: bool) -> None:
    for dims in SHAPES[:4]:
        model = tiny(*dims, qwen=qwen, tied=tied)
        shape = ModelShape.from_hf_config(model.config.to_dict())
        assert shape.parameters == sum(p.numel() for p in model.parameters()), dims


@pytest.mark.parametrize("precision", ["fp32", "bf16_autocast"])
def test_activation_bytes_per_token_are_what_autograd_saves(precision: str) -> None:
    """The formula against the saved tensors of real forwards: per token (the difference between 128
    and 64 tokens, over 64), exactly, on six shapes."""
    for dims in SHAPES:
        model = tiny(*dims, qwen=dims[0] == 1536)
        autocast = precision == "bf16_autocast"
        measured = (saved_bytes(model, 128, autocast) - saved_bytes(model, 64, autocast)) / 64
        shape = ModelShape.from_hf_config(model.config.to_dict())
        assert activation_bytes_per_token(shape, precision) == measured, dims


def test_eager_attention_adds_its_probabilities() -> None:
    """Eager attention keeps each layer's fp32 [heads, T, T] probabilities and K, V repeated to every
    head: what autograd saves for whole sequences of 64 and 128 tokens, exactly."""
    for dims in SHAPES[:5]:
        model = tiny(*dims)
        model.set_attn_implementation("eager")
        shape = ModelShape.from_hf_config(model.config.to_dict())
        for tokens in (64, 128):
            estimate = tokens * activation_bytes_per_token(shape, "fp32", eager_sequence_tokens=tokens)
            assert estimate == saved_bytes(model, tokens, autocast=False), (dims, tokens)
            assert estimate > tokens * activation_bytes_per_token(shape, "fp32")


def test_trainer_state_is_sixteen_bytes_per_parameter_after_a_real_step() -> None:
    """Weights, gradients and AdamW moments after one step, summed from the tensors themselves."""
    model = tiny(64, 128, 4, 2, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.randint(0, 256, (1, 16)), labels=torch.randint(0, 256, (1, 16))).loss.backward()
    optimizer.step()
    shape = ModelShape.from_hf_config(model.config.to_dict())
    memory = trainer_memory(shape, "fp32", 16, 16)
    held = {"weights": sum(p.nbytes for p in model.parameters()),
            "gradients": sum(p.grad.nbytes for p in model.parameters()),
            "optimizer": sum(t.nbytes for s in optimizer.state.values() for t in s.values() if t.dim() > 0)}
    assert held == {"weights": memory.weights, "gradients": memory.gradients, "optimizer": memory.optimizer}


def test_lora_parameters_are_peft_s() -> None:
    from passband.training.lora.adapters import attach_adapters
    from passband.training.lora.settings import LoraConfig

    model = tiny(64, 128, 4, 2, 2)
    shape = ModelShape.from_hf_config(model.config.to_dict())
    attach_adapters(model, LoraConfig(rank=8), seed=0)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert lora_parameters(shape, 8) == trainable
    memory = trainer_memory(shape, "fp32", 16, 16, kl_reference=True, lora_parameters=trainable)
    # the frozen base at 4 bytes, the adapters at 16; the reference is the same model, adapters off
    assert (memory.weights, memory.gradients, memory.optimizer, memory.reference) == (
        4 * shape.parameters + 4 * trainable, 4 * trainable, 8 * trainable, 0)
    # under bf16 autocast the adapted base weights are stored in bf16: the bytes the tensors hold
    from passband.training.lora.adapters import base_weights_in_bf16

    base_weights_in_bf16(model)
    held = sum(p.nbytes for p in model.parameters())
    assert trainer_memory(shape, "bf16_autocast", 16, 16, lora_parameters=trainable).weights == held


def test_shipped_shape_is_the_gguf_s() -> None:
    """PRESET_MODEL_SHAPES' SmolLM2 row is what the shipped GGUF's metadata says."""
    from transformers import AutoConfig

    from passband.training.model_shapes import PRESET_MODEL_SHAPES
    from passband.training.model_source import SMOLLM2_NAME, smollm2_gguf_path

    gguf = smollm2_gguf_path()
    config = AutoConfig.from_pretrained(str(gguf.parent), gguf_file=gguf.name).to_dict()
    assert ModelShape.from_hf_config(config) == PRESET_MODEL_SHAPES[SMOLLM2_NAME]
    assert PRESET_MODEL_SHAPES[SMOLLM2_NAME].parameters == 134_515_008  # SmolLM2-135M's count


def test_colocated_phases_by_hand() -> None:
    trainer = TrainerMemory(weights=10, gradients=10, optimizer=20, reference=5, autocast_copies=1, activations=30,
                            logits=4)
    assert trainer.persistent == 35 and trainer.peak == 80
    awake = colocated_fit(trainer, engine=50, device="gpu", device_bytes=100, engine_sleeps=False)
    asleep = colocated_fit(trainer, engine=50, device="gpu", device_bytes=100, engine_sleeps=True)
    assert awake.phases == {"training": 130, "rollout": 85} and not awake.fits
    assert asleep.phases == {"training": 80, "rollout": 85} and asleep.fits and asleep.peak_phase == "rollout"
    assert DeviceFit("cpu", 2**30, {"training": 2**31}).line() == "2.0 GiB at its peak (training) of the cpu's 1.0 GiB"


def test_eager_attention_under_autocast_keeps_six_bytes_per_probability() -> None:
    """Under bf16 autocast the fp32 probabilities and their bf16 copy: the part of what autograd saves that
    grows with T^2 (the rest is autocast's cached weight copies, the same at every length) is the model's."""
    for dims in [(64, 128, 4, 2, 2), (576, 1536, 9, 3, 2)]:
        model = tiny(*dims)
        model.set_attn_implementation("eager")
        shape = ModelShape.from_hf_config(model.config.to_dict())
        beyond = {tokens: saved_bytes(model, tokens, autocast=True)
                  - tokens * activation_bytes_per_token(shape, "bf16_autocast", eager_sequence_tokens=tokens)
                  for tokens in (64, 128, 256)}
        assert beyond[64] == beyond[128] == beyond[256], (dims, beyond)
