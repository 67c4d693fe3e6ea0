"""The `passband` command line. Imports stay inside commands so `passband --help` is instant."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import click

# flow name -> "module:function" and its config class; one entry point per flow.
FLOWS = {
    "sample": ("passband.flows.sample", "sample", "SampleConfig"),
    "curate": ("passband.flows.curate", "curate", "CurateConfig"),
    "sft": ("passband.flows.sft", "sft", "SFTConfig"),
    "rl": ("passband.flows.rl", "rl", "RLConfig"),
    "evaluate": ("passband.flows.evaluate", "evaluate", "EvaluateConfig"),
    "pipeline": ("passband.flows.pipeline", "pipeline", "PipelineConfig"),
}


def load_flow(name: str):
    """(flow function, config class) of a flow by name."""
    import importlib

    if name not in FLOWS:
        raise click.BadParameter(f"unknown flow '{name}' (flows: {', '.join(FLOWS)})", param_hint="FLOW")
    module_name, fn_name, config_name = FLOWS[name]
    module = importlib.import_module(module_name)
    return getattr(module, fn_name), getattr(module, config_name)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """passband: curate, SFT, RL and evaluate reasoning models, as Prefect flows tracked in MLflow.

    Every `passband run` prints one JSON line on stdout; progress and logs go to stderr.
    """


@main.command()
@click.argument("flow_name", metavar="FLOW")
@click.option("--preset", "-p", default=None, help="Preset name (flows/presets/FLOW/NAME.yaml), e.g. smoke, demo.")
@click.option("--config", "config_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="YAML file overriding the preset.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Override one setting by dotted key, e.g. --set rl.steps=4 (repeatable).")
def run(flow_name: str, preset: str | None, config_file: Path | None, overrides: tuple[str, ...]) -> None:
    """Run FLOW (sample, curate, sft, rl, evaluate, pipeline) on the configured stack."""
    from passband.flows.config import ConfigError, resolve_config
    from passband.flows.stack import prepare_environment, stdout_reserved_for_summary

    prepare_environment()
    flow_fn, config_cls = load_flow(flow_name)
    try:
        config = resolve_config(config_cls, flow_name, preset, config_file, list(overrides))
    except ConfigError as err:
        raise click.UsageError(str(err)) from err
    with stdout_reserved_for_summary() as summary_out:
        try:
            result = flow_fn(config=config)
            summary = result.model_dump()
        except Exception as err:
            summary = {"flow": flow_name, "status": "failed", "mlflow_run_id": None, "outputs": {},
                       "metrics": {}, "error": f"{type(err).__name__}: {err}"}
            summary_out.write(json.dumps(summary) + "\n")
            raise SystemExit(1) from err
        summary_out.write(json.dumps(summary) + "\n")


@main.command()
@click.option("--worker", is_flag=True, help="Also start a Prefect worker on the local process pool.")
def up(worker: bool) -> None:
    """Start the local Prefect server and MLflow UI in the background; print their URLs."""
    from passband.flows.stack import start_services

    for name, url in start_services(worker=worker).items():
        click.echo(f"{name}: {url}")


@main.command()
def down() -> None:
    """Stop the services `passband up` started."""
    from passband.flows.stack import stop_services

    for name in stop_services():
        click.echo(f"stopped {name}")


@main.command()
def doctor() -> None:
    """Print versions, engine availability and the resolved stack settings."""
    from passband.flows.stack import doctor_report

    click.echo(doctor_report())


@main.command()
@click.option("--task", "task_name", type=click.Choice(["math", "code", "ifeval"]), required=True)
@click.argument("input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False, path_type=Path), required=True)
@click.option("--rule", default=None, help="Math answer extraction: boxed, last_number or answer_tag.")
@click.option("--mode", default=None, help="IFEval mode: strict or loose.")
def verify(task_name: str, input_path: Path, output_path: Path, rule: str | None, mode: str | None) -> None:
    """Verify a JSONL file of {id, completion, reference} rows; write them back with score/status/detail."""
    from passband.flows.verify_cmd import verify_file

    settings = {k: v for k, v in {"rule": rule, "mode": mode}.items() if v is not None}
    counts = verify_file(task_name, input_path, output_path, **settings)
    click.echo(" ".join(f"{status}={count}" for status, count in counts.items()), err=True)


@main.command()
@click.option("--file", "prefect_file", default=None, type=click.Path(exists=True, path_type=Path),
              help="Deployment file (default: infra/prefect.yaml).")
def deploy(prefect_file: Path | None) -> None:
    """Register every flow's deployments (infra/prefect.yaml) with the Prefect server."""
    from passband.flows.deploy import register_deployments

    for name in register_deployments(prefect_file):
        click.echo(f"registered {name}")


if __name__ == "__main__":
    sys.exit(main())
