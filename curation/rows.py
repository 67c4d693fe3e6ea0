"""Quarantine: how curation filters hand back the rows they take out.

A curation row is a plain dict `{id, task, subdomain, prompt, reference, source, ...}`. Filters
never drop a row silently: every row they take out comes back as a copy carrying
`removed_reason`, so the flow can write it to a side artifact.
"""


def quarantine(row: dict, reason: str) -> dict:
    """Return a copy of `row` with `removed_reason` set (the original row is left untouched)."""
    return {**row, "removed_reason": reason}
