"""NVIDIA Nsight Systems' SQLite export (``nsys export --type sqlite``; docs/formats.md, "Nsight
Systems"), read on the real schemas 3.13.2 (2024.5) and 3.25.0 (2026.2).

A rank is a process with GPU work: ``nsys`` profiles one process tree, and ``nsys profile torchrun``
records every rank's process in one export. Device rows carry the process's ``globalPid``, host
rows ``globalTid``; both pack ``(vm << 48) | (pid << 24)``, the tid in the low 24 bits. Times are ns
from the session start, ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` gives that start in epoch ns;
names are ids into ``StringIds``. Tables and columns come and go with the version (and Nsight writes
no table for what it recorded nothing of): each is looked up, an absent one read as none.

Read:
* ``CUPTI_ACTIVITY_KIND_KERNEL``: kernels on ``GPU <deviceId> Stream <streamId>``, named by their
  demangled name (the short name in args); an NCCL kernel (``collectives.nccl``, by its short name or
  its demangled one) is a communication op on the ``NCCL`` lane, other communicating kernels
  (``collectives.gpu``) on ``GPU Communication`` (unverified: no public export holds one);
* ``_MEMCPY`` (``copyKind`` named by ``ENUM_CUDA_MEMCPY_OPER``) and ``_MEMSET``: copies on the stream's
  lane (``MEMCPY`` / ``MEMSET``: no computation);
* detail only: ``_RUNTIME`` calls on ``CUDA API (<name>, thread N)`` (the name from ``ThreadNames``
  where it has one), with an arrow from each launch to the device work of its process's
  ``correlationId``; ``_SYNCHRONIZATION`` on ``GPU N Synchronization`` (N its context's device; no
  computation); ``NVTX_EVENTS`` push/pop and start/end ranges and marks (slices of no length; the
  event types ``ENUM_NSYS_EVENT_TYPE`` names so) on ``NVTX (...)``, the rest counted (open ranges,
  names of threads and domains); ``OSRT_API`` on ``OS runtime (...)``.

Steps: the NVTX ranges ``--step-marker`` names, else the whole capture as one pseudo step. A host
record is the step's it starts in; device work (kernel, memcpy, memset) the step's whose range holds
its launch (the ``_RUNTIME`` call of its process with its ``correlationId``), as Kineto's
(``launches``; docs/analysis.md §1): a GPU runs behind its host. Work launched in no step's range is
shown apart (steps without a number); work whose launch the export lacks is filed by its start.
Each table is read in one sorted scan (the export has no index: SQLite sorts in its own temporary
storage, bounded memory here): host tables by start, device tables (with steps) by when they are
filed, their launch's start else their own; the scans are merged in that order, and a step is
yielded as soon as the merge passes the next step's start.
"""

from __future__ import annotations

import heapq
import re
import sqlite3
from collections.abc import Iterator
from operator import itemgetter
from pathlib import Path
from typing import Any

from ..errors import Diagnostics, InputError
from ..intervals import NOT_COMPUTE
from ..model import GPU_KERNEL, FlowEnd, Layer, RankInfo, Slice, Step, StepRecords, checked_ns, comm_type
from . import collectives
from .base import Reader
from .common import markers
from .common.flows import linked
from .common.lanes import gpu_stream
from .common.parts import Parts
from .common.spilled_flows import OUTSIDE_BATCH, StepTimes, say_outside
from .common.sqlite import DAMAGED, read_only

NAME = "nsys"
CLOCK = "ns from the Nsight Systems session start + TARGET_INFO_SESSION_START_TIME (epoch ns)"
HINT = "expected an Nsight Systems SQLite export (nsys export --type sqlite)"
_BATCH = 4096
_LAUNCHES = "nsys_launches"  # the temporary table of the process's launches (_Export.launches)
_TID_BITS = 0xFF_FFFF  # globalTid = (vm id << 48) | (pid << 24) | tid
# a rank the launcher put in the environment Nsight recorded (DeviceEnvironment), first found wins
_RANK_VARS = re.compile(r"(?:^|;)(?:RANK|OMPI_COMM_WORLD_RANK|PMI_RANK|SLURM_PROCID|PMIX_RANK)=(\d+)(?:;|$)")
_NVTX_RANGES = (59, 60)  # NvtxPushPopRange, NvtxStartEndRange, where ENUM_NSYS_EVENT_TYPE is absent
_RANGE_NAMES = ("NvtxPushPopRange", "NvtxStartEndRange")  # ENUM_NSYS_EVENT_TYPE's
_NVTX_MARKS = (34,)  # NvtxMark: an instant (2022.2's export: no ENUM_NSYS_EVENT_TYPE, marks 34 as in 2026.2)
_CUPTI = "CUPTI_ACTIVITY_KIND_"
_KERNEL, _MEMCPY, _MEMSET = f"{_CUPTI}KERNEL", f"{_CUPTI}MEMCPY", f"{_CUPTI}MEMSET"
_RUNTIME, _SYNC = f"{_CUPTI}RUNTIME", f"{_CUPTI}SYNCHRONIZATION"
# CUPTI's memcpy kinds by their labels in ENUM_CUDA_MEMCPY_OPER (2024.5), for exports without it
_COPY_KINDS = {0: "Unknown", 1: "Host-to-Device", 2: "Device-to-Host", 3: "Host-to-Array", 4: "Array-to-Host",
               5: "Array-to-Array", 6: "Array-to-Device", 7: "Device-to-Array", 8: "Device-to-Device",
               9: "Host-to-Host", 10: "Peer-to-Peer"}


def _is_export(path: Path) -> bool:
    """Whether ``path`` is an Nsight export: an SQLite file with its tables (a damaged one, whose
    tables cannot be read, counts: reading it then says what is wrong)."""
    try:
        with path.open("rb") as f:
            if f.read(16) != b"SQLite format 3\x00":
                return False
        with read_only(path, Diagnostics()) as db:
            tables = _tables(db)
    except OSError:
        return False
    except (InputError, *DAMAGED):
        return True
    return "META_DATA_EXPORT" in tables or {"StringIds", _KERNEL} <= tables


def _tables(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(db: sqlite3.Connection, tables: set[str], table: str) -> set[str]:
    """A table's columns; none for a table the export lacks (Nsight writes no table it has no rows
    for, and the columns change from version to version)."""
    if table not in tables:
        return set()
    return {r[1] for r in db.execute(f'PRAGMA table_info("{table}")')}


def _exports(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.sqlite") if p.is_file() and _is_export(p))


def sniff(folder: Path) -> bool:
    return bool(_exports(folder))


def lone_file(path: Path, diag: Diagnostics | None) -> list[RankInfo] | None:
    if path.suffix != ".sqlite" or not _is_export(path):
        return None
    infos = _rank_infos(path, diag)
    for rank, info in enumerate(infos):  # a lone process's rank its launcher's, where it says one
        info.rank = rank if info.rank < 0 else info.rank
    return infos


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per process with GPU work in each export: the rank its launcher's environment says
    (``RANK``, ``PMI_RANK``, ``SLURM_PROCID``, ...) where the export holds one such process, else the
    next free one in name order, then pid order."""
    infos = [info for path in _exports(folder) for info in _rank_infos(path, diag)]
    taken = {i.rank for i in infos if i.rank >= 0}
    free = (r for r in range(len(infos) + len(taken)) if r not in taken)
    for info in infos:
        if info.rank < 0:
            info.rank = next(free)
    return infos


def _rank_infos(path: Path, diag: Diagnostics | None) -> list[RankInfo]:
    """What the export's small tables say of its ranks: one a process with GPU work (``nsys profile
    torchrun ...`` records every process of the tree in one export).

    Raises:
        InputError: the file cannot be read as SQLite.
    """
    try:
        with read_only(path, Diagnostics()) as db:
            tables = _tables(db)
            start = _one(db, tables, "TARGET_INFO_SESSION_START_TIME", "utcEpochNs", "SELECT utcEpochNs FROM "
                         "TARGET_INFO_SESSION_START_TIME")
            env = {} if not {"name", "value"} <= _columns(db, tables, "TARGET_INFO_SYSTEM_ENV") else dict(
                db.execute("SELECT name, value FROM TARGET_INFO_SYSTEM_ENV "
                           "WHERE name IN ('Hostname', 'DeviceEnvironment')"))
            # an export of one process with GPU work is one rank of every row (rows naming no process too)
            processes = _processes(db, tables)
            if len(processes) > 1 and diag is not None:
                _others_said(db, tables, path, processes, diag)
            processes = processes if len(processes) > 1 else [None]
            devices = [_device(db, tables, process) for process in processes]
    except DAMAGED as e:
        raise InputError(path, "", f"damaged SQLite database ({e})", hint=HINT) from None
    found = _RANK_VARS.search(env.get("DeviceEnvironment") or "")
    # the environment is the launcher's, one for the whole tree: a rank only of a lone process
    rank = int(found.group(1)) if found and len(devices) == 1 else -1
    offset = start if type(start) is int else 0
    return [RankInfo(rank=rank, format=NAME, path=path, device=device, host=env.get("Hostname"),
                     device_name=gpu, start_ns=offset or None, source_paths=(path,), clock_offset_ns=offset,
                     clock=CLOCK if offset else "ns from the Nsight Systems session start (no epoch start)",
                     wall_clock=bool(offset), process=process)
            for process, (device, gpu) in zip(processes, devices, strict=True)]


def _processes(db: sqlite3.Connection, tables: set[str]) -> list[int]:
    """The processes (``globalPid``: ``(vm << 48) | (pid << 24)``) whose GPU work the export holds,
    in pid order; none where the device tables name no process (then the file is one rank)."""
    found: set[int] = set()
    for table in (_KERNEL, _MEMCPY, _MEMSET):
        if "globalPid" in _columns(db, tables, table):
            rows = db.execute(f"SELECT DISTINCT globalPid FROM {table}")
            found.update(r[0] for r in rows if type(r[0]) is int)
    return sorted(found)


def _others_said(db: sqlite3.Connection, tables: set[str], path: Path, processes: list[int],
                 diag: Diagnostics) -> None:
    """Warn of the host rows of processes with no GPU work (a launcher's, a compiler's): in no rank."""
    pids = ", ".join(str(p >> 24) for p in processes)
    left = 0
    for table in (_RUNTIME, "NVTX_EVENTS", "OSRT_API"):
        if "globalTid" in _columns(db, tables, table):
            (n,), = db.execute(f"SELECT count(*) FROM {table} "
                               f"WHERE coalesce(globalTid >> 24, -1) NOT IN ({pids})")
            left += n
    if left:
        diag.warn("other_process", f"{path}: {left} host rows of processes without GPU work: in no rank, "
                  "not drawn")


def _device(db: sqlite3.Connection, tables: set[str], process: int | None) -> tuple[int | None, str | None]:
    """The process's (first) CUDA device and its model, where the export names it."""
    mine = process is not None and "globalPid" in _columns(db, tables, _KERNEL)
    where, params = ("WHERE globalPid = ?", (process,)) if mine else ("", ())
    device = _one(db, tables, _KERNEL, "deviceId", f"SELECT deviceId FROM {_KERNEL} {where} LIMIT 1", params)
    if type(device) is not int:
        return None, None
    gpu = _gpu_name(db, tables, device, None if process is None else process >> 24 & _TID_BITS)
    return device, gpu if isinstance(gpu, str) else None


def _gpu_name(db: sqlite3.Connection, tables: set[str], device: int, pid: int | None) -> Any:
    """A CUDA device's model. 2024-2026 exports: ``TARGET_INFO_GPU`` by its ``id``, which
    ``TARGET_INFO_CUDA_DEVICE`` maps the CUDA device (``cudaId``, per process ``pid``: the
    process's numbering, ``CUDA_VISIBLE_DEVICES``) to, where it is; without it the CUDA device is
    taken for the id. 2021 exports: ``TARGET_INFO_CUDA_GPU`` by ``deviceId``."""
    gpu = device
    cuda = _columns(db, tables, "TARGET_INFO_CUDA_DEVICE")
    if {"cudaId", "gpuId"} <= cuda:
        mine = "pid = ? DESC," if "pid" in cuda and pid is not None else ""
        row = db.execute(f"SELECT gpuId FROM TARGET_INFO_CUDA_DEVICE WHERE cudaId = ? ORDER BY {mine} gpuId "
                         "LIMIT 1", (device, pid) if mine else (device,)).fetchone()
        gpu = row[0] if row else device
    if {"id", "name"} <= _columns(db, tables, "TARGET_INFO_GPU"):
        return _one(db, tables, "TARGET_INFO_GPU", "name", "SELECT name FROM TARGET_INFO_GPU WHERE id = ?",
                    (gpu,))
    if {"deviceId", "name"} <= _columns(db, tables, "TARGET_INFO_CUDA_GPU"):
        return _one(db, tables, "TARGET_INFO_CUDA_GPU", "name",
                    "SELECT name FROM TARGET_INFO_CUDA_GPU WHERE deviceId = ?", (device,))
    return None


def _one(db: sqlite3.Connection, tables: set[str], table: str, column: str, sql: str,
         params: tuple = ()) -> Any:
    """The first value ``sql`` selects, None where ``table`` or its ``column`` is absent."""
    if column not in _columns(db, tables, table):
        return None
    row = db.execute(sql, params).fetchone()
    return row[0] if row else None


def read(rank: RankInfo, diag: Diagnostics, *, detail: bool = True,
         step_marker: str | None = None) -> Iterator[StepRecords]:
    """The rank's records, a step at a time in time order.

    Raises:
        InputError: the file is no SQLite database, is damaged, or holds no kernel table.
    """
    path = rank.source_paths[0]
    try:
        with read_only(path, diag) as db:
            steps = _Export(db, rank, diag, detail).steps(markers.checked(step_marker))
            yield from linked(steps, diag, events=False) if detail else (s for s, _ in steps)
    except DAMAGED as e:  # a damaged page, met only when a query reaches it
        raise InputError(path, "", f"damaged SQLite database ({e})", hint=HINT) from None


# A record as the scans give it: when it is filed (epoch ns), the slice, its arrow end, and how:
_BY_START, _LAUNCHED, _LAUNCHED_WORK = 0, 1, 2  # at its start; at its launch (a copy, a kernel)
_Record = tuple[int, Slice, FlowEnd | None, int]


def _communication(short: str, full: str) -> tuple[str, str] | None:
    """(lane, kind) of a kernel that communicates, by its short name or its demangled one (NCCL's
    on the ``NCCL`` lane, as Kineto's; torch's, vLLM's, DeepEP's on ``GPU Communication``)."""
    for name in (short, full):
        if (kind := collectives.nccl(name)) is not None:
            return "NCCL", kind
    kind = collectives.gpu(full)
    return None if kind is None else ("GPU Communication", kind)


class _Export:
    """One process's records in an export's tables as slices (and arrow ends), merged in time order."""

    def __init__(self, db: sqlite3.Connection, rank: RankInfo, diag: Diagnostics, detail: bool) -> None:
        self.db, self.rank, self.diag, self.detail = db, rank, diag, detail
        self.path = rank.source_paths[0]
        self.tables = _tables(db)
        if _KERNEL not in self.tables:
            raise InputError(self.path, "", f"no table {_KERNEL}: no GPU kernels to draw (was the "
                             "run profiled with --trace=cuda?)", hint=HINT)
        self.strings = "StringIds" in self.tables
        self.bad = 0
        self.by_launch = False  # device work filed by its launch (with steps)
        self.launch_table: bool | None = None  # whether _LAUNCHES holds the launches; None: not made yet
        self.thread_names = self._thread_names() if detail else {}
        self._say_absent()

    def _say_absent(self) -> None:
        """Say which tables the export lacks: Nsight writes none for what it recorded nothing of
        (no memset, no NVTX: a note); without ``StringIds`` names are only their ids (a warning)."""
        wanted = [_MEMCPY, _MEMSET] + ([_RUNTIME, _SYNC, "NVTX_EVENTS", "OSRT_API"] if self.detail else [])
        if self.rank.device_name is None:
            wanted.append("TARGET_INFO_GPU")
        absent = [t for t in wanted if t not in self.tables]
        if absent:
            self.diag.note("nsys_absent", f"{self.path}: no {', '.join(absent)} (Nsight writes no table for "
                           "what it did not record): read what is there")
        if self.detail:
            self.nvtx_not_drawn()
        if not self.strings:
            self.diag.warn("no_string_ids", f"{self.path}: no StringIds table: kernels, calls and threads "
                           "are named by their ids")

    def _thread_names(self) -> dict[int, str]:
        """The threads' names (``ThreadNames``, by id into ``StringIds``), by globalTid."""
        if not self.strings or not {"nameId", "globalTid"} <= self.columns("ThreadNames"):
            return {}
        return dict(self.db.execute("SELECT t.globalTid, s.value FROM ThreadNames t "
                                    "JOIN StringIds s ON s.id = t.nameId"))

    def columns(self, table: str) -> set[str]:
        return _columns(self.db, self.tables, table)

    def fields(self, table: str, *names: str) -> str:
        """The columns ``names`` of ``table``, NULL for those its version lacks."""
        have = self.columns(table)
        return ", ".join(f"t.{n}" if n in have else "NULL" for n in names)

    def named(self, table: str, column: str, alias: str) -> tuple[str, str]:
        """(the text, the join) of a column holding an id into ``StringIds`` (the id itself without
        that table)."""
        if column not in self.columns(table):
            return "NULL", ""
        if not self.strings:
            return f"t.{column}", ""
        join = f"LEFT JOIN StringIds {alias} ON {alias}.id = t.{column}"
        return f"COALESCE({alias}.value, t.{column})", join

    def rows(self, table: str, fields: str, joins: str = "", where: str = "",
             order: str = "t.start") -> Iterator[tuple]:
        """A table's rows of the rank's process, ``start``, ``end`` first, in ``order`` (time order),
        a batch at a time. The process: a device row's ``globalPid``, a host row's ``globalTid`` (its
        pid bits)."""
        have = self.columns(table)
        if not {"start", "end"} <= have:
            return
        mine, params = self.mine(table)
        clauses = [c for c in (where, mine) if c]
        filtered = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        cursor = self.db.execute(f"SELECT t.start, t.end, {fields} FROM {table} t {joins} {filtered} "
                                 f"ORDER BY {order}", params)
        while batch := cursor.fetchmany(_BATCH):
            yield from batch

    def launch(self, table: str) -> tuple[str, str, str]:
        """(the field, the join, the order) that give each device row of ``table`` the start of its
        launch, the CUDA runtime call of its process with its ``correlationId`` (NULL: none found),
        and order the rows by when they are filed: at their launch, else at their start. Only with
        steps (``by_launch``): without, every row is filed by its start."""
        if not (self.by_launch and "correlationId" in self.columns(table) and self.launches()):
            return "NULL", "", "t.start"
        join = f"LEFT JOIN temp.{_LAUNCHES} l ON l.c = t.correlationId"
        return "l.start", join, "COALESCE(l.start, t.start)"

    def launches(self) -> bool:
        """Whether the process's launches are in the temporary table ``_LAUNCHES`` (made once):
        each correlation id's first launch (the earliest), keyed by the id, so that each device
        table's join looks it up by rowid (SQLite's own automatic index is rebuilt per query, ~4x
        the cost). In SQLite's temporary storage (a file beside none of the input's, paged through
        its cache): the reader's memory stays flat."""
        if self.launch_table is None:
            runtime = self.columns(_RUNTIME)
            self.launch_table = {"start", "correlationId"} <= runtime
            process = self.rank.process
            mine = (f"AND (globalTid >> 24) = {int(process) >> 24}"
                    if process is not None and "globalTid" in runtime else "")
            if self.launch_table:
                self.db.execute(f"CREATE TEMP TABLE {_LAUNCHES} (c INTEGER PRIMARY KEY, "
                                "start INTEGER NOT NULL)")
                self.db.execute(f"INSERT INTO temp.{_LAUNCHES} SELECT correlationId, min(start) "
                                f"FROM {_RUNTIME} WHERE typeof(correlationId) = 'integer' "
                                f"AND typeof(start) = 'integer' {mine} GROUP BY correlationId")
        return self.launch_table

    def filed(self, made: Slice, flow: FlowEnd | None, launched: Any, how: int) -> _Record:
        """A device record filed at its launch's start (``launched``, ns from the session start:
        only a filing time, in no output), where it has one, else at its own."""
        if type(launched) is int:
            return launched + self.rank.clock_offset_ns, made, flow, how
        return made.start_ns, made, flow, _BY_START

    def mine(self, table: str) -> tuple[str, tuple]:
        """The condition (and its parameters) on ``table``'s rows that they are the rank's process's."""
        have = self.columns(table)
        if self.rank.process is None:
            return "", ()
        if "globalPid" in have:
            return "t.globalPid = ?", (self.rank.process,)
        if "globalTid" in have:
            return "(t.globalTid >> 24) = ?", (self.rank.process >> 24,)
        return "", ()

    def times(self, start: Any, end: Any) -> tuple[int, int] | None:
        try:
            start_ns = checked_ns(int(start) + self.rank.clock_offset_ns)
            dur_ns = checked_ns(int(end) - int(start))
        except (TypeError, ValueError):
            self.bad += 1
            return None
        if dur_ns < 0:  # an end before its start
            self.bad += 1
            return None
        return start_ns, dur_ns

    # -- the tables, each as (slice, arrow end or None), in time order ----------------------------

    def kernels(self) -> Iterator[_Record]:
        (full, join_full), (short, join_short) = (self.named(_KERNEL, "demangledName", "s0"),
                                                  self.named(_KERNEL, "shortName", "s1"))
        launch, join_launch, order = self.launch(_KERNEL)
        rank = self.rank.rank
        for start, end, device, stream, corr, full_name, short_name, launched in self.rows(
                _KERNEL, f"{self.fields(_KERNEL, 'deviceId', 'streamId', 'correlationId')}, {full}, {short}, "
                f"{launch}", f"{join_full} {join_short} {join_launch}", order=order):
            times = self.times(start, end)
            if times is None:
                continue
            full_name = str(full_name if full_name is not None else short_name)
            args = {"correlationId": corr, "Short name": short_name, "device": device, "stream": stream}
            communicates = _communication(str(short_name) if short_name is not None else full_name, full_name)
            if communicates is not None:  # unverified: no public export holds an NCCL kernel
                lane, kind = communicates
                made = Slice(rank, Layer.COMM_OP, lane, full_name, *times, args, comm_type(kind))
            else:
                lane = gpu_stream(device, stream)
                made = Slice(rank, Layer.STREAM, lane, full_name, *times, args, GPU_KERNEL)
            yield self.filed(made, self.end(made, corr), launched, _LAUNCHED_WORK)

    def copies(self, table: str, task_type: str) -> Iterator[_Record]:
        have = self.columns(table)
        if "copyKind" in have and {"id", "label"} <= self.columns("ENUM_CUDA_MEMCPY_OPER"):
            kind = "COALESCE(e.label, t.copyKind)"
            joins = "LEFT JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = t.copyKind"
        else:
            kind, joins = ("t.copyKind" if "copyKind" in have else "NULL"), ""
        rank, word = self.rank.rank, "Memcpy" if task_type == "MEMCPY" else "Memset"
        fields = self.fields(table, "deviceId", "streamId", "correlationId", "bytes")
        launch, join_launch, order = self.launch(table)
        for start, end, device, stream, corr, size, how, set_to, launched in self.rows(
                table, f"{fields}, {kind}, {self.fields(table, 'value')}, {launch}", f"{joins} {join_launch}",
                order=order):
            times = self.times(start, end)
            if times is None:
                continue
            how = _COPY_KINDS.get(how, how) if type(how) is int else how
            args = {"correlationId": corr, "bytes": size}
            if how is not None:
                args["kind"] = how
            if set_to is not None:
                args["value"] = set_to
            made = Slice(rank, Layer.STREAM, gpu_stream(device, stream),
                         f"{word} {how}" if how is not None else word, *times, args, task_type)
            yield self.filed(made, self.end(made, corr), launched, _LAUNCHED)

    def end(self, made: Slice, corr: Any) -> FlowEnd | None:
        if not self.detail or corr is None:
            return None
        return FlowEnd(made.rank, made.layer, made.lane, made.start_ns, f"launch:{corr}", False)

    def calls(self, table: str, prefix: str) -> Iterator[_Record]:
        """A table of host calls named by ``nameId`` (the CUDA runtime's, the OS runtime's)."""
        name, joins = self.named(table, "nameId", "s")
        return self.host(table, prefix, name, joins, "t.end IS NOT NULL")

    def nvtx(self, marks: bool = True) -> Iterator[_Record]:
        """NVTX ranges and (``marks``) marks, a mark a slice of no length, as Kineto's instants:
        their text inline, or (registered strings) by ``textId``."""
        text = "t.text" if "text" in self.columns("NVTX_EVENTS") else "NULL"
        by_id, joins = self.named("NVTX_EVENTS", "textId", "s")
        return self.host("NVTX_EVENTS", "NVTX", f"COALESCE({text}, {by_id})", joins, self.nvtx_drawn(marks))

    def nvtx_drawn(self, marks: bool = True) -> str:
        """The condition on the NVTX events drawn: the ranges that end, and (``marks``) the marks."""
        if "eventType" not in self.columns("NVTX_EVENTS"):
            return "t.end IS NOT NULL"
        ranges = f"(t.eventType IN ({self.nvtx_types(*_RANGE_NAMES)}) AND t.end IS NOT NULL)"
        return f"({ranges} OR t.eventType IN ({self.nvtx_types('NvtxMark')}))" if marks else ranges

    def nvtx_types(self, *names: str) -> str:
        """The NVTX event types of these names in ``ENUM_NSYS_EVENT_TYPE`` where the export has it
        (ranges 59, 60 and marks 34 in 2024.5 and 2026.2: those numbers, for exports without it), as
        SQL's list."""
        found: tuple[int, ...] = ()
        if {"id", "name"} <= self.columns("ENUM_NSYS_EVENT_TYPE"):
            found = tuple(r[0] for r in self.db.execute(
                f"SELECT id FROM ENUM_NSYS_EVENT_TYPE WHERE name IN ({', '.join('?' * len(names))})", names)
                if type(r[0]) is int)
        return ", ".join(map(str, found or (_NVTX_MARKS if names == ("NvtxMark",) else _NVTX_RANGES)))

    def nvtx_not_drawn(self) -> None:
        """Say the rank's NVTX events not drawn: ranges still open when the capture ended (a warning:
        records lost), and what names things (a thread, a domain, a category: a note)."""
        if not {"start", "end", "eventType"} <= self.columns("NVTX_EVENTS"):
            return
        mine, params = self.mine("NVTX_EVENTS")
        ranges = self.nvtx_types(*_RANGE_NAMES)
        left_out = f"NOT {self.nvtx_drawn()}{f' AND {mine}' if mine else ''}"
        open_, other = self.db.execute(
            f"SELECT COALESCE(SUM(t.eventType IN ({ranges})), 0), COALESCE(SUM(t.eventType NOT IN "
            f"({ranges})), 0) FROM NVTX_EVENTS t WHERE {left_out}", params).fetchone()
        if open_:
            self.diag.warn("nvtx_open", f"{self.path}: {open_} NVTX ranges without an end (still open when "
                           "the capture ended): not drawn")
        if other:
            self.diag.note("nvtx_names", f"{self.path}: {other} NVTX events that are no range or mark (a "
                           "thread's, a domain's or a category's name, ...): not drawn")

    def host(self, table: str, prefix: str, name: str, joins: str,
             where: str) -> Iterator[_Record]:
        """A host table: one lane per thread; a runtime call starts the arrow of its correlationId."""
        have = self.columns(table)
        if "globalTid" not in have:
            return
        corr = "t.correlationId" if "correlationId" in have else "NULL"
        rank = self.rank.rank
        for start, end, tid, link, called in self.rows(table, f"t.globalTid, {corr}, {name}", joins, where):
            times = self.times(start, start if end is None else end)  # a mark: no end (only NVTX's have none)
            if times is None:
                continue
            thread = tid & _TID_BITS if type(tid) is int else tid
            named = self.thread_names.get(tid)
            lane = f"{prefix} ({named}, thread {thread})" if named else f"{prefix} (thread {thread})"
            args = {"correlationId": link} if link is not None else None
            made = Slice(rank, Layer.HOST, lane, str(called) if called is not None else prefix, *times, args)
            flow = (FlowEnd(rank, Layer.HOST, lane, made.start_ns, f"launch:{link}", True)
                    if link is not None and table == _RUNTIME else None)
            yield made.start_ns, made, flow, _BY_START

    def syncs(self) -> Iterator[_Record]:
        """Synchronizations on their context's device: a context is of one device, which its kernels
        name; the row's own ``deviceId`` can be another (2026.2: 0 in a process whose context and
        kernels are on device 1), kept in args."""
        devices = self.context_devices() if _SYNC in self.tables else {}
        for start, end, device, context, sync in self.rows(
                _SYNC, self.fields(_SYNC, "deviceId", "contextId", "syncType")):
            if (times := self.times(start, end)) is not None:
                lane = f"GPU {devices.get(context, device)} Synchronization"
                made = Slice(self.rank.rank, Layer.STREAM, lane, "Synchronization", *times,
                             {"syncType": sync, "deviceId": device, "contextId": context}, NOT_COMPUTE)
                yield made.start_ns, made, None, _BY_START

    def context_devices(self) -> dict[Any, Any]:
        """The device of each context whose kernels run on one device."""
        if not {"contextId", "deviceId"} <= self.columns(_KERNEL):
            return {}
        mine, params = self.mine(_KERNEL)
        found: dict[Any, set] = {}
        for context, device in self.db.execute(f"SELECT DISTINCT t.contextId, t.deviceId FROM {_KERNEL} t "
                                               f"{'WHERE ' + mine if mine else ''}", params):
            found.setdefault(context, set()).add(device)
        return {context: devices.pop() for context, devices in found.items() if len(devices) == 1}

    def merged(self) -> Iterator[_Record]:
        """Every record in the order it is filed: at its launch (device work, with steps), else at
        its start."""
        scans = [self.kernels(), self.copies(_MEMCPY, "MEMCPY"), self.copies(_MEMSET, "MEMSET")]
        if self.detail:
            scans += [self.calls(_RUNTIME, "CUDA API"), self.syncs(), self.nvtx(),
                      self.calls("OSRT_API", "OS runtime")]
        return heapq.merge(*scans, key=itemgetter(0))

    # -- steps ------------------------------------------------------------------------------------

    def marked(self, marker: str) -> list[Step]:
        """The NVTX ranges named ``marker`` (``name*``: named beginning so), as steps 1, 2, ..."""
        ranges = []
        for _, made, _, _ in self.nvtx(marks=False):
            if made.name == marker or (marker.endswith("*") and made.name.startswith(marker[:-1])):
                ranges.append((made.start_ns, made.dur_ns))
        return [Step(None, i, s, s + d) for i, (s, d) in enumerate(markers.numbered(ranges), 1)]

    def steps(self, marker: str | None) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
        """The records by step: host records (and device work whose launch the export lacks) under
        the last step started at or before their start (in none before the first); device work
        under the step whose window holds its launch, as Kineto's (``launches``, docs/analysis.md
        §1), or apart, outside the steps, where no window does. The merge is in filing order, so
        a step is whole once it passes the next step's start."""
        steps = self.marked(marker) if marker else []
        if marker and not steps:
            self.diag.warn(markers.UNMATCHED, f"{self.path}: no NVTX range named {marker!r}: the whole "
                           "capture is one step")
        self.by_launch = bool(steps)
        apart, whole = _Apart(self.rank.rank), Parts(self.rank.rank)
        index, before, window_end = -1, 0, None  # window_end: the current step's
        slices: list[Slice] = []
        ends: list[FlowEnd] = []
        low = high = None  # the first start and last end of the kernels the step launched
        for at, made, flow, how in self.merged():
            while index + 1 < len(steps) and at >= steps[index + 1].start_ns:
                if index >= 0:
                    yield self.records(apart.times.extended(steps[index], low, high), slices), ends
                index, slices, ends, low, high = index + 1, [], [], None, None
                window_end = steps[index].end_ns
            if how != _BY_START:
                # launches._Windows' rule: the step whose window holds the launch, none if none
                # does; steps never overlap (markers.numbered), so that is this one's or none
                if window_end is None or at >= window_end:
                    yield from apart.add(made, how == _LAUNCHED_WORK)
                    continue
                if how == _LAUNCHED_WORK:  # a kernel: compute or communication (spilled_flows.works)
                    end = made.start_ns + made.dur_ns
                    low = made.start_ns if low is None or made.start_ns < low else low
                    high = end if high is None or end > high else high
            elif steps and index < 0:  # before the first step: in none
                before += 1
                continue
            elif not steps:  # the whole capture, a part at a time (the merge is in start order)
                yield from whole.before(made.start_ns)
                slices, ends = whole.slices, whole.ends
            slices.append(made)
            if flow is not None:
                ends.append(flow)
        if steps and index >= 0:
            yield self.records(apart.times.extended(steps[index], low, high), slices), ends
        elif not steps:
            yield whole.last()
        yield from apart.rest()
        self.said(marker, before, apart.count)

    def said(self, marker: str | None, before: int, apart: int) -> None:
        """Say what is in no step, what is apart, and the rows skipped."""
        if apart:
            say_outside(self.diag, self.rank, apart, f"in no {marker!r} range")
        if before:
            self.diag.warn("before_first_step", f"{self.path}: {before} records begin before the first "
                           f"{marker!r} range: in no step, not drawn")
        if self.bad:
            self.diag.warn("bad_row", f"{self.path}: {self.bad} rows without a start or end that is a "
                           "number within ±2**62 ns; skipped")

    def records(self, step: Step, slices: list[Slice]) -> StepRecords:
        return StepRecords(self.rank.rank, None, step.step, step, slices)


class _Apart:
    """Device records launched in no step's window: shown apart, as steps without a number of at
    most ``OUTSIDE_BATCH`` records each (as Kineto's), their compute bounding the steps' times."""

    def __init__(self, rank: int) -> None:
        self.rank, self.count, self.times = rank, 0, StepTimes()
        self.held: list[Slice] = []

    def add(self, made: Slice, works: bool) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
        """``made`` apart (``works``: it computes or communicates); a batch once one is full."""
        self.count += 1
        self.held.append(made)
        if works:
            self.times.outside(made.start_ns, made.start_ns + made.dur_ns)
        if len(self.held) >= OUTSIDE_BATCH:
            yield from self.rest()

    def rest(self) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
        """The records held, without their arrows' ends (no step holds both ends)."""
        if self.held:
            yield StepRecords(self.rank, None, None, None, self.held), []
            self.held = []


READER = Reader(
    name=NAME, folder="Nsight Systems SQLite exports *.sqlite (nsys export --type sqlite)",
    sniff=sniff, rank_infos=rank_infos, read=read,
    lone_files=("an Nsight Systems SQLite export",), lone_file=lone_file,
    files=True,  # one export per rank; the walk goes on into subfolders
    step_marker=True,  # NVTX ranges as steps (--step-marker)
)
