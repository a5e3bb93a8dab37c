"""Which ranks, graphs and steps to keep (docs/design.md §4)."""

from __future__ import annotations

from collections.abc import Iterable

from .errors import STEP_MARKER_UNMATCHED, Diagnostics, UsageError
from .model import RankInfo


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


def check_steps(wanted: frozenset[int] | None, diag: Diagnostics, marker: str | None = None) -> None:
    """After reading: the steps asked for against those the kept ranks and graphs hold
    (``diag.steps``, gathered by ``read_profile``). Steps are known only once read, so this comes
    after reading, never as a second read; the output is not written yet.

    Raises:
        UsageError: none of the wanted steps is there (the output would be empty); the message
            lists the steps present. Some absent: a warning naming them (an error with --strict).
            A ``marker`` (``--step-marker``) that no kept rank holds: the message says what the
            first such rank holds.
    """
    if marker is not None and not diag.steps:
        said = diag.examples.get(STEP_MARKER_UNMATCHED, "")
        raise UsageError(f"--step-marker {marker!r}: no kept rank holds a range of that name" +
                         (f" ({said.removesuffix('; read as one step')})" if said else ""))
    if wanted is None:
        return
    present = format_ids(diag.steps) or "none (no step is marked in the kept ranks and graphs)"
    if not wanted & diag.steps:
        raise UsageError(f"unknown step {format_ids(wanted)}; steps present: {present}")
    missing = wanted - diag.steps
    if missing:
        diag.warn("unknown_steps", f"--steps: step {format_ids(missing)} in no kept rank; steps present: "
                  f"{present}")
