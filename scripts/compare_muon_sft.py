"""The demo's SFT with Muon against AdamW, each at the best of a small lr sweep (issue 70).

    .venv/bin/python scripts/compare_muon_sft.py --curate-from <a demo's PASSBAND_HOME> [--home DIR]
        [--lr-scales 1 2 0.5] [--steps-scale 0.5] [--max-problems 64] [--out FILE]

The SFT stage of `passband run pipeline --preset demo` (flows/presets/pipeline/demo.yaml: stage
`foundation` on curate's sft_stage1 and worked math, then `deep` on sft_stage2 and worked math, held out
from every set the pipeline evaluates), trained once per (optimizer, lr scale): every stage's lr times the
scale, `optimizer: adamw` or `optimizer: muon` (Muon's defaults: Moonlight's update scale, so the AdamW rates
transfer; bf16 Newton-Schulz), the same steps, data, order and seed. `--steps-scale` shortens every stage
by the same factor for both optimizers (the cosine schedule follows the new length).

Curate's outputs (sft_stage1, sft_stage2, the eval splits) come from a finished demo's home
(`--curate-from`; its artifacts are copied into --home under the same keys), or, without it, from the
demo's curate stage run here. Everything else runs in --home, one process, through the flows (stage
cache included: a rerun of this script at the same commit reuses the runs that finished; the stage key holds
the code version, so after any commit every run trains again).

The best rate of each optimizer is the one with the lowest mean training loss over the last quarter of its
steps: within an epoch the sampler draws each row once, so a step's loss is on rows the model has not yet
trained on. The two winners are evaluated on the demo's held-out splits (curate's eval_math, eval_code,
eval_ifeval, the first --max-problems of each, the demo's sampling: 3 samples at T=1, 128 tokens): AdamW's
alone, Muon's against AdamW's own samples, so the delta is paired over the same problems.

Printed: each run's loss curve, its selection loss, the median optimizer step and (Muon) Newton-Schulz
seconds inside it beside the whole step's, the optimizer state it held (bytes of its tensors, measured) beside
the memory model's figure; then the winners' pass@1 with 95% intervals and the paired delta.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

CURATE_OUTPUTS = ("sft_stage1", "sft_stage2", "eval_math", "eval_code", "eval_ifeval")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=None, help="PASSBAND_HOME (default: a fresh temporary folder)")
    parser.add_argument("--curate-from", type=Path, default=None,
                        help="PASSBAND_HOME of a finished `pipeline --preset demo` run whose curate outputs to train on")
    parser.add_argument("--lr-scales", type=float, nargs="+", default=[1.0, 2.0, 0.5],
                        help="factors on every stage's lr, in the order run")
    parser.add_argument("--optimizers", nargs="+", default=["adamw", "muon"], choices=["adamw", "muon"])
    parser.add_argument("--steps-scale", type=float, default=1.0, help="factor on every stage's num_steps")
    parser.add_argument("--max-problems", type=int, default=None, help="first N problems of each eval split")
    parser.add_argument("--no-eval", action="store_true", help="train and select only")
    parser.add_argument("--out", type=Path, default=None, help="also write every number printed as JSON")
    args = parser.parse_args()
    os.environ["PASSBAND_HOME"] = str(args.home or tempfile.mkdtemp(prefix="passband-muon-sft-"))
    from passband.stack.local import prepare_environment

    prepare_environment()  # before Prefect is imported: it reads its settings once
    from passband.flows.config import resolve_config
    from passband.flows.pipeline.flow import PipelineConfig, with_training_seed

    config = with_training_seed(resolve_config(PipelineConfig, "pipeline", "demo"))
    curate_outputs = (copied_curate_outputs(args.curate_from, Path(os.environ["PASSBAND_HOME"]))
                      if args.curate_from else run_curate(config))
    print(f"PASSBAND_HOME={os.environ['PASSBAND_HOME']}\ncurate outputs: {json.dumps(curate_outputs, indent=1)}",
          flush=True)

    probe = OptimizerProbe()
    # each rate for both optimizers before the next rate: a sweep cut short leaves them the same rates
    runs = [train(config, curate_outputs, name, scale, args.steps_scale, probe)
            for scale in args.lr_scales for name in args.optimizers]
    print(runs_markdown(runs))
    print()
    print(curves_markdown(runs))
    best = {name: min((run for run in runs if run["optimizer"] == name), key=lambda run: run["selection_loss"])
            for name in args.optimizers}
    print("\nbest rate: " + ", ".join(f"{name} x{run['lr_scale']:g} (selection loss {run['selection_loss']:.4f})"
                                     for name, run in best.items()), flush=True)
    evaluation = {}
    if not args.no_eval:
        evaluation = evaluate_winners(config, curate_outputs, best, args.max_problems)
        print(evaluation["markdown"])
    if args.out:
        args.out.write_text(json.dumps({"runs": runs, "best": {k: v["label"] for k, v in best.items()},
                                        "evaluation": evaluation}, indent=1))


def copied_curate_outputs(source_home: Path, home: Path) -> dict[str, str]:
    """The URIs of curate's outputs in `source_home` (the curate run that wrote sft_stage1), each artifact folder
    copied into `home`'s artifact root under its own key (so a run does not depend on the other home staying;
    the summary's URIs may name the root the run had, the key after `artifacts/` is looked up here)."""
    from passband.tasks.artifacts.store import fetch_artifact

    summaries = [json.loads((fetch_artifact(manifest.parent.as_uri()) / "summary.json").read_text())
                 for manifest in sorted(source_home.glob("artifacts/stages/curate/*/manifest.json"))]
    with_sft = [summary for summary in summaries if "sft_stage1" in summary["outputs"]]
    if len(with_sft) != 1:
        raise ValueError(f"{source_home}: expected one curate run with sft_stage1, found {len(with_sft)}")
    outputs = {}
    for name in CURATE_OUTPUTS:
        key = with_sft[0]["outputs"][name].split("/artifacts/", 1)[1]
        target = home / "artifacts" / key
        if not target.exists():
            shutil.copytree(source_home / "artifacts" / key, target)
        outputs[name] = target.as_uri()
    return outputs


def run_curate(config: Any) -> dict[str, str]:
    """The demo pipeline's curate stage, run (or found in the stage cache) in this home."""
    from passband.flows.curate.config import CurateConfig
    from passband.flows.curate.flow import curate
    from passband.flows.pipeline.flow import _stage_config

    summary = curate(_stage_config(CurateConfig, config.curate, {}, model=config.model))
    return {name: summary.outputs[name] for name in CURATE_OUTPUTS}


class OptimizerProbe:
    """Times each optimizer step of the SFT loop (and Newton-Schulz inside it) and measures the optimizer's state
    after each step, by wrapping the loop's build_optimizer and the optimizer module's newton_schulz: the calls the
    trainer itself makes, as scripts/bench_muon.py times them."""

    def __init__(self) -> None:
        from passband.training.optim import optimizer as optimizer_module
        from passband.training.sft import loop

        self.reset()
        build, newton_schulz = loop.build_optimizer, optimizer_module.newton_schulz

        def timed_newton_schulz(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            result = newton_schulz(*args, **kwargs)
            self.newton_schulz_s[-1] += time.perf_counter() - start
            return result

        def probed_build(*args: Any, **kwargs: Any) -> Any:
            optimizer = build(*args, **kwargs)
            step = optimizer.step

            def timed_step(*step_args: Any, **step_kwargs: Any) -> None:
                self.newton_schulz_s.append(0.0)
                start = time.perf_counter()
                step(*step_args, **step_kwargs)
                self.step_s.append(time.perf_counter() - start)
                # moments and momentum buffers; the per-tensor step counters left out
                self.state_bytes = sum(tensor.nbytes for state in optimizer.state.values()
                                       for key, tensor in state.items() if key != "step")
            optimizer.step = timed_step
            return optimizer

        loop.build_optimizer = probed_build
        optimizer_module.newton_schulz = timed_newton_schulz

    def reset(self) -> None:
        self.step_s: list[float] = []
        self.newton_schulz_s: list[float] = []
        self.state_bytes = float("nan")


def sft_config(config: Any, curate_outputs: dict[str, str], optimizer: str, lr_scale: float,
               steps_scale: float) -> Any:
    """The pipeline's SFT stage config (references bound, held out from every evaluated set), every stage's lr
    times `lr_scale` and num_steps times `steps_scale`, trained with `optimizer`."""
    from passband.flows.pipeline.flow import _sft_held_out, _stage_config
    from passband.flows.sft import SFTConfig

    outputs = {"curate": curate_outputs}
    base = _stage_config(SFTConfig, config.sft, outputs, model=config.model, held_out=_sft_held_out(config, outputs))
    data = base.model_dump(mode="json")
    for stage in data["stages"]:
        stage["lr"] *= lr_scale
        stage["num_steps"] = max(1, round(stage["num_steps"] * steps_scale))
        stage["optimizer"] = {"name": optimizer}
    return SFTConfig.model_validate(data)


def train(config: Any, curate_outputs: dict[str, str], optimizer: str, lr_scale: float, steps_scale: float,
          probe: OptimizerProbe) -> dict:
    """One SFT run: its loss curve, step and optimizer times, optimizer state, checkpoint."""
    from mlflow import MlflowClient

    from passband.flows.sft import sft
    from passband.tasks.reporting.tracking import configure
    from passband.training.memory_model import ModelShape
    from passband.training.optim.memory import optimizer_state_bytes

    probe.reset()
    run_config = sft_config(config, curate_outputs, optimizer, lr_scale, steps_scale)
    label = f"{optimizer} x{lr_scale:g}"
    start = time.perf_counter()
    summary = sft(run_config)
    wall_s = time.perf_counter() - start
    configure()  # this home's tracking store (the flow set it too; a cache hit may not have)
    client = MlflowClient()
    history = {name: {m.step: m.value for m in client.get_metric_history(summary.mlflow_run_id, name)}
               for name in ("loss", "num_tokens", "tokens_per_s")}
    steps = sorted(history["loss"])
    losses = [history["loss"][step] for step in steps]
    step_s = [history["num_tokens"][step] / history["tokens_per_s"][step] for step in steps]
    tail = max(1, math.ceil(len(losses) / 4))
    shape = ModelShape.from_hf_config(json.loads((model_dir(run_config.model) / "config.json").read_text()))
    # a stage-cache hit trains nothing here: its times and state are the ones recorded when it trained
    record = Path(os.environ["PASSBAND_HOME"]) / "compare_muon_sft" / f"{summary.mlflow_run_id}.json"
    measured = (json.loads(record.read_text()) if not probe.step_s and record.is_file() else
                {"optimizer_step_s": statistics.median(probe.step_s) if probe.step_s else float("nan"),
                 "newton_schulz_s": statistics.median(probe.newton_schulz_s) if probe.step_s else float("nan"),
                 "optimizer_state_bytes": probe.state_bytes})
    if probe.step_s:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps(measured))
    run = {
        "label": label, "optimizer": optimizer, "lr_scale": lr_scale,
        "lrs": [stage.lr for stage in run_config.stages], "steps": steps, "loss": losses,
        "selection_loss": statistics.fmean(losses[-tail:]), "final_loss": losses[-1],
        "step_s": statistics.median(step_s),
        **measured,
        "memory_model_bytes": optimizer_state_bytes(shape.parameter_shapes(), run_config.stages[-1].optimizer),
        "checkpoint": summary.outputs["checkpoint"], "mlflow_run_id": summary.mlflow_run_id, "wall_s": wall_s,
    }
    print(f"{label}: {len(steps)} steps in {wall_s / 60:.1f} min, final loss {run['final_loss']:.4f}, selection "
          f"loss {run['selection_loss']:.4f}, step {run['step_s']:.2f} s, optimizer step {run['optimizer_step_s']:.2f} s "
          f"(Newton-Schulz {run['newton_schulz_s']:.2f} s)", flush=True)
    return run


def model_dir(model: str) -> Path:
    from passband.tasks.artifacts.model import resolve_model

    return Path(resolve_model(model))


def runs_markdown(runs: list[dict]) -> str:
    lines = ["| run | peak lrs (foundation, deep) | final loss | selection loss (last quarter) | step s | "
             "optimizer step s | Newton-Schulz s | optimizer step / step | optimizer state MB (memory model) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for run in runs:
        lines.append(f"| {run['label']} | {', '.join(f'{lr:.2g}' for lr in run['lrs'])} | {run['final_loss']:.4f} | "
                     f"{run['selection_loss']:.4f} | {run['step_s']:.2f} | {run['optimizer_step_s']:.2f} | "
                     f"{run['newton_schulz_s']:.2f} | {run['optimizer_step_s'] / run['step_s']:.2f} | "
                     f"{run['optimizer_state_bytes'] / 1e6:.0f} ({run['memory_model_bytes'] / 1e6:.0f}) |")
    return "\n".join(lines)


def curves_markdown(runs: list[dict]) -> str:
    steps = runs[0]["steps"]
    lines = ["| step | " + " | ".join(run["label"] for run in runs) + " |", "|---" * (len(runs) + 1) + "|"]
    for index, step in enumerate(steps):
        lines.append(f"| {step} | " + " | ".join(f"{run['loss'][index]:.4f}" for run in runs) + " |")
    return "\n".join(lines)


def evaluate_winners(config: Any, curate_outputs: dict[str, str], best: dict[str, dict],
                     max_problems: int | None) -> dict:
    """AdamW's winner on the demo's eval splits, then Muon's against AdamW's samples (paired delta)."""
    from passband.flows.evaluate.flow import EvaluateConfig
    from passband.flows.evaluate.flow import evaluate
    from passband.flows.pipeline.flow import _stage_config
    from passband.training.engines.keeper import ENGINES

    outputs = {"curate": curate_outputs}
    common = dict(suites={}, k_curve=None, max_problems=max_problems, perplexity_samples=8)
    with ENGINES.scope():  # one live engine, the weights swapped (as the pipeline's evaluations do)
        adamw = evaluate(_stage_config(EvaluateConfig, config.evaluate, outputs, model=best["adamw"]["checkpoint"],
                                       baseline=None, baseline_samples=None, **common))
        muon = evaluate(_stage_config(EvaluateConfig, config.evaluate, outputs, model=best["muon"]["checkpoint"],
                                      baseline=best["adamw"]["checkpoint"], baseline_samples=adamw.outputs["samples"],
                                      **common))
    sets = sorted(name.split("/")[0] for name in adamw.metrics if name.endswith("/pass@1") and name.count("/") == 1)
    lines = [f"| held-out pass@1 | AdamW ({best['adamw']['label']}) | Muon ({best['muon']['label']}) | Muon - AdamW (paired) |",
             "|---|---|---|---|"]
    for name in sets:
        a, m = adamw.metrics, muon.metrics
        delta = f"delta/{name}/pass@1"
        excludes_zero = m[f"{delta}_ci_low"] > 0 or m[f"{delta}_ci_high"] < 0
        lines.append(f"| {name} | {interval(a, f'{name}/pass@1')} | {interval(m, f'{name}/pass@1')} | "
                     f"{m[delta]:+.3f} [{m[f'{delta}_ci_low']:+.3f}, {m[f'{delta}_ci_high']:+.3f}]"
                     f"{' *' if excludes_zero else ''} |")
    return {"adamw": adamw.metrics, "muon": muon.metrics, "markdown": "\n".join(lines)}


def interval(metrics: dict[str, float], name: str) -> str:
    return f"{metrics[name]:.3f} [{metrics[f'{name}_ci_low']:.3f}, {metrics[f'{name}_ci_high']:.3f}]"


if __name__ == "__main__":
    main()
