"""The pipeline (curate -> SFT -> re-curate -> RL -> evaluate) on a model that ships its own code (issue 71, must
show): `passband run pipeline` with every stage's `engine.trust_remote_code`, on the hf engine and on vLLM (RL's
vLLM in the trainer's process, its default). The model is
tests/custom_code_model.py's Llama with a squared-ReLU MLP in its own modeling_twisted.py; the pipeline's sizes
are tests/test_flow_pipeline.py's tiny ones (a random tiny model solves nothing: bands keep everything).

What it shows: every stage runs the model's own code (the checkpoints it writes carry it: RL's final checkpoint
loads as TwistedLlamaForCausalLM, and its logits are not plain Llama's), the engine's numbers equal the trainer's
on that checkpoint, and an edit to modeling_twisted.py makes the next run recompute every stage where an
unchanged rerun recomputes none."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from mlflow import MlflowClient

from custom_code_model import twisted_model
from killrun import run_to_end
from test_flow_pipeline import tiny_config

RUN_TIMEOUT_S = 1800
PIPELINE_STAGES = 7  # curate, sft, recurate, rl, evaluate-base, evaluate-sft, evaluate-rl
HF = {"kind": "hf", "dtype": "float32", "trust_remote_code": True}  # auto is bf16 on an AMX CPU
# head_dim 64 (the fixture's): vLLM's CPU attention has no kernel for smaller heads
VLLM = {"kind": "vllm", "dtype": "float32", "trust_remote_code": True, "kv_cache_gib": 0.1, "max_model_len": 512,
        "max_num_seqs": 8}


def _config_file(path: Path, model_dir: Path, engine: dict) -> list[str]:
    data = tiny_config(model_dir, lr=1e-3).model_dump(mode="json")
    for stage in ("curate", "evaluate", "rl"):  # RL's keeps its default in_process: vLLM in the trainer's process
        data[stage]["engine"] = {**data[stage]["engine"], **engine}
    data["sft"]["engine"] = {**data["sft"]["engine"], "trust_remote_code": True}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return ["run", "pipeline", "--config", str(path)]


def _cache_hits(home: Path, summary: dict) -> list[str]:
    """The stage runs of this pipeline run served from the stage cache."""
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("passband").experiment_id
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{summary['mlflow_run_id']}'")
    assert len(children) == PIPELINE_STAGES
    return sorted(run.info.run_name for run in children if run.data.tags.get("passband.cache_hit") == "true")


def _rl_checkpoint(summary: dict) -> Path:
    from passband.tasks.artifacts.store import fetch_artifact

    return fetch_artifact(summary["outputs"]["rl.checkpoint"])


def _trainer_logprobs(checkpoint: Path, prompt: list[int], tokens: list[int]) -> list[float]:
    from passband.training.model_source import load_causal_lm

    model = load_causal_lm(checkpoint, trust_remote_code=True)
    assert type(model).__name__ == "TwistedLlamaForCausalLM"  # the code travelled with every checkpoint
    with torch.no_grad():
        logprobs = torch.log_softmax(model(torch.tensor([prompt + tokens])).logits[0], -1)
    return [logprobs[len(prompt) - 1 + i, token].item() for i, token in enumerate(tokens)]


@pytest.mark.slow  # hf: three pipeline runs, ~4 min on the shared 2-core box; vllm: one, six vLLM start-ups
@pytest.mark.parametrize("engine", [HF, VLLM], ids=["hf", "vllm"])
def test_the_pipeline_runs_the_models_own_code_and_retrains_when_it_changes(tmp_path: Path, engine: dict) -> None:
    from transformers import LlamaForCausalLM

    from passband.training.engines.config import EngineConfig, SamplingConfig
    from passband.training.engines.open import open_engine

    model_dir = twisted_model(tmp_path / "twisted")
    args = _config_file(tmp_path / "pipeline.yaml", model_dir, engine)
    home = tmp_path / "home"
    first, _, first_s = run_to_end(args, home, RUN_TIMEOUT_S, "first")
    assert _cache_hits(home, first) == []
    assert yaml.safe_load(Path(args[-1]).read_text())["rl"]["engine"]["in_process"]
    for label in ("base", "sft", "rl"):
        for task in ("math", "code", "ifeval"):
            assert 0.0 <= first["metrics"][f"{label}/{task}/pass@1"] <= 1.0

    # RL's checkpoint, in the engine the pipeline ran and in the trainer: the same log-probs
    checkpoint = _rl_checkpoint(first)
    prompt = [5, 6, 7, 8]
    served = open_engine(EngineConfig(**engine, in_process=True), checkpoint)  # beside this process's models
    sample = served.generate([prompt], SamplingConfig(n=1, max_tokens=4, temperature=0, ignore_eos=True))[0][0]
    served.close()
    tokens = list(sample.token_ids)
    assert sample.logprobs == pytest.approx(_trainer_logprobs(checkpoint, prompt, tokens),
                                            abs=1e-4 if engine["kind"] == "vllm" else 1e-5)
    with torch.no_grad():  # the twist is real: the same weights as plain Llama give other logits
        ids = torch.tensor([prompt + tokens])
        as_llama = LlamaForCausalLM.from_pretrained(str(checkpoint), attn_implementation="eager")(ids).logits
        twisted = torch.log_softmax(as_llama, -1)[0, len(prompt) - 1:-1].gather(-1, torch.tensor(tokens)[:, None])
    assert (twisted[:, 0] - torch.tensor(sample.logprobs)).abs().max() > 1e-3
    if engine["kind"] == "vllm":
        return  # the cache key follows the code whatever the engine: shown once, on the faster hf engine

    again, _, again_s = run_to_end(args, home, RUN_TIMEOUT_S, "unchanged")
    assert len(_cache_hits(home, again)) == PIPELINE_STAGES  # nothing changed: every stage from the cache
    modeling = model_dir / "modeling_twisted.py"
    modeling.write_text(modeling.read_text() + "\n# an edit to the model's code, however small\n")
    edited, _, edited_s = run_to_end(args, home, RUN_TIMEOUT_S, "edited")
    assert _cache_hits(home, edited) == []  # every stage ran again on the edited code
    print(f"pipeline on the custom-code model ({engine['kind']}): first {first_s:.0f} s, unchanged rerun "
          f"{again_s:.0f} s, after the edit {edited_s:.0f} s")
