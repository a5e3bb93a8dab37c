"""CANN msprof export: ``PROF_*/device_N`` directories (formats.md §3).

Producers: MindSpore 2.0-2.2 and the msprof CLI of CANN 6.3/7.0 write per-iteration timeline
files ``device_N/timeline/{msprof,task_time,hccl,step_trace}_{device}_{modelId}_{iter}.json``;
CANN 7/8 write one ``PROF_*/mindstudio_profiler_output/msprof_{ts}.json`` (or sliced
``msprof_slice_{n}_{ts}.json``) with the same Chrome-trace events. The rank is ``rank_id`` in
``device_N/info.json.N``. Times are float µs on the host CLOCK_MONOTONIC_RAW, mapped to the epoch
with ``start_info.N``: epoch_ns = ts_ns + collectionTimeBegin_us * 1000 - clockMonotonicRaw_ns.

Quirks handled: every ``step_trace_*`` file repeats all iterations of its model (only the
file's own iteration is kept); ``msprof_*`` merges the other three, so it is read instead of them
when present; processes are told apart by ``process_name``, never by pid; CANN's own "Overlap
Analysis" lanes are skipped (the project computes its own, and tests compare the two).
"""

from __future__ import annotations

import bisect
import pickle
import re
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import orjson

from ..errors import Diagnostics, InputError
from ..model import Layer, RankInfo, Slice, Step, StepRecords
from ..overlap import is_compute
from . import jsonfile

NAME = "msprof"
CLOCK = "host CLOCK_MONOTONIC_RAW µs, mapped to epoch with start_info"

_TIMELINE = re.compile(r"^(msprof|task_time|hccl|step_trace)_(\d+)_(\d+)_(\d+)\.json$")
_CANN8 = re.compile(r"^msprof_(?:slice_\d+_)?\d+\.json$")
_STEP_TRACE_THREAD = re.compile(r"Model ID:\s*(\d+)")


def sniff(device_dir: Path) -> bool:
    """A ``device_N`` directory with ``info.json.N`` and timeline or CANN 7/8 msprof output."""
    if not device_dir.name.startswith("device_") or not any(device_dir.glob("info.json.*")):
        return False
    return bool(_timeline_files(device_dir) or _cann8_files(device_dir))


def rank_info(device_dir: Path) -> RankInfo:
    """Read rank, device, host and clock of one device directory (small files only).

    Raises:
        InputError: ``info.json.N`` or ``start_info.N`` is not readable JSON.
    """
    info_path = next(p for p in sorted(device_dir.glob("info.json.*")) if not p.name.endswith(".done"))
    info = _small_json(info_path)
    device = int(info.get("DeviceInfo", [{}])[0].get("id", device_dir.name.split("_")[-1]))
    rank = info.get("rank_id")
    if rank is None or int(rank) < 0:  # single-device runs carry no rank: one rank, rank 0
        rank = 0
    timeline = _timeline_files(device_dir)
    graphs = sorted({int(m.group(3)) for m in map(_TIMELINE.match, (p.name for p in timeline))})
    start_ns, offset_ns = _clock(device_dir)
    return RankInfo(
        rank=int(rank),
        format=NAME,
        path=device_dir,
        device=device,
        host=info.get("hostname") or None,
        graphs=tuple(graphs),
        start_ns=start_ns,
        clock=f"{CLOCK} (offset {offset_ns} ns)",
        # the folders, not every file: a long job has thousands, and every worker would copy them
        source_paths=(device_dir / "timeline",) if timeline else tuple(_cann8_files(device_dir)),
        clock_offset_ns=offset_ns,
    )


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    ``detail=False`` leaves out what only detail output draws and no analysis needs (host
    activity, device tasks that do not compute): a summary then builds half the records.

    Raises:
        InputError: a timeline file that is not a JSON array of events.
    """
    timeline = _timeline_files(rank.path)
    if timeline:
        yield from _read_timeline(rank, timeline, diag, detail)
    else:
        yield from _read_cann8(rank, list(rank.source_paths), diag, detail)


# -- files and clocks ---------------------------------------------------------------------------


def _timeline_files(device_dir: Path) -> list[Path]:
    folder = device_dir / "timeline"
    return sorted(p for p in folder.glob("*.json") if _TIMELINE.match(p.name)) if folder.is_dir() else []


def _cann8_files(device_dir: Path) -> list[Path]:
    folder = device_dir.parent / "mindstudio_profiler_output"
    if not folder.is_dir():
        return []
    return sorted((p for p in folder.glob("msprof_*.json") if _CANN8.match(p.name)), key=_natural)


def _natural(path: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def _small_json(path: Path) -> dict[str, Any]:
    try:
        value = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as e:
        raise InputError(path, "", f"cannot read JSON: {e}") from e
    if not isinstance(value, dict):
        raise InputError(path, "top level", "expected a JSON object")
    return value


def _clock(device_dir: Path) -> tuple[int | None, int]:
    """(collection start as epoch ns, offset from monotonic-raw ns to epoch ns)."""
    paths = [p for p in device_dir.glob("start_info.*") if not p.name.endswith(".done")]
    if not paths:
        raise InputError(device_dir, "", "no start_info.N: cannot map device times to wall time")
    start = _small_json(paths[0])
    try:
        begin_us, raw_ns = int(start["collectionTimeBegin"]), int(start["clockMonotonicRaw"])
    except (KeyError, ValueError) as e:
        raise InputError(paths[0], "", "expected collectionTimeBegin and clockMonotonicRaw") from e
    return begin_us * 1000, begin_us * 1000 - raw_ns


# -- the two layouts ----------------------------------------------------------------------------


def _read_timeline(
    rank: RankInfo, files: list[Path], diag: Diagnostics, detail: bool
) -> Iterator[StepRecords]:
    """Per-iteration files: the files of one (model, iteration) hold one step."""
    groups: dict[tuple[int, int], dict[str, Path]] = defaultdict(dict)
    for path in files:
        kind, _device, model, iteration = _TIMELINE.match(path.name).groups()
        groups[int(model), int(iteration)][kind] = path
    for model, iteration in _time_order(groups, rank, diag):
        kinds = groups[model, iteration]
        chosen = [kinds["msprof"]] if "msprof" in kinds else [
            kinds[k] for k in ("step_trace", "task_time", "hccl") if k in kinds
        ]
        records = _Records(rank, model, detail)
        for path in chosen:
            records.read(path, diag)
        step, phases = records.steps.get((model, iteration), (None, []))
        yield StepRecords(rank.rank, model, iteration, step, records.slices + phases)


def _time_order(
    groups: dict[tuple[int, int], dict[str, Path]], rank: RankInfo, diag: Diagnostics
) -> list[tuple[int, int]]:
    """(model, iteration) keys by step start, from the small step_trace files (each holds every
    iteration of its model); by iteration where there are none."""
    starts: dict[tuple[int, int], int] = {}
    for model in {m for m, _ in groups}:
        path = next((kinds["step_trace"] for (m, _), kinds in groups.items()
                     if m == model and "step_trace" in kinds), None)
        if path is not None:
            records = _Records(rank, model)
            records.read(path, diag)
            starts.update({key: step.start_ns for key, (step, _) in records.steps.items() if step})
    return sorted(groups, key=lambda key: (starts.get(key, 0), key[1], key[0]))


def _read_cann8(rank: RankInfo, files: list[Path], diag: Diagnostics, detail: bool) -> Iterator[StepRecords]:
    """One merged file (or its slices), read twice so memory holds one step, never the file.

    The first pass takes the metadata and the step trace; the second turns every other event
    into a slice, files it under the step it starts in (the last step started at or before it)
    in a spill file, and then each step is read back whole. The file need not be time-ordered.
    """
    records = _Records(rank, None, detail)
    for path in files:
        records.read(path, diag, slices=False)
    steps = sorted(((s, phases) for s, phases in records.steps.values() if s), key=lambda p: p[0].start_ns)
    if not steps:  # no step trace: all of it is one pseudo step
        for path in files:
            records.read(path, diag, steps=False)
        yield StepRecords(rank.rank, None, None, None, records.take_slices())
        return
    starts = [step.start_ns for step, _ in steps]
    with _Spill() as spill:
        for path in files:
            for batch in records.read_batches(path, diag):
                buckets: dict[int, list[Slice]] = defaultdict(list)
                for s in batch:
                    buckets[max(bisect.bisect_right(starts, s.start_ns) - 1, 0)].append(s)
                for index, bucket in buckets.items():
                    spill.add(index, bucket)
        for index, (step, phases) in enumerate(steps):
            yield StepRecords(rank.rank, step.graph, step.step, step, phases + spill.load(index, rank.rank))


class _Spill:
    """Slices filed by step index in a temporary file; memory keeps only where each lies."""

    _LAYERS = list(Layer)

    def __enter__(self) -> _Spill:
        self._file = tempfile.TemporaryFile(prefix="trace2perfetto-spill-")
        self._segments: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self._end = 0
        return self

    def __exit__(self, *_: object) -> None:
        self._file.close()

    def add(self, index: int, slices: list[Slice]) -> None:
        rows = [(s.layer.order, s.lane, s.name, s.start_ns, s.dur_ns,
                 None if s.args is None else bytes(s.args), s.task_type) for s in slices]
        data = pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL)
        self._file.seek(self._end)
        self._file.write(data)
        self._segments[index].append((self._end, len(data)))
        self._end += len(data)

    def load(self, index: int, rank: int) -> list[Slice]:
        out: list[Slice] = []
        for offset, length in self._segments.pop(index, []):
            self._file.seek(offset)
            for layer, *rest in pickle.loads(self._file.read(length)):
                out.append(Slice(rank, self._LAYERS[layer], *rest))
        return out


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
    for batch in jsonfile.iter_batches(path, diag, _decode):
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


def _raw_args(event: Any) -> Any:
    if isinstance(event, dict) and "args" in event:
        return {**event, "args": msgspec.Raw(orjson.dumps(event["args"]))}
    return event


class _Records:
    """Slices and steps of one rank's events, lanes named by process and thread name."""

    def __init__(self, rank: RankInfo, model: int | None, detail: bool = True) -> None:
        self.rank, self.model, self.detail = rank, model, detail
        self.slices: list[Slice] = []
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
                index += 1
            yield self.slices if keep else self.take_slices()

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
        if process == "CANN":
            return Layer.HOST, f"CANN {thread or tid}"
        if process != "Overlap Analysis":  # CANN's own lanes: the project computes its own
            diag.warn("unknown_process", f"{path}: events of process {process or pid!r} skipped")
        return None, ""

    def _complete(self, event: _Event, index: int, path: Path, diag: Diagnostics) -> None:
        key = (event.pid, event.tid)
        route = self._routes.get(key)
        if route is None:
            route = self._routes[key] = self._route(event.pid, event.tid, path, diag)
        kind, lane = route
        if kind is None or not (self._steps_wanted if kind is _STEP_TRACE else self._slices_wanted):
            return
        try:
            start_ns = round(event.ts * 1000) + self.rank.clock_offset_ns
            dur_ns = round(event.dur * 1000)
        except TypeError:
            diag.warn("bad_event", f"{path}: event {index}: expected numbers ts and dur in µs; skipped")
            return
        if dur_ns < 0:
            diag.warn("bad_event", f"{path}: event {index}: negative dur {event.dur}; skipped")
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
