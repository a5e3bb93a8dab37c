"""Which ranks, graphs and steps to keep (design §4)."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import UsageError
from .model import RankInfo, StepRecords


def parse_ids(text: str, what: str) -> frozenset[int]:
    """Parse ``0,1,4-7`` into ``{0, 1, 4, 5, 6, 7}``.

    Raises:
        UsageError: a part is not a number or an ascending range.
    """
    ids: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        low, dash, high = part.partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise UsageError(f"--{what}: {part!r} is not a number or a range like 4-7") from None
        if first < 0 or last < first:
            raise UsageError(f"--{what}: {part!r} is not an ascending range of ids >= 0")
        ids.update(range(first, last + 1))
    return frozenset(ids)


def format_ids(ids: Iterable[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``: the inverse of :func:`parse_ids`."""
    runs: list[list[int]] = []
    for i in sorted(set(ids)):
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def select_ranks(ranks: list[RankInfo], wanted: frozenset[int] | None) -> list[RankInfo]:
    """The ranks asked for, in rank order.

    Raises:
        UsageError: a wanted rank is not in the profile (the message lists those present).
    """
    if wanted is None:
        return ranks
    present = {r.rank for r in ranks}
    missing = wanted - present
    if missing:
        raise UsageError(
            f"unknown rank {format_ids(missing)}; ranks present: {format_ids(present)}"
        )
    return [r for r in ranks if r.rank in wanted]


def check_graphs(ranks: list[RankInfo], wanted: frozenset[int] | None) -> None:
    """Raise UsageError when a wanted graph (CANN model id) is in none of the ranks."""
    if wanted is None:
        return
    present = {g for r in ranks for g in r.graphs}
    missing = wanted - present
    if missing:
        listed = format_ids(present) if present else "none (this profile has no graph ids)"
        raise UsageError(f"unknown graph {format_ids(missing)}; graphs (model ids) present: {listed}")


def keep_step(batch: StepRecords, graphs: frozenset[int] | None, steps: frozenset[int] | None) -> bool:
    """Whether a step's records pass the graph and step filters."""
    if graphs is not None and batch.graph not in graphs:
        return False
    return steps is None or batch.step_id in steps
