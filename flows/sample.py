"""The `sample` flow: prompts -> n rollouts each -> a Parquet artifact of samples + rollout metrics."""

from __future__ import annotations

from pydantic import Field
from prefect import flow

from passband.flows.common_config import EngineConfig, ProblemSource, SamplingConfig
from passband.flows.config import Config
from passband.tasks.stages.summary import RunSummary


class SampleConfig(Config):
    """Sample completions from a model and record them with the engine's log-probs."""

    model: str = "smollm2-135m-instruct"
    """`smollm2-135m-instruct` (shipped), a checkpoint artifact URI, a local dir or a hub name."""
    problems: ProblemSource = ProblemSource()
    """Prompts to sample from."""
    system_prompt: str | None = None
    """System message for the chat template (None: the model's default)."""
    sampling: SamplingConfig = SamplingConfig()
    """How to sample."""
    engine: EngineConfig = EngineConfig()
    """Which engine samples."""
    kl_subsample: int = Field(32, ge=0)
    """Samples re-scored by the fp32 trainer model to measure vllm_kl (0 = skip)."""


@flow(name="sample", flow_run_name="sample")
def sample(config: SampleConfig = SampleConfig(), parent_run_id: str | None = None) -> RunSummary:
    """Prompts -> n rollouts each -> `samples` Parquet artifact; logs tokens/s, lengths, vllm_kl."""
    from passband.tasks.artifacts.datasets import commit_table
    from passband.tasks.artifacts.model import resolve_model
    from passband.tasks.reporting import tracking
    from passband.tasks.stages.stage import stage_run
    from passband.tasks.steps.data import load_problems_task
    from passband.tasks.steps.rollout import generate, measure_vllm_kl, open_engine, rollout_stats, samples_table
    from passband.training.chat import render_prompt
    from passband.training.model_source import load_tokenizer

    with stage_run("sample", config, parent_run_id, cache=False) as run:
        run_id, resolved = run.run_id, run.resolved
        model_dir = resolve_model(config.model)
        rows = load_problems_task(config.problems, run_id)
        tokenizer = load_tokenizer(model_dir, config.engine.trust_remote_code)
        prompts = [render_prompt(tokenizer, row["prompt"], config.system_prompt) for row in rows]
        settings = config.sampling
        engine = open_engine(config.engine, model_dir)
        samples, seconds = generate(engine, prompts, settings)
        engine.close()
        metrics = rollout_stats(samples, seconds)
        if config.kl_subsample:
            flat = [s for group in samples for s in group][: config.kl_subsample]
            metrics["vllm_kl"] = measure_vllm_kl(model_dir, flat, config.sampling.temperature or 1.0,
                                                trust_remote_code=config.engine.trust_remote_code)
        table = samples_table(rows, prompts, samples)
        uri = commit_table(table, f"samples/{run_id}", "sample", resolved)
        tracking.log_dataset(uri, "samples", "output", table, run_id)
        tracking.log_metrics(metrics, step=0, run_id=run_id)
        return run.finish({"samples": uri}, metrics)
