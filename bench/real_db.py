"""torch_npu's database form at a real job's shape: the real samples' databases (``ascend-pt-db``
under TRACE2PERFETTO_REALDATA), each row of every table repeated ``tiles`` times, one copy after
another in time.

The generator (``fixtures/ascend_db_gen.py``) writes device tasks and their launches only, each
op named apart and the rows shuffled: a file twice as dense in records, and three times in trace
bytes, as any real one. A real database's largest tables are others: PyTorch ops (``PYTORCH_API``,
its times TEXT) with their links (``CONNECTION_IDS``), call stacks and PMU values (not drawn),
memory records and counters. Tiling keeps every table's share, its types and its order; a copy
shifts the times by the sample's span and the ids that join rows (tasks, connections, call
stacks, ops, steps) past the previous copy's, so each copy is a step of its own.

The rows are the real files' but the output is written under build/bench only, never in the repo.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

SAMPLE = "ascend-pt-db"
TIMES = {"startNs", "endNs", "timestampNs", "timestamp", "allocationTime", "releaseTime", "activeReleaseTime"}
# (table, column) of the ids that join rows: each copy's moved past the previous one's
IDS = {("TASK", "globalTaskId"), ("TASK", "connectionId"), ("COMPUTE_TASK_INFO", "globalTaskId"),
       ("COMMUNICATION_TASK_INFO", "globalTaskId"), ("COMMUNICATION_TASK_INFO", "opId"),
       ("COMMUNICATION_OP", "opId"), ("COMMUNICATION_OP", "connectionId"), ("CANN_API", "connectionId"),
       ("PYTORCH_API", "connectionId"), ("PYTORCH_API", "callchainId"), ("CONNECTION_IDS", "id"),
       ("CONNECTION_IDS", "connectionId"), ("PYTORCH_CALLCHAINS", "id"), ("TASK_PMU_INFO", "globalTaskId"),
       ("connectionCats", "connectionId"), ("MSTX_EVENTS", "connectionId")}
ID_STRIDE = 10_000_000  # past any id of the samples (theirs are < 100,000)
NONE_ID = 4294967295  # "no id" (TASK's modelId, contextId): kept, as are negative ids
ONCE = {"NPU_INFO", "SESSION_TIME_INFO", "HOST_INFO", "META_DATA", "RANK_DEVICE_MAP", "STRING_IDS",
        "status_info", "sqlite_sequence"}


def write_tiled_databases(root: Path, real: Path, ranks: int = 8, tiles: int = 20) -> None:
    """``ranks`` rank folders under ``root``, as torch_npu lays them out, each holding one of the
    sample's databases (in turn) tiled ``tiles`` times, its rank id rewritten."""
    sources = sorted((real / SAMPLE).glob("rank*/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_*.db"))
    if not sources:
        raise FileNotFoundError(f"no ascend_pytorch_profiler_*.db under {real / SAMPLE}")
    for rank in range(ranks):
        folder = root / f"rank{rank}_ascend_pt"
        (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True, exist_ok=True)
        target = folder / "ASCEND_PROFILER_OUTPUT" / f"ascend_pytorch_profiler_{rank}.db"
        tile(sources[rank % len(sources)], target, tiles)
        db = sqlite3.connect(target)
        db.execute("UPDATE RANK_DEVICE_MAP SET rankId = ?", (rank,))
        db.commit()
        db.close()
        (folder / f"profiler_info_{rank}.json").write_text(json.dumps({"rank_id": rank}))


def tile(source: Path, target: Path, tiles: int) -> None:
    """``target``: ``source`` with each table's rows repeated ``tiles`` times (but the tables of
    one row per file, ``ONCE``), copy k's times moved by k spans and its ids by k * ID_STRIDE."""
    shutil.copyfile(source, target)
    db = sqlite3.connect(target)
    try:
        first, last = db.execute(
            "SELECT min(s), max(e) FROM (SELECT min(startNs) s, max(endNs) e FROM TASK UNION ALL "
            "SELECT min(CAST(startNs AS INTEGER)), max(CAST(endNs AS INTEGER)) FROM PYTORCH_API)").fetchone()
        span = last - first + 10_000_000
        low, high = db.execute("SELECT min(id), max(id) FROM STEP_TIME").fetchone()
        steps = high - low + 1 if low is not None else 0  # a copy's steps follow the previous copy's
        tables = [row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        for table in tables:
            if table in ONCE or table.startswith("ENUM_"):
                continue
            columns = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]
            rows = db.execute(f'SELECT max(rowid) FROM "{table}"').fetchone()[0]
            for k in range(1, tiles):
                fields = ", ".join(_moved(table, c, k, span, steps) for c in columns)
                db.execute(f'INSERT INTO "{table}" SELECT {fields} FROM "{table}" WHERE rowid <= ?', (rows,))
        db.execute("UPDATE SESSION_TIME_INFO SET endTimeNs = endTimeNs + ?", ((tiles - 1) * span,))
        db.commit()
        db.execute("VACUUM")
    finally:
        db.close()


def _moved(table: str, column: str, k: int, span: int, steps: int) -> str:
    """SQL: copy k's value of the column: a time k spans later (TEXT stays TEXT), an id past the
    previous copies', a step number ``steps`` on, anything else as it is."""
    c = f'"{column}"'
    if table == "STEP_TIME" and column == "id":
        return f"{c} + {k * steps}"
    if table == "OVERLAP_ANALYSIS" and column == "id":  # its own key: SQLite numbers the copies
        return "NULL"
    if column in TIMES:
        shift = k * span
        return (f"CASE typeof({c}) WHEN 'text' THEN CAST(CAST({c} AS INTEGER) + {shift} AS TEXT) "
                f"WHEN 'null' THEN NULL ELSE {c} + {shift} END")
    if (table, column) in IDS:
        return f"CASE WHEN {c} IS NULL OR {c} < 0 OR {c} >= {NONE_ID} THEN {c} ELSE {c} + {k * ID_STRIDE} END"
    return c
