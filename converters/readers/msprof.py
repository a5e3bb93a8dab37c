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
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from ..errors import Diagnostics, InputError
from ..model import Layer, RankInfo, Slice, Step, StepRecords
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
        source_paths=tuple(timeline or _cann8_files(device_dir)),
        clock_offset_ns=offset_ns,
    )


def read(rank: RankInfo, diag: Diagnostics) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    Raises:
        InputError: a timeline file that is not a JSON array of events.
    """
    timeline = [p for p in rank.source_paths if _TIMELINE.match(p.name)]
    if timeline:
        yield from _read_timeline(rank, timeline, diag)
    else:
        yield from _read_cann8(rank, list(rank.source_paths), diag)


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


def _read_timeline(rank: RankInfo, files: list[Path], diag: Diagnostics) -> Iterator[StepRecords]:
    """Per-iteration files: one (model, iteration) group of files is one step."""
    groups: dict[tuple[int, int], dict[str, Path]] = defaultdict(dict)
    for path in files:
        kind, _device, model, iteration = _TIMELINE.match(path.name).groups()
        groups[int(model), int(iteration)][kind] = path
    batches = []
    for (model, iteration), kinds in groups.items():
        chosen = [kinds["msprof"]] if "msprof" in kinds else [
            kinds[k] for k in ("step_trace", "task_time", "hccl") if k in kinds
        ]
        slices: list[Slice] = []
        steps: list[Step] = []
        for path in chosen:
            events = jsonfile.load_events(path, diag)
            for item in _convert(events, rank, model, path, diag):
                if isinstance(item, Step):
                    if item.step == iteration:
                        steps.append(item)
                elif item.layer is not Layer.STEP or item.step == iteration:
                    slices.append(item)
        step = steps[0] if steps else None
        batches.append(StepRecords(rank.rank, model, iteration, step, _with_step(slices, model, iteration)))
    batches.sort(key=lambda b: (b.start_ns, b.graph or 0, b.step or 0))
    yield from batches


def _read_cann8(rank: RankInfo, files: list[Path], diag: Diagnostics) -> Iterator[StepRecords]:
    """One merged file (or its slices): steps are found from the step trace, tasks by time."""
    slices: list[Slice] = []
    steps: list[Step] = []
    for path in files:
        for item in _convert(jsonfile.load_events(path, diag), rank, None, path, diag):
            (steps if isinstance(item, Step) else slices).append(item)
    yield from _split_by_step(rank, slices, steps)


def _split_by_step(rank: RankInfo, slices: list[Slice], steps: list[Step]) -> Iterator[StepRecords]:
    """Give each record the step whose interval holds its start (the last one started before)."""
    steps = sorted({(s.start_ns, s.graph or 0, s.step): s for s in steps}.values(), key=lambda s: s.start_ns)
    if not steps:
        yield StepRecords(rank.rank, None, None, None, slices)
        return
    starts = [s.start_ns for s in steps]
    buckets: list[list[Slice]] = [[] for _ in steps]
    for sl in slices:
        if sl.layer is Layer.STEP:
            index = next(i for i, s in enumerate(steps) if (s.graph, s.step) == (sl.graph, sl.step))
        else:
            index = max(bisect.bisect_right(starts, sl.start_ns) - 1, 0)
        buckets[index].append(sl)
    for step, bucket in zip(steps, buckets, strict=True):
        yield StepRecords(rank.rank, step.graph, step.step, step, _with_step(bucket, step.graph, step.step))


def _with_step(slices: list[Slice], graph: int | None, step: int) -> list[Slice]:
    return [
        s if (s.graph, s.step) == (graph, step) else _replace(s, graph=graph, step=step) for s in slices
    ]


def _replace(s: Slice, **changes: Any) -> Slice:
    fields = {f: getattr(s, f) for f in Slice.__slots__}
    fields.update(changes)
    return Slice(**fields)


# -- events to records --------------------------------------------------------------------------


def _convert(
    events: list[Any], rank: RankInfo, model: int | None, path: Path, diag: Diagnostics
) -> Iterable[Slice | Step]:
    """Turn one file's Chrome-trace events into slices and steps, naming lanes by process."""
    processes: dict[Any, str] = {}
    threads: dict[tuple[Any, Any], str] = {}
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "M":
            name = (event.get("args") or {}).get("name")
            if event.get("name") == "process_name":
                processes[event.get("pid")] = str(name)
            elif event.get("name") == "thread_name":
                threads[event.get("pid"), event.get("tid")] = str(name)
    offset = rank.clock_offset_ns
    for index, event in enumerate(events):
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        try:
            start_ns = round(float(event["ts"]) * 1000) + offset
            dur_ns = round(float(event.get("dur", 0)) * 1000)
            name = str(event["name"])
        except (KeyError, TypeError, ValueError):
            diag.warn("bad_event", f"{path}: event {index}: expected name, ts and dur; skipped")
            continue
        if dur_ns < 0:
            diag.warn("bad_event", f"{path}: event {index}: negative dur {event.get('dur')}; skipped")
            continue
        process = processes.get(event.get("pid"), "")
        thread = threads.get((event.get("pid"), event.get("tid")), "")
        args = event.get("args") or {}
        if process == "Step Trace" or thread.startswith("Step Trace"):
            yield from _step_trace(event, args, thread, model, rank, start_ns, dur_ns, offset)
        elif process == "Ascend Hardware":
            lane = thread or f"Stream {args.get('Stream Id', event.get('tid'))}"
            yield Slice(rank.rank, Layer.STREAM, lane, name, start_ns, dur_ns, model, None, args)
        elif process in ("HCCL", "Communication"):
            if thread.startswith("Plane"):
                yield Slice(rank.rank, Layer.COMM_TASK, thread, name, start_ns, dur_ns, model, None, args)
            else:
                lane = thread or "Communication"
                yield Slice(rank.rank, Layer.COMM_OP, lane, name, start_ns, dur_ns, model, None, args or None)
        elif process == "CANN":
            lane = f"CANN {thread or event.get('tid')}"
            yield Slice(rank.rank, Layer.HOST, lane, name, start_ns, dur_ns, model, None, args or None)
        elif process != "Overlap Analysis":
            diag.warn("unknown_process", f"{path}: events of process {process or event.get('pid')!r} skipped")


def _step_trace(
    event: dict[str, Any], args: dict[str, Any], thread: str, model: int | None,
    rank: RankInfo, start_ns: int, dur_ns: int, offset: int,
) -> Iterator[Slice | Step]:
    """An ``Iteration N`` event becomes a Step and its phases; ``Reduce_N_k`` a phase too.

    The raw args hold monotonic-clock µs (FP Start, BP End, ...): they become the phases'
    bounds and are not copied, since they would disagree with the epoch timeline.
    """
    found = _STEP_TRACE_THREAD.search(thread)
    graph = int(found.group(1)) if found else model
    if "Model Id" in args:
        graph = int(args["Model Id"])
    iteration = args.get("Iteration ID")
    if iteration is None:
        return
    iteration = int(iteration)
    lane = "Steps" if graph is None else f"Graph {graph}"
    category = event.get("cat")

    def at(key: str) -> int | None:
        value = args.get(key)
        return None if value is None else round(float(value) * 1000) + offset

    if category == "Iteration Time":
        end = start_ns + dur_ns
        yield Step(graph, iteration, start_ns, end)
        summary = {"Iteration ID": iteration, "Model Id": graph}
        name = f"Step {iteration}"
        yield Slice(rank.rank, Layer.STEP, lane, name, start_ns, dur_ns, graph, iteration, summary)
        fp, bp = at("FP Start"), at("BP End")
        phases = [("Iteration Interval", start_ns, fp), ("FP/BP", fp, bp), ("Tail", bp, end)]
        for name, begin, finish in phases:
            if begin is not None and finish is not None and start_ns <= begin < finish <= end:
                yield Slice(rank.rank, Layer.STEP, lane, name, begin, finish - begin, graph, iteration)
    elif category == "Reduce":
        yield Slice(rank.rank, Layer.STEP, lane, "Reduce", start_ns, dur_ns, graph, iteration)

