"""Device memory per rank and component: the peak of each kind (allocated, reserved, active) with
its time and the operators holding memory then, and the per-operator allocation table.

The records are the readers' (``readers.memory``): each component's counters as the allocators
recorded them after each event (torch_npu's ``memory_record.csv`` / ``MEMORY_RECORD``; without
those, made again from each allocation's totals in ``operator_memory.csv`` / ``OP_MEMORY``; CANN's
``NPU_OP_MEM`` events) and its allocations as slices. They are read apart from the steps, not
through ``profile.read_profile``: they are not filed by step, and a step read would parse the whole
trace for none of them. So the whole collection counts; ``--steps`` and ``--graphs`` do not apply.

A peak is the largest value of the component's counter (ties: the first); its time is that of the
peak of Allocated (where the component records none, of Reserved). The holders at the peak are the
allocations of that component (of PTA+GE: of PTA and GE) alive then (allocated at or before it,
released after it or never), largest first. One pass over the records for the peaks, which keeps the
allocations it passes in compact arrays (``KeptAllocations``: up to ``HELD``, ~30 bytes each) for the
holders; past ``HELD`` a second pass reads them again. Flat either way.
"""

from __future__ import annotations

import heapq
import os
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from ..errors import Diagnostics, UsageError
from ..executor import LOCAL, Where
from ..model import (
    MEMORY_KINDS,
    MEMORY_SIZE_ARG,
    RELEASE_NOT_RECORDED,
    Layer,
    RankInfo,
    Sample,
    Slice,
    component_of,
    memory_counter_of,
)
from ..profile import Options, Profile
from ..readers import host_memory, memory_sources, op_memory
from ..readers import memory as device_memory

HOLDERS = 5  # the operators named per peak
WITHIN = {part: (op_memory.PTA_GE,) for part in (op_memory.PTA, op_memory.GE)}  # PTA+GE holds theirs
_MB = float(1 << 20)


@dataclass(frozen=True, slots=True)
class Holder:
    """An allocation alive at a peak."""

    name: str
    size: float  # bytes
    allocated_ns: int


@dataclass(slots=True)
class PeakRow:
    """One component of one rank: its peak of each kind (bytes; None where it records none), the
    time of its peak (ns), its allocations and the largest of them alive at the peak."""

    rank: int
    component: str
    device: int | None
    peaks: dict[str, float] = field(default_factory=dict)  # kind -> bytes
    times: dict[str, int] = field(default_factory=dict)  # kind -> ns
    allocations: int = 0
    holders: list[Holder] = field(default_factory=list)

    @property
    def peak_ns(self) -> int | None:
        """When the component peaked: its Allocated peak, else its Reserved peak."""
        return next((self.times[k] for k in MEMORY_KINDS if k in self.times), None)


@dataclass(frozen=True, slots=True)
class AllocationRow:
    """One allocation of one rank (times ns; ``released_ns`` None: never within the profile)."""

    rank: int
    component: str
    device: int | None
    name: str
    size: float  # bytes
    allocated_ns: int
    released_ns: int | None


# -- the computation ------------------------------------------------------------------------------

def peaks(info: RankInfo, records: Iterable[Slice | Sample], rows: dict[str, PeakRow] | None = None
          ) -> dict[str, PeakRow]:
    """The first pass: each component's peaks and its count of allocations (added to ``rows``, where
    the records come in parts)."""
    rows = {} if rows is None else rows
    for r in records:
        if type(r) is Sample:
            found = memory_counter_of(r.lane)
            if found is None:
                continue
            row = _row(rows, info, found[0])
            kind = found[1]
            if kind not in row.peaks or r.value > row.peaks[kind]:
                row.peaks[kind], row.times[kind] = r.value, r.start_ns
        elif r.layer is Layer.MEMORY:
            _row(rows, info, component_of(r.lane)).allocations += 1
    return rows


Allocation = tuple[str, str, float, int, int]  # component, name, bytes, allocated and released ns
NEVER_RELEASED = 1 << 62  # the release time of an allocation never released within the profile


def holders(rows: dict[str, PeakRow], allocations: Iterable[Allocation], top: int = HOLDERS) -> None:
    """The ``top`` largest ``allocations`` alive at each component's peak (``allocations_of``, or
    those a ``KeptAllocations`` kept)."""
    heaps: dict[str, list[tuple[float, int, Holder]]] = {c: [] for c in rows}
    for own, name, size, start_ns, end_ns in allocations:
        for component in (own, *WITHIN.get(own, ())):
            row = rows.get(component)
            at = row.peak_ns if row is not None else None
            if at is None or not start_ns <= at < end_ns:
                continue
            heap = heaps[component]
            item = (size, -start_ns, Holder(name, size, start_ns))
            if len(heap) < top:
                heapq.heappush(heap, item)
            elif item[:2] > heap[0][:2]:
                heapq.heapreplace(heap, item)
    for component, heap in heaps.items():
        rows[component].holders = [h for *_, h in sorted(heap, key=lambda x: x[:2], reverse=True)]


def allocations_of(records: Iterable[Slice | Sample]) -> Iterator[Allocation]:
    """The allocations among a rank's memory records, in their order."""
    for r in records:
        if type(r) is Slice and r.layer is Layer.MEMORY:
            end_ns = NEVER_RELEASED if _unreleased(r) else r.end_ns
            yield component_of(r.lane), r.name, _size(r), r.start_ns, end_ns


HELD = 200_000  # allocations kept from the peaks' read (~30 bytes each); past it, they are read again


class KeptAllocations:
    """The allocations the peaks' read passes (``passing``), in compact arrays: times, sizes, and
    names and components as numbers (a span as a Slice, ~124 bytes, grew the memory command's peak
    RSS by 24 MiB at 200,000 of them); none past ``held`` of them (``full``)."""

    def __init__(self, held: int) -> None:
        self.held, self.full = held, False
        self._empty()

    def _empty(self) -> None:
        self._starts, self._ends, self._sizes = array("q"), array("q"), array("d")
        self._names, self._components = array("l"), array("l")
        self._ids: dict[str, int] = {}
        self._texts: list[str] = []

    def passing(self, records: Iterable[Slice | Sample]) -> Iterator[Slice | Sample]:
        """``records``, each allocation among them kept on its way."""
        for r in records:
            if type(r) is Slice and r.layer is Layer.MEMORY and not self.full:
                self._keep(r)
            yield r

    def _keep(self, r: Slice) -> None:
        if len(self._starts) == self.held:
            self.full = True
            self._empty()  # what was kept is of no use now: the holders read the records again
            return
        self._starts.append(r.start_ns)
        self._ends.append(NEVER_RELEASED if _unreleased(r) else r.end_ns)
        self._sizes.append(_size(r))
        self._names.append(self._id(r.name))
        self._components.append(self._id(component_of(r.lane)))

    def _id(self, text: str) -> int:
        found = self._ids.get(text)
        if found is None:
            found = self._ids[text] = len(self._texts)
            self._texts.append(text)
        return found

    def __iter__(self) -> Iterator[Allocation]:
        texts = self._texts
        for component, name, size, start, end in zip(self._components, self._names, self._sizes, self._starts,
                                                     self._ends, strict=True):
            yield texts[component], texts[name], size, start, end


def allocation_rows(info: RankInfo, records: Iterable[Slice | Sample]) -> Iterator[AllocationRow]:
    """Each allocation as the reader gives it, in its order."""
    for r in records:
        if type(r) is Slice and r.layer is Layer.MEMORY:
            released = None if _unreleased(r) or _release_unknown(r) else r.end_ns
            yield AllocationRow(info.rank, component_of(r.lane), info.device, r.name, _size(r), r.start_ns,
                                released)


def memory_records(info: RankInfo, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """The rank's device memory records (its reader's), then its host memory (host_info's, where the
    rank has any: the Host component, its peak and time alone: no allocations)."""
    yield from device_memory(info, diag)
    yield from host_memory(info, diag)


def _row(rows: dict[str, PeakRow], info: RankInfo, component: str) -> PeakRow:
    row = rows.get(component)
    if row is None:
        row = rows[component] = PeakRow(info.rank, component, info.device)
    return row


def _size(s: Slice) -> float:
    return float(s.args.get(MEMORY_SIZE_ARG, 0)) if isinstance(s.args, dict) else 0.0


def _unreleased(s: Slice) -> bool:
    """Never released within the profile: alive to its end and after."""
    return isinstance(s.args, dict) and s.args.get("Released") is False


def _release_unknown(s: Slice) -> bool:
    """Released when, the profile does not say: gone by the slice's end (its address allocated again)."""
    return isinstance(s.args, dict) and s.args.get("Released") == RELEASE_NOT_RECORDED


# -- the driver -----------------------------------------------------------------------------------

def memory_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    diag: Diagnostics | None = None,
    where: Where = LOCAL,
) -> list[PeakRow]:
    """The peaks of every component of every kept rank, ranks in order, each rank's components by
    name; a rank whose input records no memory is said in a warning in ``diag`` and has no rows.

    Raises:
        UsageError: unknown ranks, nothing recognisable under ``path``.
        InputError: an input file broken beyond recovery.
    """
    profile = Profile.open(path, Options(ranks=ranks), where=where, diag=diag)
    found: list[list[PeakRow]] = profile.map(rank_peaks)
    out = []
    for info, rows in sorted(zip(profile.ranks, found, strict=True), key=lambda x: x[0].rank):
        if not rows:
            profile.diag.warn("no_memory", f"rank {info.rank}: the input records no device memory (no "
                              f"{memory_sources(info)})", f"rank {info.rank}")
        out += rows
    return out


def rank_peaks(info: RankInfo, options: Options, diag: Diagnostics) -> list[PeakRow]:
    """One rank's peaks and holders: one read of its memory records (two past ``HELD`` allocations).
    Runs in a worker process."""
    return _peaks_of(info, memory_records(info, diag))


def _peaks_of(info: RankInfo, records: Iterable[Slice | Sample]) -> list[PeakRow]:
    """The peaks of ``records`` (the rank's memory records, read once) and their holders."""
    kept = KeptAllocations(HELD)
    return _with_holders(info, peaks(info, kept.passing(records)), kept)


def _with_holders(info: RankInfo, rows: dict[str, PeakRow], kept: KeptAllocations) -> list[PeakRow]:
    """The rows, components by name, with their holders: from the allocations the peaks' read
    ``kept``, or, past ``HELD`` of them, a second read."""
    if any(row.allocations for row in rows.values()):
        # the same records read again: their warnings said once
        holders(rows, allocations_of(device_memory(info, Diagnostics())) if kept.full else kept)
    return [rows[c] for c in sorted(rows)]


SERIES_POINTS = 400  # points kept per component for the report's picture


def memory_overview(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    where: Where = LOCAL,
    diag: Diagnostics | None = None,
) -> tuple[list[PeakRow], dict[tuple[int, str], list[tuple[int, float]]]]:
    """The peaks (as ``memory_report``, without its warning of no memory: a profile without memory
    has none) and, per rank and component, its peak kind's counter over time (Allocated, else
    Reserved; bytes), at most ``2 * SERIES_POINTS`` points, each the largest of the span it stands
    for (the peak stays). ``diag``: what reading the memory files warned of (a file cut off, a
    figure made from another file), for the report to carry."""
    profile = Profile.open(path, Options(ranks=ranks), where=where, diag=Diagnostics())
    return joined_overviews(profile.ranks, profile.map(rank_overview, diag=diag))


Overview = tuple[list[PeakRow], dict[str, list[tuple[int, float]]]]  # a rank's rows, and series by component


def joined_overviews(infos: list[RankInfo], found: list[Overview]
                     ) -> tuple[list[PeakRow], dict[tuple[int, str], list[tuple[int, float]]]]:
    """The ranks' overviews (``rank_overview``, in the order of ``infos``) as ``memory_overview``
    gives them: every rank's rows, and the series by rank and component."""
    rows = [row for peaks_of, _ in found for row in peaks_of]
    series = {(info.rank, component): points for info, (_, mine) in zip(infos, found, strict=True)
              for component, points in mine.items()}
    return rows, series


def rank_overview(info: RankInfo, options: Options, diag: Diagnostics) -> Overview:
    """One rank's peaks and series, from one read of its memory records. Runs in a worker process."""
    overview = MemoryOverview(info)
    overview(device_memory(info, diag))
    return overview.result(diag)


class MemoryOverview:
    """One rank's peaks and series (``memory_overview``), made as its device memory records come:
    from a read of them, or handed on by its reader's pass over its files (``read(..., memory=...)``,
    ``Reader.memory_in_read``: the report's summary read of a Kineto trace, which then is not read
    again for them). The series of every counter are kept (thinned, so bounded) as the records pass,
    and those of each component's peak kind are the result's."""

    def __init__(self, info: RankInfo) -> None:
        self.info = info
        self._rows: dict[str, PeakRow] = {}
        self._kept = KeptAllocations(HELD)
        self._every: dict[tuple[str, str], MaxSeries] = {}

    def __call__(self, records: Iterable[Slice | Sample]) -> None:
        """More of the rank's memory records, in their order."""
        peaks(self.info, self._kept.passing(self._counted(records)), self._rows)

    def _counted(self, records: Iterable[Slice | Sample]) -> Iterator[Slice | Sample]:
        every = self._every
        for r in records:
            if type(r) is Sample and (found := memory_counter_of(r.lane)) is not None:
                series = every.get(found)
                if series is None:
                    series = every[found] = MaxSeries(SERIES_POINTS)
                series.add(r.start_ns, r.value)
            yield r

    def result(self, diag: Diagnostics) -> Overview:
        """The rows and series once the device records are in: the host's memory read, the holders
        found."""
        self(host_memory(self.info, diag))
        rows = _with_holders(self.info, self._rows, self._kept)
        kinds = {row.component: next(k for k in MEMORY_KINDS if k in row.peaks) for row in rows}
        return rows, {c: self._every[c, kind].series if (c, kind) in self._every else []
                      for c, kind in kinds.items()}


class MaxSeries:
    """A counter's samples in time order, thinned to at most ``2 * size`` points: when full, each
    two neighbours become the larger of them, so the peak is never thinned away. Flat."""

    def __init__(self, size: int) -> None:
        self.size, self.points, self._pending = size, [], None
        self._step, self._count = 1, 0

    def add(self, ts_ns: int, value: float) -> None:
        if self._pending is None or value > self._pending[1]:
            self._pending = (ts_ns, value)
        self._count += 1
        if self._count < self._step:
            return
        self.points.append(self._pending)
        self._pending, self._count = None, 0
        if len(self.points) >= 2 * self.size:
            pairs = zip(self.points[::2], self.points[1::2], strict=True)  # an even count: 2 * size
            self.points = [max(pair, key=lambda p: p[1]) for pair in pairs]
            self._step *= 2

    @property
    def series(self) -> list[tuple[int, float]]:
        return self.points + ([self._pending] if self._pending is not None else [])


def allocations_report(
    path: str | os.PathLike[str],
    *,
    ranks: Iterable[int] | None = None,
    diag: Diagnostics | None = None,
) -> Iterator[AllocationRow]:
    """Every allocation of every kept rank, rank by rank, streamed: read here, one record at a time
    (a rank holds millions in a long run)."""
    profile = Profile.open(path, Options(ranks=ranks), diag=diag)
    for info in sorted(profile.ranks, key=lambda i: i.rank):
        yield from allocation_rows(info, device_memory(info, profile.diag))


def no_selection(steps: object, graphs: object, step_marker: object = None) -> None:
    """Memory records are not filed by step: say so where steps, graphs or a step marker are asked for.

    Raises:
        UsageError: ``--steps``, ``--graphs`` or ``--step-marker`` given.
    """
    if steps is not None or graphs is not None or step_marker is not None:
        raise UsageError("memory: --steps, --graphs and --step-marker do not apply: memory records are not "
                         "filed by step (the whole collection counts)")


# -- its rows as records ---------------------------------------------------------------------------

COLUMNS = ["Rank", "Component", "Device", "Peak Allocated(MB)", "Peak Reserved(MB)", "Peak Active(MB)",
           "Peak Time(us)", "Allocations", "Held at Peak"]
ALLOCATION_COLUMNS = ["Rank", "Component", "Device", "Name", "Size(KB)", "Allocation Time(us)",
                      "Release Time(us)", "Duration(us)"]


def record(row: PeakRow) -> dict:
    """One row of the peaks table: MB to 6 decimals, epoch µs to the ns, the holders as
    ``name (MB)`` largest first."""
    held = "; ".join(f"{h.name} ({h.size / _MB:.3f})" for h in row.holders) or None
    return {"Rank": row.rank, "Component": row.component, "Device": _device(row.device),
            **{f"Peak {kind}(MB)": _mb(row.peaks.get(kind)) for kind in MEMORY_KINDS},
            "Peak Time(us)": _epoch_us(row.peak_ns), "Allocations": row.allocations or None,
            "Held at Peak": held}


def allocation_record(row: AllocationRow) -> dict:
    """One row of the allocation table, under operator_memory.csv's column names."""
    duration = None if row.released_ns is None else row.released_ns - row.allocated_ns
    return {"Rank": row.rank, "Component": row.component, "Device": _device(row.device), "Name": row.name,
            "Size(KB)": round(row.size / 1024, 3), "Allocation Time(us)": _epoch_us(row.allocated_ns),
            "Release Time(us)": _epoch_us(row.released_ns), "Duration(us)": _us(duration)}


def _mb(value: float | None) -> float | None:
    return None if value is None else round(value / _MB, 6)


def _epoch_us(ns: int | None) -> str | None:
    """Epoch µs to the ns, as text: a double holds epoch µs to a quarter µs only."""
    if ns is None:
        return None
    sign, ns = ("-", -ns) if ns < 0 else ("", ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def _us(ns: int | None) -> float | None:
    return None if ns is None else ns / 1000


def _device(device: int | None) -> str | None:
    return None if device is None else f"NPU:{device}"
