"""CANN msprof export: ``PROF_*/device_N`` directories (docs/formats.md §3).

Producers: MindSpore 2.0-2.2 and the msprof CLI of CANN 6.3/7.0 write per-iteration timeline
files ``device_N/timeline/{msprof,task_time,hccl,step_trace}_{device}_{modelId}_{iter}.json``;
CANN 7/8 write one ``PROF_*/mindstudio_profiler_output/msprof_{ts}.json`` (or sliced
``msprof_slice_{n}_{ts}.json``) with the same Chrome-trace events; CANN 8 also writes the database
``PROF_*/msprof_{ts}.db``, which is read instead when present (``ascend_db``). The rank is ``rank_id`` in
``device_N/info.json.N``. Times are float µs on the host CLOCK_MONOTONIC_RAW, mapped to the epoch
with ``start_info.N``: epoch_ns = ts_ns + collectionTimeBegin_us * 1000 - clockMonotonicRaw_ns.

Quirks handled: every ``step_trace_*`` file repeats all iterations of its model (only the
file's own iteration is kept); ``msprof_*`` merges the other three, so it is read instead of them
when present; processes are told apart by ``process_name``, never by pid; CANN's own "Overlap
Analysis" lanes are skipped (the project computes its own, and tests compare the two).
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import Diagnostics, InputError
from ..model import RankInfo, Sample, Slice, StepRecords, checked_ns
from . import ascend_db, chrome_trace
from .base import Reader
from .common import flows, jsonfile

NAME = "msprof"
CLOCK = "host CLOCK_MONOTONIC_RAW µs, mapped to epoch with start_info"

_TIMELINE = re.compile(r"^(msprof|task_time|hccl|step_trace)_(\d+)_(\d+)_(\d+)\.json$")
_CANN8 = re.compile(r"^msprof_(?:slice_\d+_)?\d+\.json$")
_DATABASE = re.compile(r"^msprof_\w*\.db$")


def sniff(device_dir: Path) -> bool:
    """A ``device_N`` directory with ``info.json.N`` and timeline or CANN 7/8 msprof output, or a
    folder holding CANN's database ``msprof_*.db`` (a ``PROF_*`` directory, or the file alone)."""
    if _databases(device_dir):
        return True
    if not device_dir.name.startswith("device_") or _info_path(device_dir) is None:
        return False
    return bool(_timeline_files(device_dir) or _cann8_files(device_dir))


def rank_infos(device_dir: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """Read rank, device, host and clock of one device directory (small files only); for a folder
    with CANN's database, the rank of the database (its ``RANK_DEVICE_MAP``, else the rank of
    the one ``device_N`` beside it, else 0).

    Raises:
        InputError: ``info.json.N`` or ``start_info.N`` is not readable JSON.
    """
    databases = _databases(device_dir)
    if databases:
        devices = [d for d in sorted(device_dir.glob("device_*")) if any(d.glob("info.json.*"))]
        rank = rank_infos(devices[0])[0].rank if len(devices) == 1 and sniff(devices[0]) else None
        return [ascend_db.rank_info_for_file(databases[0], NAME, rank)]
    info_path = _info_path(device_dir)
    info = jsonfile.load_object(info_path)
    rank = info.get("rank_id")
    rank = 0 if rank is None else max(jsonfile.integer(rank, info_path, "rank_id"), 0)  # single-device
    # runs carry none, or -1: one rank, rank 0
    timeline = _timeline_files(device_dir)
    graphs = sorted({int(m.group(3)) for m in map(_TIMELINE.match, (p.name for p in timeline))})
    start_ns, offset_ns = _clock(device_dir)
    return [RankInfo(
        rank=rank,
        format=NAME,
        path=device_dir,
        device=_device(info, device_dir),
        host=info.get("hostname") if isinstance(info.get("hostname"), str) and info["hostname"] else None,
        graphs=tuple(graphs),
        start_ns=start_ns,
        clock=f"{CLOCK} (offset {offset_ns} ns)",
        # the folders, not every file: a long job has thousands, and every worker would copy them
        source_paths=(device_dir / "timeline",) if timeline else tuple(_cann8_files(device_dir)),
        clock_offset_ns=offset_ns,
    )]


def lone_file(path: Path, diag: Diagnostics | None) -> RankInfo | None:
    """CANN's database or a CANN 7/8 timeline read alone (None if ``path`` is neither): its rank
    and clock from the ``PROF_*`` layout it still sits in, else from the database itself, else
    rank 0 on the file's own clock (said in a note: not aligned to wall time)."""
    if _DATABASE.match(path.name):
        if path.parent.name.startswith("PROF_"):  # its rank may come from the device_N beside it
            return dataclasses.replace(rank_infos(path.parent)[0], source_paths=(path,))
        return ascend_db.rank_info_for_file(path, NAME)
    if not _CANN8.match(path.name):
        return None
    devices = sorted(d for d in path.parent.parent.glob("device_*") if sniff(d))
    if path.parent.name == "mindstudio_profiler_output" and len(devices) == 1:
        return dataclasses.replace(rank_infos(devices[0])[0], source_paths=(path,))
    if diag is not None:
        diag.note("lone_file_clock", f"{path}: no device_N/start_info.N beside it: rank 0, times "
                  "on the host's monotonic clock, not aligned to wall time")
    return RankInfo(0, NAME, path, clock="the file's own µs (no start_info.N beside it)",
                    source_paths=(path,), wall_clock=False)


def memory(rank: RankInfo, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """The rank's device memory, from CANN's database (``ascend_db.memory``: ``NPU_OP_MEM``); the
    JSON timelines carry none."""
    if rank.source_paths and rank.source_paths[0].suffix == ".db":
        yield from ascend_db.memory(rank, rank.source_paths[0], diag)


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    ``detail=False`` leaves out what only detail output draws and no analysis needs (host
    activity, device tasks that do not compute): a summary then builds half the records.

    Raises:
        InputError: a timeline file that is not a JSON array of events.
    """
    if rank.source_paths and rank.source_paths[0].suffix == ".db":
        yield from ascend_db.read_db(rank, rank.source_paths[0], diag, detail)
        return
    timeline = _timeline_files(rank.path)
    if timeline:
        yield from _read_timeline(rank, timeline, diag, detail)
    else:
        yield from chrome_trace.read_merged(rank, list(rank.source_paths), diag, detail)


# -- files and clocks ---------------------------------------------------------------------------


def _info_path(device_dir: Path) -> Path | None:
    """``info.json.N``, not its ``.done`` marker (which may be left alone)."""
    return next((p for p in sorted(device_dir.glob("info.json.*")) if not p.name.endswith(".done")), None)


def _device(info: dict[str, Any], device_dir: Path) -> int | None:
    """The device id of ``info.json.N``, else of the folder's name (``device_N``), else unknown."""
    devices = info.get("DeviceInfo")
    first = devices[0] if isinstance(devices, list) and devices and isinstance(devices[0], dict) else {}
    for value in (first.get("id"), device_dir.name.removeprefix("device_")):
        if type(value) is int or (type(value) is str and value.isdecimal() and len(value) < 10):
            return int(value)
    return None


def _databases(folder: Path) -> list[Path]:
    """CANN 8's ``msprof_*.db``: exact ns and every table, so it is read instead of the JSON
    timelines of the same ``PROF_*`` directory."""
    return sorted(p for where in (folder, folder / "mindstudio_profiler_output")
                  for p in where.glob("msprof_*.db") if p.is_file())


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





def _clock(device_dir: Path) -> tuple[int | None, int]:
    """(collection start as epoch ns, offset from monotonic-raw ns to epoch ns)."""
    paths = [p for p in device_dir.glob("start_info.*") if not p.name.endswith(".done")]
    if not paths:
        raise InputError(device_dir, "", "no start_info.N: cannot map device times to wall time")
    start = jsonfile.load_object(paths[0])
    if "collectionTimeBegin" not in start or "clockMonotonicRaw" not in start:
        raise InputError(paths[0], "", "expected collectionTimeBegin and clockMonotonicRaw")
    begin_us = jsonfile.integer(start["collectionTimeBegin"], paths[0], "collectionTimeBegin")
    raw_ns = jsonfile.integer(start["clockMonotonicRaw"], paths[0], "clockMonotonicRaw")
    try:
        return checked_ns(begin_us * 1000), checked_ns(begin_us * 1000 - raw_ns)
    except ValueError as e:
        raise InputError(paths[0], "collectionTimeBegin", f"no clock a profiler writes: {e}") from None


# -- the two layouts ----------------------------------------------------------------------------


def _read_timeline(
    rank: RankInfo, files: list[Path], diag: Diagnostics, detail: bool
) -> Iterator[StepRecords]:
    """Per-iteration files: the files of one (model, iteration) hold one step."""
    groups: dict[tuple[int, int], dict[str, Path]] = defaultdict(dict)
    for path in files:
        kind, _device, model, iteration = _TIMELINE.match(path.name).groups()
        groups[int(model), int(iteration)][kind] = path
    yield from flows.linked(_iterations(rank, groups, diag, detail), diag)


def _iterations(rank: RankInfo, groups: dict[tuple[int, int], dict[str, Path]], diag: Diagnostics,
                detail: bool) -> Iterator[tuple[StepRecords, list]]:
    for model, iteration in _time_order(groups, rank, diag):
        kinds = groups[model, iteration]
        chosen = [kinds["msprof"]] if "msprof" in kinds else [
            kinds[k] for k in ("step_trace", "task_time", "hccl") if k in kinds
        ]
        records = chrome_trace.Records(rank, model, detail)
        for path in chosen:
            records.read(path, diag)
        step, phases = records.steps.get((model, iteration), (None, []))
        yield chrome_trace.step_records(rank, model, iteration, step, records.take_slices() + phases)


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
            records = chrome_trace.Records(rank, model)
            records.read(path, diag)
            starts.update({key: step.start_ns for key, (step, _) in records.steps.items() if step})
    return sorted(groups, key=lambda key: (starts.get(key, 0), key[1], key[0]))


READER = Reader(
    name=NAME,
    folder="PROF_*/device_N/ with info.json.N and timeline/*.json or "
           "../mindstudio_profiler_output/msprof_*.json, or msprof_*.db",
    sniff=sniff, rank_infos=rank_infos, read=read,
    lone_files=("msprof_*.json", "msprof_*.db"), lone_file=lone_file, memory=memory,
)
