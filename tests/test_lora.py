"""LoRA (training/lora/): the adapted model starts as the base exactly, the reference is the base with the
adapters off, only adapters train, the merged export is W + (alpha/r) B A, and a checkpoint resumes exactly."""

import copy

import pytest
import torch
from tiny_chat_model import tiny_llama, tiny_tokenizer

from passband.training.lora.adapters import (adapter_state, adapters_disabled, attach_adapters, is_adapted,
                                             merged_state)
from passband.training.lora.settings import LoraConfig
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import build_optimizer, rl_update
from test_rl_update import _batch

IDS = torch.tensor([[5, 17, 33, 2, 9, 41, 7], [60, 3, 3, 12, 250, 1, 0]])


def _adapted(seed: int = 0, rank: int = 4, **settings) -> torch.nn.Module:
    return attach_adapters(tiny_llama(seed=seed).eval(), LoraConfig(rank=rank, **settings), seed=11)


def _randomize_b(model: torch.nn.Module, seed: int = 1) -> None:
    """Give every B a nonzero value (it starts at 0), so the adapters change the outputs."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.05 * torch.randn(parameter.shape, generator=gen))


def test_adapted_model_starts_as_the_base_exactly():
    base, adapted = tiny_llama(seed=0).eval(), _adapted()
    assert torch.equal(adapted(IDS).logits, base(IDS).logits)
    assert is_adapted(adapted) and not is_adapted(base)


def test_adapted_shipped_model_starts_as_the_base_exactly(smollm2_dir):
    from passband.training.model_source import load_causal_lm

    base, adapted = load_causal_lm(smollm2_dir).eval(), load_causal_lm(smollm2_dir).eval()
    attach_adapters(adapted, LoraConfig(rank=8), seed=0)
    ids = torch.tensor([[1, 504, 3458, 314, 253, 1345, 30, 2]])
    with torch.no_grad():
        assert torch.equal(adapted(ids).logits, base(ids).logits)


def test_adapters_off_is_the_base_bit_for_bit_and_on_again_after():
    base, adapted = tiny_llama(seed=0).eval(), _adapted()
    _randomize_b(adapted)
    with torch.no_grad():
        moved = adapted(IDS).logits
        assert not torch.allclose(moved, base(IDS).logits)
        with adapters_disabled(adapted) as reference:
            assert torch.equal(reference(IDS).logits, base(IDS).logits)
        assert torch.equal(adapted(IDS).logits, moved)
    assert all(p.requires_grad == ("lora_" in n) for n, p in adapted.named_parameters())


def test_only_adapters_train_and_the_base_does_not_move():
    model = _adapted()
    config = RLAlgoConfig(precision="fp32", lr=1e-2, lora={"rank": 4})
    optimizer = build_optimizer(model, config)
    trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
    adapters = {id(p) for n, p in model.named_parameters() if "lora_" in n}
    assert trained == adapters and len(adapters) == 2 * 7 * 2  # A and B of 7 linear layers x 2 decoder layers
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rl_update(model, None, optimizer, _batch(model, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]), config,
              torch.Generator().manual_seed(0))
    # B starts at 0, so the first step's gradient reaches B only (dL/dA = B^T dL/dW_eff x scale = 0)
    for name, parameter in model.named_parameters():
        assert torch.equal(parameter, before[name]) != ("lora_B" in name), name


def test_merged_export_is_w_plus_scaled_ba():
    model = _adapted(alpha=6.0)
    _randomize_b(model)
    merged = merged_state(model)
    assert not any("lora_" in name or "base_layer" in name for name in merged)
    assert merged.keys() == tiny_llama(seed=0).state_dict().keys()
    layer = model.model.layers[1].mlp.down_proj
    by_hand = layer.base_layer.weight + (6.0 / 4) * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    torch.testing.assert_close(merged["model.layers.1.mlp.down_proj.weight"], by_hand, rtol=0, atol=1e-6)
    loaded = tiny_llama(seed=5).eval()
    loaded.load_state_dict(merged)
    with torch.no_grad():
        torch.testing.assert_close(loaded(IDS).logits, model(IDS).logits, rtol=0, atol=1e-5)


@pytest.mark.parametrize("placement,estimator", [("loss", "k2"), ("loss", "k3"), ("reward", "k1")])
@pytest.mark.filterwarnings("ignore:KL estimator 'k3'", "ignore:a KL loss")
def test_reference_with_adapters_off_equals_a_separate_base_copy(placement, estimator):
    """The KL's reference log-probs come from the policy with its adapters off: the update equals, bit for bit,
    the one whose reference is a separate copy of the base (today's second model), for every placement."""
    policy = _adapted()
    _randomize_b(policy)  # a policy away from its reference, so KL has a gradient
    config = RLAlgoConfig(precision="fp32", lr=1e-2, kl_coef=0.5, kl_placement=placement, kl_estimator=estimator,
                          lora={"rank": 4})
    batch = _batch(policy, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0], engine_noise=0.01)
    results = []
    for reference_of in (lambda model: model, lambda model: tiny_llama(seed=0).eval().requires_grad_(False)):
        model = copy.deepcopy(policy)
        optimizer = build_optimizer(model, config)
        metrics = rl_update(model, reference_of(model), optimizer, batch, config, torch.Generator().manual_seed(0))
        results.append((adapter_state(model), metrics))
    (own, own_metrics), (separate, separate_metrics) = results
    assert own.keys() == separate.keys()
    assert all(torch.equal(own[name], separate[name]) for name in own)
    timings = {"seconds", "train_tokens_per_s"}
    assert {k: v for k, v in own_metrics.items() if k not in timings} == \
        {k: v for k, v in separate_metrics.items() if k not in timings}


def test_rl_refuses_adapter_dropout_and_lora_names_no_head():
    with pytest.raises(ValueError, match="lora.dropout=0.1: RL needs"):
        RLAlgoConfig(lora={"dropout": 0.1})
    with pytest.raises(ValueError, match=r"target_modules names \['lm_head'\]"):
        LoraConfig(target_modules=["q_proj", "lm_head"])


def test_checkpoint_holds_merged_weights_and_resumes_the_adapters_exactly(tmp_path):
    from transformers import AutoModelForCausalLM

    from passband.training.rl.trainer import open_trainer, save_trainer

    start = tmp_path / "start"
    tiny_llama(seed=0).save_pretrained(start)
    tiny_tokenizer().save_pretrained(start)
    algo = RLAlgoConfig(precision="fp32", lr=1e-2, kl_coef=0.1, lora={"rank": 2})
    trainer = open_trainer(start, ["math"], algo)
    assert trainer.ref_model is trainer.model  # no second copy: the reference is the base, adapters off
    batch = _batch(trainer.model, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0])
    rl_update(trainer.model, trainer.ref_model, trainer.optimizer, batch, algo, torch.Generator().manual_seed(0))
    trainer.state.iteration = 1
    saved = save_trainer(trainer, tmp_path / "checkpoints")

    exported = AutoModelForCausalLM.from_pretrained(saved).eval()  # loadable as any checkpoint
    with torch.no_grad():
        torch.testing.assert_close(exported(IDS).logits, trainer.model(IDS).logits, rtol=0, atol=1e-5)
    resumed = open_trainer(start, ["math"], algo, resume_dir=saved)
    assert resumed.state.iteration == 1
    mine, theirs = adapter_state(trainer.model), adapter_state(resumed.model)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[n], theirs[n]) for n in mine)
    # the AdamW moments come back too: one more identical update from each gives identical adapters
    for each in (trainer, resumed):
        rl_update(each.model, each.ref_model, each.optimizer, batch, algo, torch.Generator().manual_seed(1))
    mine, theirs = adapter_state(trainer.model), adapter_state(resumed.model)
    assert all(torch.equal(mine[n], theirs[n]) for n in mine)


def test_lora_on_ranks_and_adapters_on_the_hf_engine_are_refused_in_one_line():
    from passband.flows.rl.config import RLConfig
    from passband.flows.sft import SFTConfig

    with pytest.raises(ValueError, match="algo.lora trains in the flow's own process, not on torchrun ranks"):
        RLConfig(algo={"lora": {"rank": 4}}, distributed={"nproc_per_node": 2})
    with pytest.raises(ValueError, match="engine_weights: adapter is served by vLLM's LoRA support; engine.kind is 'hf'"):
        RLConfig(algo={"lora": {"engine_weights": "adapter"}}, engine={"kind": "hf"})
    stage = SFTConfig().stages[0].model_copy(update={"lora": LoraConfig(rank=8)})
    with pytest.raises(ValueError, match=rf"stages \['{stage.name}'\] set lora, which trains in the flow's own"):
        SFTConfig(stages=[stage], distributed={"nproc_per_node": 2})
    assert SFTConfig(stages=[stage]).stages[0].lora.rank == 8


@pytest.mark.filterwarnings("ignore:KL estimator 'k3'", "ignore:a KL loss")
def test_bf16_frozen_base_under_autocast_is_the_fp32_base_bit_for_bit():
    """Under bf16 autocast every matmul casts its weight to bf16, so a frozen base stored in bf16 (half its
    memory) gives the same update: adapters, metrics and log-probs equal bit for bit, KL's reference (the
    adapters off) included; the merged export differs only by the base's bf16 rounding."""
    from passband.training.logprobs import response_logprobs
    from passband.training.lora.adapters import base_weights_in_bf16, merged_state
    from passband.training.runtime.precision import autocast_for

    policy = _adapted()
    _randomize_b(policy)
    config = RLAlgoConfig(precision="bf16_autocast", lr=1e-2, kl_coef=0.5, kl_placement="loss", kl_estimator="k3",
                          lora={"rank": 4})
    batch = _batch(policy, [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0], engine_noise=0.01)
    results = []
    for in_bf16 in (False, True):
        model = copy.deepcopy(policy)
        if in_bf16:
            moved = base_weights_in_bf16(model)
            base = [p for n, p in model.named_parameters() if "base_layer.weight" in n]
            assert moved == sum(p.numel() for p in base) > 0 and {p.dtype for p in base} == {torch.bfloat16}
            assert {p.dtype for n, p in model.named_parameters() if "base_layer" not in n} == {torch.float32}
        optimizer = build_optimizer(model, config)
        metrics = rl_update(model, model, optimizer, batch, config, torch.Generator().manual_seed(0))
        with torch.no_grad(), autocast_for("bf16_autocast", torch.device("cpu")):
            logp = response_logprobs(model, batch.prompt_ids, batch.response_ids).logp
        results.append((adapter_state(model), metrics, logp, merged_state(model)))
    (fp32, fp32_metrics, fp32_logp, fp32_merged), (bf16, bf16_metrics, bf16_logp, bf16_merged) = results
    assert all(torch.equal(fp32[name], bf16[name]) for name in fp32)
    timings = {"seconds", "train_tokens_per_s"}
    assert {k: v for k, v in fp32_metrics.items() if k not in timings} == \
        {k: v for k, v in bf16_metrics.items() if k not in timings}
    assert torch.equal(fp32_logp, bf16_logp)
    assert {t.dtype for t in bf16_merged.values()} == {torch.float32}
    base = merged_state(tiny_llama(seed=0).eval())  # the fp32 base the adapters sit on
    for name, tensor in fp32_merged.items():  # the same delta on the bf16-rounded base: apart by that rounding
        bound = base[name].abs() * 2**-8 + 1e-7  # half a bf16 ulp is at most 2^-8 relative; 1e-7: fp32's sum
        assert bool(((bf16_merged[name] - tensor).abs() <= bound).all()), name
