"""Where a run names a judge: `reward.judges` in RL, `judges` in evaluate, keyed by task. Absent
judges leave the resolved config (and with it run keys, cache keys and checkpoints) as it was."""

import pytest
from pydantic import ValidationError

from passband.flows.config import resolve_config
from passband.flows.evaluate.flow import EvaluateConfig
from passband.flows.rl.flow import RLConfig


def test_no_judge_leaves_the_dumps_unchanged():
    from passband.flows.sft import SFTConfig

    assert "judges" not in RLConfig().model_dump(mode="json")["reward"]
    assert "judges" not in RLConfig().model_dump(mode="json")["eval"]
    assert "judges" not in SFTConfig().model_dump(mode="json")["eval"]
    assert "judges" not in EvaluateConfig().model_dump(mode="json")
    # the same keys as before the field existed, in the same order
    assert list(RLConfig().model_dump(mode="json")["reward"]) == ["verifiers", "mask_truncated", "invalid_reward"]


def test_an_rl_run_names_a_judge_for_one_of_its_tasks():
    config = resolve_config(RLConfig, "rl", overrides=[
        "reward.judges.math={model: judge-dir, sampling: {n: 3, max_tokens: 200}, aggregation: {kind: scaled, k: 2}}"])
    judge = config.reward.judges["math"]
    assert (judge.model, judge.sampling.n, judge.sampling.max_tokens, judge.aggregation.k) == ("judge-dir", 3, 200, 2)
    assert config.model_dump(mode="json")["reward"]["judges"]["math"]["aggregation"] == {
        "kind": "scaled", "k": 2, "num_reviews": 2}


def test_a_judge_for_a_task_the_run_does_not_train_is_refused():
    with pytest.raises(ValidationError, match=r"reward.judges names \['structured'\], which are not in datasets"):
        RLConfig(reward={"judges": {"structured": {"model": "m"}}})
    with pytest.raises(ValidationError):
        RLConfig(reward={"judges": {"chess": {"model": "m"}}})


def test_held_out_sets_name_their_judges_in_eval():
    config = resolve_config(RLConfig, "rl", overrides=["eval.judges.math={model: judge-dir}"])
    assert config.eval.judges["math"].model == "judge-dir" and config.reward.judges == {}


def test_evaluate_judges_sample_locally():
    assert EvaluateConfig(judges={"math": {"model": "m"}}).judges["math"].model == "m"
    with pytest.raises(ValidationError, match="set shards.workers=local"):
        EvaluateConfig(judges={"math": {"model": "m"}}, shards={"workers": "task_workers"})


def test_the_printed_config_reads_back_with_and_without_a_judge():
    from passband.flows.config import dump_with_removed_entries

    assert "judges" not in dump_with_removed_entries(RLConfig())["reward"]
    judged = RLConfig(reward={"judges": {"math": {"model": "m"}}})
    printed = dump_with_removed_entries(judged)
    assert printed["reward"]["judges"]["math"]["model"] == "m"
    assert RLConfig.model_validate(printed) == judged
