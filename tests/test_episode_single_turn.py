"""A single-turn task is the one-turn case of the episode path (issue 55 item 1): its rows run through
`run_episodes` as `SingleTurnEnvironment` episodes give, greedily on the shipped model, the tokens, the
text and the verdict the engine's single-turn generate and the task's verifier give them, with a loss
mask of all ones (every token sampled) and one turn each."""

from __future__ import annotations

from passband.curation.catalog import TASKS, VerifierSettings
from passband.curation.suites.math_suite import generate_math
from passband.training.chat import render_prompt
from passband.training.engines.config import EngineConfig, SamplingConfig
from passband.training.engines.hf_engine import HFEngine
from passband.training.episodes.environment import EpisodeBudget
from passband.training.episodes.rollout import run_episodes
from passband.training.episodes.single_turn import SingleTurnEnvironment
from episode_fixtures import smollm2_tokenizer


def test_single_turn_rows_as_one_turn_episodes_equal_single_turn_generation(smollm2_dir):
    tokenizer = smollm2_tokenizer(smollm2_dir)
    engine = HFEngine(smollm2_dir, EngineConfig(kind="hf", dtype="float32"))
    rows = generate_math(4, seed=3, difficulty=0, answer_format="plain")
    greedy = SamplingConfig(n=1, temperature=0.0, max_tokens=48)
    settings = VerifierSettings().math

    single = [group[0] for group in engine.generate([render_prompt(tokenizer, row["prompt"], None) for row in rows],
                                                    greedy)]
    verdicts = TASKS["math"].verify([s.text for s in single], [row["reference"] for row in rows], settings)

    environment = SingleTurnEnvironment(TASKS["math"], settings)
    results = run_episodes(engine, tokenizer, [environment.open(row) for row in rows], [row["id"] for row in rows],
                           greedy, EpisodeBudget(max_turns=3, episode_tokens=48))
    for sample, verdict, result in zip(single, verdicts, results, strict=True):
        assert result.tokens.prompt_ids == list(sample.prompt_token_ids)
        assert result.tokens.token_ids == list(sample.token_ids) and result.tokens.loss_mask == [1] * len(sample.token_ids)
        assert result.num_turns == 1 and result.num_tool_calls == 0
        assert result.final_text == sample.text.removesuffix(tokenizer.eos_token)
        assert (result.status, result.reward) == (verdict.status, verdict.score)
