"""Distinct items drawn in turn from several seeded generators (the math suite's sub-domains, worked
math's difficulty x sub-domain cells).

A generator that keeps repeating itself is exhausted. Balanced draws refuse to go on without it (every
cell gets its share or the request is too large); unbalanced draws let it drop out of the turn and the
others fill the rest, so a request can reach every distinct item the cells hold. Until a cell runs out
both give the same items in the same order, so a request that fits balanced is unchanged by the flag.
"""

from collections.abc import Callable, Sequence
from typing import TypeVar

Cell = TypeVar("Cell")
Item = TypeVar("Item")


def draw_round_robin(
    cells: Sequence[Cell],
    draw: Callable[[Cell], Item],
    key: Callable[[Item], str],
    num: int,
    max_duplicate_draws: int,
    exhausted_message: Callable[[Cell | None, int], str],
    balanced: bool = True,
    excluded: Callable[[str], bool] = lambda _key: False,
) -> list[tuple[Cell, Item]]:
    """`num` (cell, item) pairs with distinct keys, the cells taking turns in order.

    `draw(cell)` makes the cell's next candidate; a candidate whose key was drawn before or is
    `excluded` is drawn again, and `max_duplicate_draws` such draws in a row exhaust the cell.
    Exhausted, a balanced draw raises ValueError(`exhausted_message(cell, items it gave)`); an
    unbalanced one goes on with the other cells and, when every cell is exhausted, raises
    ValueError(`exhausted_message(None, items drawn in all)`).
    """
    order = list(range(len(cells)))  # positions in `cells` of the cells still taking turns
    seen: set[str] = set()
    picked: list[tuple[Cell, Item]] = []
    turn = 0
    while len(picked) < num:
        cell = cells[order[turn]]
        for _ in range(max_duplicate_draws):
            item = draw(cell)
            item_key = key(item)
            if item_key not in seen and not excluded(item_key):
                break
        else:
            if balanced:
                raise ValueError(exhausted_message(cell, sum(drawn == cell for drawn, _ in picked)))
            if len(order) == 1:
                raise ValueError(exhausted_message(None, len(picked)))
            del order[turn]
            turn %= len(order)
            continue
        seen.add(item_key)
        picked.append((cell, item))
        turn = (turn + 1) % len(order)
    return picked
