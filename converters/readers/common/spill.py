"""Records filed by step on disk, so a reader of one big file holds one step at a time.

Records go to disk packed by ``_core.pack`` (a format of their own: 2-3x faster both ways than
marshal, which was 3x faster than pickle); a batch it cannot pack (args that are dicts, ints past
64 bits) goes as plain rows (``_core.rows``) written by marshal, or pickled where marshal cannot
write some args. ``pickle`` is imported where it is needed: a small profile's reading seldom
needs it (issue 28's start-up).
"""

from __future__ import annotations

import marshal
import tempfile
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Iterator
from operator import add, attrgetter
from typing import NamedTuple

from ...errors import temporary_writes
from ...model import FlowEnd, Layer, Sample, Slice, StepRecords
from .. import _core

Runs = list[tuple[int, bytes, bytes]]  # (step, packed records, hashes of the arrows ending there): a batch's


class ByStep(NamedTuple):
    """What records are packed by as they are read (``_core.read_events``, read by position:
    records.h), as ``StepSpill.add_by_step`` packs them: the runs ``add_runs`` files."""

    starts: list[int]  # the steps' starts, in order
    orders: dict[Layer, int]


class StepSpill:
    """Slices filed by step (any key) in a temporary file; memory keeps only where each lies."""

    def __enter__(self) -> StepSpill:
        with temporary_writes():  # a full temporary disk is said as such, not as an unreadable input
            self._file = tempfile.TemporaryFile(prefix="trace2perfetto-spill-")
        self._segments: dict[Hashable, list[tuple[int, int]]] = defaultdict(list)
        self._end = 0
        # where the file stands after a read (None: after a write, at its end): a write after a
        # write, or a read where the last one ended, needs no seek (978,000 -> 629,000 lseek calls
        # in a detail conversion of 8,300 steps of 8 XSpace devices)
        self._read_to: int | None = None
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def add(self, index: Hashable, records: list[Slice | Sample | FlowEnd]) -> None:
        packed = _core.pack(records, _ORDER, Slice, Sample, FlowEnd)
        if packed is not None:
            self._write(index, packed, _PACKED)
            return
        found = _core.rows(records, _ORDER, Slice, Sample, FlowEnd)  # args as dicts, huge ints
        try:
            data = _MARSHAL + marshal.dumps(found)
        except ValueError:  # a value marshal cannot write, in some args
            import pickle

            data = _PICKLE + pickle.dumps(found, protocol=pickle.HIGHEST_PROTOCOL)
        self._write(index, data)

    def add_by_step(self, records: list[Slice | Sample | FlowEnd],
                    starts: list[int]) -> list[tuple[int, bytes]] | None:
        """File ``records`` under the steps they start in (the last of ``starts`` at or before each,
        the first if none), packed in one pass (C: ``_core.pack_by_step``); returns the hashes of
        the keys of the arrows that end in each step, as (step, an ``array("q")``'s bytes), a
        step's in order. None, and nothing filed, if some record cannot be packed (``add`` files any)."""
        runs = _core.pack_by_step(records, starts, _ORDER, Slice, Sample, FlowEnd)
        return None if runs is None else self.add_runs(runs)

    def by_step(self, starts: list[int]) -> ByStep:
        """What a reader packs its records by, for ``add_runs``, with steps that start at ``starts``."""
        return ByStep(starts, _ORDER)

    def add_runs(self, runs: Runs) -> list[tuple[int, bytes]]:
        """File records already packed by step (``_core.pack_by_step``, or ``_core.read_events`` by
        ``by_step``); returns the hashes of the keys of the arrows that end in each step, as
        ``add_by_step`` does."""
        for index, data, _ in runs:
            self._write(index, data, _PACKED)
        return [(index, hashes) for index, _, hashes in runs if hashes]

    def _write(self, index: Hashable, data: bytes, tag: bytes = b"") -> None:
        """``data`` filed under ``index``, after ``tag`` (written apart: no copy of the data)."""
        with temporary_writes():
            if self._read_to is not None:
                self._file.seek(self._end)
                self._read_to = None
            self._file.write(tag)
            self._file.write(data)
        self._segments[index].append((self._end, len(tag) + len(data)))
        self._end += len(tag) + len(data)

    def add_values(self, index: Hashable, value: object) -> None:
        """File any picklable value (e.g. an array of hashes) under ``index``, beside the records."""
        import pickle

        self._write(index, pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))

    def load_values(self, index: Hashable) -> list:
        """The values filed by ``add_values`` under ``index``, in the order they were added."""
        import pickle

        return [pickle.loads(self._read(offset, length)) for offset, length in self._segments.pop(index, [])]

    def load(self, index: Hashable, rank: int) -> list[Slice | Sample | FlowEnd]:
        out: list[Slice | Sample | FlowEnd] = []
        for offset, length in self._segments.pop(index, []):
            data = memoryview(self._read(offset, length))
            if data[:1] == _PACKED:
                out += _core.unpack(data[1:], rank, _LAYERS, Slice, Sample, FlowEnd)
                continue
            if data[:1] == _MARSHAL:
                found = marshal.loads(data[1:])
            else:
                import pickle

                found = pickle.loads(data[1:])
            out += _core.records(found, rank, _LAYERS, Slice, Sample, FlowEnd)
        return out

    def _read(self, offset: int, length: int) -> bytes:
        """The ``length`` bytes filed at ``offset``."""
        if self._read_to != offset:  # after a write, always: the seek writes out what is buffered
            with temporary_writes():
                self._file.seek(offset)
        data = self._file.read(length)
        self._read_to = offset + len(data)
        return data


WINDOW_NS = 100_000_000  # records are filed on disk by 100 ms of start time


class ByTime:
    """Records filed on disk by window of start time (host_info's host records, memory records),
    taken back in time order: ``window_ns`` of start time a window, the most held at once."""

    def __init__(self, spill: StepSpill, rank: int, window_ns: int = WINDOW_NS) -> None:
        self._spill, self._rank, self._window_ns = spill, rank, window_ns
        self._windows: set[int] = set()
        self._order: list[int] | None = None
        self._pending: list[Slice | Sample] = []  # of a window taken in part

    def add(self, records: list[Slice | Sample]) -> None:
        buckets = _core.by_window(records if type(records) is list else list(records), self._window_ns,
                                  Slice, Sample, FlowEnd)  # {r.start_ns // window_ns: [r, ...]}, in C
        for window, bucket in buckets.items():
            self._spill.add(window, bucket)
        self._windows.update(buckets)

    def take_before(self, end_ns: int | None) -> Iterator[list[Slice | Sample]]:
        """Every record not taken yet that starts before ``end_ns`` (None: all), a window at a time."""
        if self._order is None:
            self._order = sorted(self._windows, reverse=True)
        while True:
            taken = [r for r in self._pending if end_ns is None or r.start_ns < end_ns]
            if len(taken) < len(self._pending):
                self._pending = [r for r in self._pending if r.start_ns >= end_ns]
            else:
                self._pending = []
            if taken:
                yield taken
            if not self._order or (end_ns is not None and self._order[-1] * self._window_ns >= end_ns):
                return
            self._pending.extend(self._spill.load(self._order.pop(), self._rank))


def by_time(steps: Iterable[StepRecords], rank: int,
            fill: Callable[[Callable[[list[Slice | Sample]], None]], None]) -> Iterator[StepRecords]:
    """``steps`` (in time order) with the records ``fill`` hands to its argument added: the
    records of another file (host_info's, memory's) that are not filed by step.

    A step takes the records that start before it ends, from up to a second before it starts
    (the host launches a step before the device runs it). Records no step takes (a compile
    phase, what follows the last step) come as steps without a number, a bounded number of
    records at a time. ``fill`` runs before the first step is yielded; the records wait on disk.
    """
    with StepSpill() as spill:
        records = ByTime(spill, rank)
        fill(records.add)
        for batch in steps:
            if batch.step is not None:
                yield from _loose(rank, records.take_before(batch.step.start_ns - _LEAD_NS))
                end = batch.step.end_ns
            else:
                end = max(map(add, map(_START, batch.slices), map(_DUR, batch.slices)), default=0)  # ends
            for taken in records.take_before(end):
                _add(batch, taken)
            yield batch
        yield from _loose(rank, records.take_before(None))


def _loose(rank: int, pieces: Iterable[list[Slice | Sample]]) -> Iterator[StepRecords]:
    """Records outside every step, as steps without a number of up to ``_BATCH`` records."""
    batch = StepRecords(rank, None, None, None, [])
    for records in pieces:
        _add(batch, records)
        if len(batch.slices) + len(batch.samples) >= _BATCH:
            yield batch
            batch = StepRecords(rank, None, None, None, [])
    if batch.slices or batch.samples:
        yield batch


def _add(batch: StepRecords, records: list[Slice | Sample]) -> None:
    for r in records:
        (batch.slices if type(r) is Slice else batch.samples).append(r)


_LEAD_NS = 1_000_000_000  # how long before a step records may start and still go with it
_BATCH = 10_000
_PACKED, _MARSHAL, _PICKLE = b"c", b"m", b"p"
_ORDER = {layer: layer.order for layer in Layer}
_START, _DUR = attrgetter("start_ns"), attrgetter("dur_ns")
_LAYERS = list(Layer)
