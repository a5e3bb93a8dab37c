"""A capture that no step bounds (no step marker given, or none that matches), read in parts.

Held whole, such a pseudo step costs its reader and every command about 1-2 KB per record: an
Nsight export of a long run could not be read in any memory. So a reader that takes its records in
start order yields them in parts of about ``PART_RECORDS`` (``StepRecords.part``): each part holds
records that start before the next part's first one, and says where that part begins. The parts'
figures add up to the whole step's (``profile.carried_on`` cuts each part's intervals by then and
carries the rest on, ``profile.folded`` joins their results), and what needs the step whole joins
it back (``profile.whole_steps``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from operator import attrgetter

from ...model import FlowEnd, Layer, Sample, Slice, StepRecords
from .._core import by_kind

PART_WINDOW_NS = 10_000_000  # a reader that files records by time (spill.ByTime) holds 10 ms at once
PART_RECORDS = 5_000  # 2-8 MB at the records' cost
# An arrow binds from one part to any of the next PARTS_AHEAD (flows.linked reads them ahead), so
# across 40,000 records: the most a real sample's kernel runs behind its launch is 32,004
# (kineto-rocm-mi300). Beyond, it is left out and counted in a warning.
PARTS_AHEAD = 8


class Parts:
    """One rank's pseudo step, filled in start order and cut into parts (``has_device``: as
    ``StepRecords.has_device``)."""

    def __init__(self, rank: int, has_device: bool = True) -> None:
        self.rank, self.has_device, self.number = rank, has_device, 0
        self.slices: list[Slice] = []
        self.samples: list[Sample] = []
        self.ends: list[FlowEnd] = []  # the arrow ends of the part's records

    def before(self, start_ns: int) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
        """The part held, if full, now that a record starting at ``start_ns`` comes next."""
        if len(self.slices) + len(self.samples) >= PART_RECORDS:
            yield self._cut(start_ns)

    def fill(self, others: list[Slice | Sample], ends: list[FlowEnd],
             typed: Callable[[Slice], Slice] | None = None) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
        """The parts filled, each yielded once full and a record comes after it, from ``others``
        (slices and samples) and ``ends`` (arrow ends), each in start order, taken as if one by one
        in their merged order, an arrow's end after the records that start with it (so in their
        part); each communication op ``typed`` where given. What is not full stays held."""
        at, taken, n = 0, 0, len(others)
        while True:
            upto = min(n, at + max(PART_RECORDS - len(self.slices) - len(self.samples), 0))
            slices, samples, _ = by_kind(others[at:upto], Slice, Sample, FlowEnd)
            if typed is not None:
                slices = [typed(r) if r.layer is Layer.COMM_OP else r for r in slices]
            self.slices += slices
            self.samples += samples
            if ends:  # those before the next record: they start before it
                next_end = len(ends) if upto == n else bisect_left(ends, others[upto].start_ns, taken,
                                                                   key=_START)
                self.ends += ends[taken:next_end]
                taken = next_end
            if upto == n:
                return
            yield self._cut(others[upto].start_ns)
            at = upto

    def last(self) -> tuple[StepRecords, list[FlowEnd]]:
        """The last part (the whole step where it never filled one)."""
        return self._cut(None)

    def _cut(self, next_start_ns: int | None) -> tuple[StepRecords, list[FlowEnd]]:
        part = StepRecords(self.rank, None, None, None, self.slices, self.samples, has_device=self.has_device,
                           part=(self.number, next_start_ns))
        found = part, self.ends
        self.number, self.slices, self.samples, self.ends = self.number + 1, [], [], []
        return found


def in_parts(parts: Parts, windows: Iterable[list[Slice | Sample | FlowEnd]],
             typed: Callable[[Slice], Slice] | None = None) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
    """The records of ``windows`` (``spill.ByTime``'s, filed by ``PART_WINDOW_NS``: each starts
    after the one before) as ``parts``' parts; each communication op ``typed`` where given."""
    for window in windows:
        others = [r for r in window if type(r) is not FlowEnd]
        ends = [r for r in window if type(r) is FlowEnd] if len(others) < len(window) else []
        others.sort(key=_START)  # stable, as are the ends: a window's order where they start together
        ends.sort(key=_START)
        yield from parts.fill(others, ends, typed)
    yield parts.last()


_START = attrgetter("start_ns")
