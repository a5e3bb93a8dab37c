"""The profiler's own analysis of an ``*_ascend_pt`` / ``*_ascend_ms`` rank, where nothing else is left.

Besides the records (``trace_view.json``, ``kernel_details.csv``, the database) torch_npu and
MindSpore >= 2.3 write their analysis of them into ``ASCEND_PROFILER_OUTPUT``: per step the overlap
figures (``step_trace_time.csv``; the ``StepTraceTime`` table of ``analysis.db`` with
``export_type=db``) and per communication op its start and its Elapse, Transit, Wait,
Synchronization and Idle times (``communication.json``: ``{"step50": {"p2p": {...}, "collective":
{"<op>@<group>": {"Communication Time Info": ...}, "Total Op Info": ...}}}``, key ``"step"`` without
steps; the ``CommAnalyzerTime`` table). Ranks whose records were deleted for size keep only these.

They hold no step bounds and no device task, so each step is read as records with no bounds that
carry the profiler's figures (``StepFigures``: the overlap table, ``comm`` and ``report`` take them as
they are), and each op as a communication op from its start for its Elapse, on a lane named by its
group, with the file's figures and where they come from in its args. Nothing else is made up: the
trace draws no step and no Computing or Free lane, whose times are not there. ``Start
Timestamp(us)`` is a float of epoch µs (a 0.25 µs grain at epoch scale), taken exactly as written.
``analysis.db`` is read where it is (both exports write the same figures; it is one typed file),
else the text files.
"""

from __future__ import annotations

import csv
import re
import sqlite3
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from ..errors import Diagnostics, InputError
from ..model import Layer, RankInfo, Slice, StepFigures, StepRecords, checked_ns, comm_type
from . import MatrixLink, collectives
from .common import jsonfile
from .common.sqlite import DAMAGED, Schema, read_only
from .common.textfile import csv_header, csv_rows, whole_lines

DB, STEP_TRACE, COMMUNICATION = "analysis.db", "step_trace_time.csv", "communication.json"
MATRIX = "communication_matrix.json"
BANDWIDTH = "Communication Bandwidth Info"  # an op's arg: its transit per transport, as the file writes it
CLOCK = "epoch µs of the profiler's analysis only (no step bounds, no device tasks: per step its figures)"
# StepFigures' fields as step_trace_time.csv and the StepTraceTime table name them
_FIGURES = (("Computing", "computing"), ("Communication(Not Overlapped)", "communication_not_overlapped"),
            ("Overlapped", "overlapped"), ("Communication", "communication"), ("Free", "free"),
            ("Stage", "stage"), ("Bubble", "bubble"),
            ("Communication(Not Overlapped and Exclude Receive)",
             "communication_not_overlapped_and_exclude_receive"), ("Preparing", "preparing"))
# an op's figures as communication.json names them, and the CommAnalyzerTime columns
_TIMES = (("Elapse Time(ms)", "elapse_time"), ("Transit Time(ms)", "transit_time"),
          ("Wait Time(ms)", "wait_time"), ("Synchronization Time(ms)", "synchronization_time"),
          ("Idle Time(ms)", "idle_time"))
_STEP_KEY = re.compile(r"^step(\d*)$")

Ops = dict[int | None, list[Slice]]
Figures = dict[int | None, StepFigures]


def sources(output: Path) -> tuple[Path, ...]:
    """The analysis files of an ``ASCEND_PROFILER_OUTPUT`` folder: analysis.db, else the text files."""
    if (output / DB).is_file():
        return (output / DB,)
    return tuple(output / name for name in (STEP_TRACE, COMMUNICATION) if (output / name).is_file())


def is_analysis(path: Path) -> bool:
    return path.name in (DB, STEP_TRACE, COMMUNICATION)


def read(rank: RankInfo, paths: tuple[Path, ...], diag: Diagnostics) -> Iterator[StepRecords]:
    """Each step the analysis names, in step order: its ops and the profiler's figures.

    Raises:
        InputError: a file that is not what its name says (no CSV header, no JSON object, no SQLite).
    """
    names = ", ".join(p.name for p in paths)
    diag.warn("analysis_only", f"{paths[0].parent}: no trace_view.json, database or kernel_details.csv "
              f"(deleted?): rank {rank.rank} is read from the profiler's analysis only ({names}): each step "
              "as its figures, without step bounds or device tasks", f"rank {rank.rank}")
    figures, ops = analysed(rank, paths, diag)
    if not figures and not ops:
        diag.warn("nothing_read", f"{', '.join(map(str, paths))}: no step and no communication op "
                  f"(the profiler's analysis of rank {rank.rank}, its only files); rank {rank.rank} has "
                  "nothing to show")
    for step in sorted(figures.keys() | ops.keys(), key=lambda s: (s is not None, s or 0)):
        mine = sorted(ops.get(step, []), key=lambda s: s.start_ns)
        yield StepRecords(rank.rank, None, step, None, mine, has_device=False, ops_recorded=True,
                          figures=figures.get(step))


def analysed(rank: RankInfo, paths: tuple[Path, ...], diag: Diagnostics) -> tuple[Figures, Ops]:
    """The figures per step and the ops per step (each with its figures in its args) of ``paths``.

    Raises:
        InputError: a file that is not what its name says.
    """
    figures: Figures = {}
    ops: Ops = {}
    for path in paths:
        if path.name == DB:
            _from_db(rank, path, diag, figures, ops)
        elif path.name == STEP_TRACE:
            _step_trace(path, diag, figures)
        else:
            _communication(rank, path, diag, ops)
    return figures, ops


# -- per step: the overlap figures -----------------------------------------------------------------

def _step_trace(path: Path, diag: Diagnostics, figures: Figures) -> None:
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        rows = csv.DictReader(whole_lines(f, path, diag))
        if "Step" not in csv_header(rows, path):
            raise InputError(path, "line 1", "no column Step in the header",
                             hint="expected torch_npu's step_trace_time.csv")
        for line, row in enumerate(csv_rows(rows, path, diag), start=2):
            _add_figures(figures, row.get("Step"), [row.get(column) for column, _ in _FIGURES], diag,
                         f"{path}: line {line}")


def _add_figures(figures: Figures, step: Any, values: list[Any], diag: Diagnostics, where: str) -> None:
    """One row of figures (µs) under its step; a row with a value that is no number is skipped."""
    try:
        found = StepFigures(*(_ns(value, 1) for value in values))
        step_id = _step_id(step)
    except ValueError as e:
        diag.warn("bad_row", f"{where}: {e}; skipped")
        return
    figures[step_id] = found


# -- per op -----------------------------------------------------------------------------------------

def _communication(rank: RankInfo, path: Path, diag: Diagnostics, ops: Ops) -> None:
    for key, kinds in jsonfile.load_object(path).items():
        try:
            step = _step_id(_STEP_KEY.sub(r"\1", key))
        except ValueError:
            diag.warn("bad_event", f"{path}: {key!r} is no step (step50, or step); skipped")
            continue
        for kind, found in (kinds.items() if isinstance(kinds, dict) else ()):
            for name, info in (found.items() if isinstance(found, dict) else ()):
                if name == "Total Op Info":  # the step's sums, not an op
                    continue
                times = info.get("Communication Time Info") if isinstance(info, dict) else None
                times = times if isinstance(times, dict) else {}
                bandwidth = info.get(BANDWIDTH) if isinstance(info, dict) else None
                op = _op(rank, name, kind, times.get("Start Timestamp(us)"),
                         {k: times.get(k) for k, _ in _TIMES}, f"{path}: {key}: {name}", COMMUNICATION, diag,
                         bandwidth if isinstance(bandwidth, dict) else None)
                if op is not None:
                    ops.setdefault(step, []).append(op)


def _op(rank: RankInfo, key: str, kind: str, start: Any, times: dict[str, Any], where: str, source: str,
        diag: Diagnostics, bandwidth: dict[str, Any] | None = None) -> Slice | None:
    """One op: ``name@group`` (or the name and group apart), from its start for its Elapse; its
    transit per transport (``bandwidth``, as communication.json writes it) in its args too."""
    name, _, group = key.partition("@")
    try:
        start_ns = _ns(start, 1)
        elapse_ns = _ns(times["Elapse Time(ms)"], 1000)
        if start_ns is None or elapse_ns is None or elapse_ns < 0:
            raise ValueError("expected a Start Timestamp(us) and an Elapse Time(ms) >= 0")
        start_ns = checked_ns(start_ns + rank.clock_offset_ns)
        for value in times.values():
            _ns(value, 1000)
    except ValueError as e:
        diag.warn("bad_event", f"{where}: {e}; skipped")
        return None
    args = {"from": f"the profiler's analysis ({source})", "type": kind,
            **{k: v for k, v in times.items() if v is not None}}
    if bandwidth:
        args[BANDWIDTH] = bandwidth
    return Slice(rank.rank, Layer.COMM_OP, group or "Communication", name, start_ns, elapse_ns, args,
                 comm_type(collectives.hccl(name), collectives.hccl_group(name)))


# -- analysis.db ------------------------------------------------------------------------------------

def _from_db(rank: RankInfo, path: Path, diag: Diagnostics, figures: Figures, ops: Ops) -> None:
    with read_only(path, diag) as db:
        schema = Schema(db, path)
        try:
            _step_trace_table(db, schema, path, diag, figures)
            _comm_table(rank, db, schema, path, diag, ops)
        except DAMAGED as e:
            raise InputError(path, "", f"cannot read the profiler's analysis tables: {e}") from None


def _step_trace_table(db: sqlite3.Connection, schema: Schema, path: Path, diag: Diagnostics,
                      figures: Figures) -> None:
    if "step" not in schema.columns("StepTraceTime"):
        return
    fields, _ = schema.select("t", "StepTraceTime", ("step", *(c for _, c in _FIGURES)))
    for n, (step, *values) in enumerate(db.execute(f"SELECT {fields} FROM StepTraceTime t")):
        _add_figures(figures, step, values, diag, f"{path}: StepTraceTime row {n + 1}")


_COMM_COLUMNS = ("hccl_op_name", "group_name", "type", "step", "start_timestamp", *(c for _, c in _TIMES))


def _comm_table(rank: RankInfo, db: sqlite3.Connection, schema: Schema, path: Path, diag: Diagnostics,
                ops: Ops) -> None:
    if not {"hccl_op_name", "start_timestamp", "elapse_time", "step"} <= schema.columns("CommAnalyzerTime"):
        return
    fields, _ = schema.select("c", "CommAnalyzerTime", _COMM_COLUMNS)
    bandwidth = _bandwidth_table(db, schema)
    rows = db.execute(f"SELECT {fields} FROM CommAnalyzerTime c")  # read() puts each step's in time order
    for n, (name, group, kind, step, start, *values) in enumerate(rows):
        where = f"{path}: CommAnalyzerTime row {n + 1}"
        try:
            step_id = _step_id(None if step is None else _STEP_KEY.sub(r"\1", str(step)))
        except ValueError as e:
            diag.warn("bad_row", f"{where}: {e}; skipped")
            continue
        key = str(name) if group is None else f"{name}@{group}"
        times = dict(zip((k for k, _ in _TIMES), values, strict=True))
        op = _op(rank, key, str(kind or ""), start, times, where, f"{DB} CommAnalyzerTime", diag,
                 bandwidth.get((str(step), str(name), str(group))))
        if op is not None:
            ops.setdefault(step_id, []).append(op)


_BANDWIDTH_COLUMNS = ("step", "hccl_op_name", "group_name", "transport_type", "transit_size", "transit_time",
                      "bandwidth", "package_size", "count", "total_duration")


def _bandwidth_table(db: sqlite3.Connection, schema: Schema) -> dict[tuple[str, str, str], dict[str, Any]]:
    """CommAnalyzerBandwidth as communication.json's ``Communication Bandwidth Info`` of each op,
    by (step, op name, group): per transport its transit, one row per packet size."""
    if not set(_BANDWIDTH_COLUMNS) <= schema.columns("CommAnalyzerBandwidth"):
        return {}
    fields, _ = schema.select("b", "CommAnalyzerBandwidth", _BANDWIDTH_COLUMNS)
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for step, name, group, transport, size, ns, gb, package, count, total in db.execute(
            f"SELECT {fields} FROM CommAnalyzerBandwidth b"):
        per = found.setdefault((str(step), str(name), str(group)), {})
        entry = per.setdefault(str(transport), {"Transit Size(MB)": size, "Transit Time(ms)": ns,
                                                "Bandwidth(GB/s)": gb, "Size Distribution": {}})
        if count:  # a transport's row without packets (SDMA, the sum) holds no size
            entry["Size Distribution"][str(package)] = [count, total]
    return found


# -- communication_matrix.json: the links ------------------------------------------------------------

def links(rank: RankInfo, output: Path, diag: Diagnostics) -> tuple[str, Iterator[MatrixLink]] | None:
    """The link matrix the profiler wrote for the rank in ``output`` (``analysis.db``'s
    CommAnalyzerMatrix, else ``communication_matrix.json``) as it writes it: per step, kind, op type
    and label (``allreduce-top1``), and link; with the file's name. None where neither is there."""
    database = output / DB
    if database.is_file():
        with read_only(database, diag) as db:
            held = set(_MATRIX_COLUMNS) <= Schema(db, database).columns("CommAnalyzerMatrix")
        if held:
            return f"{DB} CommAnalyzerMatrix", _matrix_table(rank, database, diag)
    if (output / MATRIX).is_file():
        return MATRIX, _matrix_json(rank, output / MATRIX, diag)
    return None


def _matrix_json(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[MatrixLink]:
    for key, kinds in jsonfile.load_object(path).items():
        for kind, ops in (kinds.items() if isinstance(kinds, dict) else ()):
            for name, found in (ops.items() if isinstance(ops, dict) else ()):
                label, _, group = name.partition("@")
                for link, figures in (found.items() if isinstance(found, dict) else ()):
                    figures = figures if isinstance(figures, dict) else {}
                    where = f"{path}: {key}: {name}: {link}"
                    made = _link(rank, key, kind, label, group, *str(link).partition("-")[::2],
                                 *(figures.get(k) for k in _MATRIX_FIGURES), where, diag)
                    if made is not None:
                        yield made


_MATRIX_FIGURES = ("Transport Type", "Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)", "Op Name")
_MATRIX_COLUMNS = ("step", "type", "hccl_op_name", "group_name", "src_rank", "dst_rank", "transport_type",
                   "transit_size", "transit_time", "bandwidth", "op_name")


def _matrix_table(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[MatrixLink]:
    with read_only(path, diag) as db:
        fields, _ = Schema(db, path).select("m", "CommAnalyzerMatrix", _MATRIX_COLUMNS)
        try:
            rows = db.execute(f"SELECT {fields} FROM CommAnalyzerMatrix m").fetchall()
        except DAMAGED as e:
            raise InputError(path, "", f"cannot read the profiler's analysis tables: {e}") from None
    for n, row in enumerate(rows):
        made = _link(rank, *row, f"{path}: CommAnalyzerMatrix row {n + 1}", diag)
        if made is not None:
            yield made


def _link(rank: RankInfo, step: Any, kind: Any, label: Any, group: Any, src: Any, dst: Any, transport: Any,
          size: Any, time: Any, gb: Any, op: Any, where: str, diag: Diagnostics) -> MatrixLink | None:
    """One link of the matrix; one that is not as expected is warned of and skipped."""
    try:
        step_id = _step_id(None if step is None else _STEP_KEY.sub(r"\1", str(step)))
        ends = [_rank_id(src), _rank_id(dst)]
        size_bytes, time_ns = _ns(size, 1000), _ns(time, 1000)  # MB: 10^6 bytes, as ms are 10^6 ns
        if size_bytes is None or time_ns is None or not isinstance(gb, int | float) or isinstance(gb, bool):
            raise ValueError("expected a Transit Size(MB), a Transit Time(ms) and a Bandwidth(GB/s)")
    except ValueError as e:
        diag.warn("bad_event", f"{where}: {e}; skipped")
        return None
    return MatrixLink(step_id, str(kind), str(label), str(group), *ends, str(transport or "?"), size_bytes,
                      time_ns, float(gb), None if op in (None, "") else str(op))


def _rank_id(value: Any) -> int:
    text = str(value).strip()
    if not text.isdigit():
        raise ValueError(f"expected a rank, got {text[:20]!r}")
    return int(text)


# -- values ---------------------------------------------------------------------------------------

def _step_id(value: Any) -> int | None:
    """A step number as the analysis writes it ("50"), None for none (""); else ValueError."""
    text = "" if value is None else str(value).strip()
    if not text:
        return None
    if not text.isdigit():
        raise ValueError(f"expected a step number, got {text[:40]!r}")
    return int(text)


def _ns(value: Any, per_us: int) -> int | None:
    """µs (``per_us`` 1) or ms (1000) as written, a number or its text, as ns exactly (a float as its
    shortest text, which is what Python's JSON and CSV writers wrote); None for none."""
    if value is None or (isinstance(value, str) and value.strip() in ("", "N/A")):
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"expected a number, got {value!r}"[:80])
    try:
        exact = Decimal(value.strip() if isinstance(value, str) else repr(value))
    except InvalidOperation:
        raise ValueError(f"expected a number, got {value!r}"[:80]) from None
    if not exact.is_finite() or exact.adjusted() > 18:
        raise ValueError(f"{value!r} is no time"[:80])
    return checked_ns(int((exact * per_us * 1000).to_integral_value()))
