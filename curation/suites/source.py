"""One entry point for problems: a built-in procedural suite or a user file/dataset."""

from __future__ import annotations

from passband.curation.suites.loaders import LoadResult, load_rows


def load_problems(
    suite: str | None = None,
    path: str | None = None,
    task: str | None = None,
    column_map: dict[str, str] | None = None,
    num_problems: int = 32,
    seed: int = 0,
    difficulty: int | str = 0,
    subdomains: list[str] | None = None,
    answer_format: str = "plain",
) -> LoadResult:
    """Rows {id, task, subdomain, prompt, reference, source} (+ quarantined bad rows of a file).

    `path` wins over `suite`; a file is cut to its first `num_problems` good rows.
    """
    if path:
        result = load_rows(path, task=task, column_map=column_map)
        return LoadResult(rows=result.rows[:num_problems], quarantined=result.quarantined)
    if suite == "math":
        from passband.curation.suites.math_suite import generate_math

        rows = generate_math(num_problems, seed, int(difficulty), subdomains, answer_format)
    elif suite == "code":
        from passband.curation.suites.code_suite import generate_code

        rows = generate_code(num_problems, seed, int(difficulty))
    elif suite == "ifeval":
        from passband.curation.suites.ifeval_suite import generate_ifeval

        level = difficulty if isinstance(difficulty, str) else ("easy", "mixed", "hard")[min(int(difficulty), 2)]
        rows = generate_ifeval(num_problems, seed, difficulty=level)
    elif suite == "humaneval":
        from passband.curation.suites.humaneval import load_humaneval

        rows = load_humaneval()[:num_problems]
    else:
        raise ValueError(f"unknown suite {suite!r}: expected math, code, ifeval or humaneval")
    return LoadResult(rows=rows, quarantined=[])
