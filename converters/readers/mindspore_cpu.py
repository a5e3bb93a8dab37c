"""MindSpore's CPU profiler (docs/formats.md §5.12): the MindSpore 2.0 layout, and the files of its
CPU runs that the ``*_ascend_ms`` layout keeps in ``FRAMEWORK/`` (read for ``ascend_pt``).

MindSpore 2.0 on CPU writes one flat ``profiler/`` folder: ``cpu_timeline_display_{rank}.json`` (a
JSON array of Chrome-trace events, ``ts`` and ``dur`` float µs), ``profiler_info_{rank}.json``
(``rank_id``, local wall-clock strings only), ``cpu_op_execute_timestamp_{rank}.txt``,
``cpu_op_detail_info_{rank}.csv``, ``cpu_op_type_info_{rank}.csv``. Its times are the host's
monotonic clock (uptime ns), not epoch: the rank's clock is its own (``wall_clock`` False). In the
timeline, pid 0 is the host (its pid written both as ``0`` and ``"0"``): thread ``100000`` "Steps"
holds the steps, named ``1`` ... ``N`` (steps 1 and 2 start together: step 1 holds the graph's
compilation), ``100001`` the scope layers, ``HostCpuOps0`` the ops; pid 12000 ("Op Overlap
Analyse") MindSpore's own overlap lanes, which are not read (this project computes its own).

The ops are host operators (``HOST_OPERATOR``): ``ops`` counts them, by the op type
``cpu_op_detail_info`` gives each (else the ``-opN`` rule of the name). Each record lands in the
step whose span holds its start, the shortest of them where two do (step 1 within step 2), else in
the latest step started before it, else in no step.

MindSpore >= 2.3 CPU runs (``*_ascend_ms/FRAMEWORK/``): ``cpu_op_execute_timestamp_{rank}.txt``
(``full_name;HostCpuOps;start_ns,dur_ms,tid start_ns,dur_ms,tid ...``, epoch ns) as host operators
(``framework_ops``), and ``cpu_ms_memory_record_{rank}.txt`` (CSV: ``Timestamp(ns),Total
Allocated(Byte),Total Reserved(Byte),Total Active(Byte)``) as the memory counters of component
``MindSpore CPU`` (``framework_memory``).
"""

from __future__ import annotations

import bisect
import csv
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ..errors import Diagnostics, InputError
from ..model import (
    HOST_OPERATOR,
    MEMORY_KINDS,
    Layer,
    RankInfo,
    Sample,
    Slice,
    Step,
    StepRecords,
    checked_id,
    checked_ns,
    memory_counter,
)
from .base import Reader
from .common import jsonfile, times
from .common.textfile import csv_header, csv_rows, whole_lines

NAME = "mindspore_cpu"
CLOCK = "the host's monotonic clock (uptime ns, not epoch) of MindSpore 2.0's CPU profiler"
MEMORY_COMPONENT = "MindSpore CPU"
_TIMELINE = re.compile(r"^cpu_timeline_display_(\d+)\.json$")
_STEPS_TID, _SCOPES_TID = 100000, 100001
_OVERLAP_PID = 12000  # "Op Overlap Analyse": MindSpore's own lanes
_OVERLAPPING = 8  # steps looked back at for one holding a record (the sample overlaps two)
_MINDSPORE_OP = re.compile(r"(?:^|/)([^/]+)-op\d+$")


def sniff(folder: Path) -> bool:
    return any(_TIMELINE.match(p.name) for p in folder.glob("cpu_timeline_display_*.json"))


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per timeline, its id from ``profiler_info_{N}.json`` (else from the file's name).

    Raises:
        InputError: ``profiler_info_{N}.json`` is not a JSON object.
    """
    out = []
    for timeline in sorted(folder.glob("cpu_timeline_display_*.json")):
        found = _TIMELINE.match(timeline.name)
        if found is None:
            continue
        info_path = folder / f"profiler_info_{found[1]}.json"
        info = jsonfile.load_object(info_path) if info_path.is_file() else {}
        try:
            rank = int(str(info.get("rank_id", found[1])).strip())
        except ValueError:
            raise InputError(info_path, "rank_id",
                             f"expected a rank number, got {info.get('rank_id')!r}"[:120]) from None
        out.append(RankInfo(rank=max(rank, 0), format=NAME, path=folder, clock=CLOCK, wall_clock=False,
                            source_paths=(timeline,)))
    return out


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """The rank's steps in time order, each with its records (host layers in detail only).

    Raises:
        InputError: the timeline is not a JSON array of events.
    """
    path = rank.source_paths[0]
    types = op_types(path.parent / f"cpu_op_detail_info_{_rank_of(path)}.csv", diag, key="op_name")
    steps: list[Step] = []
    records: list[Slice] = []
    others = 0  # events neither metadata nor complete: none in the sample; counted, not dropped unsaid
    for index, event in enumerate(jsonfile.load_events(path, diag)):
        if not isinstance(event, dict) or event.get("ph") != "X":
            others += not isinstance(event, dict) or event.get("ph") != "M"
            continue
        made = _record(rank, event, index, path, diag, types)
        if made is None:
            continue
        if made.layer is Layer.STEP:
            steps.append(Step(None, made.args["Step"], made.start_ns, made.end_ns))
        if detail or made.layer is Layer.STEP:
            records.append(made)
    if others:
        diag.warn("bad_event", f"{path}: {others} events neither metadata (M) nor complete (X), which this "
                  "reader does not convert; left out")
    yield from _by_step(rank, steps, records)


def _record(rank: RankInfo, event: dict[str, Any], index: int, path: Path, diag: Diagnostics,
            types: dict[str, str]) -> Slice | None:
    """One X event as a slice (None: MindSpore's own overlap lanes, or a bad event, warned of)."""
    pid, tid, name = str(event.get("pid")), event.get("tid"), str(event.get("name"))
    if pid == str(_OVERLAP_PID):
        return None
    try:
        start_ns = checked_ns(times.us_to_ns(event["ts"]) + rank.clock_offset_ns)
        dur_ns = times.us_to_ns(event["dur"])
        if dur_ns < 0:
            raise ValueError("a negative dur")
        if tid == _STEPS_TID:
            step = checked_id(int(name))
    except (KeyError, TypeError, ValueError, ArithmeticError) as e:
        diag.warn("bad_event", f"{path}: event {index}: expected ts and dur in µs (a step: a number): {e}; "
                  "skipped")
        return None
    if tid == _STEPS_TID:
        return Slice(rank.rank, Layer.STEP, "Steps", f"Step {step}", start_ns, dur_ns, {"Step": step})
    if tid == _SCOPES_TID:
        return Slice(rank.rank, Layer.HOST, "Scope Layer", name, start_ns, dur_ns,
                     {"scope level": event.get("scope_level")})
    if isinstance(tid, str) and tid.startswith("HostCpuOps"):
        return Slice(rank.rank, Layer.HOST, f"CPU OP / {tid}", name, start_ns, dur_ns,
                     {"Type": types.get(name) or mindspore_type(name)}, HOST_OPERATOR)
    return Slice(rank.rank, Layer.HOST, f"Process {pid} / {tid}", name, start_ns, dur_ns, event.get("args"))


def _by_step(rank: RankInfo, steps: list[Step], records: list[Slice]) -> Iterator[StepRecords]:
    """The records filed by step (the module's rule), steps in time order; the records before the
    first step, or of a rank without steps, as the pseudo step first."""
    steps = sorted(steps, key=lambda s: (s.start_ns, s.step))
    starts = [s.start_ns for s in steps]
    place = {s.step: i for i, s in enumerate(steps)}
    filed: list[list[Slice]] = [[] for _ in steps]
    loose: list[Slice] = []
    for r in records:
        if r.layer is Layer.STEP:  # a step's own slice, in its step
            filed[place[r.args["Step"]]].append(r)
            continue
        last = bisect.bisect_right(starts, r.start_ns) - 1
        if last < 0:
            loose.append(r)
            continue
        # the steps started at or before it that hold it: the few before the latest (steps 1 and 2
        # overlap; the others follow each other), so a record costs no scan of every step
        holding = [i for i in range(last, max(last - _OVERLAPPING, -1), -1) if steps[i].end_ns > r.start_ns]
        at = min(holding, key=lambda i: (steps[i].end_ns - steps[i].start_ns, -i)) if holding else last
        filed[at].append(r)
    if loose or not steps:
        yield StepRecords(rank.rank, None, None, None, loose, has_device=False)
    for step, mine in zip(steps, filed, strict=True):
        yield StepRecords(rank.rank, None, step.step, step, mine, has_device=False)


def _rank_of(path: Path) -> str:
    return path.stem.rsplit("_", 1)[-1]


def mindspore_type(name: str) -> str:
    """MindSpore's op type in its scope name (``.../Cast-op239``: Cast), else the name itself."""
    found = _MINDSPORE_OP.search(name)
    return found.group(1) if found else name


def op_types(path: Path, diag: Diagnostics, key: str = "full_op_name") -> dict[str, str]:
    """``cpu_op_detail_info_{N}.csv``'s op type of each op (by ``key``: its full or short name);
    {} where there is no such file or column."""
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        if not {key, "op_type"} <= set(csv_header(rows, path)):
            return {}
        return {row[key]: row["op_type"] for row in csv_rows(rows, path, diag)
                if row.get(key) and row.get("op_type")}


# -- the FRAMEWORK files of a *_ascend_ms CPU run ----------------------------------------------------

def framework_file(rank_dir: Path, prefix: str, rank: int) -> Path | None:
    """``FRAMEWORK/{prefix}_{rank}.txt`` of a rank folder (else the only one), None where none."""
    folder = rank_dir / "FRAMEWORK"
    mine = folder / f"{prefix}_{rank}.txt"
    if mine.is_file():
        return mine
    found = sorted(folder.glob(f"{prefix}_*.txt"))
    return found[0] if len(found) == 1 else None


def framework_ops(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[StepRecords]:
    """``cpu_op_execute_timestamp_{N}.txt``: every run of every CPU op, a host operator (epoch ns,
    ms durations, exactly), its type from ``cpu_op_detail_info_{N}.csv``; one pseudo step (these runs
    record no step)."""
    types = op_types(path.with_name(path.name.replace("cpu_op_execute_timestamp", "cpu_op_detail_info")
                                    .replace(".txt", ".csv")), diag)
    slices = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line_no, line in enumerate(f, start=1):
            line = line.strip()
            if not line:
                continue
            name, _, runs = line.partition(";")
            _, _, runs = runs.partition(";")
            for run in runs.split():
                try:
                    start, dur_ms, tid = run.split(",")
                    start_ns = checked_ns(int(start) + rank.clock_offset_ns)
                    dur_ns = int((Decimal(dur_ms) * 1_000_000).to_integral_value())
                    if dur_ns < 0:
                        raise ValueError
                except (ValueError, InvalidOperation, ArithmeticError):
                    diag.warn("bad_row", f"{path}: line {line_no}: expected start_ns,dur_ms,tid, got "
                              f"{run[:60]!r}; skipped")
                    continue
                slices.append(Slice(rank.rank, Layer.HOST, f"CPU OP / Thread {tid}", name, start_ns, dur_ns,
                                    {"Type": types.get(name) or mindspore_type(name)}, HOST_OPERATOR))
    yield StepRecords(rank.rank, None, None, None, slices, has_device=False)


_MEMORY_COLUMNS = ("Timestamp(ns)", *(f"Total {kind}(Byte)" for kind in MEMORY_KINDS))


def framework_memory(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[Sample]:
    """``cpu_ms_memory_record_{N}.txt`` (a CSV): the allocator's totals after each of its events, in
    bytes, as the ``MindSpore CPU`` component's counters.

    Raises:
        InputError: no Timestamp(ns) column.
    """
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        if "Timestamp(ns)" not in csv_header(rows, path):
            raise InputError(path, "line 1", "no column Timestamp(ns) in the header",
                             hint="expected MindSpore's cpu_ms_memory_record file")
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            try:
                ts_ns = checked_ns(int((row.get("Timestamp(ns)") or "").strip()) + rank.clock_offset_ns)
                values = [_bytes(row.get(column)) for column in _MEMORY_COLUMNS[1:]]
            except ValueError:
                diag.warn("bad_row", f"{path}: line {line}: expected a Timestamp(ns) and totals in bytes; "
                          "skipped")
                continue
            for kind, value in zip(MEMORY_KINDS, values, strict=True):
                if value is not None:
                    yield Sample(rank.rank, memory_counter(MEMORY_COMPONENT, kind), ts_ns, value)


def _bytes(text: str | None) -> float | None:
    text = (text or "").strip()
    return float(int(text)) if text else None


READER = Reader(
    name=NAME,
    folder="a profiler/ folder with cpu_timeline_display_N.json (MindSpore 2.0 on CPU)",
    sniff=sniff, rank_infos=rank_infos, read=read,
    ops_in_detail_only=True,  # its host operators are drawn in detail only
)
