"""IFEval-style instruction checkers: one pure function `(text, **kwargs) -> bool` per type.

Semantics and kwarg names follow Google's IFEval (instructions.py), so rows from the original
data set (`{"id": "keywords:existence", "kwargs": {"keywords": [...]}}`) check unchanged. Where
IFEval needs downloads at run time we differ, on purpose:
- sentences are counted by a small regex splitter (`split_sentences`), not nltk's punkt model;
- the all-caps / all-lowercase checks skip langdetect's "is English" test (language-neutral);
- capital words are found by a regex tokenizer, not nltk's word_tokenize;
- keywords and section markers are matched literally (IFEval passed them to `re` unescaped).
`startend:start_checker` is ours: IFEval's start check (`multi-turn:constrained_start`) is
disabled in its registry; ours mirrors `startend:end_checker`.
"""

import json
import re
from collections.abc import Callable

RELATIONS = ("less than", "at least")

# IFEval's fixed options for detectable_format:constrained_response.
CONSTRAINED_RESPONSE_OPTIONS = ("My answer is yes.", "My answer is no.", "My answer is maybe.")

# Words ending in "." that do not end a sentence (lowercase, without the dot).
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e a.m p.m u.s u.k no fig approx inc ltd co "
    "p.s p.p.s".split()
)
# A sentence ends at . ! ? (any run, e.g. "?!" or "..."), optionally followed by closing
# quotes/brackets, then whitespace. Like punkt, a blank line alone does not end one.
_SENTENCE_END = re.compile(r"([.!?]+[\"')\]]*)\s+")


def compare(count: int, relation: str, threshold: int) -> bool:
    """IFEval's two relations: "less than" is count < threshold, "at least" is >=."""
    if relation == "less than":
        return count < threshold
    if relation == "at least":
        return count >= threshold
    raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")


def count_words(text: str) -> int:
    """Words as IFEval counts them: maximal runs of \\w characters ("don't" is 2 words)."""
    return len(re.findall(r"\w+", text))


def split_sentences(text: str) -> list[str]:
    """Split into sentences; pieces with no word character ("...", "-") are dropped.

    A "." after a known abbreviation, a single letter (initials: "J. Smith") or inside a
    number ("3.14", no whitespace follows) does not end a sentence.
    """
    sentences: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        candidate = text[start:match.end(1)]
        if match.group(1) == "." and _ends_with_abbreviation(candidate[:-1]):
            continue
        sentences.append(candidate)
        start = match.end()
    sentences.append(text[start:])
    return [s.strip() for s in sentences if re.search(r"\w", s)]


def _ends_with_abbreviation(before_dot: str) -> bool:
    last = before_dot.split()[-1].lower() if before_dot.split() else ""
    return last in _ABBREVIATIONS or (len(last) == 1 and last.isalpha())


# ---- keywords ----------------------------------------------------------------------------


def keyword_existence(text: str, *, keywords: list[str]) -> bool:
    """Every keyword occurs, case-insensitively, as a substring (IFEval: "cat" in "category")."""
    lowered = text.lower()
    return all(keyword.lower() in lowered for keyword in keywords)


def keyword_frequency(text: str, *, keyword: str, frequency: int, relation: str) -> bool:
    """The keyword's case-insensitive (substring) occurrence count relates to `frequency`."""
    count = len(re.findall(re.escape(keyword), text, flags=re.IGNORECASE))
    return compare(count, relation, frequency)


def forbidden_words(text: str, *, forbidden_words: list[str]) -> bool:
    """No forbidden word occurs as a whole word, case-insensitively."""
    return not any(
        re.search(r"\b" + re.escape(word) + r"\b", text, flags=re.IGNORECASE)
        for word in forbidden_words
    )


def letter_frequency(text: str, *, letter: str, let_frequency: int, let_relation: str) -> bool:
    """The letter's case-insensitive count relates to `let_frequency`."""
    return compare(text.lower().count(letter.lower()), let_relation, let_frequency)


# ---- change_case -------------------------------------------------------------------------


def english_capital(text: str) -> bool:
    """All cased characters are upper case (and there is at least one)."""
    return text.isupper()


def english_lowercase(text: str) -> bool:
    """All cased characters are lower case (and there is at least one)."""
    return text.islower()


def capital_word_frequency(text: str, *, capital_frequency: int, capital_relation: str) -> bool:
    """The number of all-capital words ("NASA", "I", "X-RAY") relates to `capital_frequency`."""
    words = re.findall(r"\w+(?:[-']\w+)*", text)
    return compare(sum(word.isupper() for word in words), capital_relation, capital_frequency)


# ---- detectable_format -------------------------------------------------------------------


def json_format(text: str) -> bool:
    """The whole response (optionally in a ```json fence) parses as JSON."""
    value = text.strip()
    for prefix in ("```json", "```Json", "```JSON", "```"):
        value = value.removeprefix(prefix)
    value = value.removesuffix("```").strip()
    try:
        json.loads(value)
    except ValueError:
        return False
    return True


def number_bullet_lists(text: str, *, num_bullets: int) -> bool:
    """Exactly `num_bullets` markdown bullet lines ("* item" or "- item")."""
    star_items = re.findall(r"^\s*\*[^*].*$", text, flags=re.MULTILINE)
    dash_items = re.findall(r"^\s*-.*$", text, flags=re.MULTILINE)
    return len(star_items) + len(dash_items) == num_bullets


def number_highlighted_sections(text: str, *, num_highlights: int) -> bool:
    """At least `num_highlights` non-empty *highlighted* spans (as IFEval: **x** counts too)."""
    singles = re.findall(r"\*[^\n*]*\*", text)
    doubles = re.findall(r"\*\*[^\n*]*\*\*", text)
    count = sum(1 for h in singles if h.strip("*").strip())
    count += sum(1 for h in doubles if h.removeprefix("**").removesuffix("**").strip())
    return count >= num_highlights


def multiple_sections(text: str, *, section_spliter: str, num_sections: int) -> bool:
    """At least `num_sections` sections, each introduced by e.g. "Section 1" (case-sensitive)."""
    pieces = re.split(r"\s?" + re.escape(section_spliter) + r"\s?\d+\s?", text)
    return len(pieces) - 1 >= num_sections


def title(text: str) -> bool:
    """A non-empty title in double angular brackets on one line: <<my title>>."""
    return any(t.lstrip("<").rstrip(">").strip() for t in re.findall(r"<<[^\n]+>>", text))


def constrained_response(text: str) -> bool:
    """The response contains one of IFEval's options ("My answer is yes." etc.)."""
    return any(option in text for option in CONSTRAINED_RESPONSE_OPTIONS)


# ---- startend ----------------------------------------------------------------------------


def end_checker(text: str, *, end_phrase: str) -> bool:
    """Ends with the phrase, ignoring case, outer whitespace and wrapping double quotes."""
    return text.strip().strip('"').lower().endswith(end_phrase.strip().lower())


def start_checker(text: str, *, start_phrase: str) -> bool:
    """Starts with the phrase, ignoring case, outer whitespace and wrapping double quotes."""
    return text.strip().strip('"').lower().startswith(start_phrase.strip().lower())


def quotation(text: str) -> bool:
    """The whole response is wrapped in double quotation marks."""
    value = text.strip()
    return len(value) > 1 and value[0] == '"' and value[-1] == '"'


# ---- punctuation, detectable_content -----------------------------------------------------


def no_comma(text: str) -> bool:
    """No ASCII comma anywhere."""
    return "," not in text


def number_placeholders(text: str, *, num_placeholders: int) -> bool:
    """At least `num_placeholders` square-bracket placeholders like [address]."""
    return len(re.findall(r"\[.*?\]", text)) >= num_placeholders


def postscript(text: str, *, postscript_marker: str) -> bool:
    """The marker occurs: "P.S." or "P.P.S" (spaces allowed between letters) or as given.

    As in IFEval the pattern is not anchored to a line start ("stop. s." matches "P.S.").
    """
    if postscript_marker == "P.P.S":
        pattern = r"\s*p\.\s?p\.\s?s.*$"
    elif postscript_marker == "P.S.":
        pattern = r"\s*p\.\s?s\..*$"
    else:
        pattern = r"\s*" + re.escape(postscript_marker.lower()) + r".*$"
    return re.search(pattern, text.lower(), flags=re.MULTILINE) is not None


# ---- length_constraints ------------------------------------------------------------------


def number_words(text: str, *, num_words: int, relation: str) -> bool:
    """The word count (`count_words`) relates to `num_words`."""
    return compare(count_words(text), relation, num_words)


def number_sentences(text: str, *, num_sentences: int, relation: str) -> bool:
    """The sentence count (`split_sentences`) relates to `num_sentences`."""
    return compare(len(split_sentences(text)), relation, num_sentences)


def number_paragraphs(text: str, *, num_paragraphs: int) -> bool:
    """Exactly `num_paragraphs` paragraphs separated by markdown dividers "***".

    An empty paragraph at either end (a leading/trailing divider) is not counted; one in the
    middle (two dividers in a row) fails the check, as in IFEval.
    """
    paragraphs = re.split(r"\s?\*\*\*\s?", text)
    count = len(paragraphs)
    for index, paragraph in enumerate(paragraphs):
        if not paragraph.strip():
            if index in (0, len(paragraphs) - 1):
                count -= 1
            else:
                return False
    return count == num_paragraphs


def nth_paragraph_first_word(
    text: str, *, num_paragraphs: int, nth_paragraph: int, first_word: str
) -> bool:
    """Exactly `num_paragraphs` paragraphs split by blank lines ("\\n\\n"), and paragraph
    `nth_paragraph` (1-based) starts with `first_word` (case-insensitive, punctuation cut)."""
    paragraphs = text.split("\n\n")
    count = sum(1 for p in paragraphs if p.strip())
    if nth_paragraph > count or not paragraphs[nth_paragraph - 1].strip():
        return False
    word = paragraphs[nth_paragraph - 1].split()[0].lstrip("'\"")
    found = re.match(r"[^.,?!'\"]*", word).group(0).lower()
    return count == num_paragraphs and found == first_word.lower()


# ---- combination -------------------------------------------------------------------------


def repeat_prompt(text: str, *, prompt_to_repeat: str) -> bool:
    """The response starts by repeating the request word for word (ignoring case)."""
    return text.strip().lower().startswith(prompt_to_repeat.strip().lower())


def two_responses(text: str) -> bool:
    """Exactly two different non-empty responses separated by six asterisks "******"."""
    responses = text.split("******")
    valid = []
    for index, response in enumerate(responses):
        if response.strip():
            valid.append(response.strip())
        elif index not in (0, len(responses) - 1):
            return False
    return len(valid) == 2 and valid[0] != valid[1]


# The instruction id (IFEval's naming) -> its checker. A plain literal, not a registry.
CHECKERS: dict[str, Callable[..., bool]] = {
    "keywords:existence": keyword_existence,
    "keywords:frequency": keyword_frequency,
    "keywords:forbidden_words": forbidden_words,
    "keywords:letter_frequency": letter_frequency,
    "change_case:english_capital": english_capital,
    "change_case:english_lowercase": english_lowercase,
    "change_case:capital_word_frequency": capital_word_frequency,
    "detectable_format:json_format": json_format,
    "detectable_format:number_bullet_lists": number_bullet_lists,
    "detectable_format:number_highlighted_sections": number_highlighted_sections,
    "detectable_format:multiple_sections": multiple_sections,
    "detectable_format:title": title,
    "detectable_format:constrained_response": constrained_response,
    "startend:end_checker": end_checker,
    "startend:start_checker": start_checker,
    "startend:quotation": quotation,
    "punctuation:no_comma": no_comma,
    "detectable_content:number_placeholders": number_placeholders,
    "detectable_content:postscript": postscript,
    "length_constraints:number_words": number_words,
    "length_constraints:number_sentences": number_sentences,
    "length_constraints:number_paragraphs": number_paragraphs,
    "length_constraints:nth_paragraph_first_word": nth_paragraph_first_word,
    "combination:repeat_prompt": repeat_prompt,
    "combination:two_responses": two_responses,
}
