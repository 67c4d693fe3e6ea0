"""From dataset rows to a stage's encoded examples: band filter, mix by weight, chat-encode.

Rows are plain dicts as the curation flow writes them: `prompt` (text or chat messages),
`completion` (the verified trajectory), optionally `system` and `band`. Rows left out of a stage
come back with a `removed_reason`, never silently dropped: out of the stage's bands, beyond the
mix's share, or unusable (missing fields, longer than max_length).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from passband.training.chat import encode_sft_example_unbounded
from passband.training.sft.packing import SFTExample


def _left_out(row: dict, reason: str) -> dict:
    return {**row, "removed_reason": reason}


def mix_stage_rows(
    datasets: dict[str, list[dict]], weights: dict[str, float], bands: list[str], seed: int
) -> tuple[list[dict], list[dict]]:
    """Rows of a stage, in the proportions of `weights`, with no row used twice.

    After the band filter (empty `bands` keeps all), dataset d gets share s_d = w_d / sum(w). The
    stage takes the largest total N such that no dataset is upsampled, N = min_d(n_d / s_d), and
    floor(s_d * N) rows of d, drawn without replacement by a generator seeded with `seed`.
    Returned rows carry `dataset`; the rest come back with their reason.
    """
    missing = sorted(set(weights) - set(datasets))
    if missing:
        raise ValueError(f"mix weights name datasets that were not given: {missing}")
    kept_by_name: dict[str, list[dict]] = {}
    left_out: list[dict] = []
    for name in weights:
        kept_by_name[name] = []
        for row in datasets[name]:
            if bands and row.get("band") not in bands:
                left_out.append(_left_out(row, f"band={row.get('band')!r} not in {bands}"))
            else:
                kept_by_name[name].append({**row, "dataset": name})
    total_weight = sum(weights.values())
    shares = {name: w / total_weight for name, w in weights.items()}
    num_total = min(len(kept_by_name[name]) / shares[name] for name in weights)
    rng = np.random.default_rng(seed)
    mixed: list[dict] = []
    for name in weights:
        rows = kept_by_name[name]
        order = rng.permutation(len(rows)).tolist()
        num_take = int(shares[name] * num_total + 1e-9)  # the epsilon keeps 3.0000000001 -> 3, not 2.999 -> 2
        mixed.extend(rows[i] for i in order[:num_take])
        left_out.extend(_left_out(rows[i], f"beyond the mix share of {name!r}") for i in order[num_take:])
    return mixed, left_out


def encode_rows(
    tokenizer: Any, rows: list[dict], max_length: int
) -> tuple[list[SFTExample], list[dict]]:
    """Chat-encode rows (training.chat, the same template as rollouts), or take an episode's tokens as
    they are (rows with `input_ids` and `loss_mask`); quarantine the unusable ones."""
    examples: list[SFTExample] = []
    quarantined: list[dict] = []
    for row in rows:
        absent = [key for key in ("prompt", "completion") if not row.get(key)]
        if absent:
            quarantined.append(_left_out(row, f"missing {', '.join(absent)}"))
            continue
        if row.get("input_ids") is not None:  # an episode's exact tokens (curation.curate_rows: SFT_COLUMNS)
            input_ids, loss_mask = list(row["input_ids"]), list(row.get("loss_mask") or [])
            mismatch = episode_mismatch(tokenizer, input_ids, loss_mask, row["completion"])
            if mismatch:
                quarantined.append(_left_out(row, mismatch))
                continue
        else:
            input_ids, loss_mask = encode_sft_example_unbounded(tokenizer, row["prompt"], row["completion"],
                                                                row.get("system"))
        if len(input_ids) > max_length:
            quarantined.append(_left_out(row, f"too_long: {len(input_ids)} tokens > max_length={max_length}"))
            continue
        examples.append(SFTExample(input_ids, loss_mask))
    return examples, quarantined


def episode_mismatch(tokenizer: Any, input_ids: list[int], loss_mask: list[int], completion: str) -> str | None:
    """Why an episode's tokens cannot be trained with `tokenizer` (None: they can). Token ids mean
    something only under the tokenizer that sampled them, so the last sampled turn, decoded here,
    must give back the row's completion (that turn's text as the sampling tokenizer decoded it)."""
    from passband.training.episodes.rollout import turn_text

    if len(input_ids) != len(loss_mask) or not any(loss_mask):
        return f"episode tokens: {len(input_ids)} input_ids, {len(loss_mask)} loss_mask entries, {sum(loss_mask)} sampled"
    end = len(loss_mask) - loss_mask[::-1].index(1)
    start = end
    while start > 0 and loss_mask[start - 1] == 1:
        start -= 1
    decoded = turn_text(tokenizer, input_ids[start:end])
    if decoded != completion:
        return (f"episode tokens from another tokenizer: the last sampled turn decodes to {decoded[:60]!r}, "
                f"the completion is {completion[:60]!r}")
    return None
