"""`training_seed`: two pipeline runs that differ in it differ only in training.

It moves curation's sampling, each SFT stage's data order and RL's rollouts; the eval rows and the
base evaluation stay the same. The config half is checked on the demo preset; the run half on the
tiny model of test_flow_pipeline.py, each seed in its own PASSBAND_HOME so that nothing is shared
through the stage cache and the equal base evaluation is sampled twice.
"""

from __future__ import annotations

from prefect.context import FlowRunContext
from prefect.testing.utilities import prefect_test_harness
from test_flow_pipeline import tiny_config
from tiny_chat_model import tiny_llama, tiny_tokenizer

import passband.training.sft.sampler as sft_sampler
from passband.flows.config import resolve_config
from passband.flows.pipeline.flow import PipelineConfig, pipeline, with_training_seed
from passband.tasks.artifacts.datasets import read_table
from passband.training.engines.hf_engine import HFEngine


def changed_fields(before: object, after: object, path: str = "") -> dict[str, tuple]:
    """Dotted path -> (before, after) for every leaf that differs between two dumps."""
    if isinstance(before, dict):
        return {k: v for key in before for k, v in changed_fields(before[key], after[key], f"{path}.{key}").items()}
    if isinstance(before, list) and len(before) == len(after) and any(isinstance(x, dict) for x in before):
        return {k: v for i, pair in enumerate(zip(before, after)) for k, v in changed_fields(*pair, f"{path}[{i}]").items()}
    return {} if before == after else {path.lstrip("."): (before, after)}


def test_training_seed_moves_the_training_seeds_and_nothing_else() -> None:
    config = resolve_config(PipelineConfig, "pipeline", "demo", None, ["training_seed=3"])
    seeded = with_training_seed(config)
    # the demo's seeds: curate's engine 0, SFT stages 0 and 1, RL 0; each moved by 3
    assert changed_fields(config.model_dump(mode="json"), seeded.model_dump(mode="json")) == {
        "curate.engine.seed": (0, 3), "sft.stages[0].seed": (0, 3), "sft.stages[1].seed": (1, 4),
        "rl.seed": (0, 3), "training_seed": (3, 0)}
    assert "worked_math" not in seeded.sft.generated  # the preset's removed default entry stays removed
    assert with_training_seed(resolve_config(PipelineConfig, "pipeline", "demo")) == \
        resolve_config(PipelineConfig, "pipeline", "demo").model_copy(update={"training_seed": 0})


ORIGINAL_GENERATE, ORIGINAL_PERMUTATION = HFEngine.generate, sft_sampler.epoch_permutation


def run_recording(config: PipelineConfig, monkeypatch) -> tuple[object, dict[str, list], list[list[int]]]:
    """The pipeline's summary, every generate call's (prompts, completions) by flow run name, and
    every SFT epoch order drawn."""
    samples: dict[str, list] = {}
    generate = ORIGINAL_GENERATE  # not HFEngine.generate: the first run's recorder may be in place

    def recording_generate(self, prompts, settings, prompt_keys=None):
        outputs = generate(self, prompts, settings, prompt_keys)
        texts = [[sample.text for sample in group] for group in outputs]
        samples.setdefault(FlowRunContext.get().flow_run.name, []).append((list(prompts), texts))
        return outputs

    orders: list[list[int]] = []
    permutation = ORIGINAL_PERMUTATION
    monkeypatch.setattr(HFEngine, "generate", recording_generate)
    monkeypatch.setattr(sft_sampler, "epoch_permutation",
                        lambda n, seed, epoch: orders.append(permutation(n, seed, epoch)) or orders[-1])
    return pipeline(config), samples, orders


def test_two_training_seeds_differ_in_training_only(tmp_path, monkeypatch) -> None:
    model_dir = tmp_path / "tiny"
    tiny_llama(seed=0).save_pretrained(model_dir)
    tiny_tokenizer().save_pretrained(model_dir)
    monkeypatch.setenv("PASSBAND_EXPERIMENT", "test-training-seed")
    runs = {}
    with prefect_test_harness(server_startup_timeout=180):
        for seed in (0, 1):
            monkeypatch.setenv("PASSBAND_HOME", str(tmp_path / f"home{seed}"))
            config = tiny_config(model_dir, lr=1e-4).model_copy(update={"training_seed": seed})
            runs[seed] = run_recording(PipelineConfig.model_validate(config.model_dump()), monkeypatch)

    (first, first_samples, first_orders), (second, second_samples, second_orders) = runs[0], runs[1]
    for name in ("eval_math", "eval_code", "eval_ifeval"):
        assert read_table(first.outputs[f"curate.{name}"]).to_pylist() == \
            read_table(second.outputs[f"curate.{name}"]).to_pylist()
        # named by their content, not by the curate run: in one home the base evaluation's stage
        # key (which names them by URI) is the same, and the second seed reuses it
        first_key, second_key = (run.outputs[f"curate.{name}"].split("/artifacts/", 1)[1] for run in (first, second))
        assert first_key == second_key and first_key.startswith("datasets/eval-splits/")
    assert first_samples["evaluate-base"] == second_samples["evaluate-base"]
    assert {k: v for k, v in first.metrics.items() if k.startswith("base/")} == \
        {k: v for k, v in second.metrics.items() if k.startswith("base/")}
    # training moved: the curation samples, the SFT order, the RL prompt order and rollouts
    assert [p for p, _ in first_samples["curate"]] == [p for p, _ in second_samples["curate"]]
    assert [t for _, t in first_samples["curate"]] != [t for _, t in second_samples["curate"]]
    assert first_orders and second_orders and first_orders != second_orders
    assert first_samples["rl"] != second_samples["rl"]
