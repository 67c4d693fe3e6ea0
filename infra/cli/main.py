"""The `passband` command line. Imports stay inside commands so `passband --help` is instant."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

import click

# flow name -> "module:function" and its config class; one entry point per flow.
FLOWS = {
    "sample": ("passband.flows.sample", "sample", "SampleConfig"),
    "curate": ("passband.flows.curate.flow", "curate", "CurateConfig"),
    "sft": ("passband.flows.sft", "sft", "SFTConfig"),
    "rl": ("passband.flows.rl.flow", "rl", "RLConfig"),
    "evaluate": ("passband.flows.evaluate.flow", "evaluate", "EvaluateConfig"),
    "pipeline": ("passband.flows.pipeline.flow", "pipeline", "PipelineConfig"),
}


def load_flow(name: str):
    """(flow function, config class) of a flow by name."""
    import importlib

    if name not in FLOWS:
        raise click.BadParameter(f"unknown flow '{name}' (flows: {', '.join(FLOWS)})", param_hint="FLOW")
    module_name, fn_name, config_name = FLOWS[name]
    module = importlib.import_module(module_name)
    return getattr(module, fn_name), getattr(module, config_name)


class UserError(click.ClickException):
    """A bad setting, file or option: one `Error: ...` line on stderr and exit 2, click's usage status."""

    exit_code = 2


class FlowCommand(click.Command):
    """A command taking FLOW: its --help ends with the presets of that FLOW (of every flow without one)."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # --help is eager: it prints before FLOW is processed, so read FLOW from the raw arguments
        opts, _, _ = self.make_parser(ctx).parse_args(args=list(args))
        ctx.meta["flow_name"] = opts.get("flow_name")
        return super().parse_args(ctx, args)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from passband.flows.config import preset_names

        flow = ctx.meta.get("flow_name")
        flows = [flow] if flow in FLOWS else list(FLOWS)
        with formatter.section(f"Presets (--preset, flows/presets/{flow if flow in FLOWS else 'FLOW'}/NAME.yaml)"):
            formatter.write_dl([(name, ", ".join(preset_names(name))) for name in flows])
        super().format_epilog(ctx, formatter)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="passband", message="passband %(version)s")  # importlib.metadata's version
def main() -> None:
    """passband: curate, SFT, RL and evaluate reasoning models, as Prefect flows tracked in MLflow.

    Every `passband run` prints one JSON line on stdout; progress and logs go to stderr.
    """


def config_options(command):
    """FLOW and the options that choose its config, shared by `run` and `config` so both resolve alike."""
    command = click.option(
        "--set", "overrides", multiple=True, metavar="KEY=VALUE",
        help="Override one setting by dotted key, e.g. --set num_iterations=4 or --set algo.lr=1e-5 (repeatable).",
    )(command)
    command = click.option("--config", "config_files", type=click.Path(exists=True, dir_okay=False, path_type=Path),
                           multiple=True, help="YAML file overriding the preset (repeatable: merged in the order "
                           "given, a later file winning; a map such as datasets written in a file is the whole map)."
                           )(command)
    command = click.option("--preset", "-p", default=None,
                           help="Preset name (flows/presets/FLOW/NAME.yaml; listed below).")(command)
    return click.argument("flow_name", metavar="FLOW")(command)


def resolve(flow_name: str, preset: str | None, config_files: tuple[Path, ...], overrides: tuple[str, ...],
            runs_here: bool = True):
    """(flow function, resolved config): the one resolution `run` and `config` share. `runs_here`: the
    config is about to run on this machine (`run`), so a trainer that cannot fit its device here
    stops it; `config` leaves that to `run` and `doctor` (the config may be meant for another machine,
    and sizing a device needs torch, which `config` does not load)."""
    from passband.flows.config import ConfigError, resolve_config

    flow_fn, config_cls = load_flow(flow_name)
    try:
        config = resolve_config(config_cls, flow_name, preset, config_files, list(overrides))
    except ConfigError as err:
        raise UserError(str(err)) from err
    return flow_fn, checked_sources(config, runs_here)


def checked_sources(config, runs_here: bool = True):
    """`config` once the preflight found its data sources readable (tasks/steps/preflight.py) and,
    when it `runs_here`, its trainers fitting their devices on this machine (flows/memory_check.py):
    each problem on a line of its own and exit 2; notes (rows that will be quarantined, trainers not
    checked) on stderr."""
    from passband.flows.memory_check import memory_check
    from passband.tasks.steps.preflight import preflight

    found = preflight(config)
    memory_problems, memory_notes = memory_check(config) if runs_here else ([], [])
    for note in found.notes + memory_notes:
        click.echo(f"note: {note}", err=True)
    problems = found.problems + memory_problems
    if problems:
        raise UserError("preflight: " + "\npreflight: ".join(problems))
    return config


PARTIAL_EXIT_CODE = 3
"""A run that ended without doing all it was asked (its summary's status is 'partial')."""


class HomeBusy(click.ClickException):
    """Another `passband run` holds this PASSBAND_HOME."""

    exit_code = 75  # EX_TEMPFAIL: a script may retry later, unlike a usage error (2) or a failed run (1)


@main.command(cls=FlowCommand)
@config_options
@click.option("--wait", is_flag=True,
              help="If another run holds this PASSBAND_HOME, wait for it instead of failing at once.")
def run(flow_name: str, preset: str | None, config_files: tuple[Path, ...], overrides: tuple[str, ...],
        wait: bool) -> None:
    """Run FLOW (sample, curate, sft, rl, evaluate, pipeline) on the configured stack.

    One run at a time per PASSBAND_HOME: a second one fails at once (exit 75) naming the holder,
    or queues behind it with --wait. A failed run still prints its JSON line, with its MLflow run.
    Exit codes: 0 completed; 1 failed; 2 bad usage or config; 3 partial (the run ended without doing
    all it was asked, e.g. RL stopped by max_iterations_this_run, or curate with every RL set empty:
    stderr and the JSON line's `message` say why); 75 the home is busy.
    """
    from passband.stack.local import prepare_environment, stdout_reserved_for_summary
    from passband.tasks.host.lock import LockHeld, home_lock

    settings = prepare_environment()
    flow_fn, config = resolve(flow_name, preset, config_files, overrides)
    with contextlib.ExitStack() as held:
        try:
            held.enter_context(home_lock(
                settings.home, wait=wait,
                on_wait=lambda holder: click.echo(f"waiting for {settings.home}: held by {holder}", err=True),
            ))
        except LockHeld as err:
            raise HomeBusy(str(err)) from err
        summary_out = held.enter_context(stdout_reserved_for_summary())
        started_ms = int(time.time() * 1000)
        try:
            result = flow_fn(config=config)
            summary = result.model_dump()
        except Exception as err:
            from passband.tasks.reporting.runs import failed_flow_run

            summary = {"flow": flow_name, "status": "failed", "mlflow_run_id": failed_flow_run(started_ms, settings),
                       "outputs": {}, "metrics": {}, "error": f"{type(err).__name__}: {err}"}
            summary_out.write(json.dumps(summary) + "\n")
            click.echo(f"{flow_name}: failed: {summary['error']}", err=True)  # the last line, under the logs
            raise SystemExit(1) from err
        summary_out.write(json.dumps(summary) + "\n")
    if summary["status"] == "partial":
        click.echo(f"{flow_name}: partial: {summary['message']}", err=True)
        sys.exit(PARTIAL_EXIT_CODE)


@main.command("config", cls=FlowCommand)
@config_options
@click.option("--schema", is_flag=True, help="Print FLOW's config JSON schema (field docs as descriptions) instead.")
def config_command(flow_name: str, preset: str | None, config_files: tuple[Path, ...], overrides: tuple[str, ...],
                   schema: bool) -> None:
    """Print the config `passband run FLOW` would run with the same options, as YAML.

    Save it, edit it and pass it back with `passband run FLOW --config FILE`.
    """
    from passband.cli.config_cmd import render_config, render_schema

    if schema:
        click.echo(render_schema(load_flow(flow_name)[1]), nl=False)
        click.echo()
        return
    click.echo(render_config(resolve(flow_name, preset, config_files, overrides, runs_here=False)[1]), nl=False)


@main.command()
@click.option("--limit", "-n", default=20, show_default=True, type=click.IntRange(min=1), help="How many runs.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run instead of a table.")
def runs(limit: int, as_json: bool) -> None:
    """List the experiment's most recent MLflow runs (reads only; stages show as FLOW/STAGE).

    Exit codes: 0 listed (or none yet); 1 the store cannot be read (a damaged mlflow.db, a server
    that does not answer within about 15 s; the MLFLOW_HTTP_REQUEST_* variables override that).
    """
    from passband.cli.runs_cmd import fail_fast_http, render_json, render_table
    from passband.tasks.reporting.runs import StoreUnreadable, recent_runs

    fail_fast_http()
    try:
        rows = recent_runs(limit)
    except StoreUnreadable as err:
        raise click.ClickException(str(err)) from err
    click.echo(render_json(rows) if as_json else render_table(rows))


@main.command()
@click.argument("run")
@click.option("--iteration", type=click.IntRange(min=1), default=None, help="Only this iteration.")
@click.option("--task", default=None, help="Only this task (math, code, ifeval, ...).")
@click.option("--status", default=None, help="Only this verifier status (pass, fail, unparsable, timeout, error).")
@click.option("--limit", "-n", type=click.IntRange(min=1), default=50, show_default=True, help="At most this many.")
@click.option("--full", is_flag=True, help="Whole completions (otherwise the first 400 characters).")
def rollouts(run: str, iteration: int | None, task: str | None, status: str | None, limit: int, full: bool) -> None:
    """Print the rollouts an RL run trained on: RUN is the rl stage's MLflow run id (`passband runs`
    lists it; its tag `rollouts_uri` names the artifact) or the artifact's URI. The artifact is a
    folder of Parquet files, one per iteration: pandas.read_parquet, pyarrow.parquet.read_table or
    DuckDB's read_parquet('<folder>/*/iter-*.parquet') read it (docs/rl-rollouts.md).

    Exit codes: 0 printed (or none matched, said on stderr); 1 the run or its store cannot be read.
    """
    from passband.cli.rollouts_cmd import render, selected
    from passband.cli.runs_cmd import fail_fast_http
    from passband.stack.local import prepare_environment
    from passband.tasks.reporting.runs import StoreUnreadable, run_tag
    from passband.tasks.steps.rollouts_log import ROLLOUTS_TAG, read_rollouts

    prepare_environment()
    fail_fast_http()
    uri = run
    if "://" not in run:
        try:
            uri = run_tag(run, ROLLOUTS_TAG)
        except StoreUnreadable as err:
            raise click.ClickException(str(err)) from err
        if uri is None:
            raise click.ClickException(f"MLflow run {run} has no {ROLLOUTS_TAG} tag: it is not an RL run, or it ran "
                                       "with keep_rollouts.enabled: false")
    rows = selected(read_rollouts(uri).to_pylist(), iteration, task, status)
    if not rows:
        click.echo(f"no rollouts match in {uri}", err=True)
        return
    click.echo(render(rows[:limit], full))
    if len(rows) > limit:
        click.echo(f"{len(rows) - limit} more (--limit)", err=True)


@main.command()
@click.option("--worker", is_flag=True, help="Also start a Prefect worker on the local process pool.")
@click.option("--task-workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Also start N Prefect task workers for sampling.workers=task_workers (a GPU or a core share each).")
@click.option("--rollout-workers", type=click.IntRange(min=0), default=0, show_default=True,
              help="Start N task workers for RL's rollout.workers=task_workers (the same workers: each serves "
                   "every shard job, so N are added to --task-workers).")
@click.option("--stack", type=click.Choice(["local", "postgres"]), default="local", show_default=True,
              help="postgres: infra/docker-compose.yaml's stack from source, without Docker (PostgreSQL, Prefect,"
                   " MLflow, moto's S3 server for MinIO) under PASSBAND_HOME/stack; prints the settings to export.")
def up(worker: bool, task_workers: int, rollout_workers: int, stack: str) -> None:
    """Start the local Prefect server and MLflow UI in the background; print their URLs."""
    task_workers += rollout_workers
    if stack == "postgres":
        _up_postgres_stack(worker or bool(task_workers))
        return
    from passband.stack.local import start_services

    urls = start_services(worker=worker)
    for name, url in urls.items():
        click.echo(f"{name}: {url}")
    if task_workers:
        from passband.stack.task_workers import start_task_workers

        for name in start_task_workers(task_workers, f"{urls['prefect']}/api"):
            click.echo(f"{name}: serving sample-shard-job, evaluate-shard-job and rollout-shard-job")


@main.command()
def down() -> None:
    """Stop the services `passband up` started."""
    from passband.stack.local import stop_services
    from passband.stack.postgres import open_home_stack, stack_root
    from passband.tasks.host.settings import StackSettings

    home = StackSettings.from_env().home
    stopped = stop_services()
    if stack_root(home).is_dir():  # `passband up --stack postgres` ran here
        stopped += open_home_stack(home).stop()
    for name in stopped:
        click.echo(f"stopped {name}")


def _up_postgres_stack(with_workers: bool) -> None:
    """`passband up --stack postgres`: start the stack, print its URLs and the settings file."""
    from passband.stack.postgres import open_home_stack
    from passband.tasks.host.settings import StackSettings

    if with_workers:
        raise click.UsageError("--worker, --task-workers and --rollout-workers start workers for the local stack only")
    stack = open_home_stack(StackSettings.from_env().home)
    stack.start()
    for service in ("prefect", "mlflow", "s3"):
        click.echo(f"{service}: {stack.url(service)}")
    click.echo(f"settings: set -a; . {stack.root / 'stack.env'}; set +a")


@main.command()
@click.argument("flow_name", metavar="[FLOW]", required=False)
@click.option("--preset", "-p", default=None, help="With FLOW: its preset, as `passband run` takes it.")
@click.option("--config", "config_files", type=click.Path(exists=True, dir_okay=False, path_type=Path), multiple=True,
              help="With FLOW: YAML files, as `passband run` takes them.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="With FLOW: overrides, as `passband run`.")
@click.option("--gpu-gib", type=click.FloatRange(min=1), default=None,
              help="With FLOW: estimate for a GPU of this many GiB (device and precision auto as on CUDA) "
                   "instead of this machine's device.")
def doctor(flow_name: str | None, preset: str | None, config_files: tuple[Path, ...], overrides: tuple[str, ...],
           gpu_gib: float | None) -> None:
    """Print versions, engine availability and the resolved stack settings.

    With FLOW (and its --preset/--config/--set): also the memory each of its trainers needs on its
    device (training/memory_model.py), the estimate `passband run` refuses a config by.
    """
    from passband.stack.local import doctor_report

    click.echo(doctor_report())
    if flow_name is None:
        return
    from passband.flows.config import ConfigError, resolve_config
    from passband.flows.memory_check import Estimate, Target, Unplaceable, estimates

    try:
        config = resolve_config(load_flow(flow_name)[1], flow_name, preset, config_files, list(overrides))
    except ConfigError as err:
        raise UserError(str(err)) from err
    target = Target("cuda", int(gpu_gib * 2**30)) if gpu_gib else None
    click.echo(f"memory ({'a ' + format(gpu_gib, 'g') + ' GiB GPU' if target else 'this machine'}):")
    for estimate in estimates(config, ask_hub=True, target=target):
        click.echo("\n".join(estimate.report()) if isinstance(estimate, (Estimate, Unplaceable)) else estimate)


@main.command()
@click.option("--task", "task_name", required=True,
              help="A catalog task: math, code, ifeval, structured or proof_grading; or your own, by passband.tasks entry"
                   " point or import path module:attribute, with PASSBAND_ALLOW_USER_CODE=1 (docs/your-reward.md).")
@click.argument("input_path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False, path_type=Path), required=True,
              help="Where the scored rows go; malformed rows go to OUTPUT's stem + .quarantine.jsonl.")
@click.option("--rule", "--answer-format", "answer_format", default=None,
              help="math: how the answer is read, the configs' answer_format: plain (the last number; the default,"
                   " as in every flow) or boxed (the last \\boxed{}).")
@click.option("--mode", default=None, help="ifeval: strict (the default, as in every flow) or loose.")
@click.option("--reward-url", default=None,
              help="Score with a reward server instead (docs/your-reward.md section 3): POST batches to this URL, "
                   "--task being the task it is sent; a server down is one line naming it and exit 1.")
@click.option("--reward-timeout-s", type=float, default=30.0, show_default=True,
              help="With --reward-url: seconds one request may take (connect, and each read).")
@click.option("--reward-retries", type=int, default=2, show_default=True,
              help="With --reward-url: further tries of a request that failed, timed out or got a 5xx.")
def verify(task_name: str, input_path: Path, output_path: Path, answer_format: str | None, mode: str | None,
           reward_url: str | None, reward_timeout_s: float, reward_retries: int) -> None:
    """Verify a JSONL file of {id, completion, reference} rows, as the flows' verifiers score them.

    Writes each row back to OUTPUT with score, status (pass, fail, unparsable) and detail. A row that
    cannot be verified (bad JSON, a missing key, a reference the task cannot use) is written with its
    line number and reason to OUTPUT's stem + .quarantine.jsonl (out.jsonl -> out.quarantine.jsonl).
    Exit codes: 0 every row verified; 1 the reward server (--reward-url) failed every try, nothing
    written; 2 a bad option; 3 some rows quarantined (the others verified; every line of a binary or
    non-UTF-8 file is quarantined); 4 the file has no rows (empty, or blank lines only), nothing written.

    \b
    The reference of each task (docs/your-data.md):
      math        the final answer as a string (a number is read as its text)
      code        {"tests": "<python>", "entry_point": "name"} or
                  {"cases": [{"input": "...", "output": "..."}]}
      ifeval      {"instructions": [{"id": "<IFEval instruction id>", "kwargs": {...}}]}
      structured  {"fields": {"key": value}}
      proof_grading
                  {"score": 0, 0.5 or 1}; the completion is an analysis ending in the
                  score phrase and \\boxed{score} (curation/grading/texts.py)
    """
    from pydantic import ValidationError

    from passband.flows.config import ConfigError
    from passband.cli.verify_cmd import exit_status, summary, verify_file
    from passband.curation.catalog.reward_server import RewardServerConfig, RewardServerUnreachable

    settings = {k: v for k, v in {"answer_format": answer_format, "mode": mode}.items() if v is not None}
    try:
        server = None if reward_url is None else RewardServerConfig(
            url=reward_url, timeout_s=reward_timeout_s, retries=reward_retries)
        counts = verify_file(task_name, input_path, output_path, settings, server)
    except ValidationError as err:  # only the reward server's options are validated here
        raise UserError("; ".join(f"--reward-{str(e['loc'][0]).replace('_', '-')}: {e['msg']}"
                                  for e in err.errors())) from err
    except ConfigError as err:
        raise UserError(str(err)) from err
    except RewardServerUnreachable as err:
        raise click.ClickException(str(err)) from err  # exit 1: the server, not the command line
    click.echo(summary(counts, output_path), err=True)
    # A file with quarantined rows exits non-zero, so a script cannot mistake it for a clean run.
    sys.exit(exit_status(counts))


@main.command()
@click.option("--file", "prefect_file", default=None, type=click.Path(exists=True, path_type=Path),
              help="Deployment file (default: infra/prefect.yaml).")
def deploy(prefect_file: Path | None) -> None:
    """Register every flow's deployments (infra/prefect.yaml) with the Prefect server."""
    from passband.cli.deploy import DeploymentFileError, register_deployments, stale_deployments

    try:
        registered = register_deployments(prefect_file)
    except DeploymentFileError as err:
        raise UserError(str(err)) from err
    for name in registered:
        click.echo(f"registered {name}")
    for line in stale_deployments():  # registered before flows/ moved, under names the file does not replace
        click.echo(line, err=True)


if __name__ == "__main__":
    sys.exit(main())
