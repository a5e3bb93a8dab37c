"""Device memory from per-operator allocations (torch_npu's ``operator_memory.csv``, the database's
``OP_MEMORY``; docs/formats.md §5.11): the allocations as slices, and the counters that
``memory_record.csv`` / ``MEMORY_RECORD`` hold, made again where those are gone.

Each row is one allocation of an operator: its size, its allocation and release times (none: the
profile never saw it released) and the allocator's totals (allocated, reserved, active) just after
each of the two. Its component: PTA (torch_npu's caching allocator, whose rows name a stream) or GE
(the graph engine's, the ``cann::`` operators, whose rows name none). The totals at each allocation
and release are the component's counter at that moment, as ``memory_record.csv`` has them; PTA+GE,
the profiler's sum of the two, is the latest PTA plus the latest GE total at each of those moments
in time order (Active: GE records none, so PTA's alone), as torch_npu adds them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ..model import (
    MEMORY_KINDS,
    MEMORY_SIZE_ARG,
    Layer,
    RankInfo,
    Sample,
    Slice,
    allocations_lane,
    memory_counter,
)
from .common.spill import ByTime, StepSpill

PTA, GE, PTA_GE = "PTA", "GE", "PTA+GE"
COMPONENTS = (PTA, GE, PTA_GE)  # the counters ``records`` makes
Totals = tuple  # (allocated, reserved, active) in bytes, None where the row gives none
_BATCH = 10_000


class Allocation(NamedTuple):
    """One row: an operator's allocation, times in epoch ns, sizes in bytes."""

    name: str
    size: float
    component: str
    allocated_ns: int
    released_ns: int | None
    at_allocation: Totals
    at_release: Totals


def records(rank: RankInfo, allocations: Iterable[Allocation], *,
            counters: bool) -> Iterator[Slice | Sample]:
    """The allocations as slices on their component's lane (those never released at the end,
    lasting to the last time the profile recorded, ``"Released": False`` in args) and, with
    ``counters``, each component's totals and PTA+GE's as samples, in time order. Flat: the samples
    wait on disk, sorted a window at a time; only the unreleased allocations are kept."""
    unreleased: list[Allocation] = []
    last_ns = 0
    with StepSpill() as spill:
        totals = ByTime(spill, rank.rank)
        batch: list[Sample] = []
        for a in allocations:
            last_ns = max(last_ns, a.allocated_ns, a.released_ns or 0)
            if a.released_ns is None:
                unreleased.append(a)
            else:
                yield _slice(rank, a, a.released_ns - a.allocated_ns, {})
            if counters:
                batch += _samples(rank.rank, a.component, a.allocated_ns, a.at_allocation)
                if a.released_ns is not None:
                    batch += _samples(rank.rank, a.component, a.released_ns, a.at_release)
                if len(batch) >= _BATCH:
                    totals.add(batch)
                    batch = []
        totals.add(batch)
        for a in unreleased:
            yield _slice(rank, a, last_ns - a.allocated_ns, {"Released": False})
        if counters:
            yield from _with_sum(rank.rank, totals.take_before(None))


def _slice(rank: RankInfo, a: Allocation, dur_ns: int, args: dict) -> Slice:
    return Slice(rank.rank, Layer.MEMORY, allocations_lane(a.component), a.name, a.allocated_ns, dur_ns,
                 {MEMORY_SIZE_ARG: a.size, **args})


def _samples(rank: int, component: str, ts_ns: int, totals: Totals) -> list[Sample]:
    return [Sample(rank, memory_counter(component, kind), ts_ns, value)
            for kind, value in zip(MEMORY_KINDS, totals, strict=True) if value is not None]


def _with_sum(rank: int, windows: Iterable[list[Sample]]) -> Iterator[Sample]:
    """The samples in time order, each PTA or GE one followed by PTA+GE's at that moment."""
    latest: dict[str, float] = {}  # counter lane -> its latest value
    names = {memory_counter(c, kind): (c, kind) for c in (PTA, GE) for kind in MEMORY_KINDS}
    for window in windows:
        for sample in sorted(window, key=_start):
            yield sample
            component, kind = names.get(sample.lane, (None, None))
            if component is None:
                continue
            latest[sample.lane] = sample.value
            parts = [latest.get(memory_counter(c, kind)) for c in (PTA, GE)]
            if any(p is not None for p in parts):
                total = sum(p or 0.0 for p in parts)
                yield Sample(rank, memory_counter(PTA_GE, kind), sample.start_ns, total)


_start: Callable[[Sample], int] = lambda s: s.start_ns  # noqa: E731
