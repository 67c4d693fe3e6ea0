"""The RL flow's rollouts with `math_tool` (issue 55 item 4): math rows become episodes with the
Python tool, whose last turn the math verifier scores, batched with their loss mask. The policy is
scripted (a tool call, then the answer), the tool runs for real. (The flow's own scoring step is a
Prefect task: here the batch is built from the samples as `_batch` builds it, without a Prefect server.)"""

from __future__ import annotations

import json

from episode_fixtures import ScriptedPolicy
from passband.flows.rl.config import RLConfig
from passband.curation.catalog.math import MATH
from passband.tasks.rollouts.collect import _episode_samples
from passband.training.rl.batches.batching import build_rollout_batch
from passband.training.engines.config import SamplingConfig
from passband.training.episodes.math_python import MathPythonSettings, MathToolConfig
from passband.training.episodes.python_tool import PythonToolSettings
from tiny_chat_model import IM_END, IM_START, tiny_tokenizer

CALL = "<tool_call>" + json.dumps({"name": "python", "arguments": {"code": "print(6 * 7)"}}) + "</tool_call>"
ROWS = [{"id": f"m{i}", "task": "math", "subdomain": "arithmetic", "prompt": "What is 6 times 7?", "reference": "42"}
        for i in range(2)]


def test_math_rows_roll_out_as_tool_episodes():
    tokenizer = tiny_tokenizer()  # byte-level ChatML: a text's ids are its bytes
    turns = [list(CALL.encode()) + [IM_END], list(b"It is 42.") + [IM_END]]
    policy = ScriptedPolicy({}, default=turns)
    roomy = MathPythonSettings(tool=PythonToolSettings(wall_timeout_s=30.0))  # a loaded box may start Python slowly
    config = RLConfig(sampling=SamplingConfig(n=2, max_tokens=200), math_tool=MathToolConfig(environment=roomy))
    samples, counts = _episode_samples(config.rollout_settings(), tokenizer, policy, ROWS, ["unused"] * 2, config.sampling)
    assert {name: counts[name] for name in ("math/num_episodes", "math/num_turns", "math/num_tool_calls")} == \
        {"math/num_episodes": 4.0, "math/num_turns": 8.0, "math/num_tool_calls": 4.0}
    assert counts["episode_env_seconds"] > 0
    # the scripted engine answers at once: nearly all of the episodes' wall time waited on the tool runs
    assert 0 < counts["episode_wait_seconds"] <= counts["episode_wall_seconds"]
    verdicts = [MATH.verify([s.text for s in group], ["42"] * 2, config.reward.verifiers.math) for group in samples]
    assert [[v.status for v in group] for group in verdicts] == [["pass", "pass"]] * 2
    batch = build_rollout_batch(samples, [[v.score for v in group] for group in verdicts], [[True, True]] * 2,
                                ["math", "math"])
    environment = [ord("\n"), IM_START, *b"tool\n42", IM_END, ord("\n"), IM_START, *b"assistant\n"]
    assert batch.response_ids == [turns[0] + environment + turns[1]] * 4
    assert batch.loss_mask == [[1] * len(turns[0]) + [0] * len(environment) + [1] * len(turns[1])] * 4
    assert batch.engine_logp[0] == ([-(1 + t) / 100 for t in range(len(turns[0]))] + [0.0] * len(environment)
                                    + [-(1 + t) / 100 for t in range(len(turns[1]))])
    # the second turn continued from the prompt, the sampled call and the tool's tokens, as they are
    assert policy.prompts[4] == batch.prompt_ids[0] + turns[0] + environment
    assert [group[0].text for group in samples] == ["It is 42."] * 2
