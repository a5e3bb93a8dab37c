"""A spilled Chrome trace's records filed by step, and its steps' arrows bound as they are read back
(``chrome_trace.read_merged``): which later steps end the arrows a step starts is known from the
hashes of their keys, filed beside each step's records, so a step need not wait for the next ones
to be read."""

from __future__ import annotations

from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ...errors import Diagnostics
from ...intervals import is_compute
from ...model import FlowEnd, Layer, RankInfo, Sample, Slice, Step, StepRecords
from .._core import by_step, later_steps, launched_work
from .flows import Linker
from .spill import Runs, StepSpill

OUTSIDE = -1  # the step of device work launched in no step's window, or whose launch is not recorded


class Packed(NamedTuple):
    """A batch's records packed by step as they were read (``StepSpill.by_step``)."""

    runs: Runs
    count: int  # records


def file_by_step(batch: list[Slice | Sample | FlowEnd] | Packed, starts: list[int], spill: StepSpill) -> None:
    """File a batch of records under the steps they start in (the last step started at or before
    each), and the keys of the arrows that end in each step (as hashes: 8 bytes each) apart, so a
    step can look ahead for arrows it starts. Packed in one pass (``StepSpill.add_by_step``), or
    as they were read (``Packed``); a batch it cannot pack is filed by ``_core.by_step`` and
    ``StepSpill.add``, a step at a time."""
    if isinstance(batch, Packed):
        finishes = spill.add_runs(batch.runs)
    elif (finishes := spill.add_by_step(batch, starts)) is None:
        buckets, hashes = by_step(batch, starts, Slice, Sample, FlowEnd)
        for index, bucket in buckets.items():
            spill.add(index, bucket)
        finishes = hashes.items()  # lists of ints, where add_by_step gives bytes: array takes either
    for index, found in finishes:
        spill.add_values((_FINISHES, index), array("q", found))


_FINISHES = "finishes"


class SpilledFinishes:
    """For a key, the last of the next ``reach`` steps that holds an arrow end of it: the spilled
    hashes of those steps, each loaded as it comes within reach (a collision only holds a step
    back needlessly)."""

    def __init__(self, spill: StepSpill, count: int, reach: int) -> None:
        self._spill, self._count, self._reach = spill, count, reach
        self._loaded: dict[int, array] = {}  # the hashes of each step within reach, 8 bytes each

    def lasts(self, index: int, keys: Iterable[str]) -> dict[str, int]:
        """For the ``keys`` that end in a step after ``index`` (at most ``reach`` after it), the
        last such step."""
        for passed in [i for i in self._loaded if i <= index]:
            del self._loaded[passed]
        reached = min(index + self._reach, self._count - 1)
        for later in range(max(self._loaded, default=index) + 1, reached + 1):
            hashes = self._loaded[later] = array("q")
            for part in self._spill.load_values((_FINISHES, later)):
                hashes.extend(part)
        return later_steps(keys, self._loaded, index)  # C: a table of the hashes for the call


def link_spilled(count: int, load: Callable[[int], tuple[StepRecords, list[FlowEnd]]],
                 finishes: SpilledFinishes, diag: Diagnostics, events: bool) -> Iterator[StepRecords]:
    """The ``count`` steps ``load`` reads back, in order, their arrows bound (``flows.Linker``)."""
    linker = Linker(events)
    for index in range(count):  # the step held by no name here: freed once bound and written
        yield from linker.add(index, *load(index), lambda keys, i=index: finishes.lasts(i, keys))
    yield from linker.finish(diag)


class Launched:
    """Device records filed under the step that launched them, not the one they start in
    (``chrome_trace.Dialect.steps_known``): each step's (with the keys of the arrows that end
    there, as ``file_by_step`` files them), and the first start and last end of its compute and
    communication, which bound the step's time (``extended``); those launched in no step go
    apart, as activity outside the steps (``outside``)."""

    def __init__(self, count: int) -> None:
        self._spans: list[list[int] | None] = [None] * count  # per step, [first start, last end] of its work
        self._outside: list[int] = []  # the spill's keys of the records launched in no step, in order
        self._outside_slices = 0
        self._outside_work = array("q")  # start, end of each compute or communication launched in no step
        self._computes: dict[str, bool] = {}  # is_compute by task type, for launched_work

    def file(self, launched: dict[int, list[Slice | FlowEnd]], spill: StepSpill) -> None:
        for index, records in launched.items():
            if index == OUTSIDE:
                self._outside.append(len(self._outside))
                spill.add((_OUTSIDE, self._outside[-1]), records)
                self._outside_slices += sum(type(r) is Slice for r in records)
                for r in records:
                    if type(r) is Slice and works(r):
                        self._outside_work.extend((r.start_ns, r.start_ns + r.dur_ns))
                continue
            spill.add(index, records)
            low, high, finishes = launched_work(records, Slice, FlowEnd, Layer.COMM_OP, Layer.STREAM,
                                                self._computes, is_compute)
            if finishes:
                spill.add_values((_FINISHES, index), array("q", finishes))
            if low is not None:
                span = self._spans[index]
                self._spans[index] = [low, high] if span is None else [min(span[0], low), max(span[1], high)]

    def extended(self, steps: list[tuple[Step, list[Slice]]]) -> list[tuple[Step, list[Slice]]]:
        """The steps' times on a device that runs behind its host (``StepTimes``), with all the work
        launched in no step known."""
        times = StepTimes(self._outside_work)
        return [(times.extended(step, *(span or (None, None))), phases)
                for (step, phases), span in zip(steps, self._spans, strict=True)]

    def outside(self, rank: RankInfo, spill: StepSpill, has_device: bool,
                diag: Diagnostics) -> Iterator[StepRecords]:
        """The device records launched in no step, as steps without a number (``OUTSIDE_BATCH``
        records at most each), said in a note."""
        if not self._outside:
            return
        say_outside(diag, rank, self._outside_slices)
        taken: list[Slice | Sample | FlowEnd] = []
        for key in self._outside:
            taken += [r for r in spill.load((_OUTSIDE, key), rank.rank) if type(r) is not FlowEnd]
            if len(taken) >= OUTSIDE_BATCH:
                yield StepRecords(rank.rank, None, None, None, taken, has_device=has_device)
                taken = []
        if taken:
            yield StepRecords(rank.rank, None, None, None, taken, has_device=has_device)


def say_outside(diag: Diagnostics, rank: RankInfo, count: int,
                where: str = "in no step's window, or before the capture began") -> None:
    """The note that ``count`` device records of ``rank`` are shown apart, launched ``where``."""
    diag.note(f"launched_outside {rank.rank}", f"{rank.path}: {count} device records (kernels, copies, "
              f"memsets) of rank {rank.rank} were launched {where}: shown apart, outside the steps")


class StepTimes:
    """The steps' times on a device that runs behind its host (docs/analysis.md §1), a step at a
    time in order (``extended``): each ends at its host window's end or at the end of the last work
    it launched, if later; and starts at its host window's start or, if later, where the device is
    done with the work of the steps before, but never after its own first work. So the step holds
    all the work it launched, and the time its device spent on earlier steps' work (or on work
    launched in no step: queued before the capture began, ``outside``) is no part of it."""

    def __init__(self, outside: array | None = None) -> None:
        self._outside = array("q") if outside is None else outside  # start, end of work launched in no step
        self._union: tuple[list[int], list[int]] | None = None  # of _outside, once asked for
        self._busy: int | None = None  # the latest end of the earlier steps' work

    def outside(self, start_ns: int, end_ns: int) -> None:
        """Compute or communication launched in no step."""
        self._outside.extend((start_ns, end_ns))
        self._union = None

    def extended(self, step: Step, first: int | None, last: int | None) -> Step:
        """``step``'s time, given the first start and last end of the work it launched (None: none)."""
        if first is None or last is None:
            return step
        if self._union is None:
            self._union = _union(self._outside)
        free, busy = _busy_until(self._union, first), self._busy
        free = busy if free is None else free if busy is None else max(busy, free)
        start = step.start_ns if free is None else max(step.start_ns, min(free, first))
        end = max(step.end_ns, last)
        self._busy = last if busy is None else max(busy, last)
        if start == step.start_ns and end == step.end_ns:
            return step
        return Step(step.graph, step.step, start, end, step.host_start)


def launched_work_by_rule(records: list[Slice | FlowEnd]) -> tuple[int | None, int | None, bytes]:
    """The first start and last end of the compute and communication among ``records`` (None,
    None: none), and the hashes of the keys of the arrows that end there, as native int64 bytes:
    the rule ``_core.launched_work`` follows (``Launched.file``)."""
    done = [(r.start_ns, r.start_ns + r.dur_ns) for r in records if type(r) is Slice and works(r)]
    finishes = array("q", [hash(r.key) for r in records if type(r) is FlowEnd and not r.starts]).tobytes()
    if not done:
        return None, None, finishes
    return min(a for a, _ in done), max(b for _, b in done), finishes


def works(r: Slice) -> bool:
    """Compute or communication: what a summary keeps too, so both bound the steps alike."""
    return r.layer is Layer.COMM_OP or (r.layer is Layer.STREAM and is_compute(r.task_type))


def _union(pairs: array) -> tuple[list[int], list[int]]:
    """The union of (start, end) pairs laid flat, as sorted disjoint starts and ends."""
    starts: list[int] = []
    ends: list[int] = []
    for a, b in sorted(zip(pairs[::2], pairs[1::2], strict=True)):
        if ends and a <= ends[-1]:
            ends[-1] = max(ends[-1], b)
        else:
            starts.append(a)
            ends.append(b)
    return starts, ends


def _busy_until(union: tuple[list[int], list[int]], at: int) -> int | None:
    """The end of the last interval of ``union`` that starts before ``at`` (None: none does)."""
    k = bisect_left(union[0], at) - 1
    return None if k < 0 else union[1][k]


_OUTSIDE = "launched outside the steps"
OUTSIDE_BATCH = 100_000
