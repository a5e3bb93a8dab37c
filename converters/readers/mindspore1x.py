"""MindSpore 1.x profiler intermediates, the legacy ``<output>/profiler/`` folder (docs/formats.md §2).

One folder may hold several ranks: every file ends in ``_{id}``, the rank (the device id before
MindSpore 1.6). A rank is an id with device ops or a step trace:

* ``output_timeline_data_{id}.txt``: ``op_name,stream_id,start_time(ms),duration(ms)``, the
  device ops per stream; joined by full name with ``framework_raw_{id}.csv`` (op type, graph,
  shapes; columns looked up by name, three layouts exist) for their args;
* ``aicpu_intermediate_{id}.csv`` or ``output_data_preprocess_aicpu_{id}.txt``: AI CPU ops
  (``run_start``/``run_end`` in µs), drawn on their own lane;
* ``step_trace_raw_{id}_detail_time.csv``: steps, FP/BP points and one start/end column pair
  per communication op (``stream_24_0_AllReduce-op3143``), which become communication ops;
* ``hccl_info/<op>[_dev<d>]/iter{N}.trace``: HCCL tasks, planes by ``tid``; a trace belongs to
  the folder's only rank, else to the rank of its ``_dev`` suffix, else to its ``device id``;
* MindData's queue, pipeline and CPU files: counters at each step's start (``minddata``).

All times count the device SysCnt (100 MHz, 10 ns ticks) and convert to ns exactly.
``host_start.log.{id}`` (``clock_realtime`` and ``clock_monotonic_raw``, ns) maps them to the
epoch as ``syscnt_ns + clock_realtime - clock_monotonic_raw`` (docs/design.md §7); without it a rank
keeps its own timebase, and its description and a note on stderr say it is not aligned.
Records are filed by step (the last step started at or before them; those before the first
step make a step of their own, with no number) in a spill file, so a rank of any size is
yielded one step at a time. A folder with ``PROF_*`` directories is MindSpore 2.0-2.2, whose
msprof export is read instead.
"""

from __future__ import annotations

import bisect
import csv
import os
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson

from ..errors import Diagnostics, InputError, as_text
from ..model import Layer, RankInfo, Slice, Step, StepRecords, checked_id, checked_ns, comm_type
from ..select import format_ids
from . import collectives, minddata
from .base import Reader
from .common import jsonfile
from .common.args import as_json
from .common.spill import StepSpill
from .common.textfile import csv_header, csv_rows, whole_lines
from .common.times import us_to_ns

NAME = "mindspore1x"
CLOCK = "device SysCnt (10 ns ticks)"

_FILES = {  # what each file holds -> its name, with the rank (or device) id
    "timeline": re.compile(r"^output_timeline_data_(\d+)\.txt$"),
    "framework": re.compile(r"^framework_raw_(\d+)\.csv$"),
    "aicpu": re.compile(r"^(?:aicpu_intermediate|output_data_preprocess_aicpu)_(\d+)\.(?:csv|txt)$"),
    "step_trace": re.compile(r"^step_trace_raw_(\d+)_detail_time\.csv$"),
    "host_start": re.compile(r"^host_start\.log\.(\d+)$"),
    "min_cycle": re.compile(r"^min_cycle_counter_(\d+)\.txt$"),
    "hccl_raw": re.compile(r"^hccl_raw_(\d+)\.csv$"),
    **minddata.FILES,
}
_READ = ("timeline", "framework", "aicpu", "step_trace", "hccl_raw", *minddata.FILES)  # besides hccl_info
_DEVICE = ("timeline", "aicpu")  # the files of device tasks: without them compute is unknown
_HCCL = "hccl_info"
_DEV_SUFFIX = re.compile(r"_dev(\d+)$")
_COMM_COLUMN = re.compile(r"^stream_(\d+)_(?:\d+_)?(.+)$")  # stream_24_0_AllReduce-op3143
_COMMUNICATION = re.compile(r"(?i)^(hcom|all_?reduce|all_?gather|reduce_?scatter|broadcast|send|receive|recv"
                            r"|all_?to_?all|neighbor_?exchange)")
_BATCH = 10_000
_SCALARS = (str, int, float, type(None))  # what an event's name and tid may be (events.Event's)


def sniff(folder: Path) -> bool:
    """A folder with device op timelines, step traces or HCCL traces, and no msprof ``PROF_*``
    beside them."""
    names = _names(folder)
    if any(name.startswith("PROF_") for name in names):
        return False
    return any(_FILES["timeline"].match(n) or _FILES["step_trace"].match(n) for n in names) \
        or bool(_hccl_dirs(folder))


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per file id with device ops, a step trace or HCCL traces.

    Raises:
        InputError: ``host_start.log`` or ``min_cycle_counter`` is unreadable.
    """
    files = _files_by_id(folder)
    ids = {i for i, found in files.items() if "timeline" in found or "step_trace" in found}
    hccl = _hccl_owners(folder, ids)
    infos = []
    for rank in sorted(ids | hccl.keys()):
        found = files.get(rank, {})
        offset, clock, aligned = _clock(found.get("host_start"))
        start = found.get("min_cycle")
        infos.append(RankInfo(
            rank=rank,
            format=NAME,
            path=folder,
            start_ns=_read_ms(start) + offset if start else None,
            clock=clock if any(k in found for k in _DEVICE) else f"{clock}; step trace only: no device tasks",
            source_paths=tuple(found[k] for k in _READ if k in found) + tuple(hccl.get(rank, ())),
            clock_offset_ns=offset,
            wall_clock=aligned,
        ))
    return infos


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    Raises:
        InputError: a file without the header it needs, or an HCCL trace that is not JSON.
    """
    sources = {kind: p for p in rank.source_paths for kind, rx in _FILES.items() if rx.match(p.name)}
    steps = _steps(rank, sources["step_trace"], diag) if "step_trace" in sources else []
    if "hccl_raw" in sources:
        _add_op_costs(steps, sources["hccl_raw"], diag)
    device = any(kind in sources for kind in _DEVICE)
    # without op columns in the step trace, the HCCL tasks stand for the communication ops
    tasks = detail or not any(s.layer is Layer.COMM_OP for _, records in steps for s in records)
    starts = [step.start_ns for step, _ in steps]
    counters = minddata.step_samples(rank.rank, [step for step, _ in steps], sources, diag)
    span = _Span()
    with StepSpill() as spill:
        _file_by_step(spill, starts, _records(rank, sources, diag, detail, tasks, span))
        covered = _covered([step for step, _ in steps], span) if device else [False] * len(steps)
        _say_uncovered(rank, sources, steps, covered, diag)
        before = spill.load(-1, rank.rank)
        if before:  # activity no step bounds (or all of it, without a step trace)
            yield StepRecords(rank.rank, None, None, None, before, has_device=device)
        for index, (step, records) in enumerate(steps):
            yield StepRecords(rank.rank, None, step.step, step, records + spill.load(index, rank.rank),
                              next(counters), has_device=covered[index])


class _Span:
    """The first start and the last end of the records of the device file that says which steps
    the device records cover: the op timeline (every AI Core task), else the AI CPU ops."""

    def __init__(self) -> None:
        self.first: int | None = None
        self.last: int | None = None

    def add(self, start_ns: int, end_ns: int) -> None:
        self.first = start_ns if self.first is None else min(self.first, start_ns)
        self.last = end_ns if self.last is None else max(self.last, end_ns)


def _covered(steps: list[Step], span: _Span) -> list[bool]:
    """Per step, whether the device records cover it, so that its Computing and Free are known.

    A profiler that stops writing the op timeline early (the file cut inside step 15 of 322)
    leaves the later steps without device records: they are unknown, not idle. The records cover
    the steps from the one they begin in (or, ahead of it, whose end they reach) to the one they
    end in. That one only partly, if later steps follow and it ends after the records do: the
    records were cut inside it, and a step measured in part is unknown too. Where the records
    end in the last step, nothing says they were cut: it is covered.
    """
    if span.first is None or span.last is None:
        return [False] * len(steps)
    ending = bisect.bisect_left([step.start_ns for step in steps], span.last) - 1  # starts before the end
    return [step.end_ns > span.first and (index < ending or (index == ending and (
            index == len(steps) - 1 or step.end_ns <= span.last)))
            for index, step in enumerate(steps)]


def _say_uncovered(rank: RankInfo, sources: dict[str, Path], steps: list[tuple[Step, list[Slice]]],
                   covered: list[bool], diag: Diagnostics) -> None:
    """A warning naming the steps the device records do not cover (where there are some)."""
    device = sources.get("timeline") or sources.get("aicpu")
    if device is None or all(covered):
        return
    known = [step.step for (step, _), yes in zip(steps, covered, strict=True) if yes]
    missing = [step.step for (step, _), yes in zip(steps, covered, strict=True) if not yes]
    diag.warn(f"device_uncovered {rank.rank}", f"rank {rank.rank}: {device.name} covers steps "
              f"{format_ids(known) or 'none'} of the step trace's {len(steps)}: Computing, Free and the "
              f"not-overlapped split of steps {format_ids(missing)} are unknown")


def _records(rank: RankInfo, sources: dict[str, Path], diag: Diagnostics, detail: bool,
             tasks: bool, span: _Span) -> Iterator[list[Slice]]:
    """Every record besides the step trace's, in batches; ``span`` takes the device records'."""
    if "timeline" in sources:
        framework = _framework(sources["framework"], diag) if detail and "framework" in sources else {}
        yield from _device_ops(rank, sources["timeline"], framework, diag, detail, span)
    if "aicpu" in sources:
        yield _aicpu_ops(rank, sources["aicpu"], diag, detail, None if "timeline" in sources else span)
    if tasks:
        yield from _hccl_tasks(rank, [p for p in rank.source_paths if p.parent.name == _HCCL], diag)


def _file_by_step(spill: StepSpill, starts: list[int], batches: Iterable[list[Slice]]) -> None:
    """File each record under the last step started at or before it (-1: before the first)."""
    for records in batches:
        buckets: dict[int, list[Slice]] = defaultdict(list)
        for s in records:
            buckets[bisect.bisect_right(starts, s.start_ns) - 1].append(s)
        for index, bucket in buckets.items():
            spill.add(index, bucket)


# -- files, owners and clocks -------------------------------------------------------------------


def _names(folder: Path) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _files_by_id(folder: Path) -> dict[int, dict[str, Path]]:
    files: dict[int, dict[str, Path]] = defaultdict(dict)
    for name in sorted(_names(folder)):
        for kind, pattern in _FILES.items():
            found = pattern.match(name)
            if found and (folder / name).is_file():
                files[int(found.group(1))].setdefault(kind, folder / name)  # .csv before .txt
    return files


def _hccl_dirs(folder: Path) -> list[Path]:
    root = folder / _HCCL
    if not root.is_dir() or root.is_symlink():
        return []
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and not p.is_symlink() and any(p.glob("iter*.trace")))


def _hccl_owners(folder: Path, ids: set[int]) -> dict[int, list[Path]]:
    """Which rank each ``hccl_info/<op>`` folder belongs to."""
    owners: dict[int, list[Path]] = defaultdict(list)
    for op_dir in _hccl_dirs(folder):
        suffix = _DEV_SUFFIX.search(op_dir.name)
        if len(ids) == 1:  # the folder's one rank, whatever device it ran on
            owner = next(iter(ids))
        elif suffix:
            owner = int(suffix.group(1))
        else:
            owner = _trace_device(op_dir)
        if owner is not None:
            owners[owner].append(op_dir)
    return owners


def _trace_device(op_dir: Path) -> int | None:
    try:
        first = min(op_dir.glob("iter*.trace"), key=_natural)
        return int(jsonfile.load_object(first)["device id"])
    except (InputError, KeyError, TypeError, ValueError):
        return None


def _natural(path: Path) -> list[Any]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", path.name)]


def _clock(path: Path | None) -> tuple[int, str, bool]:
    """(offset from SysCnt ns to epoch ns, how times were read, whether aligned to wall time)."""
    if path is None:
        return 0, (f"{CLOCK} since the device started, NOT aligned to wall time or to other ranks "
                   "(no host_start.log.N beside the files)"), False
    values = dict(re.findall(r"(clock_realtime|clock_monotonic_raw)\s*:\s*(\d+)", _read_text(path)))
    if len(values) < 2:
        raise InputError(path, "", "expected clock_realtime and clock_monotonic_raw in ns")
    offset = int(values["clock_realtime"]) - int(values["clock_monotonic_raw"])
    return offset, f"{CLOCK}, mapped to epoch with {path.name} (offset {offset} ns)", True


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:
        raise InputError(path, "", f"cannot read: {e.strerror or e}") from e


def _read_ms(path: Path) -> int:
    text = _read_text(path).strip()
    try:
        return ms_to_ns(text)
    except (ValueError, ArithmeticError):
        raise InputError(path, "", f"expected a time in ms, got {text[:40]!r}") from None


def ms_to_ns(text: str) -> int:
    """ms as MindSpore writes them (``154907895.95956``, ticks / 1e5), as ns, exactly.

    Raises:
        ValueError, ArithmeticError: no number, or one past ±2**62 ns.
    """
    value = float(text)
    if 0 <= value < 1e9:  # below 1e15 ns a double errs by < 0.25 ns: rounding is exact
        return round(value * 1e6)
    whole, _, fraction = text.partition(".")
    if whole.isdigit() and len(fraction) <= 6 and (not fraction or fraction.isdigit()):
        return checked_ns(int(whole) * 1_000_000 + int(fraction.ljust(6, "0")))
    exact = Decimal(text)
    if exact.is_finite() and exact.adjusted() > 25:  # "1e100000": not made into a huge int
        raise ValueError(f"{text!r:.40} ms is no time")
    return checked_ns(int((exact * 1_000_000).to_integral_value()))


def _ticks_ns(text: str) -> int:
    return checked_ns(int(text) * 10)


# -- step trace ---------------------------------------------------------------------------------


def _steps(rank: RankInfo, path: Path, diag: Diagnostics) -> list[tuple[Step, list[Slice]]]:
    """Steps by start, each with its phases and communication ops."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.reader(whole_lines(f, path, diag))
        header = [name.strip() for name in csv_header(rows, path)]
        column = {name: i for i, name in enumerate(header)}
        missing = [c for c in ("step_num", "start_point", "end_point") if c not in column]
        if missing:
            raise InputError(path, "line 1", f"no column {', '.join(missing)} in the header",
                             hint="expected MindSpore's step_trace_raw_N_detail_time.csv")
        ops = [(name[: -len("_start_point")], column[name], column[name[: -len("start_point")] + "end_point"])
               for name in header
               if name.endswith("_start_point") and name[: -len("start_point")] + "end_point" in column]
        steps: dict[int, tuple[Step, list[Slice]]] = {}
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            found = _step_row(rank, row, column, ops, path, line, diag)
            if found and found[0].step not in steps:
                steps[found[0].step] = found
    return sorted(steps.values(), key=lambda pair: pair[0].start_ns)


def _step_row(rank: RankInfo, row: list[str], column: dict[str, int], ops: list[tuple[str, int, int]],
              path: Path, line: int, diag: Diagnostics) -> tuple[Step, list[Slice]] | None:
    number = row[column["step_num"]].strip() if len(row) > column["step_num"] else ""
    if number == "-" or not row:  # the averages
        return None
    off, r = rank.clock_offset_ns, rank.rank
    try:
        n = checked_id(int(number))
        points = [_ticks_ns(row[column[c]]) if c in column and len(row) > column[c] else 0
                  for c in ("start_point", "end_point", "fp_point", "bp_point")]
        start, end, fp, bp = points
        if start == end == 0:  # MindSpore 1.0 writes a row of zeros: no step
            return None
        start, end = checked_ns(start + off), checked_ns(end + off)
    except (ValueError, IndexError):
        diag.warn("bad_row", f"{path}: line {line}: expected a step number and tick counts (within ±2**62 "
                  "ns); skipped")
        return None
    if end < start:
        diag.warn("bad_row", f"{path}: line {line}: step ends before it starts; skipped")
        return None
    records = [Slice(r, Layer.STEP, "Steps", f"Step {n}", start, end - start, {"Step": n})]
    fp, bp = (fp + off if fp else None), (bp + off if bp else None)
    for name, begin, finish in (("Iteration Interval", start, fp), ("FP/BP", fp, bp), ("Tail", bp, end)):
        if begin is not None and finish is not None and start <= begin < finish <= end:
            records.append(Slice(r, Layer.STEP, "Steps", name, begin, finish - begin))
    for name, first, last in ops:
        try:
            begin, finish = _ticks_ns(row[first]), _ticks_ns(row[last])
            at = checked_ns(begin + off)
        except (ValueError, IndexError):
            continue
        if 0 < begin <= finish:
            found = _COMM_COLUMN.match(name)
            lane, op = (f"Stream {found.group(1)}", found.group(2)) if found else ("Communication", name)
            records.append(Slice(r, Layer.COMM_OP, lane, op, at, finish - begin,
                                 {"step trace column": name}, comm_type(collectives.hccl(op))))
    return Step(None, n, start, end), records


def _add_op_costs(steps: list[tuple[Step, list[Slice]]], path: Path, diag: Diagnostics) -> None:
    """``hccl_raw_{id}.csv``: MindSpore's cost of each communication op per step (ms), its wait
    and its links (``"src-dst": {transport: [time ms, size, bandwidth]}``), as the op's args."""
    costs: dict[tuple[int, str], list[Any]] = {}
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            step = (row.get("step_num") or "").strip()
            if step == "-":  # the averages
                continue
            try:
                for column, cost in orjson.loads(row.get("communication_operator_cost") or "{}").items():
                    costs[int(step), column] = cost
            except (ValueError, AttributeError, orjson.JSONDecodeError):
                diag.warn("bad_row", f"{path}: line {line}: expected a step number and "
                          "communication_operator_cost as JSON; skipped")
    matched = 0
    for step, records in steps:
        for i, s in enumerate(records):
            if s.layer is not Layer.COMM_OP:
                continue
            cost = costs.get((step.step, s.args.get("step trace column")))
            if isinstance(cost, list) and len(cost) >= 4:
                records[i] = s._replace(args={**s.args, "communication cost(ms)": cost[1],
                                              "wait cost(ms)": cost[2], "links": cost[3]})
                matched += 1
    if matched < len(costs):
        diag.note("hccl_raw_unmatched", f"{path}: {len(costs) - matched} of {len(costs)} op costs name no "
                  "op of the step trace; not shown")


# -- device ops ---------------------------------------------------------------------------------


def _framework(path: Path, diag: Diagnostics) -> dict[str, bytes]:
    """Full op name -> its args as JSON (type, graph, shapes), from any of the three layouts."""
    ops: dict[str, bytes] = {}
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for row in csv_rows(csv.DictReader(whole_lines(f, path, diag)), path, diag):
            name = row.get("full_op_name") or row.get("full_kernel_name")
            if not name or name in ops:
                continue
            kind = row.get("op_type") or row.get("kernel_type") or ""
            args: dict[str, Any] = {"type": kind, "fullname": name}
            for key in ("graph_id", "task_id", "block_dim", "subgraph"):
                if row.get(key):
                    args[key] = row[key]
            try:
                info = orjson.loads(row.get("op_info") or "{}")
                if isinstance(info, dict):
                    args.update(info)
            except orjson.JSONDecodeError:
                diag.warn("bad_row", f"{path}: op_info of {name} is not JSON; left out")
            ops[name] = as_json(args)
    return ops


def _device_ops(rank: RankInfo, path: Path, framework: dict[str, bytes], diag: Diagnostics,
                detail: bool, span: _Span) -> Iterator[list[Slice]]:
    """``output_timeline_data``: one slice per op on its stream, in batches; ``span`` takes every
    op's, also of those summary leaves out."""
    with open(path, encoding="utf-8", errors="replace") as f:
        if not f.readline().startswith("op_name"):
            raise InputError(path, "line 1", "expected the header op_name, stream_id, start_time(ms), "
                             "duration(ms)")
        batch: list[Slice] = []
        for line, text in enumerate(whole_lines(f, path, diag, start=2), start=2):
            parts = text.rstrip("\r\n").rsplit(",", 3)
            if len(parts) != 4:
                if text.strip():
                    diag.warn("bad_row", f"{path}: line {line}: expected op_name,stream_id,start,duration; "
                              "skipped")
                continue
            full, stream, start, dur = parts
            try:
                start_ns, dur_ns = checked_ns(ms_to_ns(start) + rank.clock_offset_ns), ms_to_ns(dur)
            except (ValueError, ArithmeticError):
                diag.warn("bad_row", f"{path}: line {line}: expected start and duration in ms; skipped")
                continue
            if dur_ns < 0:
                diag.warn("bad_row", f"{path}: line {line}: negative duration; skipped")
                continue
            span.add(start_ns, start_ns + dur_ns)
            short = full.rsplit("/", 1)[-1]
            communication = bool(_COMMUNICATION.match(short))
            if communication and not detail:
                continue
            args = None
            if detail:
                args = framework.get(full)
                if args is None:  # an op framework_raw does not name: its full name, once
                    args = framework[full] = as_json({"fullname": full})
            batch.append(Slice(rank.rank, Layer.STREAM, f"Stream {stream.strip()}", short, start_ns, dur_ns,
                               args, "HCCL" if communication else "AI_CORE"))
            if len(batch) >= _BATCH:
                yield batch
                batch = []
        yield batch


def _aicpu_ops(rank: RankInfo, path: Path, diag: Diagnostics, detail: bool,
               span: _Span | None) -> list[Slice]:
    """AI CPU ops, from the CSV or the older space-separated text (which ends in a total line);
    ``span``, if given, takes theirs."""
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        lines = whole_lines(f, path, diag)
        if path.suffix == ".csv":
            reader = csv.reader(lines)
            first, rows = csv_header(reader, path), csv_rows(reader, path, diag)
        else:
            rows = (line.split() for line in lines)
            first = next(rows, [])
        header = [re.sub(r"\(ms\)$", "", name.strip()) for name in first]
        column = {name: i for i, name in enumerate(header)}
        name_column = column.get("kernel_type", column.get("node_type_name"))
        if name_column is None or "run_start" not in column or "run_end" not in column:
            raise InputError(path, "line 1", "expected columns kernel_type (or node_type_name), run_start "
                             "and run_end")
        out = []
        for line, row in enumerate(rows, start=2):
            if len(row) != len(header):
                if row and not row[0].startswith("AI"):  # "AI CPU Total Time(ms): ..." ends the file
                    diag.warn("bad_row", f"{path}: line {line}: expected {len(header)} fields; skipped")
                continue
            try:
                start = checked_ns(us_to_ns(row[column["run_start"]]) + rank.clock_offset_ns)
                dur = checked_ns(us_to_ns(row[column["run_end"]]) + rank.clock_offset_ns - start)
            except (ValueError, ArithmeticError):
                diag.warn("bad_row", f"{path}: line {line}: expected run_start and run_end in µs; skipped")
                continue
            if dur < 0:
                diag.warn("bad_row", f"{path}: line {line}: run_end before run_start; skipped")
                continue
            if span is not None:
                span.add(start, start + dur)
            args = {f"{key} (ms)": row[i] for key, i in column.items()
                    if key in ("total_time", "dispatch_time", "execution_time")} if detail else None
            out.append(Slice(rank.rank, Layer.STREAM, "AI CPU", row[name_column], start, dur, args, "AI_CPU"))
    return out


# -- HCCL ---------------------------------------------------------------------------------------


def _hccl_tasks(rank: RankInfo, op_dirs: list[Path], diag: Diagnostics) -> Iterator[list[Slice]]:
    """HCCL task events, one iteration file at a time; planes are the events' ``tid``."""
    for op_dir in op_dirs:
        for path in sorted(op_dir.glob("iter*.trace"), key=_natural):
            slices = []
            for index, event in enumerate(jsonfile.load_events(path, diag)):
                if not isinstance(event, dict) or event.get("ph") != "X":
                    continue
                name, plane = event.get("name"), event.get("tid", 0)
                try:
                    start_ns = checked_ns(us_to_ns(event["ts"]) + rank.clock_offset_ns)
                    dur_ns = us_to_ns(event["dur"])
                    if not isinstance(name, _SCALARS) or not isinstance(plane, _SCALARS):
                        raise TypeError("a name or tid that is no number or text")
                except (KeyError, TypeError, ValueError, ArithmeticError):
                    diag.warn("bad_event", f"{path}: event {index}: expected numbers ts and dur in µs, and a "
                              "name and tid that are numbers or text; skipped")
                    continue
                if dur_ns < 0:
                    diag.warn("bad_event", f"{path}: event {index}: negative dur; skipped")
                    continue
                args = event.get("args") if isinstance(event.get("args"), dict) else {}
                name = str(name or args.get("task type") or "?")
                slices.append(Slice(rank.rank, Layer.COMM_TASK, f"Plane {plane}", name,
                                    start_ns, dur_ns, _task_args(args, as_text(op_dir.name)), name))
            yield slices


def _task_args(args: dict[str, Any], op: str) -> dict[str, Any]:
    """The task's args with ``size`` (a hex string) as a number of bytes, and the op it serves."""
    out = {"op": op, **args}
    size = args.get("size")
    if isinstance(size, str) and size.lower().startswith("0x"):
        try:
            out["size"] = int(size, 16)
        except ValueError:
            pass
    return out


READER = Reader(
    name=NAME,
    folder="a profiler/ folder with output_timeline_data_N.txt or hccl_info/*/iterN.trace",
    sniff=sniff, rank_infos=rank_infos, read=read,
    ops_in_detail_only=True,  # op types come with framework_raw's args, read in detail
)
