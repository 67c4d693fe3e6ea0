"""The instruction-following suite: schema, determinism, valid and satisfiable references,
constraint pools that keep apart what clashes, and prompts that state each constraint."""

import itertools

import pytest

from curation.suites.ifeval_constraints import (
    EASY_IDS,
    END_PHRASES,
    HARD_IDS,
    START_PHRASES,
    TASKS,
    TOPICS,
    WORDS,
)
from curation.suites.ifeval_suite import generate_ifeval
from curation.suites.rows import validate_row
from curation.verifiers.ifeval import check_instructions, validate_instruction
from curation.verifiers.ifeval_checks import CHECKERS


def test_rows_follow_the_schema_and_reference_valid_instructions():
    for difficulty in ("easy", "hard", "mixed"):
        rows = generate_ifeval(200, seed=3, difficulty=difficulty)
        for index, row in enumerate(rows):
            assert validate_row(row, index) is None
            assert row["task"] == "ifeval" and row["source"] == "passband-procedural"
            instructions = row["reference"]["instructions"]
            assert 1 <= len(instructions) <= 3
            assert len({i["id"] for i in instructions}) == len(instructions)
            for instruction in instructions:
                validate_instruction(instruction)  # raises on an unknown id or bad kwargs
        assert len({row["prompt"] for row in rows}) == len(rows)
        assert len({row["id"] for row in rows}) == len(rows)


def test_pools_cover_every_checker_and_easy_is_the_measured_kinds():
    assert set(EASY_IDS) | set(HARD_IDS) == set(CHECKERS)
    assert not set(EASY_IDS) & set(HARD_IDS)
    assert "keywords:existence" in EASY_IDS and "change_case:english_capital" in HARD_IDS
    rows = generate_ifeval(100, seed=0, difficulty="easy")
    used = {i["id"] for row in rows for i in row["reference"]["instructions"]}
    assert used == set(EASY_IDS)


def test_deterministic_for_a_seed_and_prefix_stable():
    first = generate_ifeval(30, seed=7, difficulty="mixed")
    assert first == generate_ifeval(30, seed=7, difficulty="mixed")
    assert first[:10] == generate_ifeval(10, seed=7, difficulty="mixed")
    assert first[0]["id"] == "ifeval-mixed-c3-s7-0"
    other = generate_ifeval(30, seed=8, difficulty="mixed")
    assert [r["prompt"] for r in first] != [r["prompt"] for r in other]


def test_subdomain_is_the_first_instructions_category():
    expected = {"keywords": "keywords", "length_constraints": "length", "punctuation":
                "punctuation", "startend": "startend", "detectable_format": "format",
                "change_case": "case", "detectable_content": "content",
                "combination": "combination"}
    for row in generate_ifeval(100, seed=1, difficulty="mixed"):
        category = row["reference"]["instructions"][0]["id"].split(":")[0]
        assert row["subdomain"] == expected[category]


def test_clashing_constraints_never_share_a_row():
    groups = [
        {"change_case:english_capital", "change_case:english_lowercase",
         "change_case:capital_word_frequency"},
        {"length_constraints:number_words", "length_constraints:number_sentences"},
    ]
    for row in generate_ifeval(500, seed=2, difficulty="mixed"):
        ids = {i["id"] for i in row["reference"]["instructions"]}
        for group in groups:
            assert len(ids & group) <= 1, ids
        if "detectable_format:json_format" in ids:
            assert all(i.startswith("keywords:") for i in ids - {"detectable_format:json_format"})


def test_prompt_states_each_constraints_values():
    for row in generate_ifeval(100, seed=4, difficulty="mixed"):
        for instruction in row["reference"]["instructions"]:
            for value in instruction["kwargs"].values():
                shown = value if isinstance(value, list) else [value]
                for item in shown:
                    if item not in ("less than", "at least"):  # stated as "fewer than" etc.
                        assert str(item) in row["prompt"], (instruction, row["prompt"])


def test_word_pool_is_disjoint_from_topics_tasks_and_phrases():
    fixed_text = " ".join((*TOPICS, *TASKS, *END_PHRASES, *START_PHRASES)).lower()
    assert [word for word in WORDS if word in fixed_text] == []


def _easy_response(instructions: list[dict]) -> str:
    """A response built to meet any combination of the easy constraints."""
    kwargs = {i["id"]: i["kwargs"] for i in instructions}
    start = kwargs.get("startend:start_checker", {}).get("start_phrase", "Well")
    end = kwargs.get("startend:end_checker", {}).get("end_phrase", "Bye.")
    keyword = kwargs.get("keywords:existence", {}).get("keywords", ["nothing"])[0]
    sentences = kwargs.get("length_constraints:number_sentences")
    extra = ""
    if sentences and sentences["relation"] == "at least":
        extra = " ".join(f"Line {n} is here." for n in range(sentences["num_sentences"]))
    # Without `extra` this is one sentence (the end phrase closes it): below every
    # "fewer than N" bound the suite draws (N >= 2).
    return f"{start} we talk about {keyword} {extra} {end}"


def test_easy_references_are_satisfiable():
    for row in generate_ifeval(200, seed=5, difficulty="easy"):
        instructions = row["reference"]["instructions"]
        response = _easy_response(instructions)
        assert check_instructions(response, instructions) == [True] * len(instructions), (
            row["prompt"], response)


def test_a_hard_reference_by_hand():
    # Placeholders + repeat the prompt + all capitals, answered by hand.
    instructions = [
        {"id": "detectable_content:number_placeholders", "kwargs": {"num_placeholders": 2}},
        {"id": "combination:repeat_prompt",
         "kwargs": {"prompt_to_repeat": "Write a short blog post about trains."}},
        {"id": "change_case:english_capital", "kwargs": {}},
    ]
    good = "WRITE A SHORT BLOG POST ABOUT TRAINS. [NAME] RODE THE TRAIN TO [CITY]."
    assert check_instructions(good, instructions) == [True, True, True]
    assert check_instructions(good.lower(), instructions) == [True, True, False]


@pytest.mark.parametrize("kwargs, message", [
    ({"num_problems": -1, "seed": 0}, "num_problems"),
    ({"num_problems": 1, "seed": 0, "difficulty": "medium"}, "difficulty"),
    ({"num_problems": 1, "seed": 0, "max_constraints": 0}, "max_constraints"),
    ({"num_problems": 1, "seed": 0, "max_constraints": 7, "difficulty": "easy"},
     "max_constraints"),
])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate_ifeval(**kwargs)


def test_constraint_count_follows_max_constraints():
    counts = {len(r["reference"]["instructions"])
              for r in generate_ifeval(100, seed=6, max_constraints=1, difficulty="hard")}
    assert counts == {1}
    counts = [len(r["reference"]["instructions"])
              for r in generate_ifeval(300, seed=6, max_constraints=3, difficulty="easy")]
    assert {1, 2, 3} == set(counts)
    # Uniform in 1..3: each count holds 20%..47% of 300 rows (expected 33%; a loose band).
    for count, group in itertools.groupby(sorted(counts)):
        assert 60 <= len(list(group)) <= 140, count
