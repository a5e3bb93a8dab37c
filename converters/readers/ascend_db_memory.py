"""The database form's device memory (docs/formats.md §5.11): ``MEMORY_RECORD``, ``OP_MEMORY``,
``NPU_OP_MEM`` and ``NPU_MEM`` of torch_npu's ``ascend_pytorch_profiler_N.db`` and CANN's
``msprof_N.db``, as ``ascend_pt.memory`` reads the text form. Its own module beside ``ascend_db``,
the reader that declares it (``ascend_db.memory``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..errors import Diagnostics, InputError
from ..model import (
    MEMORY_KINDS,
    MEMORY_SIZE_ARG,
    Layer,
    RankInfo,
    Sample,
    Slice,
    allocations_lane,
    checked_ns,
    memory_counter,
)
from . import op_memory
from ._db_core import samples
from .common.sqlite import DAMAGED, HINT, SAMPLE_ROWS, Schema, enum_names, plain_key, read_only


def memory(rank: RankInfo, path: Path, diag: Diagnostics) -> Iterator[Slice | Sample]:
    """The rank's device memory (docs/formats.md §5.11), as ``ascend_pt.memory`` reads the text
    form: counters per component from ``MEMORY_RECORD`` (else made from ``OP_MEMORY``'s totals), the
    application's from ``NPU_MEM`` (its ``app`` rows: APP), allocations from ``OP_MEMORY``; where
    neither of those is there (CANN's msprof database), counters and allocations from the raw
    ``NPU_OP_MEM`` events, allocations paired with their releases by address.

    Raises:
        InputError: the file is not an SQLite database, or is damaged.
    """
    try:
        with read_only(path, diag) as db:
            schema = Schema(db, path)
            records = _memory_record(db, schema, rank)
            allocations = _op_memory(db, schema, rank)
            if records is not None:
                yield from records
            if allocations is not None:
                yield from op_memory.records(rank, allocations, counters=records is None)
            elif records is None:
                yield from _npu_op_mem(db, schema, rank)
            yield from _npu_mem(db, schema, rank)
    except DAMAGED as e:
        raise InputError(path, "", f"damaged SQLite database ({e})", hint=HINT) from None


_GE_ACTIVE = (op_memory.GE, "Active")  # GE records no active memory: the table says 0, the text form nothing
_RECORD_COLUMNS = ("component", "timestamp", "totalAllocated", "totalReserved", "totalActive")


def _memory_record(db: sqlite3.Connection, schema: Schema, rank: RankInfo) -> Iterator[Sample] | None:
    """MEMORY_RECORD's totals (bytes) per component, time-ordered; None without the table. C makes
    the samples (``_db_core.samples``: a real rank holds ~60,000), leaving to ``rules`` the rows it
    cannot read."""
    if not {"component", "timestamp"} <= schema.columns("MEMORY_RECORD"):
        return None
    fields, joins = schema.select("m", "MEMORY_RECORD", _RECORD_COLUMNS, ("component",))
    lanes: dict[Any, tuple[str | None, ...]] = {}  # a component's, by kind (GE's Active: None)

    def rules(row: tuple) -> list[Sample]:
        """A row C left (a component met first, a time or a value it cannot read) as its samples;
        the component's lanes noted for C."""
        component, ts, *values = row
        if (names := lanes.get(component)) is None or not plain_key(component):
            names = tuple(None if (component, kind) == _GE_ACTIVE else memory_counter(str(component), kind)
                          for kind in MEMORY_KINDS)
            if plain_key(component):
                lanes[component] = names
        ts_ns = _memory_ns(ts, rank)
        if ts_ns is None:
            return []
        return [Sample(rank.rank, lane, ts_ns, float(value))
                for lane, value in zip(names, values, strict=True) if lane is not None and value is not None]

    def scan() -> Iterator[Sample]:
        cursor = db.execute(f"SELECT {fields} FROM MEMORY_RECORD m{joins} ORDER BY m.timestamp")
        while rows := cursor.fetchmany(SAMPLE_ROWS):
            samples(rows, 1, lanes, rank.rank, rank.clock_offset_ns, Sample, rules, made := [])
            yield from made
    return scan()


_OP_COLUMNS = ("name", "size", "allocationTime", "releaseTime", "allocationTotalAllocated",
               "allocationTotalReserved", "allocationTotalActive", "releaseTotalAllocated",
               "releaseTotalReserved", "releaseTotalActive", "streamPtr")


def _op_memory(db: sqlite3.Connection, schema: Schema,
               rank: RankInfo) -> Iterator[op_memory.Allocation] | None:
    """OP_MEMORY's allocations (bytes, epoch ns), in allocation order; None without the table."""
    if not {"name", "size", "allocationTime"} <= schema.columns("OP_MEMORY"):
        return None
    fields, joins = schema.select("o", "OP_MEMORY", _OP_COLUMNS, ("name",))

    def scan() -> Iterator[op_memory.Allocation]:
        for name, size, allocated, released, *totals, stream in db.execute(
                f"SELECT {fields} FROM OP_MEMORY o{joins} ORDER BY o.allocationTime"):
            start = _memory_ns(allocated, rank)
            if start is None or size is None:
                continue
            component = op_memory.PTA if stream is not None else op_memory.GE
            yield op_memory.Allocation(str(name), float(size), component, start, _memory_ns(released, rank),
                                       _floats(totals[:3]), _floats(totals[3:]))
    return scan()


def _npu_op_mem(db: sqlite3.Connection, schema: Schema, rank: RankInfo) -> Iterator[Slice | Sample]:
    """NPU_OP_MEM's raw events: each one's totals (Allocated, Reserved) as its component's counter;
    an allocation paired with the release of its address as a slice (those never released at the
    end, to the last event). Memory holds the allocations not yet released."""
    columns = ("operatorName", "addr", "type", "size", "timestampNs", "totalAllocate", "totalReserve",
               "component")
    if not {"addr", "type", "timestampNs"} <= schema.columns("NPU_OP_MEM"):
        return
    kinds = enum_names(db, schema, "ENUM_MEMORY")
    strings = ("operatorName", "component") if kinds else ("operatorName", "component", "type")
    fields, joins = schema.select("n", "NPU_OP_MEM", columns, strings)
    live: dict[Any, tuple[str, str, int, Any]] = {}
    last_ns = 0
    for name, addr, kind, size, ts, allocated, reserved, component in db.execute(
            f"SELECT {fields} FROM NPU_OP_MEM n{joins} ORDER BY n.timestampNs"):
        ts_ns = _memory_ns(ts, rank)
        if ts_ns is None:
            continue
        last_ns, component = max(last_ns, ts_ns), str(component)
        for label, value in zip(MEMORY_KINDS, (allocated, reserved), strict=False):
            if value is not None:
                yield Sample(rank.rank, memory_counter(component, label), ts_ns, float(value))
        kind = kinds.get(kind, kind) if kinds else kind
        if kind == "allocate":
            live[addr] = (str(name), component, ts_ns, size)
        elif kind == "release" and addr in live:
            name, component, start, size = live.pop(addr)
            yield _allocation(rank, name, component, start, ts_ns - start, size, {})
    for name, component, start, size in live.values():
        yield _allocation(rank, name, component, start, last_ns - start, size, {"Released": False})


def _allocation(rank: RankInfo, name: str, component: str, start: int, dur: int, size: Any,
                args: dict) -> Slice:
    return Slice(rank.rank, Layer.MEMORY, allocations_lane(component), name, start, dur,
                 {MEMORY_SIZE_ARG: float(size or 0), **args})


def _npu_mem(db: sqlite3.Connection, schema: Schema, rank: RankInfo) -> Iterator[Sample]:
    """NPU_MEM's ``app`` rows: the application's device memory (HBM bytes) as the driver samples it,
    the APP component's Reserved (memory_record.csv's APP rows in the text form)."""
    if not {"type", "hbm", "timestampNs"} <= schema.columns("NPU_MEM"):
        return
    fields, joins = schema.select("k", "NPU_MEM", ("type", "hbm", "timestampNs"), ("type",))
    for kind, hbm, ts in db.execute(f"SELECT {fields} FROM NPU_MEM k{joins} ORDER BY k.timestampNs"):
        ts_ns = _memory_ns(ts, rank)
        if str(kind).lower() == "app" and ts_ns is not None and hbm is not None:
            yield Sample(rank.rank, memory_counter("APP", "Reserved"), ts_ns, float(hbm))


def _memory_ns(ts: Any, rank: RankInfo) -> int | None:
    """A time column (epoch ns, INTEGER or TEXT) as the rank's epoch ns; None where it holds none."""
    try:
        return checked_ns(int(ts) + rank.clock_offset_ns)
    except (TypeError, ValueError, ArithmeticError):
        return None


def _floats(values: Any) -> tuple:
    return tuple(None if v is None else float(v) for v in values)
