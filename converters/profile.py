"""The one way to open a profile, for the conversion and every analysis (docs/architecture.md).

``Profile.open`` finds the ranks (``discover``) and keeps those selected; ``Profile.map`` runs one
function per rank in worker processes (this machine's cores or a Dask cluster, ``executor``) and
applies the one policy for ranks that cannot be read; ``Profile.align`` moves each host's clock
by its offset as the collectives show it. A rank's work reads its steps with ``read_profile``:
``StepRecords`` one step at a time, each keyed as the whole job names it (``StepKey``) and with
the compute and communication it owns (``StepIntervals``).
"""

from __future__ import annotations

import bisect
import dataclasses
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from operator import itemgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from . import intervals
from ._overlap import slices as overlap_as_slices
from ._overlap import step_intervals
from .discover import discover
from .errors import Diagnostics, UsageError
from .executor import LOCAL, Where, each_rank
from .intervals import Interval, StepIntervals
from .model import SLICE_START_NS, Layer, RankInfo, Sample, Slice, Step, StepKey, StepRecords
from .readers import memory_feed, reader, with_memory
from .readers.common.flows import forget_flow_warnings
from .select import check_graphs, check_steps, select_ranks

# ``communication`` (its dataclasses take ~3 ms to create) is imported where collectives are
# matched, as a command on one rank never matches any (issue 44's start-up).
if TYPE_CHECKING:
    from . import communication

T = TypeVar("T")


class Kind(str, Enum):
    """How much to read and write: the cluster overview, or everything."""

    SUMMARY = "summary"  # step trace and overlap lanes
    DETAIL = "detail"  # plus device streams, communication ops and planes, host activity


@dataclass(frozen=True)
class Options:
    """What to read; every field has the CLI's default. Ranks, graphs and steps: any iterable
    (kept as a frozenset), None for all."""

    ranks: frozenset[int] | None = None
    graphs: frozenset[int] | None = None
    steps: frozenset[int] | None = None
    kind: Kind = Kind.SUMMARY
    merge_graphs: bool = False
    host_level: int = 0  # host stages of lower levels are left out (1: the users' stages only)
    step_marker: str | None = None  # the user's range that is a step, where the reader takes one
    # whether the output draws the flow arrows (convert): only then is an arrow the reader left out
    # a loss worth a warning; an analysis that draws none (and uses them, if at all, as the critical
    # path's launches) says nothing of them (``read_profile``)
    draws_arrows: bool = False
    # whether a detail read files the rank's memory records into its steps (``readers.with_memory``):
    # an analysis that looks at none of them (the critical path, the report's links) reads no memory
    # file (Kineto: its trace once more)
    memory: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))
        for name in ("ranks", "graphs", "steps"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, frozenset(getattr(self, name)))


ALIGNMENTS = ("collectives",)


def aligning(align: str | None) -> bool:
    """Whether ``align`` asks to align the hosts' clocks (``--align``).

    Raises:
        UsageError: it names no alignment.
    """
    if align not in (None, "none", *ALIGNMENTS):
        raise UsageError(f"--align: {align!r} is not one of none, {', '.join(ALIGNMENTS)}")
    return align in ALIGNMENTS


# A rank's work: ``work(info, options, diag, *args)``, a function at a module's top level (it is
# pickled to the workers); what it finds worth a warning goes into ``diag``.
RankWork = Callable[..., Any]


@dataclass
class Profile:
    """One profile, opened: the kept ranks in rank order, what to read of them, where their work
    runs, and what needed saying about the input so far (``diag``)."""

    path: Path
    options: Options
    ranks: list[RankInfo]
    diag: Diagnostics
    where: Where = LOCAL
    apart: tuple[int, ...] = ()  # ranks whose waits with the others cannot be judged (``timeline``)

    @classmethod
    def open(cls, path: str | os.PathLike[str], options: Options, *, where: Where = LOCAL,
             diag: Diagnostics | None = None) -> Profile:
        """The ranks under ``path`` that ``options`` keep.

        Raises:
            UsageError: nothing recognisable under ``path``, unknown ranks or graphs.
            InputError: a rank's description (``info.json``, ...) broken beyond recovery.
        """
        diag = Diagnostics() if diag is None else diag
        ranks = select_ranks(discover(Path(path), diag), options.ranks)
        check_graphs(ranks, options.graphs)
        check_marker(ranks, options.step_marker)
        return cls(Path(path), options, ranks, diag, where)

    def map(self, work: RankWork, args: Callable[[int, RankInfo], tuple] | None = None, *,
            each: Callable[[int, Any], None] | None = None, ordered: bool = False,
            diag: Diagnostics | None = None) -> list[Any]:
        """Run ``work(info, options, diag, *args(index, info))`` for every rank, in worker processes.

        The one policy for ranks that cannot be read: the command fails naming the rank, or, with
        ``where.skip_unreadable``, the rank is left out, named in a warning in ``self.diag``, and
        taken out of ``ranks``. The ranks' warnings go into ``diag`` (default ``self.diag``) in
        rank order, whatever order the workers finish in. Returns the results in rank order, or,
        with ``each``, hands each to it with its rank's index (into ``ranks`` as they were) as it
        arrives (``ordered``: in rank order, as soon as the ranks before it are done) and keeps none.

        Raises:
            InputError: a rank could not be read (``skip_unreadable`` off), or none could.
            ClusterError, UsageError: as ``executor.each_rank``.
        """
        ranks = self.ranks
        jobs = [(work, info, self.options, *(args(index, info) if args else ())) for index, info in
                enumerate(ranks)]
        results: list[Any] = [None] * len(ranks)
        found: list[Diagnostics | None] = [None] * len(ranks)
        waiting: dict[int, Any] = {}
        handed = 0
        progress = self.where.progress
        sizes = [input_bytes(info) for info in ranks] if progress is not None else []
        read = [0]
        if progress is not None:
            progress(0, sum(sizes), None)

        def collect(index: int, outcome: tuple[Any, Diagnostics]) -> None:
            nonlocal handed
            result, found[index] = outcome
            if progress is not None:
                read[0] += sizes[index]
                progress(read[0], sum(sizes), ranks[index].rank)
            if each is None:
                results[index] = result
            elif not ordered:
                each(index, result)
            else:
                waiting[index] = result
                while handed in waiting:
                    each(handed, waiting.pop(handed))
                    handed += 1

        size = None if self.where.remote else sum(input_bytes(info, unpacked=True) for info in ranks)
        skipped = each_rank(_rank_work, jobs, [info.rank for info in ranks], collect, self.where, self.diag,
                            size)
        for index in sorted(waiting):  # after a rank left out as unreadable
            each(index, waiting.pop(index))
        into = self.diag if diag is None else diag
        for mine in found:
            if mine is not None:
                into.merge(mine)
        self.ranks = [info for index, info in enumerate(ranks) if index not in skipped]
        return [] if each is not None else [r for index, r in enumerate(results) if index not in skipped]

    def check_steps(self) -> None:
        """After reading: ``--steps`` of which the kept ranks and graphs hold none is an error, some
        of them absent a warning (``select.check_steps``)."""
        check_steps(self.options.steps, self.diag, self.options.step_marker)

    def align(self) -> dict[int, int]:
        """``--align collectives``: ``timeline`` moving every host's clock."""
        return self.timeline("collectives")

    def timeline(self, align: str | None, move_own: bool = True) -> dict[int, int]:
        """The one clock policy (``communication.timeline``) applied: with ``align`` every host's clock moved
        by its offset to the host of the lowest rank, else only the ranks on clocks of their own put
        on the others' (``move_own``; only where the kept ranks mix clocks: no read otherwise), the offsets
        estimated from the ends of the collectives of the kept steps (one summary read of every
        rank); said in each moved rank's clock description. Returns the shift per rank (ns to add to
        its times); the ranks whose waits cannot be judged are ``self.apart``.

        Raises:
            UsageError: ``align`` names no alignment.
        """
        wanted = aligning(align)
        if not wanted and (len(self.ranks) < 2 or all(info.wall_clock for info in self.ranks)):
            return {}
        from . import communication

        clocks = self.collective_clocks() if wanted or move_own else []
        found = communication.timeline(self.ranks, clocks, wanted, move_own)
        shifts = {rank: -offset for rank, offset in found.offsets.items()}
        infos = self.ranks
        for i, info in enumerate(infos):
            if info.rank in shifts:  # on the reference rank's clock now, one timebase with the others
                infos[i] = dataclasses.replace(
                    info, start_ns=None if info.start_ns is None else info.start_ns + shifts[info.rank],
                    clock=f"{info.clock}; aligned by collectives: {shifts[info.rank] / 1000:+.3f} µs",
                    wall_clock=True)
            elif wanted and info.rank not in found.apart:
                self.diag.warn("not_aligned", f"rank {info.rank}: shares no collective with the host of rank "
                               f"{infos[0].rank}, so its clock was not aligned", f"rank {info.rank}")
        self.apart = found.apart
        communication.say_timeline(self.diag, found)
        return shifts

    def collective_clocks(self) -> list[communication.HostClock]:
        """Each host's clock offset, estimated from the ends of the collectives of the kept steps."""
        from . import communication

        summary = dataclasses.replace(self, options=dataclasses.replace(self.options, kind=Kind.SUMMARY))
        ops = summary.map(light_ops, diag=Diagnostics())  # the reading after this one says what it finds
        self.ranks = summary.ranks
        by_rank = {info.rank: mine for info, mine in zip(self.ranks, ops, strict=True)}
        return communication.clock_offsets(communication.match(by_rank), communication.host_names(self.ranks))


def check_marker(ranks: list[RankInfo], marker: str | None) -> None:
    """``--step-marker`` where every rank's reader takes one (``Reader.step_marker``: Kineto's).

    Raises:
        UsageError: it names no range, or a rank's format has steps of its own only.
    """
    if marker is None:
        return
    from .readers.common.markers import checked  # its Event type needs msgspec: only where a marker is given

    checked(marker)
    others = sorted({info.format for info in ranks if not reader(info.format).step_marker})
    if others:
        raise UsageError(f"--step-marker: {', '.join(others)} profiles have steps of their own only (it "
                         "takes a range of a PyTorch profiler trace as the step)")


def _rank_work(job: tuple) -> tuple[Any, Diagnostics]:
    """One rank's work in a worker, with the diagnostics it gathered."""
    work, info, options, *args = job
    diag = Diagnostics()
    return work(info, options, diag, *args), diag


def light_ops(info: RankInfo, options: Options, diag: Diagnostics) -> list[communication.OpComm]:
    """A rank's communication ops of the kept steps, in the light form matching needs."""
    from . import communication

    return [op for batch in read_profile([info], options, diag)
            for op in communication.light_ops(batch.rank, batch.graph, batch.step_id, batch.key,
                                     (s for s in batch.slices if s.layer is Layer.COMM_OP))]


def input_bytes(info: RankInfo, unpacked: bool = False) -> int:
    """The size of what a rank's reader reads (files, or all files in a folder); ``unpacked``: a
    gzip file counted by its uncompressed size, the bytes the reader goes through."""
    size = _unpacked_size if unpacked else _stored_size
    total = 0
    for source in info.source_paths + info.host_paths:
        if source.is_dir():
            total += sum(size(p) for p in source.iterdir() if p.is_file())
        elif source.is_file():
            total += size(source)
    return total


def _stored_size(path: Path) -> int:
    return path.stat().st_size


def _unpacked_size(path: Path) -> int:
    """A ``.gz`` file's uncompressed size as its trailer gives it (modulo 4 GiB, so never taken below
    its stored size), any other file's size."""
    stored = path.stat().st_size
    if path.suffix != ".gz" or stored < 18:  # 18: a gzip header and trailer
        return stored
    with path.open("rb") as file:
        file.seek(-4, os.SEEK_END)
        return max(stored, int.from_bytes(file.read(4), "little"))


# -- a rank's steps -------------------------------------------------------------------------------

def read_profile(infos: list[RankInfo], options: Options, diag: Diagnostics,
                 memory_to: Callable[[list[Slice | Sample]], None] | None = None) -> Iterator[StepRecords]:
    """The kept steps of every rank in ``infos``, rank by rank, each rank's in time order, each
    with the key that names it across the job (``keyed``); in detail with the rank's host stages
    and, unless ``options.memory`` is False, its memory records. The ids of the steps of the kept
    graphs go to ``diag.steps``, kept or not (``select.check_steps``). The warnings of arrows left
    out are taken back once a rank is read, unless ``options.draws_arrows``. ``memory_to``: where a
    reader that meets its memory records in its pass over the files (``Reader.memory_in_read``)
    hands them all, in a read that files none into its steps (the report's, for its memory)."""
    detail = options.kind is Kind.DETAIL
    marker = {} if options.step_marker is None else {"step_marker": options.step_marker}
    files_memory = detail and options.memory
    if memory_to is not None and (files_memory or not all(reader(i.format).memory_in_read for i in infos)):
        raise ValueError("memory_to: for a read that files no memory, of readers that meet their own")
    for info in infos:
        feed = memory_feed(info) if files_memory else memory_to
        steps = reader(info.format).read(info, diag, detail=detail, **marker,
                                         **({} if feed is None else {"memory": feed}))
        if detail and info.host_paths:
            steps = reader("host_info").attach(steps, info, diag, min_level=options.host_level)
        if files_memory:
            steps = with_memory(steps, info, diag, feed)
        for batch in carried_on(keyed(steps)):
            if options.graphs is not None and batch.graph not in options.graphs:
                continue
            if batch.step_id is not None:
                diag.steps.add(batch.step_id)
            if options.steps is None or batch.step_id in options.steps:
                yield batch
        if not options.draws_arrows:
            forget_flow_warnings(diag, info.rank)


def keyed(steps: Iterable[StepRecords]) -> Iterator[StepRecords]:
    """One rank's steps, in the order read, each with its ``StepKey``: the run of its graph, by
    the order in which the rank's runs began, and its step id. A run begins with a graph not seen
    before, or with a step id not above the last of its graph (CANN numbers each graph's iterations
    from 1, and a second training or evaluation loop counts from 1 again), so the keys of one
    graph's steps rise in the order read: chunks encoded in that order are never written out of it
    (``budget.assemble``). Every step is keyed, also those ``--graphs`` or ``--steps`` leave out."""
    latest: dict[int | None, StepKey] = {}  # graph id -> the key of its latest step
    runs = 0
    for batch in steps:
        if batch.step_id is not None:
            before = latest.get(batch.graph)
            if before is None or batch.step_id <= before.step:  # a run begins
                run, runs = runs, runs + 1
            else:
                run = before.graph
            batch.key = latest[batch.graph] = StepKey(run, batch.step_id)
        yield batch


def carried_on(steps: Iterable[StepRecords]) -> Iterator[StepRecords]:
    """One rank's steps, in time order, each with its ``StepIntervals``: what it computed and
    communicated within the time it owns (``owned``), and the communication of earlier steps that
    ran on into it. A step's figures never exceed its time: a collective that outlasts its step (a
    gloo range waiting a second for a slow peer) counts up to the step's end there, and the rest in
    the steps it runs into (in none where it runs between steps). torch_npu files an op whole under
    the step it starts in, so its figures can exceed the step; where nothing outlasts its step
    (every real sample), the two agree. The pseudo step (no step bounds it) takes no part; where it
    comes in parts (``StepRecords.part``), ``_Parts`` makes their figures add up to the whole's."""
    carried: tuple[list[Interval], list[Interval]] = ([], [])
    parts = _Parts()
    for batch in steps:
        if batch.step is not None:
            batch.intervals, carried = step_intervals_of(batch, carried)
        elif batch.part is not None:
            if batch.part[0] == 0:
                parts = _Parts()
            parts.take(batch)
        else:  # once, here: its overlap row and its span both ask for them
            batch.intervals = step_intervals_of(batch)[0]
        yield batch


class _Parts:
    """The parts of a pseudo step so far, which tile its time: each part's work is cut where the
    device is idle before the next part begins (else where it begins: a task then shows as two
    slices) and the rest carried into the next; its Free is measured from the end of the work of
    the parts before (``device_span``). So the parts' figures add up to the whole step's."""

    def __init__(self) -> None:
        self.running: tuple[list[Interval], ...] = ([], [], [])  # compute, ops, tasks past the cut
        self.ops_seen = False
        self.cut: int | None = None  # where the last part's time ended
        self.busy_until: int | None = None  # the end of the work of the parts so far

    def take(self, batch: StepRecords) -> None:
        """Give ``batch`` (the next part) its ``StepIntervals`` and the span its Free is measured in."""
        compute, ops, tasks, seen = step_intervals(
            batch.slices, Layer.STREAM, Layer.COMM_OP, Layer.COMM_TASK, intervals.is_compute)
        lanes = [compute, ops, tasks]
        if any(self.running):
            lanes = [intervals.union(x + y) for x, y in zip(lanes, self.running, strict=True)]
        self.ops_seen = self.ops_seen or seen
        cut = self.idle_before(lanes, batch.part[1] if batch.part else None)
        self.running = tuple(intervals.clip(x, cut, None) for x in lanes) if cut is not None else ([], [], [])
        if cut is not None:
            lanes = [intervals.clip(x, None, cut) for x in lanes]
        self.cut = cut
        batch.intervals = StepIntervals(*lanes, self.ops_seen)
        busy = [lane for lane in (lanes[0], communication_of(batch.intervals, batch.ops_recorded)) if lane]
        if busy:
            first = min(lane[0][0] for lane in busy)
            if self.busy_until is not None and self.busy_until < first:
                batch.device_span = (self.busy_until, first)
            self.busy_until = max(lane[-1][1] for lane in busy)

    def idle_before(self, lanes: list[list[Interval]], end: int | None) -> int | None:
        """Where this part's time ends: ``end`` (None: the last part), or earlier, at the start of
        the work running at ``end``, if that starts after the last part's time ended."""
        if end is None:
            return None
        busy = intervals.union(x for lane in lanes for x in lane)
        k = bisect.bisect_right(busy, end, key=itemgetter(0)) - 1  # the last to start by the end
        if k < 0 or not busy[k][0] < end < busy[k][1] or (self.cut is not None and busy[k][0] <= self.cut):
            return end
        return busy[k][0]


def folded(results: Iterable[tuple[tuple[int, int | None] | None, T]], join: Callable[[T, T], T]
           ) -> Iterator[T]:
    """Each step's result from (its ``StepRecords.part``, its result), those of a pseudo step's
    parts joined into one by ``join``, the earlier parts' first: a step's figures where they add up."""
    held: list[T] = []
    for part, result in results:
        if held and part is not None and part[0] > 0:
            held[0] = join(held[0], result)
            continue
        yield from held
        held = [result]
    yield from held


def summed(a: T, b: T, fields: Iterable[str]) -> T:
    """``a`` (a dataclass) with each of its ``fields`` added to ``b``'s: None where either is unknown."""
    return dataclasses.replace(a, **{f: plus(getattr(a, f), getattr(b, f)) for f in fields})  # type: ignore[type-var]


def plus(a: int | None, b: int | None) -> int | None:
    """The sum of two figures, unknown (None) where either is."""
    return None if a is None or b is None else a + b


def whole_steps(steps: Iterable[StepRecords]) -> Iterator[StepRecords | TooLarge]:
    """The steps with a pseudo step's parts joined into one, held whole: for what needs all of a
    step at once (its critical path, its pipeline schedule). One of more than ``MOST_HELD``
    records comes as a ``TooLarge``: unknown, rather than memory filled."""
    parts: list[StepRecords] = []
    held: TooLarge | None = None  # the open pseudo step's bounds so far
    for batch in steps:
        if held is not None and not (batch.part is not None and batch.part[0] > 0):
            yield _joined(parts, held)
            parts, held = [], None
        if batch.part is None:
            yield batch
            continue
        held = (held or TooLarge(batch.rank, batch.has_device, 0, None, None)).with_part(batch)
        if held.records <= MOST_HELD:
            parts.append(batch)
        else:
            parts.clear()
    if held is not None:
        yield _joined(parts, held)


MOST_HELD = 150_000  # records of a pseudo step joined whole: ~230 MiB with its critical path's graph


class TooLarge(NamedTuple):
    """A pseudo step of more than ``MOST_HELD`` records, not joined (``whole_steps``): its rank,
    its records, and the first start and last end of its compute and communication (None: none)."""

    rank: int
    has_device: bool
    records: int
    first_ns: int | None
    last_ns: int | None

    @property
    def key(self) -> None:
        """The pseudo step's ``StepKey``: none."""
        return None

    @property
    def why(self) -> str:
        return (f"rank {self.rank}'s capture, which no step bounds, holds {self.records:,} records: too "
                "many to hold at once (mark steps: --step-marker)")

    def with_part(self, part: StepRecords) -> TooLarge:
        lanes = [lane for lane in part.intervals[:3] if lane] if part.intervals else []  # compute, ops, tasks
        first = min((lane[0][0] for lane in lanes), default=None)
        last = max((lane[-1][1] for lane in lanes), default=None)
        return self._replace(
            records=self.records + len(part.slices) + len(part.samples),
            first_ns=first if self.first_ns is None else self.first_ns,
            last_ns=self.last_ns if last is None else last)


def _joined(parts: list[StepRecords], held: TooLarge) -> StepRecords | TooLarge:
    if not parts:
        return held
    if len(parts) == 1 and parts[0].part == (0, None):
        return parts[0]
    whole = dataclasses.replace(parts[0], slices=[s for p in parts for s in p.slices],
                                samples=[v for p in parts for v in p.samples], part=None)
    whole.intervals = step_intervals_of(whole)[0]
    return whole


def owned(step: Step | None, compute: list[Interval]) -> Interval | None:
    """The time a step owns in the overlap analysis: from its start to its end, or on to the end of
    its last compute task where the device runs behind the host (torch_npu's step range ends at
    the last task the step launched, or the step's end if later). None: the pseudo step."""
    if step is None:
        return None
    return step.start_ns, max(step.end_ns, compute[-1][1]) if compute else step.end_ns


def step_intervals_of(batch: StepRecords, carried: tuple[list[Interval], list[Interval]] = ([], [])
                      ) -> tuple[StepIntervals, tuple[list[Interval], list[Interval]]]:
    """The step's ``StepIntervals``, with the ops and plane tasks ``carried`` into it from earlier
    steps; and the ops and tasks that run on past the time it owns, for the next step."""
    compute, ops, tasks, ops_seen = step_intervals(  # C: the unions of each kind, in one pass
        batch.slices, Layer.STREAM, Layer.COMM_OP, Layer.COMM_TASK, intervals.is_compute)
    if carried[0] or carried[1]:
        ops, tasks = intervals.union(ops + carried[0]), intervals.union(tasks + carried[1])
        ops_seen = ops_seen or bool(carried[0])
    window = owned(batch.step, compute)
    if window is None:
        return StepIntervals(compute, ops, tasks, ops_seen), ([], [])
    low, high = window
    on = (intervals.clip(ops, high, None), intervals.clip(tasks, high, None))
    return StepIntervals(*(intervals.clip(x, low, high) for x in (compute, ops, tasks)), ops_seen), on


def renumbered(batch: StepRecords, offset: int) -> StepRecords:
    """The step with its rank, and its records', moved by ``offset`` (drawn beside another run), and
    its arrows' ids moved apart from the other run's (the readers derive them from the rank)."""
    mask = offset * _GOLDEN & _U64

    def moved(s: Slice) -> Slice:
        return s._replace(rank=s.rank + offset, flows_out=tuple(f ^ mask for f in s.flows_out),
                          flows_in=tuple(f ^ mask for f in s.flows_in))

    return dataclasses.replace(batch, rank=batch.rank + offset, slices=[moved(s) for s in batch.slices],
                               samples=[v._replace(rank=v.rank + offset) for v in batch.samples])


_GOLDEN, _U64 = 0x9E3779B97F4A7C15, 2**64 - 1  # an odd multiplier spreads offsets over the 64 bits


def shifted(batch: StepRecords, shift_ns: int) -> StepRecords:
    """The step with every time moved by ``shift_ns`` (a host's clock offset taken off)."""
    step = batch.step
    if step is not None:
        step = Step(step.graph, step.step, step.start_ns + shift_ns, step.end_ns + shift_ns, step.host_start)
    span, at = batch.device_span, SLICE_START_NS
    return dataclasses.replace(
        batch, step=step,
        slices=[Slice(*s[:at], s.start_ns + shift_ns, *s[at + 1:]) for s in batch.slices],
        samples=[Sample(v.rank, v.lane, v.start_ns + shift_ns, v.value) for v in batch.samples],
        device_span=None if span is None else (span[0] + shift_ns, span[1] + shift_ns),
        intervals=None if batch.intervals is None else StepIntervals(
            *([(a + shift_ns, b + shift_ns) for a, b in lane] for lane in batch.intervals[:3]),
            batch.intervals.ops_seen),
    )


# The overlap lanes of a step: here, with the time the step owns, rather than with the overlap
# report, so that `info` and the conversion draw them without loading the report (issue 44).

def overlap_slices(batch: StepRecords) -> list[Slice]:
    """The step's Computing / Communication / not overlapped / Free lanes as slices; only
    Communication where the input records no device tasks (the others are unknown there)."""
    lanes = step_overlap(batch).lanes()
    if not batch.has_device:
        lanes = {"Communication": lanes["Communication"]}
    return overlap_as_slices(lanes, batch.rank, Layer.OVERLAP, Slice)  # C: a summary makes millions


def communication_of(found: StepIntervals, ops_recorded: bool) -> list[Interval]:
    """A step's communication: its ops, or its plane tasks where the input records no op level."""
    return found.ops if found.ops_seen or ops_recorded else found.tasks


def step_overlap(batch: StepRecords) -> intervals.Overlap:
    """Overlap analysis of one step: compute tasks against communication ops (docs/design.md §5), within
    the time the step owns (``carried_on``; a step read otherwise has nothing carried into it)."""
    found = batch.intervals or step_intervals_of(batch)[0]
    compute, ops = found.compute, communication_of(found, batch.ops_recorded)
    span, window = batch.device_span, owned(batch.step, compute)
    if span is not None and window is not None:
        span = (max(span[0], window[0]), min(span[1], window[1]))
    return intervals.analyse_unions(compute, ops, span)
