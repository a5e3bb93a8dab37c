"""Chrome-trace event files in the dialect of Ascend's tools (CANN msprof, torch_npu).

Shared by the readers whose files are such traces: ``msprof`` (timeline and CANN 7/8
``msprof_*.json``) and ``ascend_pt`` (``trace_view.json``). Lanes are named by process and thread
name, never by pid (formats.md §3.3, §5.3): "Ascend Hardware" streams, "HCCL"/"Communication"
ops and planes, "CANN" and "Python" host threads; "Overlap Analysis" (the vendor's own lanes) is
skipped. Steps come from the CANN step trace (``Iteration N``) or from torch_npu's
``ProfilerStep#N``. Times are float µs (plus the rank's clock offset) or, in torch_npu, strings
of epoch µs with 3 decimals, parsed exactly to ns.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import orjson

from ..errors import Diagnostics
from ..model import FlowEnd, Layer, RankInfo, Sample, Slice, Step, StepRecords
from ..overlap import is_compute
from . import jsonfile
from .spill import StepSpill

BATCH_BYTES = 2 << 20  # read and decoded at a time: memory holds about this much of a file
_STEP_TRACE_THREAD = re.compile(r"Model ID:\s*(\d+)")
_PROFILER_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def read_merged(rank: RankInfo, files: list[Path], diag: Diagnostics, detail: bool) -> Iterator[StepRecords]:
    """One trace of a whole rank (or its slices), read twice so memory holds one step, never the file.

    The first pass takes every metadata event and the step trace, resolving the step events only
    once all processes are named (torch_npu writes its metadata last); the second turns every
    other event into a slice, files it under the step it starts in (the last step started at or
    before it) in a spill file, and then each step is read back whole. The file need not be
    time-ordered.
    """
    records = Records(rank, None, detail)
    for path in files:
        records.read_steps(path, diag)
    device = records.has_device()
    steps = sorted(((s, phases) for s, phases in records.steps.values() if s), key=lambda p: p[0].start_ns)
    if not steps:  # no step trace: all of it is one pseudo step
        for path in files:
            records.read(path, diag, steps=False)
        yield from linked([step_records(rank, None, None, None, records.take_slices(), device)], diag)
        return
    starts = [step.start_ns for step, _ in steps]
    with StepSpill() as spill:
        for path in files:
            for batch in records.read_batches(path, diag):
                buckets: dict[int, list[Slice]] = defaultdict(list)
                for s in batch:
                    buckets[max(bisect.bisect_right(starts, s.start_ns) - 1, 0)].append(s)
                for index, bucket in buckets.items():
                    spill.add(index, bucket)
        yield from linked((step_records(rank, step.graph, step.step, step,
                                        phases + spill.load(index, rank.rank), device)
                           for index, (step, phases) in enumerate(steps)), diag)


def step_records(
    rank: RankInfo, graph: int | None, step_id: int | None, step: Step | None,
    records: list[Slice | Sample | FlowEnd], has_device: bool = True,
) -> tuple[StepRecords, list[FlowEnd]]:
    """One step's records with counters sorted out from the slices, and its flow ends apart."""
    slices = [r for r in records if type(r) is Slice]
    samples, ends = [], []
    if len(slices) < len(records):
        samples = [r for r in records if type(r) is Sample]
        ends = [r for r in records if type(r) is FlowEnd]
    return StepRecords(rank.rank, graph, step_id, step, slices, samples, has_device=has_device), ends


def linked(steps: Iterable[tuple[StepRecords, list[FlowEnd]]], diag: Diagnostics) -> Iterator[StepRecords]:
    """The steps with their flow arrows bound: within a step, and from a step to the next (a host
    launch at the end of one step whose kernel runs in the next), so each step is held back until
    the next one is read. An end binds to the innermost slice of its lane that holds its time
    (Chrome's ``bp: e``); a start with several ends (a copy launched once, run twice) makes one
    arrow per end. An arrow whose end begins before its start is left out and counted: Perfetto
    drops such arrows without a word (host and device clocks disagree by a few µs)."""
    held: StepRecords | None = None
    held_starts: dict[str, int] = {}
    backwards = 0
    for records, ends in steps:
        starts, finishes = _bind_ends(records.slices, ends)
        arrows: list[tuple[StepRecords, int, StepRecords, int, int]] = []
        for key, lasts in finishes.items():
            source, first = (records, starts[key]) if key in starts else (held, held_starts.get(key))
            if source is None or first is None:
                continue
            for k, last in enumerate(lasts):
                arrows.append((source, first, records, last, flow_id(records.rank, key, k)))
        for source, first, target, last, flow in arrows:
            if target.slices[last].start_ns < source.slices[first].start_ns:
                backwards += 1
                continue
            a = source.slices[first]
            source.slices[first] = a._replace(flows_out=a.flows_out + (flow,))
            b = target.slices[last]
            target.slices[last] = b._replace(flows_in=b.flows_in + (flow,))
        if held is not None:
            yield held
        held, held_starts = records, {key: i for key, i in starts.items() if key not in finishes}
    if held is not None:
        yield held
    if backwards:
        diag.note(f"backwards_flows {held.rank}", f"rank {held.rank}: {backwards} arrows whose end begins "
                  "before their start (host and device clocks disagree) left out: Perfetto cannot draw them")


def _bind_ends(slices: list[Slice], ends: list[FlowEnd]) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Each flow end's slice: starts by key, and the finishes of each key in file order."""
    by_lane: dict[tuple[Layer, str], list[int]] = defaultdict(list)
    for index, s in enumerate(slices):
        by_lane[s.layer, s.lane].append(index)
    lanes = {}
    for lane, indices in by_lane.items():
        indices.sort(key=lambda i: (slices[i].start_ns, -slices[i].dur_ns))
        lanes[lane] = (indices, [slices[i].start_ns for i in indices])
    starts: dict[str, int] = {}
    finishes: dict[str, list[int]] = defaultdict(list)
    for end in ends:
        index = _enclosing(slices, *lanes.get((end.layer, end.lane), ([], [])), end.start_ns)
        if index is not None:
            if end.starts:
                starts[end.key] = index
            else:
                finishes[end.key].append(index)
    return starts, finishes


def _enclosing(slices: list[Slice], lane: list[int], starts: list[int], ts_ns: int) -> int | None:
    """The innermost slice of ``lane`` (indices sorted by start, with their starts) holding ``ts_ns``."""
    position = bisect.bisect_right(starts, ts_ns) - 1
    for i in reversed(lane[max(position - 64, 0): position + 1]):
        if slices[i].start_ns <= ts_ns <= slices[i].end_ns:
            return i
    return None


def flow_id(rank: int, key: str, k: int) -> int:
    """A flow id unique across ranks: the profilers' ids are unique within one rank only."""
    return int.from_bytes(hashlib.blake2b(f"{rank}|{key}|{k}".encode(), digest_size=8).digest(), "little")


_STEP_CATEGORIES = ("Iteration Time", "Reduce")  # the CANN step trace's events
_DEVICE_PROCESSES = ("Ascend Hardware", "HCCL", "Communication")


# -- events to records --------------------------------------------------------------------------

_STEP_TRACE = "step trace"  # a route's kind besides the layers; None skips the events
Route = tuple[Layer | str | None, str]


class _Event(msgspec.Struct):
    """The fields of a Chrome-trace event this reader uses; ``args`` stays undecoded JSON."""

    ph: Any = ""
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = 0
    cat: Any = None
    id: Any = None
    args: msgspec.Raw = msgspec.Raw(b"")


class _TaskArgs(msgspec.Struct):
    task_type: Any = msgspec.field(default="", name="Task Type")


_EVENTS = msgspec.json.Decoder(list[_Event])
_TASK_ARGS = msgspec.json.Decoder(_TaskArgs)
_ARGS = msgspec.json.Decoder()


def _batches(path: Path, diag: Diagnostics) -> Iterator[list[_Event]]:
    """The file's events in batches, decoded only as far as ``_Event`` needs (3x faster than
    decoding all of it), with memory bounded by the batch size.

    Anything unusual (cut off, an object form, a bad event) takes the careful path of
    ``jsonfile``, which recovers what can be recovered and says where the problem is.
    """
    for batch in jsonfile.iter_batches(path, diag, _decode, BATCH_BYTES):
        if batch and type(batch[0]) is _Event:
            yield batch
            continue
        decoded = []
        for index, event in enumerate(batch):
            try:
                decoded.append(msgspec.convert(_raw_args(event), _Event))
            except (msgspec.ValidationError, TypeError, ValueError):
                diag.warn("bad_event", f"{path}: event {index}: expected a JSON object of a trace event; "
                          "skipped")
        yield decoded


def _decode(data: bytes) -> list[_Event]:
    try:
        return _EVENTS.decode(data)
    except msgspec.DecodeError as e:
        raise ValueError(str(e)) from None


def us_to_ns(us: Any) -> int:
    """µs as CANN writes them (a number) or torch_npu does (a string with 3 decimals), as ns.

    The string is parsed exactly: at epoch scale a float has a grain of ~0.25 µs.
    """
    if type(us) is not str:
        if -9e12 < us < 9e12:  # below 2**53 ns a float product is exact to the ns
            return round(us * 1000)
        whole = int(us)  # epoch µs as a float (host timelines): whole and fraction apart
        return whole * 1000 + round((us - whole) * 1000)
    whole, _, fraction = us.partition(".")
    if whole.isdigit() and len(fraction) <= 3 and (not fraction or fraction.isdigit()):
        return int(whole) * 1000 + int(fraction.ljust(3, "0"))
    return int((Decimal(us) * 1000).to_integral_value())


def _raw_args(event: Any) -> Any:
    if isinstance(event, dict) and "args" in event:
        return {**event, "args": msgspec.Raw(orjson.dumps(event["args"]))}
    return event


class Records:
    """Slices and steps of one rank's events, lanes named by process and thread name."""

    def __init__(self, rank: RankInfo, model: int | None, detail: bool = True) -> None:
        self.rank, self.model, self.detail = rank, model, detail
        self.slices: list[Slice | Sample] = []  # samples of counters too, in detail
        # (graph, iteration) -> (its Step, its step trace phases)
        self.steps: dict[tuple[int | None, int], tuple[Step | None, list[Slice]]] = {}
        self._processes: dict[Any, str] = {}
        self._threads: dict[tuple[Any, Any], str] = {}
        self._routes: dict[tuple[Any, Any], Route] = {}
        self._steps_wanted = self._slices_wanted = True

    def read(self, path: Path, diag: Diagnostics, *, steps: bool = True, slices: bool = True) -> None:
        """Read a file's metadata, then its step trace (if ``steps``) and other events (if
        ``slices``), into ``self.steps`` and ``self.slices``."""
        for _ in self.read_batches(path, diag, steps=steps, slices=slices, keep=True):
            pass

    def read_batches(self, path: Path, diag: Diagnostics, *, steps: bool = False, slices: bool = True,
                     keep: bool = False) -> Iterator[list[Slice]]:
        """Like ``read``, a batch of events at a time, yielding each batch's slices (which are
        kept in ``self.slices`` too only if ``keep``)."""
        self._steps_wanted, self._slices_wanted = steps, slices
        index = 0
        for events in _batches(path, diag):
            for event in events:
                if event.ph == "M":
                    self._metadata(event)
            for event in events:
                if event.ph == "X":
                    self._complete(event, index, path, diag)
                elif event.ph == "C" and slices and self.detail:
                    self._counter(event, index, path, diag)
                elif event.ph in ("s", "f") and slices and self.detail:
                    self._flow_end(event, path, diag)
                index += 1
            yield self.slices if keep else self.take_slices()

    def read_steps(self, path: Path, diag: Diagnostics) -> None:
        """The first pass: every metadata event, then the step events among the rest, routed
        once all processes and threads are named, wherever their metadata lies in the file."""
        self._steps_wanted, self._slices_wanted = True, False
        candidates: list[tuple[int, _Event]] = []
        index = 0
        for events in _batches(path, diag):
            for event in events:
                if event.ph == "M":
                    self._metadata(event)
                elif event.ph == "X" and (event.cat in _STEP_CATEGORIES
                                          or _PROFILER_STEP.match(str(event.name))):
                    candidates.append((index, event))
                index += 1
        for index, event in candidates:
            self._complete(event, index, path, diag)

    def has_device(self) -> bool:
        """Whether any process of the files is a device's (streams, HCCL): not a host-only trace."""
        return any(name in _DEVICE_PROCESSES for name in self._processes.values())

    def take_slices(self) -> list[Slice]:
        slices, self.slices = self.slices, []
        return slices

    def _metadata(self, event: _Event) -> None:
        try:
            name = str(_ARGS.decode(event.args).get("name"))
        except (msgspec.DecodeError, AttributeError):
            return
        if event.name == "process_name":
            self._processes[event.pid] = name
            self._routes.clear()
        elif event.name == "thread_name":
            self._threads[event.pid, event.tid] = name
            self._routes.clear()

    def _route(self, pid: Any, tid: Any, path: Path, diag: Diagnostics) -> Route:
        """Where the events of a (pid, tid) go: (layer or _STEP_TRACE or None to skip, lane)."""
        process = self._processes.get(pid, "")
        thread = self._threads.get((pid, tid), "")
        if process == "Step Trace" or thread.startswith("Step Trace"):
            return _STEP_TRACE, thread
        if process == "Ascend Hardware":
            return Layer.STREAM, thread or f"Stream {tid}"
        if process in ("HCCL", "Communication"):
            if thread.startswith("Plane"):
                return Layer.COMM_TASK, thread
            return Layer.COMM_OP, thread or "Communication"
        if process in ("CANN", "Python", "MindSpore"):
            return Layer.HOST, f"{process} {thread or tid}"
        if process == "Overlap Analysis":  # CANN's own lanes: the project computes its own
            return None, ""
        # any other process (MindSpore's "CPU OP", "Scope Layer", ...) is drawn as host activity,
        # never dropped, and never counted as compute
        return Layer.HOST, f"{process or f'Process {pid}'} / {thread or tid}"

    def _complete(self, event: _Event, index: int, path: Path, diag: Diagnostics) -> None:
        key = (event.pid, event.tid)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(event.pid, event.tid, path, diag)
        kind, lane = route
        if kind is None:
            return
        profiler_step = kind is Layer.HOST and _PROFILER_STEP.match(str(event.name))
        if not (self._steps_wanted if kind is _STEP_TRACE or profiler_step else self._slices_wanted):
            return
        try:
            start_ns = us_to_ns(event.ts) + self.rank.clock_offset_ns
            dur_ns = us_to_ns(event.dur)
        except (TypeError, ValueError, ArithmeticError):
            diag.warn("bad_event", f"{path}: event {index}: expected numbers ts and dur in µs; skipped")
            return
        if dur_ns < 0:
            diag.warn("bad_event", f"{path}: event {index}: negative dur {event.dur}; skipped")
            return
        if profiler_step:
            self._profiler_step(int(profiler_step.group(1)), start_ns, dur_ns)
            return
        args = event.args or None
        if kind is _STEP_TRACE:
            decoded = _ARGS.decode(args) if args else {}
            self._step_trace(event, decoded if isinstance(decoded, dict) else {}, lane, start_ns, dur_ns)
            return
        task_type = ""
        if kind is Layer.STREAM and args:
            task_type = str(_TASK_ARGS.decode(args).task_type)
        if not self.detail and (kind is Layer.HOST or (kind is Layer.STREAM and not is_compute(task_type))):
            return
        name = str(event.name)
        self.slices.append(Slice(self.rank.rank, kind, lane, name, start_ns, dur_ns, args, task_type))

    def _flow_end(self, event: _Event, path: Path, diag: Diagnostics) -> None:
        key = (event.pid, event.tid)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(event.pid, event.tid, path, diag)
        kind, lane = route
        if isinstance(kind, Layer) and event.id is not None:
            try:
                ts_ns = us_to_ns(event.ts) + self.rank.clock_offset_ns
            except (TypeError, ValueError, ArithmeticError):
                return
            self.slices.append(FlowEnd(self.rank.rank, kind, lane, ts_ns, f"{event.cat}:{event.id}",
                                       event.ph == "s"))

    def _counter(self, event: _Event, index: int, path: Path, diag: Diagnostics) -> None:
        """A ``C`` event: one sample per numeric argument, named ``<name> [<argument>]``."""
        try:
            start_ns = us_to_ns(event.ts) + self.rank.clock_offset_ns
            values = _ARGS.decode(event.args) if event.args else {}
        except (TypeError, ValueError, ArithmeticError, msgspec.DecodeError):
            diag.warn("bad_event", f"{path}: event {index}: expected a counter with ts and args; skipped")
            return
        process = self._processes.get(event.pid, "")
        name = str(event.name)
        if process and not name.startswith(process):
            name = f"{process} {name}"
        for key, value in values.items() if isinstance(values, dict) else ():
            if type(value) in (int, float):
                self.slices.append(Sample(self.rank.rank, f"{name} [{key}]", start_ns, float(value)))

    def _profiler_step(self, number: int, start_ns: int, dur_ns: int) -> None:
        """torch_npu's ``ProfilerStep#N`` on the Python thread bounds step N."""
        step = Step(None, number, start_ns, start_ns + dur_ns)
        name = f"Step {number}"
        phase = Slice(self.rank.rank, Layer.STEP, "Steps", name, start_ns, dur_ns, {"Step": number})
        self.steps[None, number] = (step, [phase])

    def _step_trace(self, event: _Event, args: dict[str, Any], thread: str,
                    start_ns: int, dur_ns: int) -> None:
        """``Iteration N`` becomes a Step and its phases; ``Reduce_N_k`` a phase too.

        The raw args hold monotonic-clock µs (FP Start, BP End, ...): they become the phases'
        bounds and are not copied, since they would disagree with the epoch timeline.
        """
        found = _STEP_TRACE_THREAD.search(thread)
        graph = int(args["Model Id"]) if "Model Id" in args else int(found.group(1)) if found else self.model
        if args.get("Iteration ID") is None:
            return
        iteration = int(args["Iteration ID"])
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
        value = args.get(key)
        return None if value is None else round(float(value) * 1000) + self.rank.clock_offset_ns
