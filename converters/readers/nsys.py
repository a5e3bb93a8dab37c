"""NVIDIA Nsight Systems' SQLite export (``nsys export --type sqlite``; docs/formats.md, "Nsight
Systems"), read on the real schema (2024.5, schema 3.13.2).

One file is one rank (``nsys`` profiles one process tree; a job is one export per rank). Times are
ns from the session start, ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` gives that start in epoch
ns; names are ids into ``StringIds``; ``globalTid`` packs the pid and tid (``pid << 24 | tid`` below
the vm id: the tid is its low 24 bits).

Read:
* ``CUPTI_ACTIVITY_KIND_KERNEL``: kernels on ``GPU <deviceId> Stream <streamId>``, named by their
  demangled name (the short name in args); an NCCL kernel (``collectives.nccl``, by its short name or
  its demangled one) is a communication op on the ``NCCL`` lane, other communicating kernels
  (``collectives.gpu``) on ``GPU Communication`` (unverified: no public export holds one);
* ``_MEMCPY`` (``copyKind`` named by ``ENUM_CUDA_MEMCPY_OPER``) and ``_MEMSET``: copies on the stream's
  lane (``MEMCPY`` / ``MEMSET``: no computation);
* detail only: ``_RUNTIME`` calls on ``CUDA API (<name>, thread N)`` (the name from ``ThreadNames``
  where it has one), with an arrow from each launch to the device work of its ``correlationId``;
  ``_SYNCHRONIZATION`` on ``GPU N Synchronization`` (no computation); ``NVTX_EVENTS`` push/pop and
  start/end ranges (event types 59, 60; marks have no end) on ``NVTX (...)``; ``OSRT_API`` on
  ``OS runtime (...)``.

Steps: the NVTX ranges ``--step-marker`` names, else the whole capture as one pseudo step. Each
table is read in one ``ORDER BY start`` scan (the export has no index: SQLite sorts in its own
temporary storage, bounded memory here), the scans merged by time; with steps, a step is yielded as
soon as the merge passes the next step's start.
"""

from __future__ import annotations

import heapq
import re
import sqlite3
from collections.abc import Iterator
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
from .common.sqlite import DAMAGED, read_only

NAME = "nsys"
CLOCK = "ns from the Nsight Systems session start + TARGET_INFO_SESSION_START_TIME (epoch ns)"
HINT = "expected an Nsight Systems SQLite export (nsys export --type sqlite)"
_BATCH = 4096
_TID_BITS = 0xFF_FFFF  # globalTid = (vm id << 48) | (pid << 24) | tid
# a rank the launcher put in the environment Nsight recorded (DeviceEnvironment), first found wins
_RANK_VARS = re.compile(r"(?:^|;)(?:RANK|OMPI_COMM_WORLD_RANK|PMI_RANK|SLURM_PROCID|PMIX_RANK)=(\d+)(?:;|$)")
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
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except OSError:
        return False
    except (InputError, *DAMAGED):
        return True
    return "StringIds" in tables and ("META_DATA_EXPORT" in tables or _KERNEL in tables)


def _exports(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.sqlite") if p.is_file() and _is_export(p))


def sniff(folder: Path) -> bool:
    return bool(_exports(folder))


def lone_file(path: Path, diag: Diagnostics | None) -> RankInfo | None:
    return _rank_info(path, 0) if path.suffix == ".sqlite" and _is_export(path) else None


def rank_infos(folder: Path, diag: Diagnostics | None = None) -> list[RankInfo]:
    """One rank per export: the rank its launcher's environment says (``RANK``, ``PMI_RANK``,
    ``SLURM_PROCID``, ...), else the next free one in name order."""
    infos = [_rank_info(path, None) for path in _exports(folder)]
    taken = {i.rank for i in infos if i.rank >= 0}
    free = (r for r in range(len(infos) + len(taken)) if r not in taken)
    for info in infos:
        if info.rank < 0:
            info.rank = next(free)
    return infos


def _rank_info(path: Path, default_rank: int | None) -> RankInfo:
    """What the export's small tables say of its rank.

    Raises:
        InputError: the file cannot be read as SQLite.
    """
    try:
        with read_only(path, Diagnostics()) as db:
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            start = _one(db, tables, "TARGET_INFO_SESSION_START_TIME", "SELECT utcEpochNs FROM "
                         "TARGET_INFO_SESSION_START_TIME")
            env = {} if "TARGET_INFO_SYSTEM_ENV" not in tables else dict(db.execute(
                "SELECT name, value FROM TARGET_INFO_SYSTEM_ENV "
                "WHERE name IN ('Hostname', 'DeviceEnvironment')"))
            device = _one(db, tables, _KERNEL, f"SELECT deviceId FROM {_KERNEL} LIMIT 1")
            gpu = _one(db, tables, "TARGET_INFO_GPU", "SELECT name FROM TARGET_INFO_GPU WHERE id = ?",
                       (device,))
    except DAMAGED as e:
        raise InputError(path, "", f"damaged SQLite database ({e})", hint=HINT) from None
    found = _RANK_VARS.search(env.get("DeviceEnvironment") or "")
    rank = int(found.group(1)) if found else (default_rank if default_rank is not None else -1)
    offset = start if type(start) is int else 0
    return RankInfo(rank=rank, format=NAME, path=path, device=device if type(device) is int else None,
                    host=env.get("Hostname"), device_name=gpu if isinstance(gpu, str) else None,
                    start_ns=offset or None, source_paths=(path,), clock_offset_ns=offset,
                    clock=CLOCK if offset else "ns from the Nsight Systems session start (no epoch start)",
                    wall_clock=bool(offset))


def _one(db: sqlite3.Connection, tables: set[str], table: str, sql: str, params: tuple = ()) -> Any:
    if table not in tables:
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


def _communication(short: str, full: str) -> tuple[str, str] | None:
    """(lane, kind) of a kernel that communicates, by its short name or its demangled one (NCCL's
    on the ``NCCL`` lane, as Kineto's; torch's, vLLM's, DeepEP's on ``GPU Communication``)."""
    for name in (short, full):
        if (kind := collectives.nccl(name)) is not None:
            return "NCCL", kind
    kind = collectives.gpu(full)
    return None if kind is None else ("GPU Communication", kind)


class _Export:
    """One export's tables as slices (and arrow ends), merged in time order."""

    def __init__(self, db: sqlite3.Connection, rank: RankInfo, diag: Diagnostics, detail: bool) -> None:
        self.db, self.rank, self.diag, self.detail = db, rank, diag, detail
        self.path = rank.source_paths[0]
        self.tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if _KERNEL not in self.tables:
            raise InputError(self.path, "", f"no table {_KERNEL}: no GPU kernels to draw (was the "
                             "run profiled with --trace=cuda?)", hint=HINT)
        self.bad = 0
        self.thread_names = self._thread_names() if detail else {}

    def _thread_names(self) -> dict[int, str]:
        """The threads' names (``ThreadNames``, by id into ``StringIds``), by globalTid."""
        if not {"nameId", "globalTid"} <= self.columns("ThreadNames"):
            return {}
        return dict(self.db.execute("SELECT t.globalTid, s.value FROM ThreadNames t "
                                    "JOIN StringIds s ON s.id = t.nameId"))

    def columns(self, table: str) -> set[str]:
        if table not in self.tables:
            return set()
        return {r[1] for r in self.db.execute(f'PRAGMA table_info("{table}")')}

    def rows(self, table: str, fields: str, joins: str = "", where: str = "") -> Iterator[tuple]:
        """A table's rows, ``start``, ``end`` first, in time order, a batch at a time."""
        if table not in self.tables:
            return
        cursor = self.db.execute(f"SELECT t.start, t.end, {fields} FROM {table} t {joins} "
                                 f"{'WHERE ' + where if where else ''} ORDER BY t.start")
        while batch := cursor.fetchmany(_BATCH):
            yield from batch

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

    def kernels(self) -> Iterator[tuple[Slice, FlowEnd | None]]:
        have = self.columns(_KERNEL)
        names = [c for c in ("demangledName", "shortName") if c in have]
        fields = ", ".join(f"COALESCE(s{i}.value, t.{c})" for i, c in enumerate(names)) or "NULL"
        joins = " ".join(f"LEFT JOIN StringIds s{i} ON s{i}.id = t.{c}" for i, c in enumerate(names))
        rank = self.rank.rank
        for start, end, device, stream, corr, *name in self.rows(
                _KERNEL, "t.deviceId, t.streamId, t.correlationId, " + fields, joins):
            times = self.times(start, end)
            if times is None:
                continue
            full, short = (name + [None])[:2]
            full = str(full if full is not None else short)
            args = {"correlationId": corr, "Short name": short, "device": device, "stream": stream}
            communicates = _communication(str(short) if short is not None else full, full)
            if communicates is not None:  # unverified: no public export holds an NCCL kernel
                lane, kind = communicates
                made = Slice(rank, Layer.COMM_OP, lane, full, *times, args, comm_type(kind))
            else:
                lane = gpu_stream(device, stream)
                made = Slice(rank, Layer.STREAM, lane, full, *times, args, GPU_KERNEL)
            yield made, self.end(made, corr)

    def copies(self, table: str, task_type: str) -> Iterator[tuple[Slice, FlowEnd | None]]:
        have = self.columns(table)
        if "copyKind" in have and {"id", "label"} <= self.columns("ENUM_CUDA_MEMCPY_OPER"):
            kind = "COALESCE(e.label, t.copyKind)"
            joins = "LEFT JOIN ENUM_CUDA_MEMCPY_OPER e ON e.id = t.copyKind"
        else:
            kind, joins = ("t.copyKind" if "copyKind" in have else "NULL"), ""
        value = "t.value" if "value" in have else "NULL"
        rank, word = self.rank.rank, "Memcpy" if task_type == "MEMCPY" else "Memset"
        for start, end, device, stream, corr, size, how, set_to in self.rows(
                table, f"t.deviceId, t.streamId, t.correlationId, t.bytes, {kind}, {value}", joins):
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
            yield made, self.end(made, corr)

    def end(self, made: Slice, corr: Any) -> FlowEnd | None:
        if not self.detail or corr is None:
            return None
        return FlowEnd(made.rank, made.layer, made.lane, made.start_ns, f"launch:{corr}", False)

    def host(self, table: str, prefix: str, name_column: str) -> Iterator[tuple[Slice, FlowEnd | None]]:
        """A host table: one lane per thread; a runtime call starts the arrow of its correlationId."""
        have = self.columns(table)
        if not {"start", "end", "globalTid", name_column} <= have:
            return
        corr = "t.correlationId" if "correlationId" in have else "NULL"
        name = f"COALESCE(s.value, t.{name_column})"
        where = "t.end IS NOT NULL" + (" AND t.eventType IN (59, 60)" if "eventType" in have and table ==
                                       "NVTX_EVENTS" else "")
        if table == "NVTX_EVENTS" and "textId" in have:  # text inline, or by id (registered strings)
            name, joins = "COALESCE(t.text, s.value)", "LEFT JOIN StringIds s ON s.id = t.textId"
        else:
            joins = f"LEFT JOIN StringIds s ON s.id = t.{name_column}"
        rank = self.rank.rank
        for start, end, tid, link, called in self.rows(table, f"t.globalTid, {corr}, {name}", joins, where):
            times = self.times(start, end)
            if times is None:
                continue
            thread = tid & _TID_BITS if type(tid) is int else tid
            named = self.thread_names.get(tid)
            lane = f"{prefix} ({named}, thread {thread})" if named else f"{prefix} (thread {thread})"
            args = {"correlationId": link} if link is not None else None
            made = Slice(rank, Layer.HOST, lane, str(called) if called is not None else prefix, *times, args)
            flow = (FlowEnd(rank, Layer.HOST, lane, made.start_ns, f"launch:{link}", True)
                    if link is not None and table == _RUNTIME else None)
            yield made, flow

    def syncs(self) -> Iterator[tuple[Slice, FlowEnd | None]]:
        for start, end, device, sync in self.rows(_SYNC, "t.deviceId, t.syncType"):
            if (times := self.times(start, end)) is not None:
                yield Slice(self.rank.rank, Layer.STREAM, f"GPU {device} Synchronization", "Synchronization",
                            *times, {"syncType": sync}, NOT_COMPUTE), None

    def merged(self) -> Iterator[tuple[Slice, FlowEnd | None]]:
        scans = [self.kernels(), self.copies(_MEMCPY, "MEMCPY"), self.copies(_MEMSET, "MEMSET")]
        if self.detail:
            scans += [self.host(_RUNTIME, "CUDA API", "nameId"), self.syncs(),
                      self.host("NVTX_EVENTS", "NVTX", "text"), self.host("OSRT_API", "OS runtime", "nameId")]
        return heapq.merge(*scans, key=lambda pair: pair[0].start_ns)

    # -- steps ------------------------------------------------------------------------------------

    def marked(self, marker: str) -> list[Step]:
        """The NVTX ranges named ``marker`` (``name*``: named beginning so), as steps 1, 2, ..."""
        ranges = []
        for made, _ in self.host("NVTX_EVENTS", "NVTX", "text"):
            if made.name == marker or (marker.endswith("*") and made.name.startswith(marker[:-1])):
                ranges.append((made.start_ns, made.dur_ns))
        return [Step(None, i, s, s + d) for i, (s, d) in enumerate(markers.numbered(ranges), 1)]

    def steps(self, marker: str | None) -> Iterator[tuple[StepRecords, list[FlowEnd]]]:
        steps = self.marked(marker) if marker else []
        if marker and not steps:
            self.diag.warn(markers.UNMATCHED, f"{self.path}: no NVTX range named {marker!r}: the whole "
                           "capture is one step")
        rank, index, outside = self.rank.rank, -1, 0
        slices: list[Slice] = []
        ends: list[FlowEnd] = []
        for made, flow in self.merged():
            while index + 1 < len(steps) and made.start_ns >= steps[index + 1].start_ns:
                if index >= 0:
                    yield self.records(steps[index], slices), ends
                index, slices, ends = index + 1, [], []
            if steps and index < 0:  # before the first step: in none
                outside += 1
                continue
            slices.append(made)
            if flow is not None:
                ends.append(flow)
        if steps and index >= 0:
            yield self.records(steps[index], slices), ends
        elif not steps:
            yield StepRecords(rank, None, None, None, slices), ends
        if outside:
            self.diag.warn("before_first_step", f"{self.path}: {outside} records begin before the first "
                           f"{marker!r} range: in no step, not drawn")
        if self.bad:
            self.diag.warn("bad_row", f"{self.path}: {self.bad} rows without a start or end that is a "
                           "number within ±2**62 ns; skipped")

    def records(self, step: Step, slices: list[Slice]) -> StepRecords:
        return StepRecords(self.rank.rank, None, step.step, step, slices)


READER = Reader(
    name=NAME, folder="Nsight Systems SQLite exports *.sqlite (nsys export --type sqlite)",
    sniff=sniff, rank_infos=rank_infos, read=read,
    lone_files=("an Nsight Systems SQLite export",), lone_file=lone_file,
    files=True,  # one export per rank; the walk goes on into subfolders
    step_marker=True,  # NVTX ranges as steps (--step-marker)
)
