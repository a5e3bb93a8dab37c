"""The ascend_db reader (torch_npu's profiler database) on generated databases."""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from converters import step_overlap
from converters.cli import main
from converters.errors import Diagnostics, InputError
from converters.intervals import NOT_COMPUTE, is_compute, total_ns
from converters.model import Layer, RankInfo, Slice, comm_type, decoded_args
from converters.readers.ascend_db import db_rank, read_db
from fixtures.ascend_db_gen import GROUP, write_ascend_db


def _args(s: Slice) -> dict:
    """A slice's args as a dict: the database's tasks and host calls carry theirs as JSON text."""
    return s.args if type(s.args) is dict else decoded_args(s.args) if s.args else {}


def _rank(tmp_path):
    return RankInfo(rank=0, format="ascend_pt", path=tmp_path)


def _expected(file):
    """Every record the database holds, by plain SQL: (layer, lane, name, start, dur, task type)."""
    db = sqlite3.connect(file)
    s = dict(db.execute("SELECT id, value FROM STRING_IDS"))
    out = []
    for start, end, stream, ttype, name, ctype, plane, mname, mtype in db.execute(
            "SELECT t.startNs, t.endNs, t.streamId, t.taskType, c.name, c.taskType, m.planeId, m.name, "
            "m.taskType "
            "FROM TASK t LEFT JOIN COMPUTE_TASK_INFO c USING (globalTaskId) "
            "LEFT JOIN COMMUNICATION_TASK_INFO m USING (globalTaskId)"):
        if mname is not None:
            out.append((Layer.COMM_TASK, f"Plane {plane}", s[mname], start, end - start, s[mtype]))
        elif ctype is not None:  # compute is exactly what COMPUTE_TASK_INFO describes
            out.append((Layer.STREAM, f"Stream {stream}", s[name], start, end - start, s[ctype]))
        else:
            out.append((Layer.STREAM, f"Stream {stream}", s[ttype], start, end - start, NOT_COMPUTE))
    tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    if "COMMUNICATION_OP" in tables:
        ops = db.execute("SELECT opName, startNs, endNs, groupName, opType FROM COMMUNICATION_OP")
        for name, start, end, group, op_type in ops:  # what it does: its opType's; its group: the name's tag
            kind = re.match(r"hcom_([A-Za-z]+)", s[op_type])[1].lower()
            tag = re.match(r"hcom_[A-Za-z]+__(\d+)_", s[name])
            out.append((Layer.COMM_OP, s[group], s[name], start, end - start,
                        comm_type(kind, tag and f"hccl group {tag[1]}")))
    for start, end, tid, name in db.execute("SELECT startNs, endNs, globalTid, name FROM CANN_API"):
        out.append((Layer.HOST, f"CANN (thread {tid & 0xFFFFFFFF})", s[name], start, end - start, ""))
    steps = []
    if "STEP_TIME" in tables:
        steps = list(db.execute("SELECT id, startNs, endNs FROM STEP_TIME ORDER BY startNs"))
    db.close()
    return out, steps


def _key(x):
    return (x.layer, x.lane, x.name, x.start_ns, x.dur_ns, x.task_type)


def test_every_record_once_in_its_step(tmp_path):
    made = write_ascend_db(tmp_path, steps=3, tasks_per_step=20, planes=4, seed=3)
    expected, steps = _expected(made["file"])
    diag = Diagnostics()
    batches = list(read_db(_rank(tmp_path), made["file"], diag, detail=True))
    assert set(diag.counts) == {"backwards_flows 0"}  # the generator's skewed launch: its arrow only
    assert [b.step_id for b in batches] == [50, 51, 52]
    assert [(b.step.start_ns, b.step.end_ns) for b in batches] == [(a, b) for _, a, b in steps]
    got = [s for b in batches for s in b.slices if s.layer is not Layer.STEP]
    assert Counter(map(_key, got)) == Counter(expected)
    assert sum(s.layer is Layer.STREAM for s in got) == made["device_tasks"]
    assert sum(s.layer is Layer.COMM_TASK for s in got) == made["comm_tasks"]
    assert sum(s.layer is Layer.COMM_OP for s in got) == made["comm_ops"] == 3
    for index, batch in enumerate(batches):
        step_slices = [s for s in batch.slices if s.layer is Layer.STEP]
        assert [(s.lane, s.name) for s in step_slices] == [("Steps", f"Step {batch.step_id}")]
        for s in batch.slices:  # each record in the step whose interval holds its start
            if index > 0:
                assert s.start_ns >= batch.step.start_ns
            if index + 1 < len(batches):
                assert s.start_ns < batches[index + 1].step.start_ns
    ops = [s for s in got if s.layer is Layer.COMM_OP]
    assert {s.lane for s in ops} == {GROUP}
    assert ops[0].args["alg_type"] == "MESH-RING" and ops[0].args["data_type"] == "FP32"
    memcpy = next(s for s in got if s.name == "Memcpy")
    assert memcpy.args["transport type"] == "SDMA" and memcpy.args["link type"] == "HCCS"
    assert "rdma type" not in memcpy.args  # 65534 = N/A
    record = next(s for s in got if s.name == "Notify_Record")
    assert "link type" not in record.args and "data type" not in record.args  # 65535 = INVALID
    kernel = next(s for s in got if s.task_type == "AI_CORE")
    assert _args(kernel)["Op Type"] in ("MatMulV2", "TransData") and _args(kernel)["Model Id"] == 4294967295
    # compute overlaps communication in each step
    assert all(step_overlap(b).overlapped_ns > 0 for b in batches)
    # an arrow from each launch to its task, in the same step or the next (the launches just
    # before a step's start run their tasks in it), none backwards (the skewed first)
    flows_out = sum(len(s.flows_out) for s in got)
    expected_flows, crossing = _expected_flows(made["file"])
    assert flows_out == sum(len(s.flows_in) for s in got) == expected_flows
    assert crossing > 0
    assert diag.counts["backwards_flows 0"] == 1  # a record not drawn: a warning, --strict fails on it


def _expected_flows(file):
    """Launch-to-task pairs whose task begins no earlier than its launch, in the launch's step or
    the next one; and how many of them cross into the next step."""
    db = sqlite3.connect(file)
    starts = [row[0] for row in db.execute("SELECT startNs FROM STEP_TIME ORDER BY startNs")]
    pairs = db.execute("SELECT c.startNs, t.startNs FROM CANN_API c JOIN TASK t USING (connectionId)")

    def step(t):
        return max(sum(start <= t for start in starts) - 1, 0)

    steps = [step(task) - step(launch) for launch, task in pairs if task >= launch]
    db.close()
    assert set(steps) <= {0, 1}
    return len(steps), steps.count(1)


def test_compute_is_what_compute_task_info_describes(tmp_path):
    """The real databases hold AI_CORE tasks without COMPUTE_TASK_INFO (HCCL's): no computation."""
    made = write_ascend_db(tmp_path, steps=2, tasks_per_step=15, planes=2, seed=4)
    db = sqlite3.connect(made["file"])
    compute = list(db.execute("SELECT t.startNs, t.endNs FROM TASK t "
                              "JOIN COMPUTE_TASK_INFO USING (globalTaskId)"))
    db.close()
    for detail in (False, True):
        batches = list(read_db(_rank(tmp_path), made["file"], Diagnostics(), detail=detail))
        lonely = [s for b in batches for s in b.slices if _args(s).get("Task Type") == "AI_CORE"
                  and s.task_type == NOT_COMPUTE]
        assert len(lonely) == (2 if detail else 0)
        assert sum(step_overlap(b).computing_ns for b in batches) == total_ns(compute)


def test_summary_drops_non_compute_tasks_and_keeps_ops(tmp_path):
    made = write_ascend_db(tmp_path, steps=2, tasks_per_step=15, planes=2, seed=1)
    batches = list(read_db(_rank(tmp_path), made["file"], Diagnostics(), detail=False))
    got = [s for b in batches for s in b.slices]
    streams = [s for s in got if s.layer is Layer.STREAM]
    assert streams and all(is_compute(s.task_type) for s in streams)
    assert len(streams) == made["compute_tasks"]
    assert sum(s.layer is Layer.COMM_OP for s in got) == made["comm_ops"]
    assert not any(s.layer is Layer.COMM_TASK for s in got)


def test_without_step_time_one_pseudo_step(tmp_path):
    made = write_ascend_db(tmp_path, steps=2, tasks_per_step=5, planes=1)
    db = sqlite3.connect(made["file"])
    db.execute("DROP TABLE STEP_TIME")
    db.commit()
    db.close()
    expected, _ = _expected(made["file"])
    batches = list(read_db(_rank(tmp_path), made["file"], Diagnostics(), detail=True))
    assert len(batches) == 1 and batches[0].step is None and batches[0].step_id is None
    assert Counter(map(_key, batches[0].slices)) == Counter(expected)


def test_missing_optional_tables_and_bad_rows(tmp_path):
    made = write_ascend_db(tmp_path, steps=1, tasks_per_step=5, planes=1)
    db = sqlite3.connect(made["file"])
    for table in ("COMPUTE_TASK_INFO", "COMMUNICATION_TASK_INFO", "COMMUNICATION_OP", "ENUM_HCCL_DATA_TYPE"):
        db.execute(f"DROP TABLE {table}")
    db.execute("INSERT INTO TASK (startNs, endNs, streamId) VALUES (NULL, 5, 9)")
    db.execute("INSERT INTO TASK (startNs, endNs, streamId) VALUES (10, 5, 9)")
    db.commit()
    n = db.execute("SELECT count(*) FROM TASK").fetchone()[0]
    db.close()
    diag = Diagnostics()
    batches = list(read_db(_rank(tmp_path), made["file"], diag, detail=True))
    got = [s for b in batches for s in b.slices if s.layer is Layer.STREAM]
    assert len(got) == n - 2 and all(s.task_type == NOT_COMPUTE for s in got)
    assert diag.counts["bad_row"] == 2
    assert "COMPUTE_TASK_INFO" in diag.examples["no_compute_info"]


def test_not_sqlite_or_no_task_is_an_input_error(tmp_path):
    bad = tmp_path / "ascend_pytorch_profiler_0.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(InputError):
        list(read_db(_rank(tmp_path), bad, Diagnostics(), detail=True))
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).execute("CREATE TABLE X (a)").connection.close()
    with pytest.raises(InputError, match="TASK"):
        list(read_db(_rank(tmp_path), empty, Diagnostics(), detail=True))
    with pytest.raises(InputError):
        db_rank(bad)


def test_rank_and_file_untouched(tmp_path):
    made = write_ascend_db(tmp_path, rank=3, steps=2, tasks_per_step=10, planes=2)
    file = made["file"]
    assert file.name == "ascend_pytorch_profiler_3.db"
    before = hashlib.sha256(file.read_bytes()).hexdigest()
    listing = sorted(p.name for p in tmp_path.iterdir())
    assert db_rank(file) == 3
    list(read_db(_rank(tmp_path), file, Diagnostics(), detail=True))
    assert hashlib.sha256(file.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == listing  # no journal left behind


def test_generator_is_deterministic(tmp_path):
    a = write_ascend_db(tmp_path / "a", seed=7)
    b = write_ascend_db(tmp_path / "b", seed=7)
    assert {k: v for k, v in a.items() if k != "file"} == {k: v for k, v in b.items() if k != "file"}
    assert _expected(a["file"]) == _expected(b["file"])


def _wal_copy(made, into):
    """The database as a crashed writer leaves it: committed rows still in its ``-wal``."""
    db = sqlite3.connect(made["file"])
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("UPDATE STEP_TIME SET id = id + 1000")
    db.commit()
    into.mkdir()
    for suffix in ("", "-wal"):
        (into / (made["file"].name + suffix)).write_bytes(Path(str(made["file"]) + suffix).read_bytes())
    db.close()
    return into / made["file"].name


def test_a_write_ahead_log_with_data_is_read_and_nothing_appears_beside_it(tmp_path):
    made = write_ascend_db(tmp_path / "made", steps=2, tasks_per_step=5, planes=1)
    file = _wal_copy(made, tmp_path / "crashed")
    assert file.with_name(file.name + "-wal").stat().st_size > 0
    listing = {p.name: p.read_bytes() for p in file.parent.iterdir()}
    diag = Diagnostics()
    batches = list(read_db(_rank(tmp_path), file, diag, detail=True))
    assert [b.step_id for b in batches] == [1050, 1051]  # the rows only the log holds
    assert "wal_copy" in diag.notes
    assert {p.name: p.read_bytes() for p in file.parent.iterdir()} == listing


def test_a_database_another_process_holds_locked_is_read(tmp_path):
    made = write_ascend_db(tmp_path, steps=2, tasks_per_step=5, planes=1)
    holder = sqlite3.connect(made["file"], isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        batches = list(read_db(_rank(tmp_path), made["file"], Diagnostics(), detail=False))
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert [b.step_id for b in batches] == [50, 51]


def test_hostile_databases_get_a_clear_answer_never_a_traceback(tmp_path, capsys):
    made = write_ascend_db(tmp_path / "good", steps=2, tasks_per_step=10, planes=2)
    data = made["file"].read_bytes()
    cases = {
        "truncated": data[: len(data) // 3],
        "not-sqlite": b"SQLite format 2\0" + b"x" * 5000,
        "empty": b"",
    }
    for name, content in cases.items():
        folder = tmp_path / name / "rank0_ascend_pt"
        (folder / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        (folder / "profiler_info_0.json").write_text('{"rank_id": 0}')
        file = folder / "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
        file.write_bytes(content)
        code = main([str(folder), "-o", str(tmp_path / f"{name}.pftrace")])
        err = capsys.readouterr().err
        assert code in (0, 1) and "Traceback" not in err, name
        if code == 1:  # an error names the file
            assert str(file) in err, name
        else:  # or the rest converts, with a warning
            assert "warning" in err, name
        assert file.read_bytes() == content and sorted(p.name for p in file.parent.iterdir()) == [file.name]


def test_string_ids_that_point_nowhere_stay_numbers_with_a_warning(tmp_path):
    made = write_ascend_db(tmp_path, steps=1, tasks_per_step=5, planes=1)
    db = sqlite3.connect(made["file"])
    db.execute("UPDATE COMPUTE_TASK_INFO SET name = 999999")
    db.commit()
    db.close()
    diag = Diagnostics()
    batches = list(read_db(_rank(tmp_path), made["file"], diag, detail=True))
    kernels = [s for b in batches for s in b.slices if s.layer is Layer.STREAM and s.task_type != NOT_COMPUTE]
    assert kernels and all(s.name == "999999" for s in kernels)
    assert "COMPUTE_TASK_INFO" in diag.examples["unknown_string_id"]
