"""Exact and near-duplicate removal and decontamination on constructed cases.

Similarities are recomputed here from plain `str.split()` word trigrams (the prompts have no
punctuation and all-distinct words), independent of the module's tokenizer and MinHash.
"""

import random

import pytest

from passband.curation.hygiene import (decontaminate, normalize_text, question_key, remove_exact_duplicates,
                                      remove_near_duplicates)

WORDS = (
    "alice buys several apples at the market then walks home carefully while counting coins "
    "she finds seven pears cost twelve dollars in total and wonders how much eleven plums "
    "would sell for if prices stayed constant over time this week"
).split()  # 40 distinct words


def text(words):
    return " ".join(words)


def replaced(words, changes: dict[int, str]):
    return [changes.get(i, word) for i, word in enumerate(words)]


def trigram_jaccard(first, second):
    a = {tuple(first[i : i + 3]) for i in range(len(first) - 2)}
    b = {tuple(second[i : i + 3]) for i in range(len(second) - 2)}
    return len(a & b) / len(a | b)


def test_normalize_text():
    assert normalize_text("  What IS\t2+2?\n ") == "what is 2+2?"
    assert normalize_text("ﬁnd ＡＢ") == "find ab"  # NFKC: ligature and full-width letters


def test_exact_duplicates_after_normalization():
    rows = [
        {"id": "a", "prompt": "What is 2+2?"},
        {"id": "b", "prompt": "  what is   2+2? "},
        {"id": "c", "prompt": "What is 2+3?"},
        {"id": "d"},
    ]
    kept, removed = remove_exact_duplicates(rows)
    assert [row["id"] for row in kept] == ["a", "c"]
    assert [(row["id"], row["removed_reason"]) for row in removed] == [
        ("d", "missing column prompt"),
        ("b", "exact_duplicate_of:a"),
    ]


def test_one_word_changed_is_a_near_duplicate():
    assert len(set(WORDS)) == 40
    variant = replaced(WORDS, {20: "nine"})
    expected = trigram_jaccard(WORDS, variant)
    assert expected == 35 / 41  # 38 trigrams each, 3 differ
    rows = [{"id": "p1", "prompt": text(WORDS)}, {"id": "p2", "prompt": text(variant)}]
    kept, removed = remove_near_duplicates(rows, ngram=3, threshold=0.8)
    assert [row["id"] for row in kept] == ["p1"]
    assert removed[0]["removed_reason"] == f"near_duplicate_of:p1 jaccard={expected:.2f}"


def test_different_prompts_are_not_near_duplicates():
    other = "a train leaves the station at noon travelling sixty miles per hour toward the coast".split()
    rows = [{"id": "p1", "prompt": text(WORDS)}, {"id": "p2", "prompt": text(other)}]
    kept, removed = remove_near_duplicates(rows, ngram=3, threshold=0.5)
    assert [row["id"] for row in kept] == ["p1", "p2"] and removed == []


def test_threshold_is_respected_on_both_sides():
    variant = replaced(WORDS, {10: "nine", 30: "ten"})
    similarity = trigram_jaccard(WORDS, variant)
    assert similarity == 32 / 44  # 6 of 38 trigrams differ
    rows = [{"id": "p1", "prompt": text(WORDS)}, {"id": "p2", "prompt": text(variant)}]
    kept, _ = remove_near_duplicates(rows, ngram=3, threshold=0.8)
    assert len(kept) == 2
    kept, removed = remove_near_duplicates(rows, ngram=3, threshold=0.7)
    assert len(kept) == 1 and removed[0]["removed_reason"] == f"near_duplicate_of:p1 jaccard={similarity:.2f}"


def test_near_duplicates_match_brute_force_on_many_rows():
    # 60 random 40-word prompts plus 10 copies with one word changed; the LSH result must equal
    # a greedy all-pairs pass with exact trigram Jaccard.
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(200)]
    prompts = [[rng.choice(vocabulary) for _ in range(40)] for _ in range(60)]
    for copy in range(10):
        words = list(prompts[rng.randrange(60)])
        words[rng.randrange(40)] = f"changed{copy}"
        prompts.append(words)
    rows = [{"id": f"p{i}", "prompt": text(words)} for i, words in enumerate(prompts)]
    expected_removed, kept_words = [], []
    for i, words in enumerate(prompts):
        if any(trigram_jaccard(words, other) >= 0.8 for other in kept_words):
            expected_removed.append(f"p{i}")
        else:
            kept_words.append(words)
    _, removed = remove_near_duplicates(rows, ngram=3, threshold=0.8)
    assert len(expected_removed) == 10  # one changed word of 40 keeps Jaccard >= 35/41
    assert [row["id"] for row in removed] == expected_removed


def test_decontamination_overlap_fractions():
    eval_words = "find the smallest prime number that divides the sum of all two digit odd squares exactly once".split()
    assert len(eval_words) == 17  # 10 distinct 8-grams
    evals = [{"id": "e1", "prompt": text(eval_words)}, {"id": "e2", "prompt": "compute the digit sum"}]
    rows = [
        {"id": "quote", "prompt": "Here is a task: " + text(eval_words) + ". Show your work."},
        {"id": "most", "prompt": text(eval_words[:14]) + " zebra"},  # 7 of 10 8-grams
        {"id": "some", "prompt": text(eval_words[:10])},  # 3 of 10 8-grams
        {"id": "short", "prompt": "Please compute the digit sum of 4096."},  # contains all of e2
        {"id": "clean", "prompt": "How many ways can five books be arranged on a shelf?"},
    ]
    kept, removed = decontaminate(rows, evals, ngram=8, threshold=0.5)
    assert [row["id"] for row in kept] == ["some", "clean"]
    assert [(row["id"], row["removed_reason"]) for row in removed] == [
        ("quote", "contaminated:e1 overlap=1.00"),
        ("most", "contaminated:e1 overlap=0.70"),
        ("short", "contaminated:e2 overlap=1.00"),
    ]
    kept, _ = decontaminate(rows, evals, ngram=8, threshold=0.25)
    assert [row["id"] for row in kept] == ["clean"]


def test_decontamination_refuses_empty_eval_prompts():
    with pytest.raises(ValueError, match="eval row 'e0' has an empty 'prompt'"):
        decontaminate([{"id": "a", "prompt": "x"}], [{"id": "e0", "prompt": "  "}])


def test_question_key_drops_either_answer_format_instruction():
    boxed = "What is 2 + 5? Put the final answer in \\boxed{}."
    plain = "What is 2 + 5?  Answer with just the number."
    assert question_key(boxed) == question_key(plain) == "what is 2 + 5?"
    assert question_key("What is 2 + 6? Answer with just the number.") != question_key(plain)
    # only a trailing instruction is dropped; other prompts are just normalized
    assert question_key("Answer with just the number. What is 2 + 5?") == "answer with just the number. what is 2 + 5?"
    assert question_key("  Write a function  f(x).") == "write a function f(x)."
