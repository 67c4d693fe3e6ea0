"""Synthetic SFT data: queries from seed problems by templates, and traces grouped per problem.

Query generation: the suites' procedural generators are templates over seeds, so fresh seeds
give new queries of the same kinds; `frame_queries` adds phrasing variants ("Question: {prompt}")
so the SFT set does not teach one wording only. Responses come from a teacher model elsewhere
(the flow); here they are joined back to their queries for the selection rules.
"""

from passband.curation.hygiene import HygieneConfig, decontaminate, normalize_text, remove_exact_duplicates
from passband.curation.rows import quarantine


def frame_queries(rows: list[dict], framings: list[str], generator: str) -> list[dict]:
    """Copies of `rows` whose prompt is wrapped by framings[i % len(framings)] (a "{prompt}" template).

    Each copy records `generator` (how it was made) and `framing`; ids get a "syn-" prefix so
    synthetic queries never share an id with pool problems.
    """
    if not framings:
        raise ValueError("frame_queries: framings is empty; use ['{prompt}'] for no reframing")
    for framing in framings:
        if "{prompt}" not in framing:
            raise ValueError(f"frame_queries: framing {framing!r} has no '{{prompt}}' placeholder")
    framed = []
    for index, row in enumerate(rows):
        framing = framings[index % len(framings)]
        framed.append({**row, "id": f"syn-{row['id']}", "prompt": framing.replace("{prompt}", row["prompt"]),
                       "generator": generator, "framing": framing})
    return framed


def attach_samples(problems: list[dict], samples: list[dict]) -> list[dict]:
    """Problems with a `samples` list each (select_sft's input), from sample rows keyed by problem_id.

    Samples keep their order; a problem without samples gets an empty list (select_sft then
    quarantines it as "no samples").
    """
    by_problem: dict[str, list[dict]] = {row["id"]: [] for row in problems}
    for sample in samples:
        if sample["problem_id"] not in by_problem:
            raise ValueError(f"attach_samples: sample of unknown problem {sample['problem_id']!r}")
        by_problem[sample["problem_id"]].append(sample)
    return [{**row, "samples": by_problem[row["id"]]} for row in problems]


def filter_queries(queries: list[dict], pool: list[dict], eval_rows: list[dict],
                   hygiene: HygieneConfig) -> tuple[list[dict], list[dict]]:
    """Synthetic queries none of which repeats another, a pool prompt (after normalize_text) or
    overlaps an eval row; (kept, removed with their reasons: duplicates, pool repeats, eval overlap)."""
    queries, duplicates = remove_exact_duplicates(queries)
    pool_prompts = {normalize_text(row["prompt"]) for row in pool}
    repeats = [normalize_text(row["prompt"]) in pool_prompts for row in queries]
    repeated = [quarantine(row, "repeats_pool_prompt") for row, repeat in zip(queries, repeats) if repeat]
    queries = [row for row, repeat in zip(queries, repeats) if not repeat]
    queries, overlapping = decontaminate(queries, eval_rows, ngram=hygiene.decontam_ngram,
                                         threshold=hygiene.decontam_threshold)
    return queries, duplicates + repeated + overlapping
