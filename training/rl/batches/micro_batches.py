"""Token-budget micro-batches (RLAlgoConfig.micro_batch_tokens, issue 68 item 2): rows packed up to a budget of
decoder tokens, the micro-batches dealt so that every trainer rank runs as many and as much as the others.

With a fixed number of rows per micro-batch a long-tailed batch (most answers short, a few at the limit) gives
micro-batches of very different cost, their count fixed whatever the tokens, and under ranks the round-robin
split (training/runtime/distributed.py: `rank_micro_batches`) hands one rank the long ones. Here:

1. How many: the fewest the budget allows (the rows' tokens over the budget, rounded up, plus one for each row
   longer than the budget on its own: a row is never split, its attention spans it), rounded up to a multiple
   of the R ranks, so no rank runs a padding pass (a zero-weight copy) while the others work.
2. Rows, longest first, each into the micro-batch it adds the fewest tokens to without passing `budget` decoder
   tokens (an empty one takes any row), of those the one with the fewest: packed (`pack_rows`), a micro-batch
   costs its rows' tokens, rounded up once to `pad_to_multiple`, so each row goes to the lightest and the
   micro-batches come out about equal; padded, its rows times its longest row, rounded up, so a row joins the
   started micro-batch whose longest row is shortest, and those left unused are dropped (then the costliest of
   two rows or more is split in two while the count is not a multiple of R). When a row fits in none, one more
   round of R is tried.
3. The micro-batches, most tokens first, are dealt in rounds of R, one per rank per round, each to the rank
   with the fewest tokens so far, and laid out so that `rank_micro_batches`' round-robin gives rank r exactly
   its own. Under FSDP every micro-batch's backward reduces gradients across ranks, so ranks wait for each
   other at every round: dealing by rounds keeps each round's micro-batches alike as well as the totals.

The split changes which rows are summed together and in which order, nothing else: each micro-batch's loss is
its share of the whole batch's loss (training/rl/loss.py), so the normalisation is the batch's whatever the
grouping.
"""

from __future__ import annotations

from collections.abc import Callable


def micro_batch_cost(lengths: list[int], packed: bool, pad_to_multiple: int = 1) -> int:
    """The decoder tokens one micro-batch of rows of `lengths` (prompt + response) runs: the pack's length, or
    rows x the longest row, rounded up to `pad_to_multiple` as the forwards round them."""
    if not lengths:
        return 0
    def round_up(n: int) -> int:
        return -(-n // pad_to_multiple) * pad_to_multiple
    return round_up(sum(lengths)) if packed else len(lengths) * round_up(max(lengths))


def token_budget_micro_batches(rows: list[int], lengths: list[int], budget: int, num_ranks: int, packed: bool,
                               pad_to_multiple: int = 1) -> list[list[int]]:
    """Micro-batches of `rows` (`lengths[i]`: row i's prompt + response tokens) of at most `budget` decoder tokens
    each (a row over it alone), ordered for `rank_micro_batches` over `num_ranks` ranks (module docstring)."""
    if budget < 1:
        raise ValueError(f"micro_batch_tokens must be >= 1, got {budget}")
    def cost(batch: list[int]) -> int:
        return micro_batch_cost([lengths[i] for i in batch], packed, pad_to_multiple)

    if not rows:
        return []
    alone = [i for i in rows if cost([i]) > budget]
    fewest = len(alone) + -(-sum(cost([i]) for i in rows if i not in alone) // budget)
    count = min(-(-fewest // num_ranks) * num_ranks, len(rows))
    longest_first = sorted(rows, key=lambda i: -lengths[i])  # stable: equal lengths keep the batch's order
    while (bins := _fill(longest_first, count, budget, cost, packed)) is None:
        count += 1 if count + num_ranks > len(rows) else num_ranks
    bins = [b for b in bins if b]
    while len(bins) % num_ranks and any(len(b) > 1 for b in bins):  # padded rows may leave some unused
        largest = max((b for b in bins if len(b) > 1), key=cost)
        bins.remove(largest)
        bins += [largest[0::2], largest[1::2]]
    bins.sort(key=cost, reverse=True)
    if len(bins) % num_ranks:  # fewer rows than ranks: the round-robin's padding passes make up the difference
        return bins
    load = [0] * num_ranks
    dealt: list[list[int]] = []
    for start in range(0, len(bins), num_ranks):
        round_: list[list[int]] = [[] for _ in range(num_ranks)]
        for batch in bins[start : start + num_ranks]:  # most tokens first, to the least loaded rank free this round
            rank = min((r for r in range(num_ranks) if not round_[r]), key=lambda r: load[r])
            round_[rank] = batch
            load[rank] += cost(batch)
        dealt += round_
    return dealt


def _fill(rows: list[int], count: int, budget: int, cost: Callable[[list[int]], int],
          packed: bool) -> list[list[int]] | None:
    """`rows` (longest first), in order, each into the one of `count` micro-batches it fits in (an empty one takes any
    row) that it adds the fewest tokens to, of those the one with the fewest: packed, every micro-batch gains the
    row's tokens, so the row goes to the lightest and the micro-batches come out about equal; padded, a row joins a
    started micro-batch where it fits, the one whose longest row is shortest (an empty one only when none has
    room: one row alone costs less than joining any, but would leave every micro-batch one row wide). None when a
    row fits in none of them."""
    bins: list[list[int]] = [[] for _ in range(count)]
    for row in rows:
        fitting = [b for b in bins if not b or cost(b + [row]) <= budget]
        if not fitting:
            return None
        min(fitting, key=lambda b: (not packed and not b, cost(b + [row]) - cost(b), cost(b))).append(row)
    return bins
