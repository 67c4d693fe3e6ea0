"""Code with test feedback (issue 55 item 4's second task): each model turn is an attempt run against the
tests in the sandbox; a failure is fed back with what failed, a pass or the last attempt ends the episode,
rewarded by the code verifier. The environment is driven turn by turn with written attempts, then through
the RL flow's rollouts with a scripted policy (the code runs for real)."""

from __future__ import annotations

from episode_fixtures import ScriptedPolicy
from passband.curation.catalog.code import CODE
from passband.flows.rl.config import RLConfig
from passband.tasks.rollouts.collect import _episode_samples
from passband.training.engines.config import SamplingConfig
from passband.training.episodes.code_feedback import (CodeFeedbackConfig, CodeFeedbackEnvironment,
                                                      CodeFeedbackSettings)
from passband.training.rl.batches.batching import build_rollout_batch
from tiny_chat_model import IM_END, tiny_tokenizer

ROW = {"id": "c0", "task": "code", "prompt": "Write add(a, b) returning a + b.",
       "reference": {"tests": "assert add(1, 2) == 3\nassert add(2, 2) == 4\n", "entry_point": "add"}}
WRONG = "```python\ndef add(a, b):\n    return a * b\n```"
RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"


def test_a_failure_is_fed_back_and_a_pass_ends_the_episode():
    episode = CodeFeedbackEnvironment().open(ROW)
    assert episode.messages[0] == {"role": "system", "content": CodeFeedbackSettings().system}
    first = episode.step(WRONG, final=False)
    assert not first.done and first.reward is None
    # the failing test's line, from the sandbox's traceback: add(1, 2) == 2, not 3
    assert first.observation == [{"role": "user", "content": "Your solution failed the tests: exit 1: AssertionError "
                                  "at `assert add(1, 2) == 3`\nFix it and reply with the whole corrected solution in one "
                                  "```python block."}]
    second = episode.step(RIGHT, final=False)
    assert (second.done, second.reward, second.status) == (True, 1.0, "pass")


def test_the_last_attempt_is_graded_whatever_it_gives():
    episode = CodeFeedbackEnvironment(CodeFeedbackSettings(max_attempts=2)).open(ROW)
    unparsable = episode.step("I would add them.", final=False)
    assert not unparsable.done and "no code block found" in unparsable.observation[0]["content"]
    last = episode.step(WRONG, final=False)  # the second of two attempts
    assert (last.done, last.reward, last.status) == (True, 0.0, "fail")
    # the turn budget's final turn ends it too, graded as the model's last word
    assert CodeFeedbackEnvironment().open(ROW).step(WRONG, final=True).done


def test_code_rows_roll_out_as_feedback_episodes():
    """Through the RL flow's rollouts: a wrong then a right attempt per episode; the last turn is what the
    code verifier scores (reward 1), and only the sampled tokens carry the loss mask."""
    tokenizer = tiny_tokenizer()  # byte-level ChatML: a text's ids are its bytes
    turns = [list(WRONG.encode()) + [IM_END], list(RIGHT.encode()) + [IM_END]]
    policy = ScriptedPolicy({}, default=turns)
    config = RLConfig(sampling=SamplingConfig(n=2, max_tokens=200), code_feedback=CodeFeedbackConfig())
    samples, counts = _episode_samples(config.rollout_settings(), tokenizer, policy, [ROW], ["unused"], config.sampling)
    assert {name: counts[name] for name in ("code/num_episodes", "code/num_turns", "code/num_tool_calls")} == \
        {"code/num_episodes": 2.0, "code/num_turns": 4.0, "code/num_tool_calls": 0.0}
    assert [s.text for s in samples[0]] == [RIGHT, RIGHT]
    verdicts = CODE.verify([s.text for s in samples[0]], [ROW["reference"]] * 2, config.reward.verifiers.code)
    assert [v.status for v in verdicts] == ["pass", "pass"]
    batch = build_rollout_batch(samples, [[v.score for v in verdicts]], [[True, True]], ["code"])
    feedback = len(batch.response_ids[0]) - len(turns[0]) - len(turns[1])
    assert feedback > 0 and batch.response_ids[0][:len(turns[0])] == turns[0]
    assert batch.loss_mask[0] == [1] * len(turns[0]) + [0] * feedback + [1] * len(turns[1])


def test_held_out_evaluation_scores_whole_episodes():
    """RL's held-out evaluation with code_feedback on: each sample is an episode (wrong, then right), its last
    turn verified (pass@1 = 1), its rows carrying the turns, and the set's mean turns and tool calls."""
    from passband.training.episodes.setups import episode_setups
    from passband.training.evaluation.evaluate import episode_means, evaluate

    tokenizer = tiny_tokenizer()
    policy = ScriptedPolicy({}, default=[list(WRONG.encode()) + [IM_END], list(RIGHT.encode()) + [IM_END]])
    config = RLConfig(sampling=SamplingConfig(n=2, max_tokens=200), code_feedback=CodeFeedbackConfig())
    row = ROW | {"subdomain": "arithmetic"}
    evaluation = evaluate(policy, {"code": [row]}, SamplingConfig(n=2, max_tokens=200), config.reward.verifiers,
                          tokenizer, episodes=episode_setups(config.math_tool, config.code_feedback, config.reward.verifiers))
    assert [(r["status"], r["num_turns"], r["num_tool_calls"], r["text"]) for r in evaluation.rows] == \
        [("pass", 2, 0, RIGHT)] * 2
    assert evaluation.headline()["code/pass@1"] == 1.0
    assert episode_means(evaluation.rows) == {"code/mean_turns": 2.0, "code/mean_tool_calls": 0.0}


def test_episode_rollouts_in_flight_survive_a_checkpoint():
    """Rollouts sampled ahead of the trainer (max_off_policy_steps >= 1) are kept in the checkpoint as JSON
    and trained on after a resume: episode rollouts come back whole, the loss mask on the sampled turns included."""
    import json

    from passband.tasks.rollouts.collect import Rollouts, ScoredGroup

    tokenizer = tiny_tokenizer()
    policy = ScriptedPolicy({}, default=[list(WRONG.encode()) + [IM_END], list(RIGHT.encode()) + [IM_END]])
    config = RLConfig(sampling=SamplingConfig(n=2, max_tokens=200), code_feedback=CodeFeedbackConfig())
    samples, counts = _episode_samples(config.rollout_settings(), tokenizer, policy, [ROW], ["unused"], config.sampling)
    batch = build_rollout_batch(samples, [[1.0, 1.0]], [[True, True]], ["code"])
    rollouts = Rollouts([ScoredGroup(ROW, samples[0], [1.0, 1.0], [True, True], [1.0, 1.0], ["pass", "pass"], ["", ""])],
                        batch, {"code": 1}, counts, 3, [])
    restored = Rollouts.from_json(json.loads(json.dumps(rollouts.to_json())))
    assert restored == rollouts
    assert restored.groups[0].samples[0].loss_mask == samples[0][0].loss_mask and 0 in batch.loss_mask[0]
