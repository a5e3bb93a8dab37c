"""The database form of torch_npu / MindSpore >= 2.3 profiler output (formats.md §5.10).

``ascend_pytorch_profiler_{rank}.db`` (MindSpore: ``ascend_mindspore_profiler_{rank}.db``), written
with ``export_type=db``: SQLite, times in epoch ns, string columns as ids into ``STRING_IDS``,
HCCL enums as ids into ``ENUM_HCCL_*`` (65534 = N/A, 65535 = INVALID, both left out).

Read:
* ``STEP_TIME(id, startNs, endNs)``: the steps ("Step N" on Layer.STEP lane "Steps"); without it,
  one pseudo step;
* ``TASK`` + ``COMPUTE_TASK_INFO`` (by ``globalTaskId``): device tasks on Layer.STREAM lanes
  ``Stream N``, ``task_type`` the task type string;
* ``TASK`` + ``COMMUNICATION_TASK_INFO`` (by ``globalTaskId``): HCCL tasks on Layer.COMM_TASK
  lanes ``Plane N`` (only there, not also on their stream);
* ``COMMUNICATION_OP``: communication ops on Layer.COMM_OP, the lane named by the group;
* ``RANK_DEVICE_MAP``: the rank (``db_rank``).

Not read: host tables (``PYTORCH_API``, ``CANN_API``, ``MSTX_EVENTS``), counters (HBM, LLC,
AICORE_FREQ, ...), memory tables, ``OVERLAP_ANALYSIS`` (the project computes its own), flows
(``CONNECTION_IDS``), PMU (``TASK_PMU_INFO``).

The file is opened read-only. Tables and columns are looked up by name, so missing optional
ones are tolerated. Rows are read in one ``ORDER BY startNs`` scan of TASK merged with one of
COMMUNICATION_OP; a step is yielded as soon as the scan passes the next step's start, so memory
holds one step (plus the string table) at a time.
"""

from __future__ import annotations

import heapq
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import Diagnostics, InputError
from ..model import Layer, RankInfo, Slice, Step, StepRecords
from ..overlap import is_compute

NAME = "ascend_db"
_NA_ENUMS = (65534, 65535)
_HINT = "expected torch_npu's ascend_pytorch_profiler_{rank}.db"


def read_db(rank: RankInfo, path: Path, diag: Diagnostics, detail: bool) -> Iterator[StepRecords]:
    """Yield the rank's records one step at a time, steps in time order.

    Raises:
        InputError: the file is not an SQLite database, or has no TASK table with startNs/endNs.
    """
    with _open(path) as db:
        schema = _Schema(db, path)
        if "TASK" not in schema.tables:
            raise InputError(path, "", "no table TASK", hint=_HINT)
        missing = [c for c in ("startNs", "endNs") if c not in schema.columns("TASK")]
        if missing:
            raise InputError(path, "TASK", f"no column {', '.join(missing)}", hint=_HINT)
        strings = _strings(db, schema)
        enums = {name: _enum(db, schema, f"ENUM_HCCL_{name}") for name in
                 ("TRANSPORT_TYPE", "LINK_TYPE", "DATA_TYPE", "RDMA_TYPE")}
        reader = _Reader(rank, path, diag, detail, schema, strings, enums)
        steps = _steps(db, schema, path, diag, rank)
        stream = heapq.merge(reader.tasks(db), reader.ops(db), key=lambda s: s.start_ns)
        yield from _by_step(rank, steps, stream)


def db_rank(path: Path) -> int | None:
    """The rank in ``RANK_DEVICE_MAP`` (its first row), or None if there is none.

    Raises:
        InputError: the file is not an SQLite database.
    """
    with _open(path) as db:
        schema = _Schema(db, path)
        if "RANK_DEVICE_MAP" not in schema.tables:
            return None
        columns = schema.columns("RANK_DEVICE_MAP")
        column = next((c for c in ("rankId", "rank_id", "rank") if c in columns), None)
        if column is None:
            return None
        try:
            row = db.execute(f'SELECT "{column}" FROM RANK_DEVICE_MAP WHERE "{column}" IS NOT NULL '
                             "LIMIT 1").fetchone()
        except sqlite3.DatabaseError as e:
            raise InputError(path, "RANK_DEVICE_MAP", str(e)) from None
        try:
            value = int(row[0]) if row else None
        except (TypeError, ValueError):
            return None
        return value if value is not None and value >= 0 else None


# -- the database ---------------------------------------------------------------------------------

class _Connection:
    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        except sqlite3.Error as e:
            raise InputError(path, "", f"cannot open as SQLite: {e}", hint=_HINT) from None

    def __enter__(self) -> sqlite3.Connection:
        return self.db

    def __exit__(self, *_: object) -> None:
        self.db.close()


def _open(path: Path) -> _Connection:
    return _Connection(path)


class _Schema:
    """Table names and, on demand, their columns (PRAGMA table_info)."""

    def __init__(self, db: sqlite3.Connection, path: Path) -> None:
        self.db = db
        try:
            self.tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as e:
            raise InputError(path, "", f"not an SQLite database ({e})", hint=_HINT) from None
        self._columns: dict[str, set[str]] = {}

    def columns(self, table: str) -> set[str]:
        if table not in self._columns:
            self._columns[table] = ({row[1] for row in self.db.execute(f'PRAGMA table_info("{table}")')}
                                    if table in self.tables else set())
        return self._columns[table]

    def select(self, alias: str, table: str, names: tuple[str, ...]) -> str:
        """``alias."col"`` for each column the table has, NULL for each it lacks."""
        have = self.columns(table)
        return ", ".join(f'{alias}."{n}"' if n in have else "NULL" for n in names)


def _strings(db: sqlite3.Connection, schema: _Schema) -> dict[int, str]:
    if not {"id", "value"} <= schema.columns("STRING_IDS"):
        return {}
    return {row[0]: row[1] for row in db.execute("SELECT id, value FROM STRING_IDS")}


def _enum(db: sqlite3.Connection, schema: _Schema, table: str) -> dict[int, str]:
    columns = schema.columns(table)
    if "id" not in columns or "name" not in columns:
        return {}
    return {row[0]: row[1] for row in db.execute(f'SELECT id, name FROM "{table}"')}


def _steps(db: sqlite3.Connection, schema: _Schema, path: Path, diag: Diagnostics,
           rank: RankInfo) -> list[Step]:
    if not {"id", "startNs", "endNs"} <= schema.columns("STEP_TIME"):
        return []
    steps = []
    for step_id, start, end in db.execute("SELECT id, startNs, endNs FROM STEP_TIME ORDER BY startNs"):
        try:
            offset = rank.clock_offset_ns
            step = Step(None, int(step_id), int(start) + offset, int(end) + offset)
        except (TypeError, ValueError):
            diag.warn("bad_row", f"{path}: STEP_TIME: step {step_id!r} lacks an integer id, startNs or "
                      "endNs; skipped")
            continue
        steps.append(step)
    return steps


def _by_step(rank: RankInfo, steps: list[Step], stream: Iterator[Slice]) -> Iterator[StepRecords]:
    """File time-ordered slices under the last step started at or before them (the first step
    for those before it); yield each step as soon as the stream passes the next one's start."""
    if not steps:
        yield StepRecords(rank.rank, None, None, None, list(stream))
        return
    index, bucket = 0, []
    for s in stream:
        while index + 1 < len(steps) and s.start_ns >= steps[index + 1].start_ns:
            yield _records(rank, steps[index], bucket)
            index, bucket = index + 1, []
        bucket.append(s)
    yield _records(rank, steps[index], bucket)
    for step in steps[index + 1:]:
        yield _records(rank, step, [])


def _records(rank: RankInfo, step: Step, slices: list[Slice]) -> StepRecords:
    slices.append(Slice(rank.rank, Layer.STEP, "Steps", f"Step {step.step}", step.start_ns,
                        step.end_ns - step.start_ns, {"Step": step.step}))
    return StepRecords(rank.rank, None, step.step, step, slices)


# -- rows to slices -------------------------------------------------------------------------------

_TASK = ("startNs", "endNs", "streamId", "taskId", "modelId", "contextId", "connectionId", "taskType",
         "globalTaskId")
_COMPUTE = ("globalTaskId", "name", "taskType", "opType", "blockDim", "mixBlockDim", "inputShapes",
            "inputDataTypes", "inputFormats", "outputShapes", "outputDataTypes", "outputFormats", "waitNs")
_COMM_TASK = ("globalTaskId", "name", "taskType", "planeId", "groupName", "notifyId", "rdmaType", "srcRank",
              "dstRank", "transportType", "size", "dataType", "linkType", "opId")
_OP = ("startNs", "endNs", "opName", "groupName", "opType", "algType", "dataType", "count", "connectionId",
       "opId", "relay", "retry", "waitNs")


class _Reader:
    def __init__(self, rank: RankInfo, path: Path, diag: Diagnostics, detail: bool, schema: _Schema,
                 strings: dict[int, str], enums: dict[str, dict[int, str]]) -> None:
        self.rank, self.path, self.diag, self.detail = rank, path, diag, detail
        self.schema, self.strings, self.enums = schema, strings, enums

    def _string(self, value: Any) -> str | None:
        if value is None:
            return None
        if type(value) is int:
            return self.strings.get(value, str(value))
        return str(value)

    def _enum(self, family: str, value: Any) -> str | None:
        if value is None or value in _NA_ENUMS:
            return None
        return self.enums[family].get(value, str(value))

    def _times(self, table: str, start: Any, end: Any) -> tuple[int, int] | None:
        try:
            start_ns, end_ns = int(start), int(end)
        except (TypeError, ValueError):
            self.diag.warn("bad_row", f"{self.path}: {table}: a row without integer startNs/endNs; skipped")
            return None
        if end_ns < start_ns:
            self.diag.warn("bad_row", f"{self.path}: {table}: a row ending before it starts; skipped")
            return None
        return start_ns + self.rank.clock_offset_ns, end_ns - start_ns

    def tasks(self, db: sqlite3.Connection) -> Iterator[Slice]:
        """TASK rows, time-ordered, as stream or plane slices."""
        schema = self.schema
        joined = "globalTaskId" in schema.columns("TASK")
        compute = joined and "globalTaskId" in schema.columns("COMPUTE_TASK_INFO")
        comm = joined and "globalTaskId" in schema.columns("COMMUNICATION_TASK_INFO")
        fields = [schema.select("t", "TASK", _TASK)]
        joins = ""
        if compute:
            fields.append(schema.select("c", "COMPUTE_TASK_INFO", _COMPUTE))
            joins += " LEFT JOIN COMPUTE_TASK_INFO c ON c.globalTaskId = t.globalTaskId"
        else:
            fields.append(", ".join("NULL" for _ in _COMPUTE))
        if comm:
            fields.append(schema.select("m", "COMMUNICATION_TASK_INFO", _COMM_TASK))
            joins += " LEFT JOIN COMMUNICATION_TASK_INFO m ON m.globalTaskId = t.globalTaskId"
        else:
            fields.append(", ".join("NULL" for _ in _COMM_TASK))
        query = f"SELECT {', '.join(fields)} FROM TASK t{joins} ORDER BY t.startNs"
        n_task, n_compute = len(_TASK), len(_COMPUTE)
        for row in db.execute(query):
            task = dict(zip(_TASK, row[:n_task], strict=False))
            c = dict(zip(_COMPUTE, row[n_task:n_task + n_compute], strict=False))
            m = dict(zip(_COMM_TASK, row[n_task + n_compute:], strict=False))
            if m["globalTaskId"] is not None:
                if self.detail:
                    record = self._comm_task(task, m)
                    if record is not None:
                        yield record
                continue
            record = self._device_task(task, c)
            if record is not None:
                yield record

    def _device_task(self, task: dict[str, Any], c: dict[str, Any]) -> Slice | None:
        task_type = self._string(c["taskType"]) or self._string(task["taskType"]) or ""
        if not self.detail and not is_compute(task_type):
            return None
        times = self._times("TASK", task["startNs"], task["endNs"])
        if times is None:
            return None
        name = self._string(c["name"]) or task_type or "Task"
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
        return Slice(self.rank.rank, Layer.STREAM, f"Stream {stream}", name, *times, args, task_type)

    def _comm_task(self, task: dict[str, Any], m: dict[str, Any]) -> Slice | None:
        times = self._times("TASK", task["startNs"], task["endNs"])
        if times is None:
            return None
        task_type = self._string(m["taskType"]) or self._string(task["taskType"]) or ""
        name = self._string(m["name"]) or task_type or "HCCL task"
        args: dict[str, Any] = {}
        notify = m["notifyId"]
        if type(notify) is int and notify < 0:  # SQLite holds signed 64-bit ints: -1 is 2**64 - 1
            notify &= 0xFFFF_FFFF_FFFF_FFFF
        for key, value in (("notify_id", notify), ("stream id", task["streamId"]),
                           ("task id", task["taskId"]), ("context id", task["contextId"]),
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
        fields = self.schema.select("o", "COMMUNICATION_OP", _OP)
        query = f"SELECT {fields} FROM COMMUNICATION_OP o ORDER BY o.startNs"
        for row in db.execute(query):
            op = dict(zip(_OP, row, strict=False))
            times = self._times("COMMUNICATION_OP", op["startNs"], op["endNs"])
            if times is None:
                continue
            group = self._string(op["groupName"]) or "Communication"
            name = self._string(op["opName"]) or "Communication op"
            args: dict[str, Any] = {}
            for key, value in (("op_type", self._string(op["opType"])),
                               ("alg_type", self._string(op["algType"])),
                               ("data_type", self._enum("DATA_TYPE", op["dataType"])), ("count", op["count"]),
                               ("connection_id", op["connectionId"]), ("op id", op["opId"]),
                               ("relay", op["relay"]), ("retry", op["retry"]),
                               ("Wait Time(ns)", op["waitNs"])):
                if value is not None:
                    args[key] = value
            yield Slice(self.rank.rank, Layer.COMM_OP, group, name, *times, args)
