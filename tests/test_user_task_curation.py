"""Curation with a task of the user's (issue 54; fast: no engine): the curate config takes
docs/your-reward.md's entry-point task `capitals`, its samples are verified as a pass-rate shard
verifies them (verify_groups), the RL band keeps the recipe's (0, 0.8] (or the task's own
`default_band`), and SFT selection keeps the passed traces of problems solved sometimes, checked by
the structure check only (consistency, execution and math are ours: not applicable to it). The whole
flow on a model: tests/test_flow_user_task.py (slow)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from passband.curation.bands import BandFilter
from passband.curation.catalog.verify import verify_groups
from passband.curation.curate_rows import attach_pass_rates
from passband.curation.passrate import summarize_attempts
from passband.curation.rl_selection import rl_bands
from passband.curation.sft_select import select_sft
from passband.curation.synthetic import attach_samples
from passband.flows.curate.flow import _rl_sets
from passband.flows.curate.config import CurateConfig
from passband.flows.curate.sft import _with_verdicts
from user_package import forget_user_code, install_user_package

# four problems, four samples each: 0, 1, 2 and 4 of them say the capital (the page's rule: the last
# word, a final period and case ignored); "Rome Rome Rome Rome Rome" passes the rule but loops
CAPITALS = ["Paris", "Rome", "Madrid", "Lisbon"]
COMPLETIONS = [
    ["Lyon", "Nice", "", "Marseille"],
    ["Milan", "rome.", "Turin", "Naples"],
    ["It is Madrid", "Madrid Madrid Madrid Madrid Madrid", "Seville", "Bilbao"],
    ["Lisbon", "Lisbon.", "lisbon", "It is Lisbon"],
]
BANDED = '''
from passband.curation.bands import BandFilter
from mypkg.tasks import Capitals


class NarrowCapitals(Capitals):
    default_band = BandFilter.parse("[0.5, 1]")
'''


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    install_user_package(tmp_path / "site", monkeypatch, extra={"banded": BANDED})
    (tmp_path / "capitals.jsonl").write_text("")
    yield tmp_path
    forget_user_code()


def curate_config(folder: Path, task: str = "capitals", **source: object) -> CurateConfig:
    pool = {"source": {"path": str(folder / "capitals.jsonl"), "task": task, **source}, "eval_size": 0}
    return CurateConfig.model_validate({"tasks": {task: pool}, "balance": {"stratify_key": None}})


def test_the_config_takes_a_task_of_yours_and_refuses_what_is_not_one(site: Path) -> None:
    assert list(curate_config(site).pools()) == ["capitals"]
    assert list(curate_config(site, "mypkg.banded:NarrowCapitals").pools()) == ["mypkg.banded:NarrowCapitals"]
    with pytest.raises(ValidationError, match=r"tasks keys must be catalog tasks .* \(got \['capitols'\]\)"):
        curate_config(site, "capitols")
    with pytest.raises(ValidationError, match="tasks.capitals: a task of your own has no built-in suite"):
        CurateConfig.model_validate({"tasks": {"capitals": {"source": {"suite": "math"}}}})


def test_bands_and_sft_selection_with_a_task_of_yours(site: Path) -> None:
    config = curate_config(site)
    rows = [{"id": f"cap-{i}", "task": "capitals", "subdomain": "europe", "prompt": f"Capital {i}?",
             "reference": {"capital": capital}, "source": "test"} for i, capital in enumerate(CAPITALS)]
    verdicts = verify_groups(["capitals"] * 4, [row["reference"] for row in rows], COMPLETIONS, config.verifiers())
    assert [[v.status for v in group] for group in verdicts] == [
        ["fail", "fail", "unparsable", "fail"], ["fail", "pass", "fail", "fail"],
        ["pass", "pass", "fail", "fail"], ["pass", "pass", "pass", "pass"]]
    summaries = [{"problem_id": row["id"], **summary}
                 for row, summary in zip(rows, summarize_attempts([[v.status for v in g] for g in verdicts]))]
    train = {"capitals": attach_pass_rates(rows, summaries, "ckpt")}
    assert [row["pass_rate"] for row in train["capitals"]] == [0.0, 0.25, 0.5, 1.0]

    # the band: no band configured and none declared, so the recipe's (0, 0.8]: pass rates 0.25 and 0.5
    assert rl_bands({"capitals": None}) == {"capitals": BandFilter.parse("(0, 0.8]")}
    rl_sets, removed, empty = _rl_sets(config, train)
    assert [row["id"] for row in rl_sets["capitals"]] == ["cap-1", "cap-2"] and not empty
    assert sorted((record["id"], record["stage"]) for record in removed) == [("cap-0", "band"), ("cap-3", "band")]
    assert rl_bands({"mypkg.banded:NarrowCapitals": None}) == {
        "mypkg.banded:NarrowCapitals": BandFilter.parse("[0.5, 1]")}  # a task's own default_band

    # SFT selection: problems solved sometimes (cap-1, cap-2), their passed samples, the looping one out
    samples = [{"problem_id": row["id"], "task": "capitals", "sample_index": j, "completion": text,
                "finish_reason": "stop", "status": verdict.status, "score": verdict.score, "detail": verdict.detail}
               for row, group, results in zip(rows, COMPLETIONS, verdicts) for j, (text, verdict) in
               enumerate(zip(group, results))]
    checked = _with_verdicts(config, rows, samples)
    assert {(s["verdict_consistency"], s["verdict_execution"], s["verdict_math"]) for s in checked} == {
        ("not_applicable",) * 3}
    assert [s["sample_index"] for s in checked if s["verdict_structure"] == "fail"] == [2, 1]  # empty; the loop
    kept, out = select_sft(attach_samples(rows, checked), num_samples=4)
    assert [(row["problem_id"], row["completion"], row["npass"]) for row in kept] == [
        ("cap-1", "rome.", 1), ("cap-2", "It is Madrid", 2)]
    reasons = sorted(row["removed_reason"] for row in out)
    assert reasons == sorted(["all_failed npass=0/4", "all_passed npass=4/4", "failed_checks:structure",
                              *["status=fail"] * 5])
