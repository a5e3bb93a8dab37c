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

from collections.abc import Callable, Iterable, Iterator

from ...model import FlowEnd, Layer, Sample, Slice, StepRecords

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
        window.sort(key=_order)  # an arrow's end after the records that start with it: in their part
        for r in window:
            kind = type(r)
            if kind is FlowEnd:
                parts.ends.append(r)  # type: ignore[arg-type]
                continue
            yield from parts.before(r.start_ns)
            if kind is Sample:
                parts.samples.append(r)  # type: ignore[arg-type]
            else:
                parts.slices.append(typed(r) if typed is not None and r.layer is Layer.COMM_OP else r)  # type: ignore
    yield parts.last()


def _order(r: Slice | Sample | FlowEnd) -> tuple[int, bool]:
    return r.start_ns, type(r) is FlowEnd
