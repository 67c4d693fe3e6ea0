"""Verifiable writing constraints for the instruction-following suite: which ones are easy,
which can be combined, how to draw their kwargs and how to state them in plain English.

Ids and kwargs are those of `curation.verifiers.ifeval_checks`. Word pools, topics and phrases
are disjoint (tests check it), so a keyword never sneaks in through the topic or a fixed
phrase, and a forbidden word is never one the prompt forces.
"""

import random
from typing import Any

from passband.curation.verifiers.ifeval_checks import RELATIONS

# Measured on the demo model (docs/recipe.md section 10): a given word is included 73% of the time,
# all caps 0%. "Easy" holds constraints of that keyword-inclusion kind.
EASY_IDS = (
    "keywords:existence",
    "keywords:forbidden_words",
    "length_constraints:number_sentences",
    "punctuation:no_comma",
    "startend:end_checker",
    "startend:start_checker",
)
HARD_IDS = (
    "keywords:frequency",
    "keywords:letter_frequency",
    "change_case:english_capital",
    "change_case:english_lowercase",
    "change_case:capital_word_frequency",
    "detectable_format:json_format",
    "detectable_format:number_bullet_lists",
    "detectable_format:number_highlighted_sections",
    "detectable_format:multiple_sections",
    "detectable_format:title",
    "detectable_format:constrained_response",
    "startend:quotation",
    "detectable_content:number_placeholders",
    "detectable_content:postscript",
    "length_constraints:number_words",
    "length_constraints:number_paragraphs",
    "length_constraints:nth_paragraph_first_word",
    "combination:repeat_prompt",
    "combination:two_responses",
)

# Constraints in one group are mutually exclusive (they fight over the case, the overall
# shape of the response, or its length).
_GROUPS = {
    "change_case:english_capital": "case",
    "change_case:english_lowercase": "case",
    "change_case:capital_word_frequency": "case",
    "length_constraints:number_words": "length",
    "length_constraints:number_sentences": "length",
    **{id_: "shape" for id_ in (
        "detectable_format:json_format", "detectable_format:number_bullet_lists",
        "detectable_format:multiple_sections", "detectable_format:constrained_response",
        "startend:quotation", "length_constraints:number_paragraphs",
        "length_constraints:nth_paragraph_first_word", "combination:repeat_prompt",
        "combination:two_responses",
    )},
}
# Pairs that clash across groups: both fix the first words; case-sensitive text under a
# case rule ("My answer is yes.", "Section 1"); "P.S." is two capital words.
_PAIR_CONFLICTS = {
    frozenset(pair) for pair in (
        ("startend:start_checker", "combination:repeat_prompt"),
        ("startend:start_checker", "length_constraints:nth_paragraph_first_word"),
        ("change_case:capital_word_frequency", "detectable_content:postscript"),
        *((case, other) for case in ("change_case:english_capital",
                                     "change_case:english_lowercase",
                                     "change_case:capital_word_frequency")
          for other in ("detectable_format:constrained_response",
                        "detectable_format:multiple_sections")),
    )
}

TOPICS = (
    "the ocean", "a rainy day", "your favorite food", "learning to ride a bike", "the moon",
    "a busy city", "cats", "dogs", "a school trip", "the importance of sleep", "playing chess",
    "baking bread", "the history of the bicycle", "saving money", "volcanoes", "honey bees",
    "recycling", "the first day of school", "a camping trip", "penguins", "the desert",
    "growing tomatoes", "a visit to the zoo", "trains", "snowy weather", "birthday parties",
    "owls", "a picnic in the park", "dinosaurs", "painting a room",
)
TASKS = (
    "Write a short paragraph about {topic}.",
    "Write a short story about {topic}.",
    "Write a short poem about {topic}.",
    "Give some advice about {topic}.",
    "Write a short blog post about {topic}.",
    "Describe {topic} to a child.",
)
# Keywords and forbidden words; none occurs in a topic, task or fixed phrase.
WORDS = (
    "friend", "light", "river", "music", "garden", "window", "morning", "bridge", "happy",
    "simple", "journey", "color", "heart", "voice", "water", "forest", "family", "golden",
    "quiet", "smile",
)
END_PHRASES = ("Is there anything else I can help with?", "Thank you for reading.",
               "That is all.", "The end.")
START_PHRASES = ("Here is my answer", "Sure", "Once upon a time", "Dear reader")
FIRST_WORDS = ("however", "next", "also", "finally", "then")


def compatible(chosen: list[str], candidate: str) -> bool:
    """Can `candidate` join the already `chosen` instruction ids without a clash?"""
    for other in chosen:
        if other == candidate or frozenset((other, candidate)) in _PAIR_CONFLICTS:
            return False
        if candidate in _GROUPS and _GROUPS.get(other) == _GROUPS[candidate]:
            return False
        # JSON leaves room only for word-level constraints inside its strings.
        if "detectable_format:json_format" in (other, candidate) and not (
                other.startswith("keywords:") or candidate.startswith("keywords:")):
            return False
    return True


def make_instruction(
    instruction_id: str, rng: random.Random, words: list[str], task: str
) -> tuple[dict[str, Any], str]:
    """Draw kwargs for one instruction and state it in plain English.

    `words` is this row's private shuffled copy of WORDS: keywords are popped from it so that
    no two constraints of a row share a word. `task` is the writing task (for repeat_prompt).
    """
    if instruction_id == "keywords:existence":
        keyword = words.pop()  # one word: the kind the demo model meets 73% of the time
        return {"keywords": [keyword]}, f'Include the word "{keyword}".'
    if instruction_id == "keywords:forbidden_words":
        forbidden = [words.pop() for _ in range(rng.randint(1, 2))]
        return ({"forbidden_words": forbidden},
                f"Do not use the {_quoted_words(forbidden)} anywhere in your response.")
    if instruction_id == "keywords:frequency":
        keyword, frequency, relation = words.pop(), rng.randint(2, 3), rng.choice(RELATIONS)
        return ({"keyword": keyword, "frequency": frequency, "relation": relation},
                f'Use the word "{keyword}" {_relation_text(relation, frequency)} times.')
    if instruction_id == "keywords:letter_frequency":
        # Only "at least" with common letters: "fewer than N" of a letter could clash with
        # the fixed phrases and keywords another constraint forces into the text.
        letter, count = rng.choice("aeinorst"), rng.randint(3, 8)
        return ({"letter": letter, "let_frequency": count, "let_relation": "at least"},
                f'The letter "{letter}" should appear at least {count} times in your response.')
    if instruction_id == "change_case:english_capital":
        return {}, "Your entire response must be in English and in capital letters only."
    if instruction_id == "change_case:english_lowercase":
        return {}, ("Your entire response must be in English and in lowercase letters only; "
                    "no capital letters are allowed.")
    if instruction_id == "change_case:capital_word_frequency":
        count, relation = rng.randint(2, 4), rng.choice(RELATIONS)
        return ({"capital_frequency": count, "capital_relation": relation},
                f"Use words written entirely in capital letters "
                f"{_relation_text(relation, count)} times.")
    if instruction_id == "detectable_format:json_format":
        return {}, "Wrap your entire output in JSON format."
    if instruction_id == "detectable_format:number_bullet_lists":
        count = rng.randint(2, 5)
        return ({"num_bullets": count},
                f"Your answer must contain exactly {count} bullet points in markdown, "
                f"each on its own line starting with '* '.")
    if instruction_id == "detectable_format:number_highlighted_sections":
        count = rng.randint(1, 3)
        return ({"num_highlights": count},
                f"Highlight at least {count} parts of your answer with markdown, "
                f"for example *highlighted part*.")
    if instruction_id == "detectable_format:multiple_sections":
        marker, count = rng.choice(("Section", "SECTION")), rng.randint(2, 4)
        return ({"section_spliter": marker, "num_sections": count},
                f"Your response must have {count} sections. Mark the beginning of each section "
                f"with {marker} X, where X is its number.")
    if instruction_id == "detectable_format:title":
        return {}, "Give your answer a title wrapped in double angular brackets, like <<title>>."
    if instruction_id == "detectable_format:constrained_response":
        return {}, ('Finish by answering with one of the following options: "My answer is '
                    'yes.", "My answer is no.", "My answer is maybe."')
    if instruction_id == "startend:end_checker":
        phrase = rng.choice(END_PHRASES)
        return ({"end_phrase": phrase},
                f'Finish your response with the exact phrase "{phrase}" and nothing after it.')
    if instruction_id == "startend:start_checker":
        phrase = rng.choice(START_PHRASES)
        return {"start_phrase": phrase}, f'Start your response with the exact words "{phrase}".'
    if instruction_id == "startend:quotation":
        return {}, "Wrap your entire response in double quotation marks."
    if instruction_id == "punctuation:no_comma":
        return {}, "Do not use any commas in your response."
    if instruction_id == "detectable_content:number_placeholders":
        count = rng.randint(1, 3)
        return ({"num_placeholders": count},
                f"Include at least {count} placeholders in square brackets, such as [name].")
    if instruction_id == "detectable_content:postscript":
        marker = rng.choice(("P.S.", "P.P.S"))
        return ({"postscript_marker": marker},
                f"At the end of your response add a postscript starting with {marker}")
    if instruction_id == "length_constraints:number_words":
        relation = rng.choice(RELATIONS)
        count = rng.choice((40, 60, 80, 100) if relation == "less than" else (20, 30, 50))
        return ({"num_words": count, "relation": relation},
                f"Answer with {_relation_text(relation, count)} words.")
    if instruction_id == "length_constraints:number_sentences":
        # "Fewer than" starts at 4: the end phrase, a repeated request and "My answer is
        # yes." each close a sentence of their own, and a row may hold all three.
        relation = rng.choice(RELATIONS)
        count = rng.randint(4, 6) if relation == "less than" else rng.randint(2, 5)
        return ({"num_sentences": count, "relation": relation},
                f"Answer in {_relation_text(relation, count)} sentences.")
    if instruction_id == "length_constraints:number_paragraphs":
        count = rng.randint(2, 4)
        return ({"num_paragraphs": count},
                f"Write exactly {count} paragraphs separated from each other by the markdown "
                f"divider ***.")
    if instruction_id == "length_constraints:nth_paragraph_first_word":
        count = rng.randint(2, 4)
        nth, word = rng.randint(2, count), rng.choice(FIRST_WORDS)
        return ({"num_paragraphs": count, "nth_paragraph": nth, "first_word": word},
                f"Write exactly {count} paragraphs separated by blank lines. Paragraph {nth} "
                f'must start with the word "{word}".')
    if instruction_id == "combination:repeat_prompt":
        return ({"prompt_to_repeat": task},
                f'First repeat the request "{task}" word for word without change, then give '
                f"your answer. Say nothing before the repeated request.")
    if instruction_id == "combination:two_responses":
        return {}, "Give two different responses separated by six asterisk symbols: ******."
    raise ValueError(f"no generator for instruction id {instruction_id!r}")


def _relation_text(relation: str, count: int) -> str:
    return f"fewer than {count}" if relation == "less than" else f"at least {count}"


def _quoted_words(words: list[str]) -> str:
    if len(words) == 1:
        return f'word "{words[0]}"'
    return "words " + " and ".join(f'"{word}"' for word in words)
