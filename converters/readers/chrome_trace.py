"""Chrome-trace event files, in the dialect of Ascend's tools (CANN msprof, torch_npu, MindSpore)
unless a reader gives its own (``Dialect``: PyTorch's Kineto, Paddle).

Shared by the readers whose files are such traces: ``msprof`` (timeline and CANN 7/8
``msprof_*.json``), ``ascend_pt`` (``trace_view.json``), ``kineto`` and ``paddle``. Lanes are named
by process and thread name, never by pid (docs/formats.md §3.3, §5.3), and those names may come anywhere
in a file (torch_npu writes them after the host events): "Ascend Hardware" streams,
"HCCL"/"Communication" ops and planes, "CANN", "Python" and "MindSpore" host threads; "Overlap
Analysis" (the vendor's own lanes) is skipped. Any other process (MindSpore's "CPU OP" and "Scope
Layer", ...) is drawn as lanes "<process> / <thread>" of the host, or of the device when its name
says it is one. Steps come from the CANN step trace (``Iteration N``) or from torch_npu's
``ProfilerStep#N``. Times are µs as numbers (plus the rank's clock offset) or strings (torch_npu,
MindSpore: epoch µs with 3 decimals), parsed exactly to ns. What is not read is said
(``Records.report``).
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any, NamedTuple

import msgspec

from ..errors import NOTHING_DRAWN, Diagnostics
from ..intervals import NOT_COMPUTE, is_compute
from ..model import (
    ID_LIMIT,
    FlowEnd,
    Layer,
    RankInfo,
    Sample,
    Slice,
    Step,
    StepRecords,
    checked_id,
    checked_ns,
    comm_type,
)
from . import collectives
from ._core import RawEvents, by_kind, read_events, steps_and_names
from .common import markers, seek
from .common.events import ANY, EVENTS, Event, batches, is_profiler_step
from .common.flows import linked
from .common.parts import PART_WINDOW_NS, Parts, in_parts
from .common.spill import ByStep, ByTime, StepSpill
from .common.spilled_flows import Launched, Packed, SpilledFinishes, file_by_step, link_spilled
from .common.times import us_to_ns

BATCH_BYTES = 2 << 20  # read and decoded at a time: memory holds about this much of a file
_STEP_TRACE_THREAD = re.compile(r"Model ID:\s*(\d+)")


MAX_FLOW_STEPS = 4  # an arrow may end this many steps after the one it starts in; longer ones are left out


def read_merged(rank: RankInfo, files: list[Path], diag: Diagnostics, detail: bool,
                dialect: Dialect | None = None) -> Iterator[StepRecords]:
    """One trace of a whole rank (or its slices), read twice so memory holds a step (and the few
    an arrow still has to reach from), never the file.

    The first pass takes every metadata event and the step trace, resolving the step events only
    once all processes are named (torch_npu writes its metadata after the host events, CANN
    anywhere); the second turns every other event into a record, files it under the step it
    starts in (the last step started at or before it) in a spill file, and then each step is
    read back whole, its arrows bound (``flows.Linker``). The file need not be time-ordered.
    A big file in Ascend's dialect has its first pass made from its text (``_sought``).
    """
    dialect = dialect or ASCEND
    sought = _sought(rank, files, detail, dialect)
    if sought is not None:
        records, steps, spill, notes = sought
        for kind, text in notes.items():
            diag.note(kind, text)
        try:
            yield from _linked_spill(records, steps, spill, diag)
        finally:
            spill.__exit__()
        return
    records = Records(rank, None, detail, dialect)
    for path in files:
        records.read_steps(path, diag)
    if dialect.step_marker is not None:
        records.number_marked(files, diag)
    steps = _steps(records)
    dialect.steps_known([step for step, _ in steps], diag)
    if not steps:  # no step trace: all of it is one pseudo step, in parts in time order
        with StepSpill() as spill:
            held = ByTime(spill, rank.rank, PART_WINDOW_NS)
            for path in files:
                records.read(path, diag, steps=False, into=held.add)
            dialect.finish(rank, diag)
            parts = in_parts(Parts(rank.rank, records.saw_device), held.take_before(None))
            yield from linked(parts, diag, events=dialect.flow_events)
        return
    with StepSpill() as spill:
        launched = _spill_pass(records, files, steps, spill, diag)
        dialect.finish(rank, diag)
        yield from _linked_spill(records, launched.extended(steps), spill, diag)
        yield from launched.outside(rank, spill, records.saw_device, diag)


_Steps = list[tuple[Step, list[Slice]]]


def _sought(rank: RankInfo, files: list[Path], detail: bool,
            dialect: Dialect) -> tuple[Records, _Steps, StepSpill, dict[str, str]] | None:
    """The records pass of ``read_merged`` on one big plain file in Ascend's dialect, after a first
    pass made from the text every metadata event and step must hold (``seek``), not a scan of
    every event: the records, steps, spill (open) and notes, if the records pass, which sees every
    event, met the same metadata and steps, and nothing was warned of (then the usual way reads
    the same, and says the same). None where the text does not tell, or the passes differ: then
    the file is read the usual way."""
    path = files[0]
    if dialect is not ASCEND or len(files) != 1 or path.name.endswith(".gz"):
        return None
    try:  # a file that cannot be read is said so by the usual way
        found = seek.names_and_steps(path) if path.stat().st_size > BATCH_BYTES else None
    except OSError:
        return None
    if found is None:
        return None
    names, candidates = found
    tried = Diagnostics()
    records = Records(rank, None, detail, dialect)
    records.take_sought(path, names, candidates, tried)
    steps = _steps(records)
    if not steps or tried.counts:
        return None
    spill = StepSpill().__enter__()
    seen: tuple[list[str], list[str]] = ([], [])
    try:
        _spill_pass(records, files, steps, spill, tried, seen)
    except Exception:  # the usual way meets it too, and says what it says before it
        spill.__exit__()
        return None
    except BaseException:
        spill.__exit__()
        raise
    if tried.counts or seen != (seek.keys(names), seek.keys(candidates)):
        spill.__exit__()
        return None
    return records, steps, spill, tried.notes


def _steps(records: Records) -> _Steps:
    return sorted(((s, phases) for s, phases in records.steps.values() if s), key=lambda p: p[0].start_ns)


def _spill_pass(records: Records, files: list[Path], steps: _Steps, spill: StepSpill, diag: Diagnostics,
                seen: tuple[list[str], list[str]] | None = None) -> Launched:
    """Every event but the first pass's into a record, filed under its step in ``spill`` (packed as
    it is read: ``by_step``), the device work a dialect files by its launch under the step that
    launched it (``Dialect.steps_known``, ``Launched``); ``seen`` takes the metadata and possible steps met
    (``seek.keys``)."""
    starts = [step.start_ns for step, _ in steps]
    launched = Launched(len(steps))
    for path in files:
        for batch in records.read_batches(path, diag, seen=seen, by_step=spill.by_step(starts)):
            file_by_step(batch, starts, spill)
            del batch  # its runs freed before the next batch is read: ~1 MB less at the peak
            if records.launched:
                launched.file(records.take_launched(), spill)
    return launched


def _linked_spill(records: Records, steps: _Steps, spill: StepSpill,
                  diag: Diagnostics) -> Iterator[StepRecords]:
    """The spilled steps read back one at a time, their arrows bound."""
    rank, device = records.rank, records.saw_device  # known only now: the spill pass saw every event

    def load(index: int) -> tuple[StepRecords, list[FlowEnd]]:
        step, phases = steps[index]
        found = phases + spill.load(index, rank.rank)
        return step_records(rank, step.graph, step.step, step, found, device)

    finishes = SpilledFinishes(spill, len(steps), MAX_FLOW_STEPS)
    return link_spilled(len(steps), load, finishes, diag, records.dialect.flow_events)


def in_python(events: list[Event] | RawEvents, index: int, out: list, python: Callable[[Event, int], None],
              context: ReadContext, by_step: ByStep | None = None) -> tuple[int, bool, None]:
    """``_core.read_events`` without C: every event but metadata by ``python(event, index)``, the
    records left in ``out`` (none packed: ``by_step`` is for C)."""
    metadata = 0
    for at, event in enumerate(events, index):
        if event.ph == "M":
            metadata += 1
        else:
            python(event, at)
    return metadata, False, None


def step_records(
    rank: RankInfo, graph: int | None, step_id: int | None, step: Step | None,
    records: list[Slice | Sample | FlowEnd], has_device: bool = True,
) -> tuple[StepRecords, list[FlowEnd]]:
    """One step's records with counters sorted out from the slices, and its flow ends apart."""
    slices, samples, ends = by_kind(records, Slice, Sample, FlowEnd)
    return StepRecords(rank.rank, graph, step_id, step, slices, samples, has_device=has_device), ends


# A process the reader does not know is a device's when its name says so (its events are drawn
# with the device streams, but count as computation only if they say their Task Type); any other
# one is host activity.
_DEVICE_WORDS = re.compile(r"NPU|Ascend|Device|GPU", re.IGNORECASE)


class Dialect:
    """How one profiler's Chrome traces map to the model; this one is Ascend's tools'. Readers
    of other profilers' traces (``kineto``, ``paddle``) subclass it.

    ``route`` sends each (process, thread) to a layer, to the step trace, to None (skipped), or
    to a kind of the dialect's own (a str), whose events ``convert`` reads one by one in Python;
    so do the events of ``python_cats``, whatever their route.
    """

    events: msgspec.json.Decoder  # decodes a batch of events
    python_cats: frozenset[str] | None = None
    step_marker: str | None = None  # the user's range that is the step (--step-marker), not the profiler's
    by_design: frozenset[str] = frozenset()  # reasons of ``convert`` said only when nothing is read
    flow_events: bool = True  # its flow ends are the trace's flow events, not taken from slices' args
    # a host event's task type by its category (where no ``python_cats`` reads it): Paddle's operators
    host_tasks: Mapping[Any, str] = MappingProxyType({})

    def route(self, process: str, thread: str, pid: Any, tid: Any) -> Route:
        if process == "Step Trace" or thread.startswith("Step Trace"):
            return Route(_STEP_TRACE, thread)
        if process == "Ascend Hardware":
            return Route(Layer.STREAM, thread or f"Stream {tid}")
        if process in ("HCCL", "Communication"):
            if thread.startswith("Plane"):
                return Route(Layer.COMM_TASK, thread)
            return Route(_HCCL_OP, thread or "Communication")  # read in Python: what each op does
        if process in ("CANN", "Python", "MindSpore"):
            return Route(Layer.HOST, f"{process} {thread or tid}")
        if process == "Overlap Analysis":  # CANN's own lanes: the project computes its own
            return Route(None, "")
        # any other process (MindSpore's "CPU OP", "Scope Layer", a GPU, ...) is drawn, never dropped
        lane = f"{process or f'Process {pid}'} / {thread or tid}"
        return Route(Layer.STREAM if _DEVICE_WORDS.search(process) else Layer.HOST, lane)

    def batches(self, path: Path, diag: Diagnostics) -> Iterator[list[Event] | RawEvents]:
        """The file's events, a batch at a time (a dialect of another file format makes them)."""
        return batches(path, diag, self.events, BATCH_BYTES)

    def first_pass(self, path: Path, diag: Diagnostics) -> Iterator[list[Event] | RawEvents]:
        """The batches of the first pass (``Records.read_steps``), which takes only metadata events and
        steps: ``batches``' (a dialect may make Events of those alone: Paddle)."""
        return self.batches(path, diag)

    def step_number(self, event: Event, kind: Layer | str) -> int | None:
        """The step an event starts, if it is one: torch_npu's ``ProfilerStep#N`` on the host."""
        return int(event.name[13:]) if kind is Layer.HOST and is_profiler_step(event.name) else None

    def marks_step(self, event: Event, kind: Layer | str) -> bool:
        """Whether an event is a host range of the user's ``step_marker`` (``markers.marks``)."""
        return kind is Layer.HOST and markers.marks(self.step_marker, event)

    def convert(self, event: Event, kind: Layer | str, lane: str) -> Converted | str:
        """An event of the dialect's own kinds or categories: where it is drawn, or why it is
        left out (counted, and said by ``Records.report``). Ascend's: an HCCL op, what it does and
        its communicator from its name."""
        name = str(event.name)
        return Converted(Layer.COMM_OP, lane, name, meaning=comm_type(collectives.hccl(name),
                                                                       collectives.hccl_group(name)))

    def in_c(self, launched: dict[int, list]) -> tuple | None:
        """The rules by which ``_core.read_events`` reads the dialect's own events in C (Kineto's
        ``InC``; ``launched``: ``Records.launched``), or None: they are all Python's."""
        return None

    def survey(self, events: list[Event] | RawEvents, rank: RankInfo) -> None:
        """The first pass's look at a batch of events, besides its steps and metadata (Kineto's
        launches)."""

    def steps_known(self, steps: list[Step], diag: Diagnostics) -> None:
        """After the first pass: the steps (in order of their start; none: the pseudo step), by
        which ``convert`` may file device work under the step that launched it (``Converted.step``)."""

    def finish(self, rank: RankInfo, diag: Diagnostics) -> None:
        """After the records pass over the rank's files: what the dialect has to say of them."""


class Converted(NamedTuple):
    """A dialect's reading of one event: where it is drawn, and the arrow end it makes, if any."""

    layer: Layer
    lane: str
    name: str
    task_type: str = ""
    flow: tuple[str, bool] | None = None  # (key, starts): an arrow end at the event's start
    on_device: bool = True  # False: not device activity (a collective run by the CPU, on gloo)
    step: int | None = None  # device work filed by its launch: the index of its step (or OUTSIDE)
    args: bytes | None = None  # its args as the dialect completed them (None: the event's own)
    # the record's task_type where it is not the Task Type its args show (``task_type``): what a
    # communication op does (``model.comm_type``), a GPU kernel's ``model.GPU_KERNEL``
    meaning: str = ""


# -- events to records --------------------------------------------------------------------------

_STEP_TRACE = "step trace"  # a route's kind besides the layers; None skips the events
_HCCL_OP = "HCCL op"  # Ascend's communication ops: Layer.COMM_OP, each read by ``Dialect.convert``


class Route(NamedTuple):
    """Where the events of one (pid, tid) go: a layer, ``_STEP_TRACE``, a dialect's own kind (a
    str), or None to skip them; and their lane. ``_core.read_events`` reads it by position
    (``records.h``)."""

    kind: Layer | str | None
    lane: str


class _TaskArgs(msgspec.Struct):
    task_type: Any = msgspec.field(default="", name="Task Type")


Dialect.events = EVENTS
ASCEND = Dialect()
_TASK_ARGS = msgspec.json.Decoder(_TaskArgs)


class ReadContext(NamedTuple):
    """What ``_core.read_events`` takes of a ``Records``: its state and rules, read by position
    (``records.h``). C adds to ``unread`` and reads ``routes`` as Python fills them."""

    routes: dict[tuple[Any, Any], Route]  # by (pid, tid)
    rank: int
    offset_ns: int  # the rank's clock offset
    detail: bool
    unread: Counter[tuple[str, Any]]  # (why, pid) of events left out
    reasons: LeftOut  # the whys of what C leaves out
    is_compute: Callable[[str], bool]  # by task type: what a summary keeps
    layer_type: type[Layer]
    slice_type: type[Slice]
    flow_end_type: type[FlowEnd]
    python_cats: frozenset[str] | None  # categories whose events Python reads
    processes: dict[Any, str]  # process names by pid, for counters' names
    sample_type: type[Sample]
    dialect: tuple | None  # Dialect.in_c: the rules for the dialect's own events C reads, if any
    host_tasks: Mapping[Any, str]  # Dialect.host_tasks: a host event's task type by its category


class Records:
    """Slices and steps of one rank's events, lanes named by process and thread name.

    Metadata may lie anywhere in a file: ``read`` and ``read_steps`` take all of it before they
    route any event (``read_batches`` relies on one of them having been called on the file).
    """

    def __init__(self, rank: RankInfo, model: int | None, detail: bool = True,
                 dialect: Dialect = ASCEND) -> None:
        self.rank, self.model, self.detail, self.dialect = rank, model, detail, dialect
        self.slices: list[Slice | Sample | FlowEnd] = []  # samples and flow ends too, in detail
        # (graph, iteration) -> (its Step, its step trace phases)
        self.steps: dict[tuple[int | None, int], tuple[Step | None, list[Slice]]] = {}
        self.saw_device = False  # any event of a device layer (streams, communication ops, planes)
        self._processes: dict[Any, str] = {}
        self._threads: dict[tuple[Any, Any], str] = {}
        self._routes: dict[tuple[Any, Any], Route] = {}
        self._named: set[Path] = set()  # files whose metadata has all been read
        self._steps_wanted = self._slices_wanted = True
        self._unread: Counter[tuple[str, Any]] = Counter()  # (why, pid) of events left out, per file
        self._marked: list[tuple[int, int]] = []  # (start, dur) of the ranges of the dialect's step marker
        # device records a dialect files by their launch (``Converted.step``), by step index
        self.launched: defaultdict[int, list[Slice | FlowEnd]] = defaultdict(list)

    def read(self, path: Path, diag: Diagnostics, *, steps: bool = True, slices: bool = True,
             into: Callable[[list[Slice | Sample | FlowEnd]], None] | None = None) -> None:
        """Read a file's metadata, then its step trace (if ``steps``) and other events (if
        ``slices``), into ``self.steps`` and ``self.slices``, or each batch's records ``into``."""
        if path not in self._named and path.stat().st_size > BATCH_BYTES:
            self.read_metadata(path, diag)  # more than one batch: the names may come after the events
        for batch in self.read_batches(path, diag, steps=steps, slices=slices, keep=into is None):
            if into is not None:
                into(batch)  # type: ignore[arg-type]

    def read_metadata(self, path: Path, diag: Diagnostics) -> None:
        """Every process and thread name of the file, wherever they lie."""
        for events in self.dialect.batches(path, diag):
            for event in steps_and_names(events, 0)[0]:
                self._metadata(event)
        self._named.add(path)

    def read_batches(self, path: Path, diag: Diagnostics, *, steps: bool = False, slices: bool = True,
                     keep: bool = False, seen: tuple[list[str], list[str]] | None = None,
                     by_step: ByStep | None = None) -> Iterator[list[Slice | Sample | FlowEnd] | Packed]:
        """Like ``read``, a batch of events at a time, yielding each batch's records (which are
        kept in ``self.slices`` too only if ``keep``), or, ``by_step``, the records packed by step
        as they were read (C makes no tuple of them), where it could pack them all. At the end, says
        what of the file was not read, and why (``report``). ``seen`` takes the metadata events and
        possible steps met, as ``seek.keys``."""
        self._steps_wanted, self._slices_wanted = steps, slices
        self._unread.clear()
        index = made = events_seen = 0
        context = ReadContext(
            routes=self._routes, rank=self.rank.rank, offset_ns=self.rank.clock_offset_ns, detail=self.detail,
            unread=self._unread, reasons=_LEFT_OUT_IN_C, is_compute=is_compute, layer_type=Layer,
            slice_type=Slice, flow_end_type=FlowEnd, python_cats=self.dialect.python_cats,
            processes=self._processes, sample_type=Sample,
            # a user's step marker may be any host range: those the first pass takes are Python's
            dialect=None if steps and self.dialect.step_marker is not None
            else self.dialect.in_c(self.launched), host_tasks=self.dialect.host_tasks)
        # the common events in C (c/chrome_trace.c), by the rules of _event; the rest there
        read = read_events if slices else in_python

        def event_of(event: Event, at: int) -> None:
            self._event(event, at, path, diag, slices)

        for events in self.dialect.batches(path, diag):
            events_seen += len(events)
            if path not in self._named:  # names first, wherever they lie in the batch
                for event in steps_and_names(events, index)[0]:
                    self._metadata(event)
            if seen is not None:
                names, candidates = steps_and_names(events, index)
                seen[0].extend(seek.keys(names))
                seen[1].extend(seek.keys(event for _, event in candidates))
            kept_before = len(self.slices)
            metadata, device, filed = read(events, index, self.slices, event_of, context, by_step)
            self.saw_device = self.saw_device or device
            events_seen -= metadata
            index += len(events)
            if filed is not None:
                made += filed[1] + sum(map(len, self.launched.values()))
                yield Packed(*filed)
                filed = None  # not held while the next batch is read: peak RSS
                continue
            made += len(self.slices) - kept_before + sum(map(len, self.launched.values()))
            yield self.slices if keep else self.take_slices()
        self.report(path, events_seen, made + len(self.steps), diag)

    def _event(self, event: Event, index: int, path: Path, diag: Diagnostics, slices: bool) -> None:
        """Any event but metadata: a slice, a counter, a flow end, or what was left out and why."""
        ph = event.ph
        if ph == "X" or ph == "i" or ph == "I":  # an instant (PyTorch's, Paddle's): a slice of no length
            self._complete(event, index, path, diag)
        elif ph == "s" or ph == "f" or ph == "t":  # a flow step ends an arrow too
            if slices and self.detail:
                self._flow_end(event)
            else:
                self._unread[_DETAIL_ONLY_FLOWS, event.pid] += 1
        elif ph == "C":
            if slices and self.detail:
                self._counter(event, index, path, diag)
            else:
                self._unread[_DETAIL_ONLY_COUNTERS, event.pid] += 1
        elif ph or event.name:
            self._unread[f"events of phase {ph!r}, which are not converted", event.pid] += 1
        # else: an empty object, no event (Paddle ends its array with one)

    def read_steps(self, path: Path, diag: Diagnostics) -> None:
        """The first pass: every metadata event, then the step events among the rest, routed
        once all processes and threads are named, wherever their metadata lies in the file."""
        self._steps_wanted, self._slices_wanted = True, False
        candidates: list[tuple[int, Event]] = []
        index = 0
        marker = self.dialect.step_marker
        for events in self.dialect.first_pass(path, diag):  # C sorts out the few events this pass takes
            names, steps = steps_and_names(events, index, None if marker is None else marker.rstrip("*"))
            for event in names:
                self._metadata(event)
            self.dialect.survey(events, self.rank)
            for _, event in steps:  # its args apart: a msgspec.Raw keeps its whole batch alive
                event.args = msgspec.Raw(bytes(event.args))
            candidates += steps
            index += len(events)
        self._named.add(path)
        for index, event in candidates:
            self._complete(event, index, path, diag)

    def take_sought(self, path: Path, names: list[Event], candidates: list[Event], diag: Diagnostics) -> None:
        """``read_steps`` from the metadata events and possible steps ``seek`` found in the file."""
        for event in names:
            self._metadata(event)
        self._named.add(path)
        self._steps_wanted, self._slices_wanted = True, False
        for index, event in enumerate(candidates):
            self._complete(event, index, path, diag)

    def report(self, path: Path, events: int, made: int, diag: Diagnostics) -> None:
        """Say what of a file was left out: all of it (a warning: the conversion would be empty
        for it), or events the reader cannot convert (a note); parts that summary output leaves
        out by design are said only when nothing else was read."""
        unread, told = self._unread, _BY_DESIGN | self.dialect.by_design
        if events and not made:
            by_design = all(why in told for why, _ in unread)
            diag.warn(NOTHING_DRAWN if by_design else "nothing_read", f"{path}: {events} events of processes "
                      f"{self._names(unread)} were not read: {self._reasons(unread)}")
        elif any(why not in told for why, _ in unread):
            left = Counter({key: n for key, n in unread.items() if key[0] not in told})
            rank = self.rank.rank
            diag.note(f"unread_events {rank}", f"{path}: {sum(left.values())} events not converted: "
                      f"{self._reasons(left)} (other files of rank {rank} may hold more)")

    def _names(self, unread: Counter[tuple[str, Any]]) -> str:
        names = sorted({self._processes.get(pid) or f"pid {pid}" for _, pid in unread})
        return ", ".join(names) or ", ".join(sorted(set(self._processes.values()))) or "without names"

    def _reasons(self, unread: Counter[tuple[str, Any]]) -> str:
        by_reason: dict[str, Counter[str]] = defaultdict(Counter)
        for (why, pid), count in unread.items():
            by_reason[why][self._processes.get(pid) or f"pid {pid}"] += count
        said = [f"{sum(c.values())} {why} ({', '.join(sorted(c))})" for why, c in by_reason.items()]
        return "; ".join(said) or "none of them is a slice, counter or step this reader draws"

    def take_slices(self) -> list[Slice | Sample | FlowEnd]:
        slices, self.slices = self.slices, []
        return slices

    def take_launched(self) -> dict[int, list[Slice | FlowEnd]]:
        """The device records filed by their launch since the last call, by step index."""
        launched = dict(self.launched)
        self.launched.clear()  # the same dict: ReadContext.dialect holds it
        return launched

    def _metadata(self, event: Event) -> None:
        try:
            name = str(ANY.decode(event.args).get("name"))
        except (msgspec.DecodeError, AttributeError):
            return
        if event.name == "process_name":
            self._processes[event.pid] = name
            self._routes.clear()
        elif event.name == "thread_name":
            self._threads[event.pid, event.tid] = name
            self._routes.clear()

    def _route(self, pid: Any, tid: Any) -> Route:
        """Where the events of a (pid, tid) go: (layer, _STEP_TRACE, a dialect's own kind, or
        None to skip; lane)."""
        return self.dialect.route(self._processes.get(pid, ""), self._threads.get((pid, tid), ""), pid, tid)

    def _complete(self, event: Event, index: int, path: Path, diag: Diagnostics) -> None:
        key = (event.pid, event.tid)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(event.pid, event.tid)
        kind, lane = route
        if kind is None:
            self._unread[_VENDOR_OVERLAP, event.pid] += 1
            return
        marker = self.dialect.step_marker  # the user's ranges are the steps, drawn too as the ranges they are
        if marker is not None and self._steps_wanted and self.dialect.marks_step(event, kind) and (
                times := self._times(event, index, path, diag)):
            self._marked.append(times)
        number = None if kind is _STEP_TRACE or marker is not None else self.dialect.step_number(event, kind)
        if number is not None and not -ID_LIMIT < number < ID_LIMIT:
            diag.warn("bad_event", f"{path}: event {index}: a step numbered past ±2**31; skipped")
            self._unread[_BAD_TIMES, event.pid] += 1
            return
        if kind is _STEP_TRACE or number is not None:
            if self._steps_wanted and (times := self._times(event, index, path, diag)):
                if kind is _STEP_TRACE:
                    self._step_trace(event, _decode_object(event.args or None), lane, *times)
                else:
                    self._profiler_step(number, *times)
            return
        if not self._slices_wanted:
            return
        args, name, task_type, flow, on_device = event.args or None, event.name, "", None, True
        if args is not None and memoryview(args)[:1] != b"{":  # an array, a number: no record's args
            if bytes(args) != b"null":
                diag.warn("bad_event", f"{path}: event {index}: expected a trace event whose args are an "
                          "object; skipped")
                self._unread[_BAD_TIMES, event.pid] += 1
                return
            args = None
        cats = self.dialect.python_cats
        own = type(kind) is str or (cats is not None and event.cat in cats)
        launched = None
        if own:
            converted = self.dialect.convert(event, kind, lane)
            if type(converted) is str:
                self._unread[converted, event.pid] += 1
                return
            kind, lane, name, task_type, flow, on_device, launched, completed, meaning = converted
            args = args if completed is None else completed
            if task_type and kind is not Layer.HOST:  # shown as Ascend's device tasks show theirs
                args = _with_task_type(args, task_type)
            task_type = meaning or task_type
        elif kind is Layer.HOST:
            task_type = self.dialect.host_tasks.get(event.cat, "")
        # what summary leaves out is left before its times are parsed: most of a file
        if kind is Layer.HOST:
            if not self.detail:
                self._unread[_DETAIL_ONLY_HOST, event.pid] += 1
                return
        else:
            self.saw_device = self.saw_device or on_device
            if kind is Layer.STREAM:
                if not own:
                    task_type = _task_type(args) if args else ""
                    if not task_type and " / " in lane:
                        task_type = NOT_COMPUTE  # a device process the reader does not know: not compute
                if not self.detail and not is_compute(task_type):
                    self._unread[_DETAIL_ONLY_TASKS, event.pid] += 1
                    return
        if times := self._times(event, index, path, diag):
            out = self.slices if launched is None else self.launched[launched]
            out.append(Slice(self.rank.rank, kind, lane, str(name), *times, args, task_type))
            if flow is not None and self.detail:
                out.append(FlowEnd(self.rank.rank, kind, lane, times[0], *flow))

    def _times(self, event: Event, index: int, path: Path, diag: Diagnostics) -> tuple[int, int] | None:
        """An event's start (epoch ns) and duration (ns), or None with a warning."""
        try:
            start_ns = checked_ns(us_to_ns(event.ts) + self.rank.clock_offset_ns)
            dur_ns = us_to_ns(event.dur)
        except (TypeError, ValueError, ArithmeticError):
            diag.warn("bad_event", f"{path}: event {index}: expected numbers ts and dur in µs, within "
                      "±2**62 ns; skipped")
            self._unread[_BAD_TIMES, event.pid] += 1
            return None
        if dur_ns < 0:
            diag.warn("bad_event", f"{path}: event {index}: negative dur {event.dur}; skipped")
            self._unread[_BAD_TIMES, event.pid] += 1
            return None
        return start_ns, dur_ns

    def _flow_end(self, event: Event) -> None:
        key = (event.pid, event.tid)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(event.pid, event.tid)
        kind, lane = route
        if self.dialect.python_cats is not None and event.cat in self.dialect.python_cats:
            converted = self.dialect.convert(event, kind, lane)
            if type(converted) is str:
                self._unread[converted, event.pid] += 1
                return
            kind, lane = converted.layer, converted.lane
        elif kind is _HCCL_OP:
            kind = Layer.COMM_OP
        if not isinstance(kind, Layer) or event.id is None:
            why = _STEP_TRACE_FLOWS if kind is _STEP_TRACE else _VENDOR_OVERLAP if kind is None else _NO_ID
            self._unread[why, event.pid] += 1
            return
        try:
            ts_ns = checked_ns(us_to_ns(event.ts) + self.rank.clock_offset_ns)
        except (TypeError, ValueError, ArithmeticError):
            self._unread[_BAD_TIMES, event.pid] += 1
            return
        key = f"{event.cat}:{event.id}"
        self.slices.append(FlowEnd(self.rank.rank, kind, lane, ts_ns, key, event.ph == "s"))

    def _counter(self, event: Event, index: int, path: Path, diag: Diagnostics) -> None:
        """A ``C`` event: one sample per numeric argument, named ``<name> [<argument>]`` (C:
        ``c/chrome_trace.c``'s ``fast_counter`` where the args are plain)."""
        try:
            start_ns = checked_ns(us_to_ns(event.ts) + self.rank.clock_offset_ns)
            values = ANY.decode(event.args) if event.args else {}
        except (TypeError, ValueError, ArithmeticError, msgspec.DecodeError):
            diag.warn("bad_event", f"{path}: event {index}: expected a counter with ts and args; skipped")
            self._unread[_BAD_TIMES, event.pid] += 1
            return
        process = self._processes.get(event.pid, "")
        name = str(event.name)
        if process and not name.startswith(process):
            name = f"{process} {name}"
        for key, value in values.items() if isinstance(values, dict) else ():
            if type(value) is float or (type(value) is int and abs(value) < 1 << 1023):  # within a double
                self.slices.append(Sample(self.rank.rank, f"{name} [{key}]", start_ns, float(value)))

    def number_marked(self, files: list[Path], diag: Diagnostics) -> None:
        """The ranges of the step marker the first pass met, as steps 1, 2, ... in time order
        (``markers.numbered``); none met: a warning naming the marker and what the files hold."""
        marker, rank = self.dialect.step_marker, self.rank.rank
        kept = markers.numbered(self._marked)
        for number, (start_ns, dur_ns) in enumerate(kept, 1):
            self._profiler_step(number, start_ns, dur_ns)
        if len(kept) < len(self._marked):
            diag.note(f"step_marker_nested {rank}", f"rank {rank}: {len(self._marked) - len(kept)} ranges of "
                      f"--step-marker {marker!r} inside or across an earlier one are no steps of their own")
        if not self._marked:
            held = markers.most_frequent(self.dialect, files, diag, lambda e: self._route(e.pid, e.tid).kind)
            diag.warn(markers.UNMATCHED, f"rank {rank}: no host range named {marker!r} (--step-marker) in "
                      f"{', '.join(p.name for p in files)}; the most frequent there: {held}; read as one "
                      "step", f"rank {rank}")
        self._marked = []

    def _profiler_step(self, number: int, start_ns: int, dur_ns: int) -> None:
        """torch_npu's ``ProfilerStep#N`` on the Python thread bounds step N."""
        step = Step(None, number, start_ns, start_ns + dur_ns)
        name = f"Step {number}"
        phase = Slice(self.rank.rank, Layer.STEP, "Steps", name, start_ns, dur_ns, {"Step": number})
        self.steps[None, number] = (step, [phase])

    def _step_trace(self, event: Event, args: dict[str, Any], thread: str,
                    start_ns: int, dur_ns: int) -> None:
        """``Iteration N`` becomes a Step and its phases; ``Reduce_N_k`` a phase too.

        The raw args hold monotonic-clock µs (FP Start, BP End, ...): they become the phases'
        bounds and are not copied, since they would disagree with the epoch timeline.
        """
        found = _STEP_TRACE_THREAD.search(thread)
        try:
            graph = int(args["Model Id"]) if "Model Id" in args else int(found[1]) if found else self.model
            iteration = None if args.get("Iteration ID") is None else checked_id(int(args["Iteration ID"]))
            graph = graph if graph is None else checked_id(graph)
        except (TypeError, ValueError, OverflowError):
            iteration = None
        if iteration is None:
            self._unread["step trace events without an iteration", event.pid] += 1
            return
        step, phases = self.steps.get((graph, iteration), (None, []))
        lane = "Steps" if graph is None else f"Graph {graph}"
        rank = self.rank.rank
        category = event.cat
        if category == "Iteration Time":
            end = start_ns + dur_ns
            step = Step(graph, iteration, start_ns, end)
            info = {"Iteration ID": iteration, "Model Id": graph}
            phases.append(Slice(rank, Layer.STEP, lane, f"Step {iteration}", start_ns, dur_ns, info))
            fp, bp = self._at(args, "FP Start"), self._at(args, "BP End")
            for name, begin, finish in (("Iteration Interval", start_ns, fp), ("FP/BP", fp, bp),
                                        ("Tail", bp, end)):
                if begin is not None and finish is not None and start_ns <= begin < finish <= end:
                    phases.append(Slice(rank, Layer.STEP, lane, name, begin, finish - begin))
        elif category == "Reduce":
            phases.append(Slice(rank, Layer.STEP, lane, "Reduce", start_ns, dur_ns))
        self.steps[graph, iteration] = (step, phases)

    def _at(self, args: dict[str, Any], key: str) -> int | None:
        try:
            return checked_ns(round(float(args[key]) * 1000) + self.rank.clock_offset_ns)
        except (KeyError, TypeError, ValueError, OverflowError):
            return None


# Why events were left out. The first ones are by design, said only when nothing else was read.
_VENDOR_OVERLAP = "events of the profiler's own overlap lanes, which trace2perfetto computes anew"
_DETAIL_ONLY_HOST = "host events, drawn with --kind detail only"
_DETAIL_ONLY_TASKS = "device tasks that do not compute, drawn with --kind detail only"
_DETAIL_ONLY_COUNTERS = "counter values, drawn with --kind detail only"
_DETAIL_ONLY_FLOWS = "flow ends, drawn with --kind detail only"
_BAD_TIMES = "events without valid times (warned above)"
_STEP_TRACE_FLOWS = "flow ends of the step trace (CANN's data augmentation bound), which its phases show"
_BY_DESIGN = frozenset((_VENDOR_OVERLAP, _DETAIL_ONLY_HOST, _DETAIL_ONLY_TASKS, _DETAIL_ONLY_COUNTERS,
                        _DETAIL_ONLY_FLOWS, _BAD_TIMES, _STEP_TRACE_FLOWS))
_NO_ID = "flow ends without an id, which no arrow can join"


class LeftOut(NamedTuple):
    """Why ``_core.read_events`` leaves an event out, each reason at the position C counts it by
    (``records.h``)."""

    host: str
    tasks: str
    counters: str
    flows: str
    vendor: str


_LEFT_OUT_IN_C = LeftOut(host=_DETAIL_ONLY_HOST, tasks=_DETAIL_ONLY_TASKS, counters=_DETAIL_ONLY_COUNTERS,
                         flows=_DETAIL_ONLY_FLOWS, vendor=_VENDOR_OVERLAP)


def _task_type(args: bytes) -> str:
    """The args' top-level "Task Type" (``c/chrome_trace.c`` finds it as text where that gives the same)."""
    try:
        return str(_TASK_ARGS.decode(args).task_type)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""


def _with_task_type(args: Any, task_type: str) -> bytes:
    """Raw JSON args with a "Task Type" first (a dialect's device events carry none of their own)."""
    raw = bytes(args) if args else b"{}"
    body = raw[1:].lstrip()
    if raw[:1] != b"{" or b'"Task Type"' in raw:
        return raw
    return b'{"Task Type":' + msgspec.json.encode(task_type) + (b"," if body[:1] != b"}" else b"") + body


def _decode_object(args: bytes | None) -> dict[str, Any]:
    try:
        decoded = ANY.decode(args) if args else {}
    except msgspec.DecodeError:
        return {}
    return decoded if isinstance(decoded, dict) else {}
