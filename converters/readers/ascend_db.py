"""The database form of the profilers' output (docs/formats.md §5.10), read on the real schema.

torch_npu / MindSpore >= 2.3 with ``export_type=db`` write ``ascend_pytorch_profiler_{rank}.db``
(MindSpore: ``ascend_mindspore_profiler_{rank}.db``); CANN 8's msprof writes ``msprof_*.db`` with
the same tables. SQLite, times in epoch ns (some columns as TEXT), string columns as ids into
``STRING_IDS``, HCCL enums as ids into ``ENUM_HCCL_*`` (65534 = N/A, 65535 = INVALID, left out).

Read, the profilers' own way (checked against their ``OVERLAP_ANALYSIS`` and ``StepTraceTime``):
* ``STEP_TIME(id, startNs, endNs)``: the steps; without it, one pseudo step;
* ``TASK`` rows: every device task on its ``Stream N`` lane. Compute is exactly the rows joined
  with ``COMPUTE_TASK_INFO`` (by ``globalTaskId``); any other task (notify waits, event records,
  copies, even AI_CORE rows HCCL launches without compute info) is drawn but is no computation
  (``intervals.NOT_COMPUTE``, its type in args);
* ``TASK`` + ``COMMUNICATION_TASK_INFO``: HCCL tasks on ``Plane N`` lanes (only there);
* ``COMMUNICATION_OP``: communication ops, on a lane named by the group;
* CANN's database measures Free from the first to the last device task of any type
  (``StepRecords.device_span``); torch_npu's from the first to the last compute or communication;
* detail only: host API ranges (``PYTORCH_API``, ``CANN_API``, ``MSTX_EVENTS``) on one lane per
  table and thread; host-to-device arrows from a ``CANN_API`` launch to the tasks and ops that
  share its ``connectionId``, and from a ``PYTORCH_API`` op to the stream tasks and ops of the
  connection ids ``CONNECTION_IDS`` lists for it (its ``connectionId`` is an ``id`` there: the text
  form's ``async_npu`` arrows, which ``diff --by op`` follows); host-to-host arrows between
  ``PYTORCH_API`` ops whose ids list one connection id, from the earlier to each later one: a task
  queue's ``Enqueue`` to its ``Dequeue@...`` (the text form's ``async_task_queue``), else a forward
  op to its backward (``fwdbwd``); each arrow ending in its start's step or the next one (a launch
  at a step's end whose task runs in the next), as the text form's reach, and never backwards in
  time (Perfetto drops those); counters ``HBM``, ``LLC``, ``DDR``, ``AICORE_FREQ``, ``NPU_MEM`` and
  ``NPU_MODULE_MEM``;
* the rank from ``RANK_DEVICE_MAP``.

Device memory (``MEMORY_RECORD``, ``OP_MEMORY``, ``NPU_OP_MEM``, ``NPU_MEM``'s app rows) is read
apart, by ``memory``: it is not filed by step. Not read: ``OVERLAP_ANALYSIS`` (the project computes
its own; tests compare the two), PMU (``TASK_PMU_INFO``, ``ACC_PMU``, ``SOC_BANDWIDTH_LEVEL``),
call stacks (``PYTORCH_CALLCHAINS``), and ``connectionCats`` (the kinds of the links, in some files:
the ops' names tell them).

The file is opened by ``sqlite.read_only``, leaving nothing beside it; tables and columns are
looked up by name (``sqlite.Schema``), since they drift between versions. Each table is read in
one ``ORDER BY`` scan, in batches of rows, and the scans are merged by time; a step is yielded as
soon as the merge passes the next step's start, so memory holds one step at a time (two in detail:
a step is held until the next is read, which its arrows may reach). The TASK and
host API queries are stepped in C (``_db_core.Rows``, SQLite's C API on a read-only connection of
its own): SQLite does the joins, C says of each row whether its times and stream or thread are as
expected, resolves its string ids once each (a cache of the ids met, looked up in ``STRING_IDS``
as the join would) and makes the rows that are as expected into slices, what the rules would make of
them, a device task's args the JSON text orjson makes of the rules' dict (as the Chrome-trace reader's
raw args: no dict per slice; the writers read the text), an HCCL task's the rules' dict; any other
row (a bad time, an id ``STRING_IDS`` lacks, an HCCL enum that is no INTEGER) comes back as the
sqlite3 module would give it and goes through the rules (``_device_task``, ``_comm_task``,
``_host_slice``), which say what is skipped or warned about. The
merge by time is C too, as are the step's arrows (``ascend_db_flows``; BENCHMARKS.md, issue 28;
tests/readers/test_ascend_db_core.py and test_ascend_db_rows.py pin each C path to its Python).
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Callable, Iterable, Iterator
from functools import cached_property
from itertools import islice
from operator import attrgetter
from pathlib import Path
from typing import Any

from ..errors import Diagnostics, InputError
from ..intervals import NOT_COMPUTE
from ..model import (
    TIME_LIMIT_NS,
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
from ._db_core import Rows as _Rows
from ._db_core import fill as _fill
from ._db_core import samples as _samples
from .ascend_db_flows import Flows
from .ascend_db_memory import memory  # noqa: F401 - ascend_pt.memory and msprof.memory read it here
from .ascend_db_specs import CommEnums, CommSpec, FillHead, HostSpec, TaskPlaces, TaskSpec
from .common.sqlite import DAMAGED, HINT, SAMPLE_ROWS, Schema, enum_names, plain_key, read_only

NAME = "ascend_db"
CLOCK = "epoch ns as written by the profiler"
_NA_ENUMS = (65534, 65535)


def read_db(rank: RankInfo, path: Path, diag: Diagnostics, detail: bool) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    Raises:
        InputError: the file is not an SQLite database, is damaged (a page SQLite cannot read),
            or has no TASK table with startNs/endNs.
    """
    try:
        yield from _read(rank, path, diag, detail)
    except DAMAGED as e:  # a damaged page, met only when a query reaches it
        raise InputError(path, "", f"damaged SQLite database ({e})", hint=HINT) from None


def _read(rank: RankInfo, path: Path, diag: Diagnostics, detail: bool) -> Iterator[StepRecords]:
    cann = path.name.startswith("msprof")  # CANN's Free spans every device task
    source = read_only(path, diag)
    with source as db:
        schema = Schema(db, path)
        if "TASK" not in schema.tables:
            raise InputError(path, "", "no table TASK: no device tasks to draw", hint=HINT)
        missing = [c for c in ("startNs", "endNs") if c not in schema.columns("TASK")]
        if missing:
            raise InputError(path, "TASK", f"no column {', '.join(missing)}", hint=HINT)
        if "globalTaskId" not in schema.columns("COMPUTE_TASK_INFO"):
            diag.warn("no_compute_info", f"{path}: no table COMPUTE_TASK_INFO (or its globalTaskId): "
                      "compute cannot be told from other device tasks, so none counts as compute")
        reader = _Reader(rank, path, diag, detail or cann, schema, _enums(db, schema))
        steps = _steps(db, schema, path, diag, rank)
        scans = [reader.tasks(source.uri), _batches(reader.ops(db))]
        if detail:
            scans += [reader.host(source.uri, table) for table in _HOST] + \
                [_batches(reader.counters(db, t)) for t in _COUNTERS]
        flows = Flows(rank.rank, reader.links)
        ops_recorded = {"startNs", "endNs"} <= schema.columns("COMMUNICATION_OP")
        filed = _by_step(rank, steps, scans)
        for records in flows.linked(filed) if detail else filed:
            records.ops_recorded = ops_recorded
            if cann:
                records.device_span = _device_span(records.slices)
            if cann and not detail:  # tasks read only for the device span: summary needs no more than compute
                records.slices = [s for s in records.slices if s.layer is not Layer.STREAM
                                  or s.task_type != NOT_COMPUTE]
            yield records
        reader.report_unknown_strings()
        flows.report(path, diag)


def _enums(db: sqlite3.Connection, schema: Schema) -> dict[str, dict[int, str]]:
    """The names of the HCCL enums (by their ``ENUM_HCCL_`` tables' suffix), ``API`` and ``MODULE``."""
    enums = {name: enum_names(db, schema, f"ENUM_HCCL_{name}") for name in
             ("TRANSPORT_TYPE", "LINK_TYPE", "DATA_TYPE", "RDMA_TYPE")}
    enums["API"] = enum_names(db, schema, "ENUM_API_TYPE")
    enums["MODULE"] = enum_names(db, schema, "ENUM_MODULE")
    return enums


def db_rank(path: Path) -> int | None:
    """The rank in ``RANK_DEVICE_MAP`` (its first row), or None if there is none.

    Raises:
        InputError: the file is not an SQLite database.
    """
    with read_only(path, Diagnostics()) as db:
        schema = Schema(db, path)
        if "RANK_DEVICE_MAP" not in schema.tables:
            return None
        try:
            columns = schema.columns("RANK_DEVICE_MAP")
            column = next((c for c in ("rankId", "rank_id", "rank") if c in columns), None)
            if column is None:
                return None
            row = db.execute(f'SELECT "{column}" FROM RANK_DEVICE_MAP WHERE "{column}" IS NOT NULL '
                             "LIMIT 1").fetchone()
        except DAMAGED as e:
            raise InputError(path, "RANK_DEVICE_MAP", f"damaged SQLite database ({e})", hint=HINT) from None
        try:
            value = int(row[0]) if row else None
        except (TypeError, ValueError, OverflowError):
            return None
        return value if value is not None and value >= 0 else None


def db_device_host(path: Path) -> tuple[int | None, str | None]:
    """The device and host a database says its rank ran on: ``RANK_DEVICE_MAP``'s deviceId, else
    the device of its ``TASK`` rows (the first and the last agreeing: no scan of a large table),
    and ``HOST_INFO``'s hostName; None for what it does not say (or says unreadably: this is
    metadata for ``info``, and reading the records says what is broken)."""
    try:
        with read_only(path, Diagnostics()) as db:
            schema = Schema(db, path)
            if "deviceId" in schema.columns("RANK_DEVICE_MAP"):
                devices = {_one(db, "SELECT deviceId FROM RANK_DEVICE_MAP LIMIT 1")}
            elif "deviceId" in schema.columns("TASK"):
                devices = {_one(db, f"SELECT deviceId FROM TASK ORDER BY rowid {order} LIMIT 1")
                           for order in ("ASC", "DESC")}
            else:
                devices = {None}
            host = _one(db, "SELECT hostName FROM HOST_INFO LIMIT 1") \
                if "hostName" in schema.columns("HOST_INFO") else None
    except (InputError, sqlite3.DatabaseError, UnicodeDecodeError):
        return None, None
    device = devices.pop() if len(devices) == 1 else None
    return (device if type(device) is int and device >= 0 else None,
            host if isinstance(host, str) and host else None)


def _one(db: sqlite3.Connection, query: str) -> object:
    row = db.execute(query).fetchone()
    return row[0] if row else None


def rank_info_for_file(path: Path, reader: str = "msprof", rank: int | None = None) -> RankInfo:
    """The rank of one database file read alone: its ``RANK_DEVICE_MAP``, else ``rank``, else 0;
    its device and host where it says them."""
    found = db_rank(path)
    device, host = db_device_host(path)
    return RankInfo(rank=found if found is not None else (rank or 0), format=reader, path=path.parent,
                    device=device, host=host, clock=CLOCK, source_paths=(path,))


def _steps(db: sqlite3.Connection, schema: Schema, path: Path, diag: Diagnostics,
           rank: RankInfo) -> list[Step]:
    if not {"id", "startNs", "endNs"} <= schema.columns("STEP_TIME"):
        return []
    steps = []
    for step_id, start, end in db.execute("SELECT id, startNs, endNs FROM STEP_TIME ORDER BY startNs"):
        try:
            offset = rank.clock_offset_ns
            step = Step(None, checked_id(int(step_id)), checked_ns(int(start) + offset),
                        checked_ns(int(end) + offset))
            if step.end_ns < step.start_ns:
                raise ValueError("it ends before it starts")
        except (TypeError, ValueError, ArithmeticError):
            diag.warn("bad_row", f"{path}: STEP_TIME: step {step_id!r:.40} lacks an integer id, or startNs "
                      "and endNs within ±2**62 ns in order; skipped")
            continue
        steps.append(step)
    return steps


def _by_step(rank: RankInfo, steps: list[Step],
             scans: list[Iterator[list[Slice | Sample]]]) -> Iterator[StepRecords]:
    """File the scans' records (each scan a time-ordered iterator of batches), merged by time as
    ``heapq.merge`` would (ties: the earlier scan's first), under the last step started at or
    before them (the first step for those before it); yield each step as soon as the merge passes
    the next one's start. The merge and filing are C (``_db_core.fill``): 160,000 records per
    rank went through ``heapq.merge`` and a Python loop."""
    heads: list[list] = [list(FillHead(iter(scan), [], 0)) for scan in scans]  # fill moves them on
    if not steps:
        slices, samples = [], []
        _fill(heads, TIME_LIMIT_NS, slices, samples, Slice, Sample)
        yield StepRecords(rank.rank, None, None, None, slices, samples)
        return
    # the start of the step after each, then one no record reaches (they start within ±2**62 ns)
    for step, next_start in zip(steps, [step.start_ns for step in steps[1:]] + [TIME_LIMIT_NS], strict=True):
        slices, samples = [], []
        _fill(heads, next_start, slices, samples, Slice, Sample)
        slices.append(Slice(rank.rank, Layer.STEP, "Steps", f"Step {step.step}", step.start_ns,
                            step.end_ns - step.start_ns, {"Step": step.step}))
        yield StepRecords(rank.rank, None, step.step, step, slices, samples)


def by_step_rules(rank: RankInfo, steps: list[Step], scans: list[list[list]]) -> list[StepRecords]:
    """What ``_by_step`` yields, by the rules its C (``_db_core.fill``) follows: the scans' batches
    flattened, merged by ``heapq.merge`` and filed as it went. The reference
    tests/readers/test_ascend_db_core.py holds C to."""
    flat = ([r for batch in scan for r in batch] for scan in scans)
    stream = heapq.merge(*flat, key=attrgetter("start_ns"))
    if not steps:
        records = list(stream)
        return [StepRecords(rank.rank, None, None, None, [r for r in records if type(r) is Slice],
                            [r for r in records if type(r) is Sample])]
    out, after = [], [step.start_ns for step in steps[1:]] + [TIME_LIMIT_NS]
    index, bucket = 0, []
    for r in stream:
        while r.start_ns >= after[index]:
            out.append(bucket)
            index, bucket = index + 1, []
        bucket.append(r)
    out += [bucket] + [[] for _ in steps[index + 1:]]
    result = []
    for step, records in zip(steps, out, strict=True):
        slices = [r for r in records if type(r) is Slice]
        slices.append(Slice(rank.rank, Layer.STEP, "Steps", f"Step {step.step}", step.start_ns,
                            step.end_ns - step.start_ns, {"Step": step.step}))
        samples = [r for r in records if type(r) is Sample]
        result.append(StepRecords(rank.rank, None, step.step, step, slices, samples))
    return result


def _batches(records: Iterable[Slice | Sample]) -> Iterator[list[Slice | Sample]]:
    """A scan made one record at a time (the small tables) as ``_by_step``'s batches."""
    records = iter(records)
    while batch := list(islice(records, _BATCH)):
        yield batch


def _by_rules(batch: list[Slice | tuple], rules: Callable[[tuple], Slice | None]) -> list[Slice]:
    """A batch of ``_db_core.Rows`` with each row it left to the rules (a tuple: a Slice is a
    subclass) made by them, in its place, or left out."""
    made = []
    for record in batch:
        if type(record) is tuple and (record := rules(record)) is None:
            continue
        made.append(record)
    return made


def _device_span(slices: list[Slice]) -> tuple[int, int] | None:
    tasks = [s for s in slices if s.layer is Layer.STREAM or s.layer is Layer.COMM_TASK]
    if not tasks:
        return None
    return min(s.start_ns for s in tasks), max(s.end_ns for s in tasks)


# -- rows to records ------------------------------------------------------------------------------

_TASK = ("startNs", "endNs", "streamId", "taskId", "modelId", "contextId", "connectionId", "taskType",
         "globalTaskId")
_COMPUTE = ("globalTaskId", "name", "taskType", "opType", "blockDim", "mixBlockDim", "inputShapes",
            "inputDataTypes", "inputFormats", "outputShapes", "outputDataTypes", "outputFormats", "waitNs")
_COMPUTE_STRINGS = ("name", "taskType", "opType", "inputShapes", "inputDataTypes", "inputFormats",
                    "outputShapes", "outputDataTypes", "outputFormats")
_COMM_TASK = ("globalTaskId", "name", "taskType", "planeId", "groupName", "notifyId", "rdmaType", "srcRank",
              "dstRank", "transportType", "size", "dataType", "linkType", "opId")
_OP = ("startNs", "endNs", "opName", "groupName", "opType", "algType", "dataType", "count", "connectionId",
       "opId", "relay", "retry", "waitNs")
# TASK's fast read (``_Reader.tasks``): a device task's args, in the order drawn (the task's own, then its
# compute info's), and the columns of the query, named by their place
_COMPUTE_ARGS = ("opType", "blockDim", "mixBlockDim", "inputShapes", "inputDataTypes", "inputFormats",
                 "outputShapes", "outputDataTypes", "outputFormats", "waitNs")
_DEVICE_ARGS = ("Task Id", "Stream Id", "Model Id", "Context Id", "connection_id", "Task Type", "Op Type",
                "Block Dim", "Mix Block Dim", "Input Shapes", "Input Data Types", "Input Formats",
                "Output Shapes", "Output Data Types", "Output Formats", "Wait Time(ns)")
_TASK_ARGS = 6  # of them the task's own
_TASK_COLUMNS = ("ok", "kind", "start", "dur", "stream", *_DEVICE_ARGS, "startNs", "endNs", "taskType",
                 "c name", "c taskType", *(f"m {n}" for n in _COMM_TASK))
_OK, _KIND, _START, _DUR, _STREAM, _TASK_TYPE, _COMPUTE_NAME = (_TASK_COLUMNS.index(n) for n in (
    "ok", "kind", "start", "dur", "stream", "Task Type", "c name"))
_ARGS_AT = _TASK_COLUMNS.index(_DEVICE_ARGS[0])
_TASK_ARGS_END, _ARGS_END = _ARGS_AT + _TASK_ARGS, _ARGS_AT + len(_DEVICE_ARGS)
_COMM_AT = _TASK_COLUMNS.index(f"m {_COMM_TASK[0]}")
# where the rules of _device_task and _comm_task find their columns
_TASK_AT = {"startNs": _TASK_COLUMNS.index("startNs"), "endNs": _TASK_COLUMNS.index("endNs"),
            "streamId": _STREAM, "taskId": _ARGS_AT, "modelId": _ARGS_AT + 2, "contextId": _ARGS_AT + 3,
            "connectionId": _ARGS_AT + 4, "taskType": _TASK_COLUMNS.index("taskType")}
_COMPUTE_AT = {"name": _COMPUTE_NAME, "taskType": _TASK_COLUMNS.index("c taskType"),
               **{n: _ARGS_AT + _TASK_ARGS + i for i, n in enumerate(_COMPUTE_ARGS)}}
_COMPUTE_KIND, _COMM = 1, 2  # the query's kinds of task: 0 no computation

_TASK_SPEC = TaskSpec(Slice, Layer.STREAM, NOT_COMPUTE, _DEVICE_ARGS, TaskPlaces(
    _OK, _KIND, _START, _DUR, _STREAM, _ARGS_AT, _TASK_ARGS_END, _ARGS_END, _TASK_TYPE, _COMPUTE_NAME,
    *(_TASK_COLUMNS.index(n) for n in ("c taskType", "taskType", "startNs", "endNs"))))
# what it makes an HCCL task's row into (``_comm_task``'s slice): the args' keys, in order, the columns
# they are read from (the task type drawn from "m taskType" and TASK's), then its name's and plane's
_COMM_KEYS = ("notify_id", "stream id", "task id", "context id", "connection_id", "task type", "group",
              "src rank", "dst rank", "transport type", "size(Byte)", "data type", "link type", "rdma type",
              "model id", "op id", "bandwidth(GB/s)")
_COMM_PLACES = tuple(_TASK_COLUMNS.index(n) for n in (
    "m notifyId", "Stream Id", "Task Id", "Context Id", "connection_id", "m taskType", "m groupName",
    "m srcRank", "m dstRank", "m transportType", "m size", "m dataType", "m linkType", "m rdmaType",
    "Model Id", "m opId", "m name", "m planeId"))
_COMM_ENUMS = ("TRANSPORT_TYPE", "DATA_TYPE", "LINK_TYPE", "RDMA_TYPE")  # in the order of their args
# the TASK query's columns of string ids (Rows resolves them), and the tables' (SQLite's joins resolve them)
_QUERY_STRINGS = {"t": ("taskType",), "c": _COMPUTE_STRINGS, "m": ("name", "taskType", "groupName")}
_TASK_STRINGS = tuple(_TASK_COLUMNS.index(n) for n in (
    "taskType", "c name", "c taskType", "Op Type", "Input Shapes", "Input Data Types", "Input Formats",
    "Output Shapes", "Output Data Types", "Output Formats", "m name", "m taskType", "m groupName"))
_BATCH = 64  # rows fetched and made into slices at once (more: a step's memory grows, no faster)
# host tables: (lane prefix, columns); name, globalTid and connectionId are read from each
_HOST = {
    "PYTORCH_API": ("PyTorch", ("sequenceNumber", "fwdThreadId", "inputDtypes", "inputShapes", "type")),
    "CANN_API": ("CANN", ("type",)),
    "MSTX_EVENTS": ("MSTX", ("eventType", "category", "domainId")),
}
# a PYTORCH_API row's connection ids, to device work and to other PyTorch ops (``_Reader._links``)
_LINKS_JOIN = (" LEFT JOIN (SELECT id, group_concat(connectionId) AS links FROM CONNECTION_IDS"
               " WHERE typeof(connectionId) = 'integer' GROUP BY id) k ON k.id = h.connectionId")
# counters: (lane format over the row's columns, time column, [(value column, label)])
_COUNTERS = {
    "HBM": ("HBM {hbmId}/{type}", "timestampNs", (("bandwidth", "Bandwidth(MB/s)"),)),
    "LLC": ("LLC {llcId}/{mode}", "timestampNs",
            (("hitRate", "Hit Rate(%)"), ("throughput", "Throughput(MB/s)"))),
    "DDR": ("DDR", "timestampNs", (("read", "Read(MB/s)"), ("write", "Write(MB/s)"))),
    "AICORE_FREQ": ("AI Core", "timestampNs", (("freq", "Frequency(MHz)"),)),
    "NPU_MEM": ("NPU memory/{type}", "timestampNs", (("hbm", "HBM(B)"), ("ddr", "DDR(B)"))),
    "NPU_MODULE_MEM": ("Module memory/{moduleId}", "timestampNs", (("totalReserved", "Reserved(B)"),)),
}


def module_memory_lane(module: str) -> str:
    """The counter of one CANN module's reserved memory (bytes), as ``NPU_MODULE_MEM`` is drawn: the
    text form (``npu_module_mem.csv``) uses it too."""
    lane_format, _, ((_, label),) = _COUNTERS["NPU_MODULE_MEM"]
    return f"{lane_format.format(moduleId=module)} [{label}]"


class _Reader:
    def __init__(self, rank: RankInfo, path: Path, diag: Diagnostics, all_tasks: bool, schema: Schema,
                 enums: dict[str, dict[int, str]]) -> None:
        self.rank, self.path, self.diag, self.all_tasks = rank, path, diag, all_tasks
        self.schema, self.enums = schema, enums
        self.unknown_strings: dict[str, int] = {}
        # PYTORCH_API's connectionId -> the connection ids it links to, comma-separated, from the rows
        # read until ``ascend_db_flows.Flows.bind`` takes them in the op's own step: two steps' at most
        self.links: dict[int, str] = {}

    def _string(self, value: Any, table: str = "") -> str | None:
        """A string column as SQLite resolved it; a number is an id ``STRING_IDS`` lacks."""
        if value is None or type(value) is str:
            return value
        self.unknown_strings[table] = self.unknown_strings.get(table, 0) + 1
        return str(value)

    def report_unknown_strings(self) -> None:
        for table, count in self.unknown_strings.items():
            self.diag.warn("unknown_string_id", f"{self.path}: {table}: {count} string ids not in "
                           "STRING_IDS; kept as numbers")

    def _enum(self, family: str, value: Any) -> str | None:
        if value is None or value in _NA_ENUMS:
            return None
        return self.enums[family].get(value, str(value))

    def _times(self, table: str, start: Any, end: Any) -> tuple[int, int] | None:
        try:
            start_ns, end_ns = int(start), int(end)
            times = checked_ns(start_ns + self.rank.clock_offset_ns), checked_ns(end_ns - start_ns)
        except (TypeError, ValueError, ArithmeticError):
            self.diag.warn("bad_row", f"{self.path}: {table}: a row without integer startNs/endNs within "
                           "±2**62 ns; skipped")
            return None
        if end_ns < start_ns:
            self.diag.warn("bad_row", f"{self.path}: {table}: a row ending before it starts; skipped")
            return None
        return times

    def tasks(self, uri: str) -> Iterator[list[Slice]]:
        """TASK rows, time-ordered, as stream or plane slices, in batches. SQLite joins the task info;
        C steps the query (``_db_core.Rows``: no Python tuple per row), resolves the string ids once
        each, and makes a device or HCCL task whose times and strings are as expected into its slice
        (what ``_task_rules`` makes of such a row); any other row (a bad time, an id ``STRING_IDS``
        lacks, an HCCL plane or enum that is no INTEGER) it gives back as its row, which
        ``_task_rules`` reads, in its place."""
        lanes: dict[int, str] = {}
        looked_up = self._ids_looked_up
        rows = _Rows(uri, self._task_query(sqlite_strings=not looked_up), self.rank.clock_offset_ns,
                     _TASK_STRINGS, looked_up, _BATCH)
        enums = CommEnums(*(self.enums[e] for e in _COMM_ENUMS))
        comm = CommSpec(Layer.COMM_TASK, _COMM_KEYS, _COMM_PLACES, enums, {})
        args = (_TASK_SPEC, self.rank.rank, lanes, self.all_tasks, comm)
        while (rare := rows.tasks(batch := [], *args)) is not None:
            yield _by_rules(batch, self._task_rules) if rare else batch

    def tasks_by_rules(self, db: sqlite3.Connection) -> Iterator[list[Slice]]:
        """What ``tasks`` yields, every row read by the rules from the sqlite3 module's rows, SQLite
        resolving the strings by joins: the reference tests/readers/test_ascend_db_rows.py holds C to."""
        cursor = db.execute(self._task_query(sqlite_strings=True), {"offset": self.rank.clock_offset_ns})
        while rows := cursor.fetchmany(_BATCH):
            yield [s for row in rows if (s := self._task_rules(row)) is not None]

    @cached_property
    def _ids_looked_up(self) -> bool:
        """Whether ``Rows`` resolves the string ids, looking each up in ``STRING_IDS`` by its key (the
        real schema's ``id INTEGER PRIMARY KEY``). Else SQLite's joins resolve them: a ``STRING_IDS``
        without a key on ``id`` (a lookup would scan it, where a join gets an index of its own), or
        without ``id`` and ``value`` (then a string column's TEXT is its string, a number an unknown
        id: ``Schema.expressions``)."""
        if not {"id", "value"} <= self.schema.columns("STRING_IDS"):
            return False
        plan = self.schema.db.execute("EXPLAIN QUERY PLAN SELECT value FROM STRING_IDS WHERE id = 1")
        return any(str(row[-1]).startswith("SEARCH") for row in plan)

    def _task_rules(self, row: tuple) -> Slice | None:
        """One row of the TASK query as its slice, by the rules; None if it is skipped (summary
        draws no HCCL task, nor, torch_npu's, a task that does not compute)."""
        kind = row[_KIND]
        task = {name: row[i] for name, i in _TASK_AT.items()}
        if kind == _COMM:
            return self._comm_task(task, dict(zip(_COMM_TASK, row[_COMM_AT:], strict=True))) \
                if self.all_tasks else None
        if kind == _COMPUTE_KIND or self.all_tasks:
            c = {name: row[i] for name, i in _COMPUTE_AT.items()}
            c["globalTaskId"] = kind or None
            return self._device_task(task, c)
        return None

    def _task_query(self, sqlite_strings: bool) -> str:
        """The TASK query: its columns at the places ``_TASK_COLUMNS`` names. Summary (torch_npu's:
        ``all_tasks`` off) reads only the compute tasks, and of the HCCL tasks only which they are.
        Its string columns are the ids (``Rows`` resolves them, and sets "Task Type"), or, with
        ``sqlite_strings``, resolved by SQLite's joins (``ok`` then says they all were; else it is 1).
        ``Rows`` checks the times and the stream from the columns (``c/ascend_db_rows.c``'s ``times_ok``):
        as terms of ``ok`` SQLite evaluated them per row, a sixth of its work on this query."""
        schema, all_tasks = self.schema, self.all_tasks
        strings = _QUERY_STRINGS if sqlite_strings else dict.fromkeys(_QUERY_STRINGS, ())
        joined = "globalTaskId" in schema.columns("TASK")
        t, t_strings = schema.expressions("t", "TASK", _TASK, strings["t"])
        c, m, joins = dict.fromkeys(_COMPUTE, "NULL"), dict.fromkeys(_COMM_TASK, "NULL"), ""
        resolved = [schema.resolved("t", n, t[n]) for n in strings["t"]]
        if joined and "globalTaskId" in schema.columns("COMPUTE_TASK_INFO"):
            c, c_strings = schema.expressions("c", "COMPUTE_TASK_INFO", _COMPUTE, strings["c"])
            joins += " LEFT JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId" + c_strings
            resolved += [schema.resolved("c", n, c[n]) for n in strings["c"]]
        if joined and "globalTaskId" in schema.columns("COMMUNICATION_TASK_INFO"):
            names = _COMM_TASK if all_tasks else ("globalTaskId",)
            found, m_strings = schema.expressions("m", "COMMUNICATION_TASK_INFO", names, strings["m"])
            m.update(found)
            joins += " LEFT JOIN COMMUNICATION_TASK_INFO m ON m.globalTaskId = t.globalTaskId" + m_strings
        kind = f"CASE WHEN {m['globalTaskId']} IS NOT NULL THEN {_COMM} " \
               f"WHEN {c['globalTaskId']} IS NOT NULL THEN {_COMPUTE_KIND} ELSE 0 END"
        columns = {
            "ok": " AND ".join(resolved) or "1", "kind": kind, "start": "t.startNs + :offset",
            "dur": "t.endNs - t.startNs",
            "stream": t["streamId"], "Task Id": t["taskId"], "Stream Id": t["streamId"],
            "Model Id": t["modelId"], "Context Id": t["contextId"], "connection_id": t["connectionId"],
            "Task Type": f"COALESCE(NULLIF({c['taskType']}, ''), NULLIF({t['taskType']}, ''))"
                         if sqlite_strings else "NULL",
            **{arg: c[n] for arg, n in zip(_DEVICE_ARGS[_TASK_ARGS:], _COMPUTE_ARGS, strict=True)},
            "startNs": t["startNs"], "endNs": t["endNs"], "taskType": t["taskType"], "c name": c["name"],
            "c taskType": c["taskType"], **{f"m {n}": m[n] for n in _COMM_TASK},
        }
        assert tuple(columns) == _TASK_COLUMNS
        where = "" if all_tasks else f" WHERE {kind} = {_COMPUTE_KIND}"
        return f"SELECT {', '.join(columns.values())} FROM TASK t{joins}{t_strings}{where} ORDER BY t.startNs"

    def _device_task(self, task: dict[str, Any], c: dict[str, Any]) -> Slice | None:
        times = self._times("TASK", task["startNs"], task["endNs"])
        if times is None:
            return None
        computes = c["globalTaskId"] is not None
        task_type = (self._string(c["taskType"], "COMPUTE_TASK_INFO") if computes else None) \
            or self._string(task["taskType"], "TASK") or ""
        name = (self._string(c["name"], "COMPUTE_TASK_INFO") if computes else None) or task_type or "Task"
        args: dict[str, Any] = {}
        for key, value in (("Task Id", task["taskId"]), ("Stream Id", task["streamId"]),
                           ("Model Id", task["modelId"]), ("Context Id", task["contextId"]),
                           ("connection_id", task["connectionId"]), ("Task Type", task_type or None),
                           ("Op Type", self._string(c["opType"])), ("Block Dim", c["blockDim"]),
                           ("Mix Block Dim", c["mixBlockDim"]),
                           ("Input Shapes", self._string(c["inputShapes"])),
                           ("Input Data Types", self._string(c["inputDataTypes"])),
                           ("Input Formats", self._string(c["inputFormats"])),
                           ("Output Shapes", self._string(c["outputShapes"])),
                           ("Output Data Types", self._string(c["outputDataTypes"])),
                           ("Output Formats", self._string(c["outputFormats"])),
                           ("Wait Time(ns)", c["waitNs"])):
            if value is not None and value not in ("", "N/A"):
                args[key] = value
        stream = task["streamId"] if task["streamId"] is not None else "?"
        return Slice(self.rank.rank, Layer.STREAM, f"Stream {stream}", name, *times, args,
                     task_type if computes else NOT_COMPUTE)

    def _comm_task(self, task: dict[str, Any], m: dict[str, Any]) -> Slice | None:
        """An HCCL task's row as its slice on its plane's lane: the rules ``c/ascend_db_rows.c``'s
        ``comm_slice`` follows for the rows it makes (tests/readers/test_ascend_db_rows.py)."""
        times = self._times("TASK", task["startNs"], task["endNs"])
        if times is None:
            return None
        task_type = self._string(m["taskType"]) or self._string(task["taskType"]) or ""
        name = self._string(m["name"], "COMMUNICATION_TASK_INFO") or task_type or "HCCL task"
        args: dict[str, Any] = {}
        notify = m["notifyId"]
        if type(notify) is int and notify < 0:  # SQLite holds signed 64-bit ints: -1 is 2**64 - 1
            notify &= 0xFFFF_FFFF_FFFF_FFFF
        for key, value in (("notify_id", notify), ("stream id", task["streamId"]),
                           ("task id", task["taskId"]), ("context id", task["contextId"]),
                           ("connection_id", task["connectionId"]),
                           ("task type", task_type or None), ("group", self._string(m["groupName"])),
                           ("src rank", m["srcRank"]), ("dst rank", m["dstRank"]),
                           ("transport type", self._enum("TRANSPORT_TYPE", m["transportType"])),
                           ("size(Byte)", m["size"]), ("data type", self._enum("DATA_TYPE", m["dataType"])),
                           ("link type", self._enum("LINK_TYPE", m["linkType"])),
                           ("rdma type", self._enum("RDMA_TYPE", m["rdmaType"])),
                           ("model id", task["modelId"]), ("op id", m["opId"])):
            if value is not None:
                args[key] = value
        if type(m["size"]) is int and times[1] > 0:
            args["bandwidth(GB/s)"] = m["size"] / times[1]  # bytes per ns
        plane = m["planeId"] if m["planeId"] is not None else "?"
        return Slice(self.rank.rank, Layer.COMM_TASK, f"Plane {plane}", name, *times, args, task_type)

    def ops(self, db: sqlite3.Connection) -> Iterator[Slice]:
        """COMMUNICATION_OP rows, time-ordered, on lanes named by their group."""
        columns = self.schema.columns("COMMUNICATION_OP")
        if not {"startNs", "endNs"} <= columns:
            return
        fields, joins = self.schema.select("o", "COMMUNICATION_OP", _OP,
                                           ("opName", "groupName", "opType", "algType"))
        query = f"SELECT {fields} FROM COMMUNICATION_OP o{joins} ORDER BY o.startNs"
        for row in db.execute(query):
            op = dict(zip(_OP, row, strict=False))
            times = self._times("COMMUNICATION_OP", op["startNs"], op["endNs"])
            if times is None:
                continue
            group = self._string(op["groupName"], "COMMUNICATION_OP") or "Communication"
            name = self._string(op["opName"], "COMMUNICATION_OP") or "Communication op"
            args: dict[str, Any] = {}
            for key, value in (("op_type", self._string(op["opType"])),
                               ("alg_type", self._string(op["algType"])),
                               ("data_type", self._enum("DATA_TYPE", op["dataType"])), ("count", op["count"]),
                               ("connection_id", op["connectionId"]), ("op id", op["opId"]),
                               ("relay", op["relay"]), ("retry", op["retry"]),
                               ("Wait Time(ns)", op["waitNs"])):
                if value is not None:
                    args[key] = value
            kind = collectives.hccl(args.get("op_type") or name)  # the database's type, else the name's
            yield Slice(self.rank.rank, Layer.COMM_OP, group, name, *times, args,
                        comm_type(kind, collectives.hccl_group(name)))

    def host(self, uri: str, table: str) -> Iterator[list[Slice]]:
        """A host API table, time-ordered, in batches, one lane per thread (``globalTid``: pid << 32 |
        tid). C steps the query (``_db_core.Rows``) and makes a row whose times, thread and strings are
        as expected into its slice (what ``_host_row`` makes of it); any other it gives back as its
        row, which ``_host_row`` reads, in its place."""
        looked_up = self._ids_looked_up
        query = self._host_query(table, sqlite_strings=not looked_up)
        if query is None:
            return
        sql, strings = query
        prefix, extra = _HOST[table]
        rows = _Rows(uri, sql, self.rank.clock_offset_ns, strings, looked_up, _BATCH)
        args = (HostSpec(Slice, Layer.HOST, ("connection_id", *extra)), self.rank.rank, {}, prefix,
                self.enums["API"] if table == "CANN_API" else None, self.links)
        while (rare := rows.host(batch := [], *args)) is not None:
            yield _by_rules(batch, lambda row: self._host_row(table, row)) if rare else batch

    def host_by_rules(self, db: sqlite3.Connection, table: str) -> Iterator[list[Slice]]:
        """What ``host`` yields, every row read by ``_host_row`` from the sqlite3 module's rows, SQLite
        resolving the strings by joins: the reference tests/readers/test_ascend_db_rows.py holds C to."""
        query = self._host_query(table, sqlite_strings=True)
        if query is None:
            return
        cursor = db.execute(query[0], {"offset": self.rank.clock_offset_ns})
        while rows := cursor.fetchmany(_BATCH):
            yield [s for row in rows if (s := self._host_row(table, row)) is not None]

    def _host_query(self, table: str, sqlite_strings: bool) -> tuple[str, tuple[int, ...]] | None:
        """(the query of a host table, the places of its string columns), None where the table has
        no times: its columns ok, links (``_links``), startNs, endNs, the name, globalTid,
        connectionId, then the table's own. The strings are ids (``Rows`` resolves them) or, with
        ``sqlite_strings``, resolved by SQLite's joins (``ok`` then says they all were; else it is
        1). ``Rows`` checks the times and the thread (a TEXT time, PYTORCH_API's in some versions,
        that spells an integer exactly it reads; any other goes to ``_host_row``)."""
        extra = _HOST[table][1]
        if not {"startNs", "endNs"} <= self.schema.columns(table):
            return None
        name_column = "message" if table == "MSTX_EVENTS" else "name"
        names = ("startNs", "endNs", name_column, "globalTid", "connectionId", *extra)
        strings = (name_column, "inputDtypes", "inputShapes")
        h, joins = self.schema.expressions("h", table, names, strings if sqlite_strings else ())
        ok = " AND ".join(self.schema.resolved("h", n, h[n]) for n in strings if n in h and sqlite_strings)
        links, joins = self._links(table, joins)
        # startNs is TEXT in some versions: order by its value, not its spelling
        query = (f"SELECT {ok or 1}, {links}, {', '.join(h[n] for n in names)} FROM {table} h{joins} "
                 "ORDER BY CAST(h.startNs AS INTEGER)")
        return query, tuple(2 + names.index(n) for n in strings if n in names)

    def _host_row(self, table: str, row: tuple) -> Slice | None:
        """A row of a host table's query (ok, links, then the columns ``_host_slice`` reads) as its
        slice by the rules, its links to connection ids noted; None if it is skipped."""
        record = self._host_slice(table, row[2:])
        if record is not None and row[1] is not None:
            self.links[row[6]] = row[1]
        return record

    def _links(self, table: str, joins: str) -> tuple[str, str]:
        """(column, joins): for PYTORCH_API, the connection ids its row's ``connectionId`` names in
        ``CONNECTION_IDS(id, connectionId)`` (one row per id and connection id: a ``Conv2D`` launches
        four tasks; an ``Enqueue`` shares one with its ``Dequeue@...``), joined by commas, or NULL;
        NULL for any other table."""
        if table != "PYTORCH_API" or not {"id", "connectionId"} <= self.schema.columns("CONNECTION_IDS"):
            return "NULL", joins
        return "k.links", joins + _LINKS_JOIN

    def _host_slice(self, table: str, row: tuple) -> Slice | None:
        """One host API row (startNs, endNs, name, globalTid, connectionId, then the table's own
        columns) as its slice; None if it is skipped."""
        prefix, extra = _HOST[table]
        start, end, name, tid, link, *values = row
        times = self._times(table, start, end)
        if times is None:
            return None
        thread = tid & 0xFFFF_FFFF if type(tid) is int else tid
        args: dict[str, Any] = {"connection_id": link} if link is not None else {}
        for key, value in zip(extra, values, strict=True):
            if value is None:
                continue
            if key == "type" and table == "CANN_API":
                value = self.enums["API"].get(value, value)
            elif key in ("inputDtypes", "inputShapes"):
                value = self._string(value, table)
            args[key] = value
        return Slice(self.rank.rank, Layer.HOST, f"{prefix} (thread {thread})",
                     self._string(name, table) or prefix, *times, args)

    def counters(self, db: sqlite3.Connection, table: str) -> Iterator[Sample]:
        """One counter table, time-ordered; a lane per (instance, value column). C makes the samples
        (``_db_core.samples``), leaving to ``rules`` the rows it cannot read."""
        lane_format, time_column, values = _COUNTERS[table]
        columns = self.schema.columns(table)
        if time_column not in columns:
            return
        keys = [c for c in ("hbmId", "type", "llcId", "mode", "moduleId") if "{" + c + "}" in lane_format]
        if not set(keys) <= columns:
            return
        values = tuple((c, label) for c, label in values if c in columns)
        selected = (*keys, time_column, *(c for c, _ in values))  # as _db_core.samples reads a row
        fields, joins = self.schema.select("k", table, selected, ("type", "mode"))
        lanes: dict[Any, tuple[str, ...]] = {}  # an instance's (its key columns), by value column
        bad, modules, n = 0, self.enums["MODULE"], len(keys)
        number, offset = self.rank.rank, self.rank.clock_offset_ns

        def rules(row: tuple) -> list[Sample]:
            """A row C left (an instance met first, a time or a value it cannot read) as its samples;
            its instance's lanes noted for C where they are the same for every row of it."""
            nonlocal bad
            key = row[0] if n == 1 else row[:n]
            if (names := lanes.get(key)) is None or not plain_key(key):
                unknown = sum(self.unknown_strings.values())
                labels = {k: self._string(v, table) if k in ("type", "mode") else modules.get(v, v)
                          for k, v in zip(keys, row[:n], strict=True)}
                lane = lane_format.format(**labels)
                names = tuple(f"{lane} [{label}]" for _, label in values)
                if sum(self.unknown_strings.values()) == unknown and plain_key(key):  # unknown ids: per row
                    lanes[key] = names
            try:
                ts = checked_ns(int(row[n]) + offset)
            except (TypeError, ValueError, ArithmeticError):
                bad += len(names)
                return []
            made = []
            for name, value in zip(names, row[n + 1:], strict=True):
                try:
                    made.append(Sample(number, name, ts, float(value)))
                except (TypeError, ValueError, ArithmeticError):
                    bad += 1
            return made

        cursor = db.execute(f"SELECT {fields} FROM {table} k{joins} ORDER BY k.{time_column}")
        while rows := cursor.fetchmany(SAMPLE_ROWS):
            _samples(rows, n, lanes, number, offset, Sample, rules, made := [])
            yield from made
        if bad:
            self.diag.warn("bad_row", f"{self.path}: {table}: {bad} values without a number or time; skipped")

