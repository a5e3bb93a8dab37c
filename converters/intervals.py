"""Interval algebra and the compute/communication overlap breakdown (docs/design.md §5).

Intervals are half-open ``(start_ns, end_ns)`` pairs. Every function takes any iterable of
intervals and returns a new sorted list of disjoint, non-empty intervals; nothing is changed in
place. Touching intervals merge, as CANN's own Overlap Analysis lanes do.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from ._overlap import lanes

Interval = tuple[int, int]

LANES = ("Computing", "Communication", "Communication (not overlapped)", "Free")

# Device task types that are not computation: synchronisation, copies and the HCCL tasks a
# collective launches on the device. Everything else (AI_CORE, AI_CPU, AIV, MIX_*, DSA_SQE, ...)
# computes. Matched as words of the upper-cased type, so "Notify Wait" and NOTIFY_WAIT agree.
_NON_COMPUTE_WORDS = (
    "NOTIFY", "EVENT", "WRITE_VALUE", "PLACE_HOLDER", "DMA", "SDMA", "MEMCPY", "MEMSET", "REDUCE",
    "HCCL", "COMMUNICATION", "NOT_COMPUTE",
)
# The task type a reader gives a device task that its profiler says is no computation whatever
# its type (a database TASK row without COMPUTE_TASK_INFO); the real type stays in its args.
NOT_COMPUTE = "NOT_COMPUTE"


@functools.lru_cache(maxsize=1024)
def is_compute(task_type: str) -> bool:
    """Whether a device task of this type counts as computation in the overlap analysis."""
    kind = task_type.upper().replace(" ", "_")
    return not any(word in kind for word in _NON_COMPUTE_WORDS)


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The sorted, disjoint intervals covering exactly the points of ``intervals``."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if end <= start:
            continue
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The points that lie in both ``a`` and ``b``."""
    a, b = union(a), union(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The points of ``a`` that are not in ``b``."""
    return _subtract(union(a), union(b))


def _subtract(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """``subtract`` of two unions."""
    out: list[Interval] = []
    j = 0
    for start, end in a:
        while j < len(b) and b[j][1] <= start:
            j += 1
        k, cursor = j, start
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cursor:
                out.append((cursor, b[k][0]))
            cursor = max(cursor, b[k][1])
            k += 1
        if cursor < end:
            out.append((cursor, end))
    return out


def clip(intervals: list[Interval], low: int | None, high: int | None) -> list[Interval]:
    """The part of a union (sorted, disjoint) within ``[low, high)``; None: unbounded on that side.
    A union that lies within is returned as it is (no copy)."""
    out = intervals
    if low is not None and out and out[0][0] < low:
        out = out[bisect.bisect_right(out, low, key=_end):]  # those ending after low
        if out and out[0][0] < low:
            out = [(low, out[0][1]), *out[1:]]
    if high is not None and out and out[-1][1] > high:
        out = out[:bisect.bisect_left(out, high, key=_start)]  # those starting before high
        if out and out[-1][1] > high:
            out = [*out[:-1], (out[-1][0], high)]
    return out


def _start(interval: Interval) -> int:
    return interval[0]


def _end(interval: Interval) -> int:
    return interval[1]


def total_ns(intervals: Iterable[Interval]) -> int:
    """The length covered by ``intervals``, counting overlaps once."""
    return sum(end - start for start, end in union(intervals))


class StepIntervals(NamedTuple):
    """One step's compute tasks, communication ops and communication (plane) tasks, each a union,
    within the time the step owns (``profile.carried_on``); ``ops_seen``: whether it has any op at
    all (plane tasks stand in for ops only where the input records none)."""

    compute: list[Interval]
    ops: list[Interval]
    tasks: list[Interval]
    ops_seen: bool


@dataclass(frozen=True, slots=True)
class Overlap:
    """The overlap lanes of one step of one rank, as interval lists, and their totals."""

    computing: list[Interval]
    communication: list[Interval]
    not_overlapped: list[Interval]
    free: list[Interval]

    @property
    def computing_ns(self) -> int:
        return total_ns(self.computing)

    @property
    def communication_ns(self) -> int:
        return total_ns(self.communication)

    @property
    def not_overlapped_ns(self) -> int:
        return total_ns(self.not_overlapped)

    @property
    def overlapped_ns(self) -> int:
        return self.communication_ns - self.not_overlapped_ns

    @property
    def free_ns(self) -> int:
        return total_ns(self.free)

    def lanes(self) -> dict[str, list[Interval]]:
        """Lane name to intervals, in the order the lanes are drawn."""
        return dict(zip(LANES, (self.computing, self.communication, self.not_overlapped, self.free),
                        strict=True))


def analyse(compute: Iterable[Interval], comm: Iterable[Interval], span: Interval | None = None) -> Overlap:
    """Break one step's device activity into Computing, Communication, not-overlapped and Free.

    Free is what neither covers between the first and the last compute or communication of the
    step, or within ``span`` where the profiler measures it over all device tasks (CANN's msprof
    database), extended to the compute and communication that lie outside it.
    """
    return analyse_unions(union(compute), union(comm), span)


def analyse_unions(computing: list[Interval], communication: list[Interval],
                   span: Interval | None = None) -> Overlap:
    """``analyse`` of the unions of the compute and communication intervals."""
    # C (_overlap.c): busy = union(computing + communication), from its first to its last instant
    # and over the span: bounds; not_overlapped = _subtract(communication, computing) and
    # free = _subtract(bounds, busy)
    not_overlapped, free = lanes(computing, communication, span)
    return Overlap(computing=computing, communication=communication, not_overlapped=not_overlapped, free=free)
