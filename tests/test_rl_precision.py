"""bf16 autocast in the RL update: pi_old and pi_theta share precision (the first ratio is exactly 1),
master weights, gradients and AdamW state stay fp32, and the update stays close to fp32's."""

import copy

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from passband.training.logprobs import response_logprobs
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import rl_update
from passband.training.runtime.precision import autocast_for

VOCAB = 96


def _model() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()


def _batch(model: LlamaForCausalLM) -> RolloutBatch:
    """2 prompts x G=4, responses of 3-9 tokens; engine log-probs = the model's own in fp32."""
    gen = torch.Generator().manual_seed(1)
    prompts, responses = [], []
    for _ in range(2):
        prompt = torch.randint(0, VOCAB, (5,), generator=gen).tolist()
        for _ in range(4):
            prompts.append(prompt)
            responses.append(torch.randint(0, VOCAB, (int(torch.randint(3, 10, (1,), generator=gen)),), generator=gen).tolist())
    with torch.no_grad():
        out = response_logprobs(model, prompts, responses)
    engine = [out.logp[i, : len(r)].tolist() for i, r in enumerate(responses)]
    return RolloutBatch(prompt_ids=prompts, response_ids=responses, engine_logp=engine,
                        rewards=[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0], valid=[True] * 8, tasks=["math"] * 8,
                        group_size=4)


def _train(model, batch, precision, **cfg):
    trained = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(trained.parameters(), lr=1e-3)
    config = RLAlgoConfig(precision=precision, micro_batch_size=3, **cfg)
    return trained, optimizer, rl_update(trained, None, optimizer, batch, config)


def test_auto_picks_bf16_where_the_cpu_has_bf16_matmul():
    from passband.training.runtime.precision import resolve_precision

    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert resolve_precision("auto", torch.device("cpu")) == ("bf16_autocast" if native else "fp32")
    assert RLAlgoConfig().precision == "auto"


def test_bf16_pi_old_and_pi_theta_agree_exactly_before_the_first_step():
    model = _model()
    batch = _batch(model)
    _, _, bf16 = _train(model, batch, "bf16_autocast")
    _, _, fp32 = _train(model, batch, "fp32")
    # Not vacuous: bf16 really changed the trainer's log-probs (the engine's are fp32 here, so
    # fp32 matches them to float noise and bf16 does not) ...
    assert fp32["vllm_kl"] < 1e-10
    assert bf16["vllm_kl"] > 100 * max(fp32["vllm_kl"], 1e-12)
    # ... yet the one inner step's ratio pi_theta / pi_old is exactly 1 on every token: both sides
    # came from the same bf16 forward, so nothing clips.
    assert bf16["ratio_max"] == 1.0 and bf16["ratio_min"] == 1.0
    assert bf16["clip_frac"] == 0.0


def test_bf16_keeps_fp32_master_weights_gradients_and_adam_state():
    model = _model()
    trained, optimizer, metrics = _train(model, _batch(model), "bf16_autocast")
    assert metrics["skipped"] == 0.0
    assert {p.dtype for p in trained.parameters()} == {torch.float32}
    states = [s for s in optimizer.state.values()]
    assert states and {s["exp_avg"].dtype for s in states} == {torch.float32}
    assert {s["exp_avg_sq"].dtype for s in states} == {torch.float32}


def test_bf16_log_probs_and_update_stay_close_to_fp32():
    model = _model()
    batch = _batch(model)
    with torch.no_grad(), autocast_for("bf16_autocast", torch.device("cpu")):
        bf16 = response_logprobs(model, batch.prompt_ids, batch.response_ids)
    with torch.no_grad():
        fp32 = response_logprobs(model, batch.prompt_ids, batch.response_ids)
    diff = (bf16.logp - fp32.logp)[fp32.mask.bool()].abs()
    # bf16 rounds each matmul input to 8 mantissa bits (relative 2^-9 = 0.2%); with the head in
    # fp32 the log-probs (|log p| ~ log 96 = 4.6 here) moved by at most 1.1e-3 (mean 4e-4) when
    # this was written: a 10x / 5x margin.
    assert 0 < diff.max() < 0.01 and diff.mean() < 0.002
    before = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    deltas = {}
    for precision in ("bf16_autocast", "fp32"):
        trained, _, _ = _train(model, batch, precision, num_inner_steps=2)
        deltas[precision] = torch.cat([p.detach().reshape(-1) for p in trained.parameters()]) - before
    cosine = torch.nn.functional.cosine_similarity(deltas["bf16_autocast"], deltas["fp32"], dim=0)
    assert deltas["fp32"].abs().max() > 1e-4  # a real update
    assert cosine > 0.99  # 0.9984 when this was written


@pytest.mark.parametrize("precision", ["fp32", "bf16_autocast"])
def test_precision_is_refused_when_unknown(precision):
    assert RLAlgoConfig(precision=precision).precision == precision
    with pytest.raises(ValueError):
        RLAlgoConfig(precision="fp16")


def test_uncached_autocast_gives_the_cached_log_probs_and_gradients_bit_for_bit():
    # autocast_for turns off autocast's weight cache (memory); each matmul casts its weight itself,
    # to the same bf16 values: log-probs and gradients must equal the cached run's exactly.
    with autocast_for("bf16_autocast", torch.device("cpu")):
        assert not torch.is_autocast_cache_enabled()
    model = _model()
    batch = _batch(model)
    results = []
    for context in (lambda: autocast_for("bf16_autocast", torch.device("cpu")),
                    lambda: torch.autocast("cpu", dtype=torch.bfloat16, cache_enabled=True)):
        model.zero_grad(set_to_none=True)
        with context():
            out = response_logprobs(model, batch.prompt_ids, batch.response_ids)
        (out.logp * out.mask).sum().backward()
        results.append((out.logp.detach().clone(), [p.grad.clone() for p in model.parameters()]))
    (logp_uncached, grads_uncached), (logp_cached, grads_cached) = results
    assert torch.equal(logp_uncached, logp_cached)
    assert all(torch.equal(a, b) for a, b in zip(grads_uncached, grads_cached))
