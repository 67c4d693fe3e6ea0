"""The proof_grading task on the RL path that exists: an RL config names its triples and the
defect check, and the flow's rollout scoring rewards analyses with the grading verifier."""

from passband.curation.grading.analyses import worked_analysis
from passband.flows.config import resolve_config
from passband.flows.rl.flow import RLConfig
from passband.tasks.steps.rl import score_rollouts
from passband.training.engines.protocol import Sample


def test_an_rl_config_trains_a_verifier_on_generated_triples_with_the_defect_check():
    config = resolve_config(RLConfig, "rl", overrides=[
        "datasets={proof_grading: {suite: proof_grading, num_problems: 6, difficulty: 1}}",
        "reward.verifiers.proof_grading.meta=defect_check"])
    assert config.reward.verifiers.proof_grading.meta == "defect_check"
    rows = config.datasets["proof_grading"].load().rows
    assert [row["reference"]["defect"] for row in rows] == [
        "complete", "unjustified_step", "wrong_step", "complete", "minor_slip", "wrong_result"]
    texts = [[worked_analysis(row["reference"]), "I think it is fine."] for row in rows[:2]]
    samples = [[Sample(i, j, [], text, [], "stop") for j, text in enumerate(group)] for i, group in enumerate(texts)]
    rewards, valid, counts, judged, _ = score_rollouts.fn(rows[:2], samples, config.reward.verifiers)
    # the worked analysis earns 1; the unformatted one is masked out of the gradient, not rewarded 0
    assert (rewards, valid) == ([[1.0, None], [1.0, None]], [[True, False], [True, False]])
    assert counts == {"proof_grading/num_pass": 2.0, "proof_grading/num_unparsable": 2.0}
    assert judged == []  # no judge named: the program scored every rollout
