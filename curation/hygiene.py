"""Hygiene: exact and near-duplicate removal, and decontamination against evaluation sets.

Texts are compared after normalize_text, as word/punctuation token n-grams. Every removed row
comes back with `removed_reason` naming the row it duplicates or the eval item it overlaps,
with the measured similarity, so the side artifact explains itself.
"""

import hashlib
import re
import unicodedata

from pydantic import Field

from passband.curation.config import CurationConfig
from passband.curation.grading.texts import compared_text, problem_of
from passband.curation.minhash import band_keys, lsh_rows_per_band, minhash_permutations, minhash_signature, shingle_hashes
from passband.curation.rows import quarantine
from passband.curation.suites.math_suite import question_of

_TOKEN = re.compile(r"\w+|[^\w\s]")


def normalize_text(text: str) -> str:
    """NFKC, case-folded, whitespace collapsed to single spaces, stripped.

    Punctuation is kept: in math "2+3" and "2-3" are different problems.
    """
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def question_key(prompt: str) -> str:
    """What makes two prompts the same problem: the normalized text without the math suite's
    answer-format instruction ("What is 2 + 5? Put the final answer in \\boxed{}." and "What is
    2 + 5? Answer with just the number." share a key). A proof-grading prompt's key is its problem
    X's: grading a solution of a question is asking it. Exact-match decontamination compares these."""
    problem = problem_of(prompt.strip())
    return normalize_text(question_of(prompt.strip() if problem is None else problem.strip()))


def question_keys(prompt: str | list[dict[str, str]]) -> list[str]:
    """The question keys a prompt asks: of its text, or of each user turn of its chat messages.

    The one key every decontamination compares by (SFT stages, RL datasets, the curated pools
    against the eval sets), so a question held out in one answer format is caught in any other."""
    if isinstance(prompt, str):
        return [question_key(prompt)]
    return [question_key(message.get("content", "")) for message in prompt if message.get("role") == "user"]


def held_out_keys(prompts: list[str | list[dict[str, str]]]) -> frozenset[str]:
    """The question keys of held-out prompts (an eval set's), for `asks_held_out`."""
    return frozenset(key for prompt in prompts for key in question_keys(prompt))


def asks_held_out(prompt: str | list[dict[str, str]], held_out: frozenset[str]) -> bool:
    """Whether `prompt` asks a held-out question, in whatever answer format."""
    return any(key in held_out for key in question_keys(prompt))


def tokenize(text: str) -> list[str]:
    """Tokens of the normalized text: runs of word characters, and single punctuation marks."""
    return _TOKEN.findall(normalize_text(text))


def ngrams(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    """All windows of n consecutive tokens (empty when there are fewer than n tokens)."""
    return {tuple(tokens[start : start + n]) for start in range(len(tokens) - n + 1)}


def shingles(tokens: list[str], n: int) -> set[tuple[str, ...]]:
    """n-grams, except a text shorter than n tokens is one shingle of its whole token sequence,
    so that short prompts are still compared rather than treated as empty."""
    return ngrams(tokens, min(n, len(tokens)))


def jaccard(first: set, second: set) -> float:
    """|A & B| / |A | B|, and 0.0 for two empty sets (nothing to compare)."""
    union = len(first | second)
    return len(first & second) / union if union else 0.0


def _split_missing_text(rows: list[dict], field: str) -> tuple[list[dict], list[dict]]:
    """Rows whose `field` is a string, and the others quarantined as "missing column <field>"."""
    present = [row for row in rows if isinstance(row.get(field), str)]
    missing = [quarantine(row, f"missing column {field}") for row in rows if not isinstance(row.get(field), str)]
    return present, missing


def remove_exact_duplicates(rows: list[dict], field: str = "prompt") -> tuple[list[dict], list[dict]]:
    """Keep the first row of every group with the same normalized `field`.

    Removed rows carry "exact_duplicate_of:<id of the kept row>"; rows without a string `field`
    carry "missing column <field>".
    """
    first_id_by_hash: dict[str, object] = {}
    rows, removed = _split_missing_text(rows, field)
    kept = []
    for row in rows:
        digest = hashlib.sha256(normalize_text(row[field]).encode("utf-8")).hexdigest()
        if digest in first_id_by_hash:
            removed.append(quarantine(row, f"exact_duplicate_of:{first_id_by_hash[digest]}"))
        else:
            first_id_by_hash[digest] = row.get("id")
            kept.append(row)
    return kept, removed


def remove_near_duplicates(
    rows: list[dict],
    field: str = "prompt",
    ngram: int = 3,
    threshold: float = 0.8,
    num_perm: int = 128,
    seed: int = 0,
) -> tuple[list[dict], list[dict]]:
    """Remove a row whose token-`ngram` Jaccard with an earlier kept row reaches `threshold`.

    MinHash LSH (num_perm slots, band width chosen for 99% recall at the threshold) proposes
    candidates; the exact Jaccard of the n-gram sets decides, so no pair below the threshold is
    removed and the reported value is exact. Short prompts want a small n: with n=3, changing
    one word of a 40-token prompt leaves a Jaccard of about 0.85; with n=5, about 0.76.
    Removed rows carry "near_duplicate_of:<id> jaccard=0.91" (the most similar kept row).
    A proof-grading prompt is compared without its rubric (curation/grading/texts.py compared_text).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"remove_near_duplicates: threshold must be in (0, 1], got {threshold}")
    if ngram < 1:
        raise ValueError(f"remove_near_duplicates: ngram must be >= 1, got {ngram}")
    permutations = minhash_permutations(num_perm, seed)
    rows_per_band = lsh_rows_per_band(num_perm, threshold)
    buckets: dict[tuple[int, bytes], list[int]] = {}
    kept_shingles: list[set] = []
    rows, removed = _split_missing_text(rows, field)
    kept = []
    for row in rows:
        row_shingles = shingles(tokenize(compared_text(row[field])), ngram)
        keys = band_keys(minhash_signature(shingle_hashes(row_shingles), permutations), rows_per_band)
        candidates = sorted({index for key in keys for index in buckets.get(key, ())})
        best_index, best_similarity = None, 0.0
        for index in candidates:
            similarity = jaccard(row_shingles, kept_shingles[index])
            if similarity > best_similarity:
                best_index, best_similarity = index, similarity
        if best_index is not None and best_similarity >= threshold:
            reason = f"near_duplicate_of:{kept[best_index].get('id')} jaccard={best_similarity:.2f}"
            removed.append(quarantine(row, reason))
            continue
        for key in keys:
            buckets.setdefault(key, []).append(len(kept))
        kept_shingles.append(row_shingles)
        kept.append(row)
    return kept, removed


def decontaminate(
    rows: list[dict],
    eval_rows: list[dict],
    field: str = "prompt",
    eval_field: str = "prompt",
    ngram: int = 13,
    threshold: float = 0.5,
) -> tuple[list[dict], list[dict]]:
    """Remove rows that ask an evaluation question or contain a large part of some evaluation prompt.

    A row whose question key (`question_keys`) is an eval prompt's is removed with reason
    "contaminated:<eval id> same question": the n-grams below miss a short question asked in
    another answer format, whose instruction sentence is most of its tokens.
    overlap(row, eval) = |ngrams(row) & ngrams(eval)| / |ngrams(eval)|: the fraction of the eval
    prompt's n-grams found in the row, so a long row that quotes a whole eval prompt scores 1.
    A row is removed when its overlap with any eval prompt reaches `threshold`, with reason
    "contaminated:<eval id> overlap=0.85" (the highest overlap). An eval prompt shorter than
    `ngram` tokens counts as one n-gram of its own length. n=13 suits long texts; the short
    prompts of small-model suites need a smaller n, e.g. 8. A proof-grading prompt (row or eval) is
    compared without its rubric (curation/grading/texts.py compared_text).
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"decontaminate: threshold must be in (0, 1], got {threshold}")
    if ngram < 1:
        raise ValueError(f"decontaminate: ngram must be >= 1, got {ngram}")
    # index[m][gram] -> eval indices whose shingles (of length m) include gram.
    index: dict[int, dict[tuple[str, ...], list[int]]] = {}
    num_eval_shingles = []
    for eval_index, eval_row in enumerate(eval_rows):
        tokens = tokenize(compared_text(eval_row[eval_field]))
        if not tokens:
            raise ValueError(f"decontaminate: eval row {eval_row.get('id')!r} has an empty {eval_field!r}")
        eval_shingles = shingles(tokens, ngram)
        num_eval_shingles.append(len(eval_shingles))
        by_gram = index.setdefault(min(ngram, len(tokens)), {})
        for gram in eval_shingles:
            by_gram.setdefault(gram, []).append(eval_index)

    eval_by_key = {key: eval_row for eval_row in eval_rows for key in question_keys(eval_row[eval_field])}
    rows, removed = _split_missing_text(rows, field)
    kept = []
    for row in rows:
        same = next((eval_by_key[key] for key in question_keys(row[field]) if key in eval_by_key), None)
        if same is not None:
            removed.append(quarantine(row, f"contaminated:{same.get('id')} same question"))
            continue
        tokens = tokenize(compared_text(row[field]))
        num_hits: dict[int, int] = {}
        for length, by_gram in index.items():
            for gram in ngrams(tokens, length):
                for eval_index in by_gram.get(gram, ()):
                    num_hits[eval_index] = num_hits.get(eval_index, 0) + 1
        best_index, best_overlap = None, 0.0
        for eval_index in sorted(num_hits):
            overlap = num_hits[eval_index] / num_eval_shingles[eval_index]
            if overlap > best_overlap:
                best_index, best_overlap = eval_index, overlap
        if best_index is not None and best_overlap >= threshold:
            reason = f"contaminated:{eval_rows[best_index].get('id')} overlap={best_overlap:.2f}"
            removed.append(quarantine(row, reason))
        else:
            kept.append(row)
    return kept, removed


def clean_pool(rows: list[dict], eval_rows: list[dict], config: "HygieneConfig") -> tuple[list[dict], list[dict]]:
    """One training pool's hygiene: exact duplicates, then near duplicates within the pool, then n-gram
    overlap with any eval row; (kept rows, removed rows with their reasons, in that order)."""
    rows, exact = remove_exact_duplicates(rows)
    rows, near = remove_near_duplicates(rows, ngram=config.near_dup_ngram, threshold=config.near_dup_threshold)
    rows, overlapping = decontaminate(rows, eval_rows, ngram=config.decontam_ngram, threshold=config.decontam_threshold)
    return rows, exact + near + overlapping


class HygieneConfig(CurationConfig):
    """Duplicate removal and decontamination of the training pools."""

    near_dup_threshold: float = Field(0.8, gt=0, le=1)
    """Prompt token-n-gram Jaccard at which a later prompt counts as a near duplicate."""
    near_dup_ngram: int = Field(3, ge=1)
    """n of the near-duplicate shingles (short prompts want a small n)."""
    decontam_ngram: int = Field(10, ge=1)
    """n of the decontamination n-grams."""
    decontam_threshold: float = Field(0.6, gt=0, le=1)
    """Fraction of an eval prompt's n-grams found in a training prompt that removes the latter.
    Templated suites share instruction sentences; 10-grams at 0.6 leave those alone and catch
    copies (measured on the demo pools: see the flow's removed/ counts)."""
    against_humaneval: bool = True
    """Also decontaminate against HumanEval's 164 prompts."""
