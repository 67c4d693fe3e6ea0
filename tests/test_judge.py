"""A judge model as a task's reward (training/judge/), on a tiny model whose outputs are forced:
fitted to answer any prompt with one of two fixed evaluations (score 1 or 0.5, about half each),
it is sampled n times and its parsed scores averaged; an untrained one writes nothing readable,
which is `unparsable` and masked, never a 0. Its texts are kept beside the rollouts.

The tiny model attends to its last 24 tokens only (a sliding window), so fitting it on short
prompts carries over to the rubric's 1,100-token prompts, whose last tokens are the same
(the rollout, then the chat template's turn markers).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
import torch
from transformers import MistralConfig, MistralForCausalLM

from passband.curation.grading.texts import EVALUATION_PHRASE, SCORE_PHRASE
from passband.tasks.steps.rl import score_rollouts
from passband.training.chat import encode_sft_example_unbounded
from passband.training.engines import EngineConfig, SamplingConfig
from passband.training.engines.hf_engine import HFEngine
from passband.training.engines.protocol import Sample
from passband.training.evaluation.evaluate import evaluate
from passband.training.judge.config import JudgeConfig
from passband.training.judge.judge import Judge
from tiny_chat_model import IM_END, PAD, VOCAB_SIZE, tiny_tokenizer

EVALUATIONS = {1.0: f"{EVALUATION_PHRASE}\nNo issues found.\n{SCORE_PHRASE} \\boxed{{1}}",
               0.5: f"{EVALUATION_PHRASE}\nNo issues found.\n{SCORE_PHRASE} \\boxed{{0.5}}"}
"""The two texts the fitted judge writes; the score each one gives."""
HF = EngineConfig(kind="hf", dtype="float32")


@contextmanager
def _one_thread() -> Iterator[None]:
    """Torch on one thread: on the shared 2-core box a tiny model's steps run 20x faster so."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    with _one_thread():
        yield


def _judge_model(path: Path, fit_steps: int) -> Path:
    """A tiny windowed model; fitted `fit_steps` Adam steps to answer with EVALUATIONS (0: as initialized)."""
    tokenizer = tiny_tokenizer()
    config = MistralConfig(vocab_size=VOCAB_SIZE, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                           sliding_window=24, tie_word_embeddings=False, pad_token_id=PAD, bos_token_id=None,
                           eos_token_id=IM_END)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = MistralForCausalLM(config).float()
    examples = [encode_sft_example_unbounded(tokenizer, f"Solution:\n{answer}", text)
                for answer in ("1", "2", "3", "ab") for text in EVALUATIONS.values()]
    width = max(len(ids) for ids, _ in examples)
    ids = torch.tensor([i + [0] * (width - len(i)) for i, _ in examples])
    mask = torch.tensor([m + [0] * (width - len(m)) for _, m in examples], dtype=torch.float32)[:, 1:]
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(fit_steps):
        logp = torch.log_softmax(model(input_ids=ids).logits[:, :-1], dim=-1)
        loss = -(logp.gather(2, ids[:, 1:, None]).squeeze(-1) * mask).sum() / mask.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def fitted(tmp_path_factory) -> Path:
    with _one_thread():
        return _judge_model(tmp_path_factory.mktemp("judge") / "fitted", fit_steps=120)


@pytest.fixture(scope="module")
def untrained(tmp_path_factory) -> Path:
    return _judge_model(tmp_path_factory.mktemp("judge") / "untrained", fit_steps=0)


def _judge(model_dir: Path, **settings) -> Judge:
    config = JudgeConfig(model=str(model_dir), engine=HF, **settings)
    engine = HFEngine(model_dir, HF)
    return Judge(config, engine, engine.tokenizer)


def _score_of(text: str) -> float | None:
    """What a judge's text scores, read without the parser: which fixed evaluation it is."""
    return next((score for score, evaluation in EVALUATIONS.items() if text == evaluation), None)


def _samples(texts: list[list[str]]) -> list[list[Sample]]:
    return [[Sample(i, j, [], text, [], "stop") for j, text in enumerate(group)] for i, group in enumerate(texts)]


def test_a_fitted_judge_scores_a_rollout_by_the_mean_of_its_analyses(fitted):
    judge = _judge(fitted, sampling=SamplingConfig(n=8, temperature=1.0, max_tokens=130, seed=0))
    (judgement,) = judge.grade(["What is 1 + 1?"], ["2"])
    by_text = [_score_of(text) for text in judgement.analyses]
    parsed = [score for score in by_text if score is not None]
    # the seed draws both evaluations (and, the fit being short, a slip that reads as neither)
    assert len(judgement.analyses) == 8 and set(parsed) == {0.5, 1.0} and judgement.scores == by_text
    assert judgement.result.score == pytest.approx(sum(parsed) / len(parsed))
    assert judgement.result.status == "fail"
    assert judgement.result.detail == f"judge mean of {len(parsed)}/8 parsed analyses"
    assert judgement.num_samples == 8  # the mean reviews nothing
    # seeded by the (prompt, rollout) pair: the same judgement beside another rollout
    _, again = judge.grade(["What is 2 + 2?", "What is 1 + 1?"], ["4", "2"])
    assert again == judgement
    # greedy: the fitted text's likelier ending, and the verdict is its score
    greedy = _judge(fitted, sampling=SamplingConfig(n=1, temperature=0.0, max_tokens=130))
    (sure,) = greedy.grade(["What is 1 + 1?"], ["2"])
    assert _score_of(sure.analyses[0]) is not None and sure.result.score == _score_of(sure.analyses[0])


def test_scaled_verification_reviews_the_low_analyses(fitted):
    judge = _judge(fitted, sampling=SamplingConfig(n=8, temperature=1.0, max_tokens=130, seed=0),
                   aggregation={"kind": "scaled", "k": 1, "num_reviews": 2})
    (judgement,) = judge.grade(["What is 1 + 1?"], ["2"])
    low = [j for j, score in enumerate(judgement.scores) if score is not None and score < 1]
    assert low and 1.0 in judgement.scores
    # each analysis below 1 got 2 reviews; the judge answers a review with an evaluation, which
    # lacks the review phrases, so no low score is confirmed and the label is the 1 an analysis gave
    assert [len(reviews) for reviews in judgement.reviews] == [2 if j in low else 0 for j in range(8)]
    assert judgement.num_samples == 8 + 2 * len(low)
    assert all(grade is None for grades in judgement.review_grades for grade in grades)
    assert (judgement.result.score, judgement.result.status) == (1.0, "pass")
    # the same analyses asked for one more 1 than they hold: no agreement, unparsable
    ones = judgement.scores.count(1.0)
    strict = _judge(fitted, sampling=SamplingConfig(n=8, temperature=1.0, max_tokens=130, seed=0),
                    aggregation={"kind": "scaled", "k": ones + 1, "num_reviews": 2})
    (undecided,) = strict.grade(["What is 1 + 1?"], ["2"])
    assert undecided.analyses == judgement.analyses and undecided.result.status == "unparsable"


def test_an_unreadable_judge_masks_its_rollouts_beside_programmatic_ones(untrained):
    judge = _judge(untrained, sampling=SamplingConfig(n=2, temperature=1.0, max_tokens=12))
    rows = [{"id": "m0", "task": "math", "prompt": "1 + 1?", "reference": "2"},
            {"id": "c0", "task": "code", "prompt": "Write f.", "reference": {"tests": []}}]
    rewards, valid, counts, records, _ = score_rollouts.fn(rows, _samples([["2", "3"], ["def f(): pass"]]),
                                                        _verifier_settings(), {"code": judge})
    # math by its program (pass, fail); code by the judge, whose outputs parse as nothing
    assert (rewards, valid) == ([[1.0, 0.0], [None]], [[True, True], [False]])
    assert counts == {"math/num_pass": 1.0, "math/num_fail": 1.0, "code/num_unparsable": 1.0,
                      "code/num_judge_samples": 2.0}
    (record,) = records
    assert (record["prompt_id"], record["text"], record["status"], record["score"]) == ("c0", "def f(): pass",
                                                                                         "unparsable", 0.0)
    assert len(record["judge_analyses"]) == 2 and record["judge_scores"] == [None, None]
    # without judges: the program for every row, and no records
    assert score_rollouts.fn(rows[:1], _samples([["2", "3"]]), _verifier_settings())[3] == []


def test_evaluation_keeps_the_judge_texts_in_its_sample_rows(untrained):
    judge = _judge(untrained, sampling=SamplingConfig(n=2, temperature=1.0, max_tokens=8))
    policy = HFEngine(untrained, HF)
    sets = {"judged": [{"id": "p0", "task": "code", "subdomain": "s", "prompt": "Write f.", "reference": {}}],
            "math": [{"id": "p1", "task": "math", "subdomain": "s", "prompt": "1 + 1?", "reference": "2"}]}
    sampling = SamplingConfig(n=2, temperature=1.0, max_tokens=4)
    judged = evaluate(policy, sets, sampling, _verifier_settings(), policy.tokenizer, judges={"code": judge})
    plain = evaluate(policy, {"math": sets["math"]}, sampling, _verifier_settings(), policy.tokenizer)
    code_rows = [row for row in judged.rows if row["task"] == "code"]
    assert [row["status"] for row in code_rows] == ["unparsable", "unparsable"]
    assert all(len(row["judge_analyses"]) == 2 and row["judge_scores"] == [None, None] for row in code_rows)
    math_rows = [row for row in judged.rows if row["task"] == "math"]
    assert all(row["judge_analyses"] == [] for row in math_rows)
    # no judge: the rows are those of before, with no judge columns
    assert plain.rows == [{k: v for k, v in row.items() if not k.startswith("judge_")} for row in math_rows]
    assert "judge_analyses" not in plain.rows[0]
    # the table the evaluate flow commits holds them (a list column, empty on programmatic rows)
    table = pa.Table.from_pylist(judged.rows)
    assert table.column("judge_analyses").to_pylist() == [row["judge_analyses"] for row in judged.rows]


def _verifier_settings():
    from passband.curation.catalog import VerifierSettings

    return VerifierSettings()
