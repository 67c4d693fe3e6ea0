"""The RL update on a tiny Llama: micro-batch invariance, on-policy identities, masking, direction,
the vllm_kl filter, off-policy drift with S=2, and k1-in-the-reward advantages by hand."""

import copy
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from passband.training.logprobs import response_logprobs
from passband.training.rl.batches.batching import RolloutBatch
from passband.training.rl.config import RLAlgoConfig
from passband.training.rl.update import advantages_with_kl, rl_update

VOCAB = 64


def _tiny_model(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    return LlamaForCausalLM(config).eval()  # eval: no dropout, deterministic log-probs


def _own_logp(model, prompts, responses, temperature=1.0) -> list[list[float]]:
    """The model's log-probs of the responses, one prompt at a time (a different padding than the update)."""
    with torch.no_grad():
        return [response_logprobs(model, [p], [r], temperature).logp[0].tolist() for p, r in zip(prompts, responses)]


def _batch(model, rewards, valid=None, num_prompts=2, group_size=4, seed=1, engine_noise=0.0) -> RolloutBatch:
    """Random prompts (3-6 tokens) and responses (2-7 tokens); engine log-probs = the model's own + noise."""
    gen = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for _ in range(num_prompts):
        prompt = torch.randint(0, VOCAB, (int(torch.randint(3, 7, (1,), generator=gen)),), generator=gen).tolist()
        for _ in range(group_size):
            length = int(torch.randint(2, 8, (1,), generator=gen))
            prompts.append(prompt)
            responses.append(torch.randint(0, VOCAB, (length,), generator=gen).tolist())
    engine = _own_logp(model, prompts, responses)
    engine = [[v + engine_noise * float(torch.randn(1, generator=gen)) for v in row] for row in engine]
    num_rows = num_prompts * group_size
    return RolloutBatch(prompt_ids=prompts, response_ids=responses, engine_logp=engine, rewards=list(rewards),
                        valid=list(valid) if valid is not None else [True] * num_rows,
                        tasks=["math"] * (num_rows // 2) + ["code"] * (num_rows - num_rows // 2), group_size=group_size)


def _update(model, batch, lr=0.1, ref_model=None, **cfg):
    """Copy the model, apply rl_update with plain SGD (update proportional to the gradient), return (copy, metrics).

    fp32 unless a test asks otherwise: these identities are exact algebra, which bf16 rounding (its
    GEMM blocking depends on the micro-batch's shape) would blur (bf16: tests/test_rl_precision.py)."""
    trained = copy.deepcopy(model)
    optimizer = torch.optim.SGD(trained.parameters(), lr=lr)
    config = RLAlgoConfig(**{"precision": "fp32", **cfg})
    metrics = rl_update(trained, ref_model, optimizer, batch, config, torch.Generator().manual_seed(0))
    return trained, metrics


def _delta(before, after) -> torch.Tensor:
    return torch.cat([(a - b).reshape(-1) for a, b in zip(before.parameters(), after.parameters())])


REWARDS = [1.0, 0.0, 0.5, 0.0, 1.0, 1.0, 0.0, 0.25]


@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean", "seq_sum"])
@pytest.mark.parametrize("extras", [
    {},
    {"kl_coef": 0.3, "kl_placement": "loss", "kl_estimator": "k2", "cov_method": "kl_cov", "cov_fraction": 0.2},
    {"level": "sequence", "cov_method": "clip_cov", "cov_fraction": 0.3, "cov_bounds": (-10.0, 10.0)},
])
def test_micro_batching_does_not_change_the_update(aggregation, extras):
    model = _tiny_model()
    ref = _tiny_model(seed=5) if extras.get("kl_coef") else None
    batch = _batch(model, REWARDS, valid=[True, True, True, False, True, True, True, True], engine_noise=0.05)
    settings = dict(aggregation=aggregation, max_tokens=8, correction="token_tis", **extras)
    whole, m_whole = _update(model, batch, ref_model=ref, micro_batch_size=8, **settings)
    ones, m_ones = _update(model, batch, ref_model=ref, micro_batch_size=1, **settings)
    threes, _ = _update(model, batch, ref_model=ref, micro_batch_size=3, **settings)
    d_whole = _delta(model, whole)
    assert d_whole.abs().max() > 1e-4  # a real update, so equality below is not vacuous
    assert torch.allclose(_delta(model, ones), d_whole, rtol=1e-4, atol=1e-7)
    assert torch.allclose(_delta(model, threes), d_whole, rtol=1e-4, atol=1e-7)
    assert m_ones["loss"] == pytest.approx(m_whole["loss"], rel=1e-5, abs=1e-7)
    assert m_ones["grad_norm"] == pytest.approx(m_whole["grad_norm"], rel=1e-5)


def test_micro_batch_means_are_not_averaged_naively():
    # Independent check of the token_mean normalizer: the loss at ratio 1 with token weights 1 is
    # -sum_i A_i * len_i / sum_i len_i over valid rows, computed here from the advantages by hand.
    model = _tiny_model()
    batch = _batch(model, [1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0])
    _, metrics = _update(model, batch, micro_batch_size=1, correction="none", scale_by_std=False)
    advantages = [0.75, -0.25, -0.25, -0.25, 0.25, 0.25, 0.25, -0.75]
    lengths = [len(r) for r in batch.response_ids]
    expected = -sum(a * n for a, n in zip(advantages, lengths)) / sum(lengths)
    assert metrics["loss"] == pytest.approx(expected, abs=1e-6)


@pytest.mark.parametrize("behaviour_policy", ["engine", "trainer"])
def test_on_policy_step_has_unit_ratio_and_no_mismatch(behaviour_policy):
    model = _tiny_model()
    batch = _batch(model, REWARDS)
    _, metrics = _update(model, batch, micro_batch_size=3, behaviour_policy=behaviour_policy)
    assert metrics["vllm_kl"] == pytest.approx(0.0, abs=1e-10)
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["ratio_max"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0.0
    assert metrics["mismatch_masked_token_frac"] == metrics["mismatch_masked_seq_frac"] == 0.0
    assert metrics["skipped"] == 0.0
    # Perplexity by an independent method: full logits, log_softmax, every response token.
    logps = []
    with torch.no_grad():
        for prompt, response in zip(batch.prompt_ids, batch.response_ids):
            logits = model(torch.tensor([prompt + response])).logits[0]
            log_probs = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
            logps += log_probs[torch.arange(len(response)), torch.tensor(response)].tolist()
    assert metrics["trainer_ppl"] == pytest.approx(math.exp(-sum(logps) / len(logps)), rel=1e-5)
    assert 0.0 < metrics["entropy"] <= math.log(VOCAB)


def test_invalid_rows_get_no_gradient():
    model = _tiny_model()
    valid = [True, True, False, True, True, True, True, True]
    rewards = [1.0, 0.0, math.nan, 0.5, 1.0, 0.0, 0.0, 1.0]
    batch = _batch(model, rewards, valid=valid)
    changed = copy.deepcopy(batch)
    changed.response_ids[2] = [5, 6, 7, 8, 9, 10, 11, 12, 13]
    changed.engine_logp[2] = [-1.0] * 9
    base, metrics = _update(model, batch, micro_batch_size=2)
    other, _ = _update(model, changed, micro_batch_size=2)
    assert torch.equal(_delta(model, base), _delta(model, other))
    assert metrics["num_masked_unparsable"] == 1.0
    assert metrics["math/unparsable_frac"] == 0.25
    # Control: the same edit on a valid row does change the update.
    control = copy.deepcopy(batch)
    control.response_ids[1] = changed.response_ids[2]
    control.engine_logp[1] = _own_logp(model, [control.prompt_ids[1]], [control.response_ids[1]])[0]
    moved, _ = _update(model, control, micro_batch_size=2)
    assert not torch.allclose(_delta(model, base), _delta(model, moved))


def test_update_raises_positive_and_lowers_negative_advantage_responses():
    model = _tiny_model()
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    batch = _batch(model, rewards)
    trained, _ = _update(model, batch, lr=0.5, micro_batch_size=4, grad_clip=None)
    before = _own_logp(model, batch.prompt_ids, batch.response_ids)
    after = _own_logp(trained, batch.prompt_ids, batch.response_ids)
    for i, reward in enumerate(rewards):
        change = sum(after[i]) - sum(before[i])
        assert (change > 0) == (reward == 1.0), f"row {i}: reward {reward}, log-prob change {change}"


def test_vllm_kl_filter_skips_the_update():
    model = _tiny_model()
    batch = _batch(model, REWARDS)
    batch.engine_logp = [[v - 0.5 for v in row] for row in batch.engine_logp]
    # d = trainer - engine = 0.5 on every token: vllm_kl = exp(0.5) - 0.5 - 1 = 0.148721.
    expected_kl = math.exp(0.5) - 1.5
    skipped, metrics = _update(model, batch, max_vllm_kl=0.1, correction="none")
    assert metrics["skipped"] == 1.0
    assert metrics["vllm_kl"] == pytest.approx(expected_kl, rel=1e-5)
    assert torch.equal(_delta(model, skipped), torch.zeros_like(_delta(model, skipped)))
    taken, metrics = _update(model, batch, max_vllm_kl=0.2, correction="none")
    assert metrics["skipped"] == 0.0
    assert _delta(model, taken).abs().max() > 0


def test_second_inner_step_is_off_policy_and_clips():
    model = _tiny_model()
    batch = _batch(model, REWARDS)
    settings = dict(lr=2.0, micro_batch_size=8, clip_low=0.01, clip_high=0.01, grad_clip=None)
    one_step, first = _update(model, batch, num_inner_steps=1, **settings)
    _, second = _update(model, batch, num_inner_steps=2, **settings)
    assert first["ratio_max"] == pytest.approx(1.0, abs=1e-6)
    # Independent: after one step the ratio of each token is exp(logp_after - logp_before).
    before = _own_logp(model, batch.prompt_ids, batch.response_ids)
    after = _own_logp(one_step, batch.prompt_ids, batch.response_ids)
    ratios = [math.exp(a - b) for ra, rb in zip(after, before) for a, b in zip(ra, rb)]
    assert second["ratio_max"] == pytest.approx(max(ratios), rel=1e-4)
    assert second["ratio_min"] == pytest.approx(min(ratios), rel=1e-4)
    assert second["ratio_max"] > 1.01 and second["clip_frac_high"] + second["clip_frac_low"] > 0


def test_k1_in_reward_shifts_advantages_by_the_centred_penalty():
    # Sums over response tokens of (logp - ref_logp): row 0: 0.3 + 0.2 = 0.5; row 1: -0.2;
    # row 2: 0; row 3: 1.0 (its second token is padding and must be ignored).
    trainer_logp = torch.tensor([[-1.0, -0.5], [-2.0, -1.0], [-0.7, -0.7], [-0.1, 0.0]])
    ref_logp = torch.tensor([[-1.3, -0.7], [-1.8, -1.0], [-0.7, -0.7], [-1.1, -9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0])
    valid = torch.ones(4, dtype=torch.bool)
    cfg = RLAlgoConfig(kl_coef=0.1, kl_placement="reward", kl_estimator="k1", scale_by_std=False)
    advantages, shaped = advantages_with_kl(rewards, valid, 4, cfg, trainer_logp, ref_logp, mask)
    # penalty = 0.1 * [0.5, -0.2, 0, 1.0] = [0.05, -0.02, 0, 0.1]; shaped = [0.95, 0.02, 1.0, -0.1],
    # mean 0.4675 -> A = [0.4825, -0.4475, 0.5325, -0.5675] (vs [0.5, -0.5, 0.5, -0.5] without KL).
    assert torch.allclose(shaped, torch.tensor([0.95, 0.02, 1.0, -0.1]), atol=1e-6)
    assert torch.allclose(advantages, torch.tensor([0.4825, -0.4475, 0.5325, -0.5675]), atol=1e-6)


def test_k1_in_reward_is_not_rescaled_by_the_reward_std():
    # Same penalties as above with scale_by_std=True. Rewards [1, 0, 1, 0]: mean 0.5, sample std
    # sqrt(1/3) = 0.577350, so the verifier's A = +-0.5 / (0.577350 + 1e-6) = +-0.866024. The
    # penalty [0.05, -0.02, 0, 0.1] centred on its mean 0.0325 is [0.0175, -0.0525, -0.0325, 0.0675]
    # and is subtracted as it is: A = [0.848524, -0.813524, 0.898524, -0.933524]. (Dividing the
    # shaped rewards by their own std, 0.5884, would give [0.8200, -0.7605, 0.9050, -0.9645].)
    trainer_logp = torch.tensor([[-1.0, -0.5], [-2.0, -1.0], [-0.7, -0.7], [-0.1, 0.0]])
    ref_logp = torch.tensor([[-1.3, -0.7], [-1.8, -1.0], [-0.7, -0.7], [-1.1, -9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    cfg = RLAlgoConfig(kl_coef=0.1, kl_placement="reward", kl_estimator="k1", scale_by_std=True)
    advantages, shaped = advantages_with_kl(torch.tensor([1.0, 0.0, 1.0, 0.0]), torch.ones(4, dtype=torch.bool), 4, cfg,
                                            trainer_logp, ref_logp, mask)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    expected = torch.tensor([a - 0.0175, -a + 0.0525, a + 0.0325, -a - 0.0675])
    assert torch.allclose(advantages, expected, atol=1e-6)
    assert torch.allclose(shaped, torch.tensor([0.95, 0.02, 1.0, -0.1]), atol=1e-6)


@pytest.mark.parametrize("scale_by_std", [True, False])
def test_k1_in_reward_advantages_scale_linearly_with_beta_in_an_equal_reward_group(scale_by_std):
    # Rewards [1, 1, 1, 1]: the task advantage is 0, so A = -beta * (k1_seq - its group mean)
    # exactly, at every beta. (Dividing the shaped rewards by their std, the old rule, gave
    # advantages of size ~1 whatever beta: beta = 0.1 and 1e-3 were indistinguishable.)
    trainer_logp = torch.tensor([[-1.0, -0.5], [-2.0, -1.0], [-0.7, -0.7], [-0.1, 0.0]])
    ref_logp = torch.tensor([[-1.3, -0.7], [-1.8, -1.0], [-0.7, -0.7], [-1.1, -9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    k1 = torch.tensor([0.5, -0.2, 0.0, 1.0])  # sums of logp - ref_logp over response tokens
    for beta in (0.1, 1e-3):
        cfg = RLAlgoConfig(kl_coef=beta, kl_placement="reward", kl_estimator="k1", scale_by_std=scale_by_std)
        advantages, _ = advantages_with_kl(torch.ones(4), torch.ones(4, dtype=torch.bool), 4, cfg,
                                           trainer_logp, ref_logp, mask)
        assert torch.allclose(advantages, -beta * (k1 - k1.mean()), atol=1e-7)


def test_k1_in_reward_gives_signal_to_a_zero_variance_group():
    # Equal verifier rewards: no gradient without KL; the KL-shaped rewards differ, so with it the
    # group trains. The reported penalty is checked against full-logits log-probs.
    model = _tiny_model()
    ref = _tiny_model(seed=3)
    batch = _batch(model, [1.0] * 4, num_prompts=1)
    untouched, metrics = _update(model, batch)
    assert metrics["zero_variance_group_frac"] == 1.0
    assert _delta(model, untouched).abs().max() == 0
    shaped, metrics = _update(model, batch, ref_model=ref, kl_coef=0.2)
    assert _delta(model, shaped).abs().max() > 0
    assert metrics["zero_variance_group_frac"] == 1.0  # counted on the verifier's rewards
    sums = []
    with torch.no_grad():
        for prompt, response in zip(batch.prompt_ids, batch.response_ids):
            ids = torch.tensor([prompt + response])
            positions, targets = torch.arange(len(prompt) - 1, len(prompt) + len(response) - 1), torch.tensor(response)
            policy = torch.log_softmax(model(ids).logits[0], -1)[positions, targets]
            reference = torch.log_softmax(ref(ids).logits[0], -1)[positions, targets]
            sums.append(float((policy - reference).sum()))
    assert metrics["kl_reward_penalty_mean"] == pytest.approx(0.2 * sum(sums) / 4, rel=1e-4, abs=1e-6)


def test_config_refuses_k1_as_a_loss_and_seq_sum_without_budget():
    with pytest.raises(ValueError, match="zero expected gradient"):
        RLAlgoConfig(kl_coef=0.1, kl_placement="loss", kl_estimator="k1")
    with pytest.raises(ValueError, match="max_tokens"):
        RLAlgoConfig(aggregation="seq_sum")
    with pytest.warns(UserWarning, match="forward KL"):
        RLAlgoConfig(kl_coef=0.1, kl_placement="loss", kl_estimator="k3")


def test_kl_needs_a_reference_model():
    model = _tiny_model()
    with pytest.raises(ValueError, match="ref_model"):
        _update(model, _batch(model, REWARDS), kl_coef=0.1)



def test_engine_as_behaviour_applies_only_the_rejections_of_the_correction():
    # pi_theta/pi_engine already carries rho, so a capping correction (never 0) must not reweight.
    model = _tiny_model()
    batch = _batch(model, REWARDS, engine_noise=0.1)
    capped, _ = _update(model, batch, behaviour_policy="engine", correction="token_tis", correction_threshold=1.05)
    plain, _ = _update(model, batch, behaviour_policy="engine", correction="none")
    reweighted, _ = _update(model, batch, behaviour_policy="trainer", correction="token_tis", correction_threshold=1.05)
    assert torch.allclose(_delta(model, capped), _delta(model, plain), atol=1e-8)
    assert not torch.allclose(_delta(model, reweighted), _delta(model, plain), atol=1e-6)


def test_kl_loss_is_weighted_by_the_engine_ratio_even_at_one_step_without_correction():
    # Equal rewards: advantages 0, so the KL loss is the whole gradient. Lowering every engine
    # log-prob by ln 2 makes pi_theta/pi_engine = 2 on every token (S = 1, correction 'none': the
    # tokens still came from the engine, docs/recipe.md section 6), so the update doubles exactly.
    model = _tiny_model()
    ref = _tiny_model(seed=3)
    batch = _batch(model, [1.0] * 4, num_prompts=1)
    # lr 10: steps ~1e-3, far above the float32 rounding of parameter + step (~1e-8).
    settings = dict(lr=10.0, ref_model=ref, kl_coef=0.5, kl_placement="loss", kl_estimator="k2", correction="none",
                    grad_clip=None, micro_batch_size=3)
    plain, m_plain = _update(model, batch, **settings)
    shifted_batch = copy.deepcopy(batch)
    shifted_batch.engine_logp = [[v - math.log(2.0) for v in row] for row in batch.engine_logp]
    shifted, m_shifted = _update(model, shifted_batch, **settings)
    assert m_plain["vllm_kl"] == pytest.approx(0.0, abs=1e-10)
    assert m_shifted["vllm_kl"] == pytest.approx(1.0 - math.log(2.0), rel=1e-5)  # exp(d) - d - 1, d = ln 2
    d_plain = _delta(model, plain)
    assert d_plain.abs().max() > 1e-3
    assert torch.allclose(_delta(model, shifted), 2.0 * d_plain, rtol=1e-3, atol=1e-7)


def test_kl_cov_update_is_the_unclipped_surrogate():
    # With no token selected (fraction 0) KL-Cov's update is the plain surrogate without clipping,
    # reproduced by a clip range too wide to bind; the config's tight clip 0.01 is not applied.
    model = _tiny_model()
    batch = _batch(model, REWARDS)
    settings = dict(lr=2.0, micro_batch_size=8, num_inner_steps=2, grad_clip=None, correction="none")
    kl_cov, metrics = _update(model, batch, cov_method="kl_cov", cov_fraction=0.0, clip_low=0.01, clip_high=0.01,
                              **settings)
    wide, _ = _update(model, batch, clip_low=0.999, clip_high=1e6, **settings)
    clipped, clipped_metrics = _update(model, batch, clip_low=0.01, clip_high=0.01, **settings)
    assert metrics["ratio_max"] > 1.01 or metrics["ratio_min"] < 0.99  # the tight range would bind
    assert metrics["clip_frac_low"] == metrics["clip_frac_high"] == 0.0
    assert clipped_metrics["clip_frac_low"] + clipped_metrics["clip_frac_high"] > 0
    assert torch.allclose(_delta(model, kl_cov), _delta(model, wide), rtol=1e-5, atol=1e-8)
    assert not torch.allclose(_delta(model, kl_cov), _delta(model, clipped), rtol=1e-3, atol=1e-6)


def test_token_mis_lower_threshold_reaches_the_update():
    model = _tiny_model()
    batch = _batch(model, REWARDS, engine_noise=0.3)
    # Independent count: rho = pi_model / pi_engine per token from one-at-a-time log-probs.
    own = _own_logp(model, batch.prompt_ids, batch.response_ids)
    rhos = [math.exp(t - e) for ro, re in zip(own, batch.engine_logp) for t, e in zip(ro, re)]
    for high, low in [(5.0, 1.2), (1.2, 5.0)]:
        _, metrics = _update(model, batch, correction="token_mis", correction_threshold=high, correction_threshold_low=low)
        outside = sum(not (1.0 / low <= rho <= high) for rho in rhos) / len(rhos)
        assert 0.0 < outside < 1.0
        assert metrics["mismatch_masked_token_frac"] == pytest.approx(outside)


def test_config_refuses_a_lower_threshold_for_modes_without_one():
    with pytest.raises(ValueError, match="no such bound"):
        RLAlgoConfig(correction="seq_mis", correction_threshold_low=2.0)
    # geo_mis has its own (much tighter) thresholds: C_low of seq-scale ratios is refused there.
    with pytest.raises(ValueError, match="geo_threshold"):
        RLAlgoConfig(correction="geo_mis", correction_threshold_low=2.0)
    assert RLAlgoConfig(correction="token_mis", correction_threshold_low=2.0).correction_threshold_low == 2.0
    assert RLAlgoConfig(correction="geo_mis", geo_threshold_low=1.002).correction_bounds() == (1.001, 1.002)


def test_vllm_kl_all_counts_the_invalid_rows_vllm_kl_does_not():
    # Row 2 is invalid (e.g. truncated) and its engine log-probs are 0.5 too low: d = 0.5 on its
    # tokens, 0 elsewhere. vllm_kl (valid rows) is 0; vllm_kl_all = n2 (e^0.5 - 1.5) / all tokens.
    model = _tiny_model()
    valid = [True, True, False, True, True, True, True, True]
    batch = _batch(model, [1.0, 0.0, math.nan, 0.5, 1.0, 0.0, 0.0, 1.0], valid=valid)
    batch.engine_logp[2] = [v - 0.5 for v in batch.engine_logp[2]]
    _, metrics = _update(model, batch, micro_batch_size=3)
    num_tokens = sum(len(r) for r in batch.response_ids)
    assert metrics["vllm_kl"] == pytest.approx(0.0, abs=1e-10)
    expected = len(batch.response_ids[2]) * (math.exp(0.5) - 1.5) / num_tokens
    assert metrics["vllm_kl_all"] == pytest.approx(expected, rel=1e-4)


def test_kl_loss_gets_no_gradient_from_sequences_the_correction_rejected():
    # Equal rewards: the KL loss is the whole gradient. Engine log-probs 1 nat lower on every token
    # of every row: prod rho = e^len > 2, so seq-MIS rejects every row and the KL term (weighted
    # by the correction's keep factor) must give no gradient; without a correction it does.
    model = _tiny_model()
    ref = _tiny_model(seed=3)
    batch = _batch(model, [1.0] * 4, num_prompts=1)
    batch.engine_logp = [[v - 1.0 for v in row] for row in batch.engine_logp]
    settings = dict(ref_model=ref, kl_coef=0.5, kl_placement="loss", kl_estimator="k2", grad_clip=None, lr=10.0)
    for kl_level in ("token", "sequence"):
        rejected, metrics = _update(model, batch, correction="seq_mis", kl_level=kl_level, **settings)
        assert metrics["mismatch_masked_seq_frac"] == 1.0
        assert _delta(model, rejected).abs().max() == 0.0
        kept, _ = _update(model, batch, correction="none", kl_level=kl_level, **settings)
        assert _delta(model, kept).abs().max() > 1e-4


def test_micro_batching_does_not_change_a_sequence_level_kl_update():
    model = _tiny_model()
    ref = _tiny_model(seed=5)
    batch = _batch(model, REWARDS, valid=[True, True, True, False, True, True, True, True], engine_noise=0.05)
    settings = dict(ref_model=ref, kl_coef=0.3, kl_placement="loss", kl_estimator="k2", kl_level="sequence",
                    correction="token_tis")
    whole, m_whole = _update(model, batch, micro_batch_size=8, **settings)
    threes, m_threes = _update(model, batch, micro_batch_size=3, **settings)
    assert _delta(model, whole).abs().max() > 1e-4
    assert torch.allclose(_delta(model, threes), _delta(model, whole), rtol=1e-4, atol=1e-7)
    assert m_threes["kl_loss"] == pytest.approx(m_whole["kl_loss"], rel=1e-5)


def test_micro_batches_group_rows_of_similar_length():
    """Rows are grouped by prompt + response length (stable), not taken in rollout order: each
    micro-batch is padded to its own longest row. Lengths here: 3+9, 3+1, 2+2, 3+8, 2+1."""
    from passband.training.rl.update import _micro_batches

    prompts = [[1, 2, 3], [1, 2, 3], [4, 5], [1, 2, 3], [4, 5]]
    responses = [[0] * 9, [0], [0, 0], [0] * 8, [0]]
    batch = RolloutBatch(prompt_ids=prompts, response_ids=responses, engine_logp=[[0.0] * len(r) for r in responses],
                         rewards=[0.0] * 5, valid=[True] * 5, tasks=["math"] * 5, group_size=1)
    assert _micro_batches(batch, [0, 1, 2, 3, 4], RLAlgoConfig(micro_batch_size=2)) == [[4, 1], [2, 3], [0]]
    assert _micro_batches(batch, [3, 0], RLAlgoConfig(micro_batch_size=8)) == [[3, 0]]


def test_trimming_the_heap_between_micro_batches_changes_nothing_but_the_heap(monkeypatch):
    # The trim only returns freed pages to the OS: the same weights and metrics bit for bit, and
    # one trim per micro-batch (3 of 3, 3 and 2 rows) plus the one after the update.
    import passband.training.rl.update as update

    calls = []
    monkeypatch.setattr(update, "trim_heap", lambda: calls.append(1) or True)
    model = _tiny_model()
    batch = _batch(model, REWARDS, engine_noise=0.05)
    plain, m_plain = _update(model, batch, micro_batch_size=3, trim_heap_each_micro_batch=False)
    assert len(calls) == 1
    trimmed, m_trimmed = _update(model, batch, micro_batch_size=3)  # the default
    assert len(calls) == 1 + 3 + 1
    assert torch.equal(_delta(model, trimmed), _delta(model, plain))
    assert {k: v for k, v in m_trimmed.items() if k not in ("seconds", "train_tokens_per_s")} == \
        {k: v for k, v in m_plain.items() if k not in ("seconds", "train_tokens_per_s")}


def test_checkpointed_update_leaves_the_global_generator_alone(tmp_path, monkeypatch):
    """With rollouts sampled ahead the engine draws from torch's process-wide CPU generator on
    another thread during the update: the update (activation checkpointing on, the default) must
    neither read nor set that generator, or the samples depend on the timing."""
    from passband.training.rl.trainer import load_policy

    _tiny_model().save_pretrained(tmp_path)
    config = RLAlgoConfig(precision="fp32", micro_batch_size=3)
    assert config.activation_checkpointing
    policy = load_policy(tmp_path, config)
    assert policy.is_gradient_checkpointing and policy.training
    batch = _batch(policy, [1.0, 0.0, 1.0, 0.0, 0.0, 1.0, 1.0, 0.0])
    touched = []
    for name in ("get_rng_state", "set_rng_state", "manual_seed", "seed"):
        monkeypatch.setattr(torch, name, lambda *args, _name=name, **kwargs: touched.append(_name))
    before = [p.detach().clone() for p in policy.parameters()]
    rl_update(policy, None, torch.optim.SGD(policy.parameters(), lr=0.1), batch, config, torch.Generator().manual_seed(0))
    assert any(not torch.equal(a, p) for a, p in zip(before, policy.parameters()))  # the update did run backward
    assert touched == []
