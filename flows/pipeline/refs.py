"""The pipeline's `@stage.output` references, checked when the config is read.

A stage's config may name another stage's output (`@recurate.rl_math`); the pipeline binds the URI
when that stage starts (pipeline.bind_refs). A typo, or a reference to an output no stage will make
(`@recurate.rl_code` after `curate.tasks.code: null`), would otherwise fail only then, after the
stages before it ran. Here each reference is resolved symbolically against what each earlier stage
will produce, from the config alone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from passband.flows.curate.config import CurateConfig
    from passband.flows.sft import SFTConfig

STAGE_ORDER = ("curate", "sft", "recurate", "rl", "evaluate")


def curate_outputs(config: CurateConfig, with_sft: bool) -> set[str]:
    """What a curate run of `config` commits (flows/curate/flow.py): an eval split and an RL set per
    enabled task, the SFT stage sets when its SFT half is on, and the removed rows."""
    tasks = config.pools()
    sft = {"sft_stage1", "sft_stage2"} if with_sft and config.sft.enabled else set()
    return {*(f"eval_{name}" for name in tasks), *(f"rl_{name}" for name in tasks), *sft, "removed"}


def sft_outputs(config: SFTConfig) -> set[str]:
    """What an SFT run of `config` outputs (flows/sft.py): each stage's checkpoint, the last as
    `checkpoint`, and the datasets it generated."""
    built = config.built_in
    used = {name for stage in config.stages for name in stage.datasets}
    return {"checkpoint", *(f"stage{index}_checkpoint" for index in range(1, len(config.stages) + 1)),
            *(f"data_{name}" for name in used & built)}


def planned_outputs(config: Any) -> dict[str, set[str]]:
    """Each stage's outputs, as the pipeline (a PipelineConfig: pipeline.py imports this module) will hand them on."""
    curate = curate_outputs(config.curate, with_sft=True)
    return {"curate": curate, "sft": sft_outputs(config.sft),
            "recurate": curate_outputs(config.curate, with_sft=False) if config.recurate else curate,
            "rl": {"checkpoint", "best_checkpoint"}}


def references(value: Any, where: str) -> list[tuple[str, str]]:
    """(dotted setting, `@stage.output`) of every reference in a dumped config, values and keys."""
    found = []
    if isinstance(value, dict):
        for key, inner in value.items():
            here = f"{where}.{key}"
            if isinstance(key, str) and key.startswith("@"):
                found.append((where, key))
            found += references(inner, here)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += references(inner, f"{where}.{index}")
    elif isinstance(value, str) and value.startswith("@"):
        found.append((where, value))
    return found


def visible_stages(where: str) -> tuple[str, ...]:
    """The stages whose outputs a setting may name: those finished when it is bound. Evaluate's sets
    are bound when SFT starts (SFT holds their questions out), so they may name curate's only."""
    stage = where.split(".")[0]
    if where.startswith(("evaluate.datasets", "evaluate.suites")):
        return ("curate",)
    if stage == "sft":
        return ("curate",)
    return STAGE_ORDER[:STAGE_ORDER.index(stage)]


def reference_problems(config: Any) -> list[str]:
    """One line per reference that would not bind when its stage starts."""
    outputs = planned_outputs(config)
    problems = []
    for stage in ("curate", "sft", "rl", "evaluate"):
        for where, ref in references(getattr(config, stage).model_dump(mode="json"), stage):
            name, _, output = ref[1:].partition(".")
            visible = visible_stages(where)
            if name not in outputs:
                problems.append(f"{where}: {ref} names no stage (stages: {', '.join(outputs)})")
            elif name not in visible:
                problems.append(f"{where}: {ref}: {name} has not run when {stage} reads it "
                                f"({'it may name outputs of ' + ', '.join(visible) if visible else 'it names none'})")
            elif output not in outputs[name]:
                problems.append(f"{where}: {ref}: {name} will not produce {output!r} with this config "
                                f"(it produces {', '.join(sorted(outputs[name]))})")
    return problems
