"""One decontamination key on every path (curation/hygiene.py: question_keys): a question held out
in one answer format and trained in another is caught by the curated pools' decontamination, by
RL's dataset loading and by SFT's stage filter (text prompts and chat messages alike)."""

from __future__ import annotations

from passband.curation.hygiene import asks_held_out, decontaminate, held_out_keys
from passband.curation.suites.math_suite import generate_math
from passband.curation.suites.source import ProblemSource
from passband.tasks.steps.rl import load_rl_problems

BOXED = " Put the final answer in \\boxed{}."
PLAIN = " Answer with just the number."


def _eval_and_training() -> tuple[list[dict], list[dict]]:
    """12 questions held out asking for a plain number; the same 12 and 8 others asked boxed."""
    plain = generate_math(20, seed=5, difficulty=0, subdomains=["arithmetic"], answer_format="plain")
    boxed = generate_math(20, seed=5, difficulty=0, subdomains=["arithmetic"], answer_format="boxed")
    assert [row["prompt"].removesuffix(PLAIN) for row in plain] == [row["prompt"].removesuffix(BOXED) for row in boxed]
    return plain[:12], boxed


def test_curated_pools_drop_an_eval_question_asked_in_another_format():
    eval_rows, training = _eval_and_training()
    # 10-grams (the default) share nothing between "what is 3 + 4 ?" + two different instructions
    kept, removed = decontaminate(training, eval_rows, ngram=10, threshold=0.6)
    assert [row["id"] for row in kept] == [row["id"] for row in training[12:]]
    assert [row["removed_reason"] for row in removed] == [f"contaminated:{row['id']} same question" for row in eval_rows]


def test_rl_drops_an_eval_question_asked_in_another_format():
    eval_rows, _ = _eval_and_training()
    source = ProblemSource(suite="math", num_problems=20, seed=5, difficulty=0, subdomains=["arithmetic"],
                           answer_format="boxed")
    problems, dropped, _ = load_rl_problems({"math": source}, held_out_keys([row["prompt"] for row in eval_rows]))
    assert dropped == {"math": 12}
    assert len(problems["math"]) == 8


def test_sft_drops_an_eval_question_in_a_chat_turn_in_another_format():
    eval_rows, training = _eval_and_training()
    held_out = held_out_keys([row["prompt"] for row in eval_rows])
    as_messages = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": row["prompt"]}]
                   for row in training]
    assert [asks_held_out(prompt, held_out) for prompt in as_messages] == [True] * 12 + [False] * 8
    assert [asks_held_out(row["prompt"], held_out) for row in training] == [True] * 12 + [False] * 8
    # the system turn is not a question: a held-out question there does not count
    assert not asks_held_out([{"role": "system", "content": eval_rows[0]["prompt"]}], held_out)
