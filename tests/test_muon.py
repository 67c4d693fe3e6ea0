"""Muon (issue 70), one process: the optimizer against Muon written here from the paper's algorithm, the
Newton-Schulz map's singular values, the parameter split on SmolLM2's layout, state-dict resume bit for bit,
the state's bytes, and the config's refusals. Ranks: tests/test_muon_ranks.py."""

import io
import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from passband.training.optim.config import KELLER_COEFFICIENTS, OptimizerConfig
from passband.training.optim.groups import split_parameters, uses_muon
from passband.training.optim.memory import optimizer_state_bytes
from passband.training.optim.newton_schulz import newton_schulz
from passband.training.optim.optimizer import MuonAdamW, build_optimizer, set_scheduled_lr
from passband.training.optim.parallel import assign_owners, plan_rounds

MUON_FP32 = OptimizerConfig(name="muon", newton_schulz_dtype="float32")


def tiny_model(seed: int = 0, tied: bool = True, intermediate: int = 37) -> LlamaForCausalLM:
    """A 2-layer Llama, hidden 32, with an MLP width no rank count divides (uneven shards under ranks)."""
    config = LlamaConfig(vocab_size=61, hidden_size=32, intermediate_size=intermediate, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=tied, attention_bias=False)
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).float()


def batch(seed: int, rows: int = 4, length: int = 12) -> torch.Tensor:
    return torch.randint(0, 61, (rows, length), generator=torch.Generator().manual_seed(seed))


def loss_of(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    return model(input_ids=ids, labels=ids).loss


# --- Muon from the paper, written here (Keller Jordan's post; Moonlight arXiv:2502.16982 Algorithm 1) ---

def paper_orthogonalize(g: torch.Tensor, steps: int = 5) -> torch.Tensor:
    """Quintic Newton-Schulz: X0 = G / ||G||_F; X <- a X + b (X X^T) X + c (X X^T)^2 X on the wide side."""
    a, b, c = 3.4445, -4.7750, 2.0315
    transposed = g.shape[0] > g.shape[1]
    x = g.t() if transposed else g
    x = x / (torch.linalg.matrix_norm(x, "fro") + 1e-7)
    for _ in range(steps):
        s = torch.mm(x, x.t())
        x = a * x + torch.mm(b * s + c * torch.mm(s, s), x)
    return x.t() if transposed else x


def paper_muon_steps(model, batches, lr, wd, adamw_lr, momentum=0.95):
    """Moonlight's update: M <- mu M + G; O = NS(G + mu M); W <- W - lr (0.2 sqrt(max(A, B)) O + wd W) on the
    hidden matrices (named by hand here); torch's AdamW on the rest."""
    hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and "embed" not in n and "lm_head" not in n]
    rest = [p for n, p in model.named_parameters() if not any(p is h for h in hidden)]
    adamw = torch.optim.AdamW(rest, lr=adamw_lr, weight_decay=wd)
    buffers = [torch.zeros_like(p) for p in hidden]
    for ids in batches:
        model.zero_grad()
        loss_of(model, ids).backward()
        with torch.no_grad():
            for p, m in zip(hidden, buffers):
                m.copy_(momentum * m + p.grad)
                o = paper_orthogonalize(p.grad + momentum * m)
                p.copy_(p - lr * wd * p - lr * 0.2 * math.sqrt(max(p.shape)) * o)
        adamw.step()


def test_three_steps_equal_muon_written_from_the_paper():
    batches = [batch(seed) for seed in (1, 2, 3)]
    ours, paper = tiny_model(), tiny_model()
    optimizer = build_optimizer(ours, MUON_FP32, lr=0.02, weight_decay=0.1)
    for ids in batches:
        optimizer.zero_grad()
        loss_of(ours, ids).backward()
        optimizer.step()
    paper_muon_steps(paper, batches, lr=0.02, wd=0.1, adamw_lr=0.02)
    start = dict(tiny_model().named_parameters())
    for (name, mine), (_, theirs) in zip(ours.named_parameters(), paper.named_parameters()):
        assert float((mine - theirs).detach().abs().max()) <= 1e-6, name
        assert float((mine - start[name]).detach().abs().max()) > 1e-3, name  # every weight moved: not two start models


def test_newton_schulz_leaves_singular_values_in_the_quintics_band():
    """On a random [64, 256] matrix and its transpose, in float64. The map acts on each singular value alone,
    s -> a s + b s^3 + c s^5 from s / ||G||_F, so LAPACK's singular values of the result are that scalar map's
    (computed here, no matrices); for the published coefficients 5 steps take every s >= ~0.05 into
    [0.6818, 1.1344], the band the iteration cycles in."""
    a, b, c = KELLER_COEFFICIENTS
    g = torch.randn(64, 256, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    for matrix in (g, g.T):
        out = newton_schulz(matrix, 5, KELLER_COEFFICIENTS, torch.float64)
        assert out.shape == matrix.shape
        singular = torch.linalg.svdvals(out)
        scalar = torch.linalg.svdvals(matrix) / (torch.linalg.matrix_norm(matrix, "fro") + 1e-7)
        for _ in range(5):
            scalar = a * scalar + b * scalar ** 3 + c * scalar ** 5
        print(f"{tuple(matrix.shape)}: singular values in [{float(singular.min()):.4f}, {float(singular.max()):.4f}]")
        assert torch.allclose(singular.sort().values, scalar.sort().values, atol=1e-10)
        assert 0.68 <= float(singular.min()) and float(singular.max()) <= 1.135


def test_parameters_split_on_smollm2s_layout():
    """SmolLM2-135M's layout (30 layers, tied head), random init at a small width: per layer 7 matrices
    (q, k, v, o, gate, up, down) for Muon and 2 norms for AdamW; plus the embedding (= the tied head) and the
    final norm for AdamW. Muon 30 * 7 = 210, AdamW 30 * 2 + 2 = 62."""
    config = LlamaConfig(vocab_size=128, hidden_size=24, intermediate_size=64, num_hidden_layers=30,
                         num_attention_heads=3, num_key_value_heads=1, tie_word_embeddings=True)
    model = LlamaForCausalLM(config)
    muon, adamw = split_parameters(model)
    assert (len(muon), len(adamw)) == (210, 62)
    assert {name for name, _ in adamw} >= {"model.embed_tokens.weight", "model.norm.weight"}
    assert all(p.ndim == 2 for _, p in muon) and not any("embed" in n or "norm" in n for n, _ in muon)
    untied = LlamaForCausalLM(LlamaConfig(**{**config.to_dict(), "tie_word_embeddings": False}))
    muon, adamw = split_parameters(untied)
    assert (len(muon), len(adamw)) == (210, 63) and "lm_head.weight" in {name for name, _ in adamw}


def test_split_refuses_an_embedding_the_names_miss():
    class Odd(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tokens = torch.nn.Embedding(10, 4)
    with pytest.raises(ValueError, match="NOT_HIDDEN"):
        split_parameters(Odd())


def test_name_rule():
    assert uses_muon("lm.model.layers.3.mlp.down_proj.weight", (576, 1536))
    assert not uses_muon("lm.model.embed_tokens.weight", (49152, 576))
    assert not uses_muon("lm_head.weight", (49152, 576))
    assert not uses_muon("model.layers.0.input_layernorm.weight", (576,))
    assert not uses_muon("model.layers.0.self_attn.q_proj.bias", (576,))


def _run(model, optimizer, batches):
    for ids in batches:
        optimizer.zero_grad()
        loss_of(model, ids).backward()
        optimizer.step()


def test_state_dict_resume_is_bit_identical():
    batches = [batch(seed) for seed in (1, 2, 3)]
    config = OptimizerConfig(name="muon")  # bf16 Newton-Schulz, as published
    straight = tiny_model()
    _run(straight, build_optimizer(straight, config, lr=0.01, weight_decay=0.1), batches)

    first = tiny_model()
    optimizer = build_optimizer(first, config, lr=0.01, weight_decay=0.1)
    _run(first, optimizer, batches[:2])
    saved = io.BytesIO()
    torch.save({"model": first.state_dict(), "optimizer": optimizer.state_dict()}, saved)
    saved.seek(0)
    state = torch.load(saved, weights_only=True)
    second = tiny_model(seed=5)
    second.load_state_dict(state["model"])
    resumed = build_optimizer(second, config, lr=0.01, weight_decay=0.1)
    resumed.load_state_dict(state["optimizer"])
    assert {tuple(s) for s in (sorted(v) for v in resumed.state_dict()["state"].values())} == \
        {("exp_avg", "exp_avg_sq", "step"), ("momentum_buffer", "step")}
    _run(second, resumed, batches[2:])
    for (name, a), (_, b) in zip(straight.named_parameters(), second.named_parameters()):
        assert torch.equal(a, b), name


def test_adamw_group_trains_as_torchs_adamw():
    """A config of only AdamW settings routed through MuonAdamW's AdamW group equals torch.optim.AdamW bit for bit."""
    ours, theirs = tiny_model(), tiny_model()
    params = list(ours.parameters())
    optimizer = MuonAdamW([], params, OptimizerConfig(name="muon", adamw_betas=(0.8, 0.99)), lr=0.01,
                          weight_decay=0.1, betas=(0.9, 0.999))
    reference = torch.optim.AdamW(theirs.parameters(), lr=0.01, betas=(0.8, 0.99), weight_decay=0.1)
    batches = [batch(seed) for seed in (1, 2)]
    _run(ours, optimizer, batches)
    _run(theirs, reference, batches)
    assert all(torch.equal(a, b) for a, b in zip(ours.parameters(), theirs.parameters()))


def test_adamw_is_todays_adamw():
    optimizer = build_optimizer(tiny_model(), OptimizerConfig(), lr=0.01, weight_decay=0.0)
    assert type(optimizer) is torch.optim.AdamW


def test_schedule_scales_each_groups_own_peak():
    config = OptimizerConfig(name="muon", lr=0.02, adamw_lr=0.001)
    optimizer = build_optimizer(tiny_model(), config, lr=0.005, weight_decay=0.0)
    assert [g["lr"] for g in optimizer.param_groups] == [0.02, 0.001]
    set_scheduled_lr(optimizer, config, lr=0.005, schedule=lambda peak: peak * 0.5)
    assert [g["lr"] for g in optimizer.param_groups] == [0.01, 0.0005]
    plain = OptimizerConfig(name="muon")  # None: the trainer's lr for both groups
    optimizer = build_optimizer(tiny_model(), plain, lr=0.005, weight_decay=0.0)
    set_scheduled_lr(optimizer, plain, lr=0.005, schedule=lambda peak: peak * 0.1)
    assert [g["lr"] for g in optimizer.param_groups] == [0.005 * 0.1] * 2


def test_state_bytes_by_hand():
    """Two layers' worth by hand: q [8, 4] (Muon: 32 elements, one buffer), a norm [4] and an embedding
    [10, 4] (AdamW: 4 + 40 elements, two moments). fp32: Muon (32 + 2 * 44) * 4 = 480; AdamW 2 * 76 * 4 = 608."""
    shapes = {"model.layers.0.self_attn.q_proj.weight": (8, 4), "model.layers.0.input_layernorm.weight": (4,),
              "model.embed_tokens.weight": (10, 4)}
    assert optimizer_state_bytes(shapes, OptimizerConfig(name="muon")) == 480
    assert optimizer_state_bytes(shapes, OptimizerConfig()) == 608
    assert optimizer_state_bytes(shapes, OptimizerConfig(name="muon"), bytes_per_element=2) == 240


def test_state_bytes_match_the_optimizers_own_state():
    model = tiny_model()
    optimizer = build_optimizer(model, OptimizerConfig(name="muon"), lr=0.01, weight_decay=0.0)
    _run(model, optimizer, [batch(1)])
    held = sum(t.numel() * t.element_size() for s in optimizer.state.values() for k, t in s.items() if k != "step")
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert optimizer_state_bytes(shapes, OptimizerConfig(name="muon")) == held


def test_owners_balance_the_work():
    """Costs 8, 5, 4, 3, 3, 1 over 2 ranks, largest first onto the lighter rank: 8->0, 5->1, 4->1, 3->0,
    3->1... rank loads 0: 8+3=11 after four; then 3 -> rank 1 (9 < 11): 12; then 1 -> rank 0: 12. Both 12."""
    owners = assign_owners([8, 5, 4, 3, 3, 1], 2)
    assert owners == [0, 1, 1, 0, 1, 0]
    assert plan_rounds(owners, 2, 1) == [[0, 1], [2, 3], [4, 5]]
    assert plan_rounds(owners, 2, 2) == [[0, 1, 2, 3], [4, 5]]
    assert plan_rounds([0, 0, 0], 4, 1) == [[0], [1], [2]]


def test_config_refusals_and_short_form():
    assert OptimizerConfig.model_validate("muon").name == "muon"
    assert OptimizerConfig().name == "adamw"
    with pytest.raises(ValueError, match="set name: muon"):
        OptimizerConfig(momentum=0.9)
    dumped = OptimizerConfig().model_dump(mode="json")  # every field present, as in torchrun's yaml
    assert OptimizerConfig.model_validate(dumped) == OptimizerConfig()
    with pytest.raises(ValueError, match="adamw_betas"):
        OptimizerConfig(name="muon", adamw_betas=(0.9, 1.0))
    with pytest.raises(ValueError):
        OptimizerConfig(name="muon", update_scale="rms")
