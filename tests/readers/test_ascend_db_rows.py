"""The database form's rows read in C (readers/c/ascend_db_rows.c's ``Rows``: SQLite's C API, string ids
resolved once each) against the reference: the sqlite3 module's rows, SQLite resolving the strings by
joins, every row read by the rules (``_Reader.tasks_by_rules``, ``host_by_rules``)."""

from __future__ import annotations

import os
import sqlite3
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from converters.errors import Diagnostics, InputError
from converters.model import Layer, RankInfo, Slice, decoded_args
from converters.readers import ascend_db, ascend_db_memory
from converters.readers.ascend_db import _HOST, _enums, _Reader, read_db
from converters.readers.common.sqlite import Schema, read_only
from fixtures.ascend_db_gen import write_ascend_db

_TABLES = ("TASK", *_HOST)


def _read(file: Path, all_tasks: bool, offset: int, by_rules: bool) -> tuple:
    """Every table's slices read one way, and what the reader noted: unknown string ids, PyTorch
    links, warnings."""
    diag = Diagnostics()
    rank = RankInfo(rank=2, format="ascend_pt", path=file.parent, clock_offset_ns=offset)
    source = read_only(file, diag)
    with source as db:
        schema = Schema(db, file)
        reader = _Reader(rank, file, diag, all_tasks, schema, _enums(db, schema))
        scans = {"TASK": reader.tasks_by_rules(db) if by_rules else reader.tasks(source.uri)}
        for table in _HOST:
            scans[table] = reader.host_by_rules(db, table) if by_rules else reader.host(source.uri, table)
        read = {table: [s for batch in scan for s in batch] for table, scan in scans.items()}
    return read, reader.unknown_strings, reader.links, diag


def _same_both_ways(file: Path, all_tasks: bool, offset: int) -> dict[str, list[Slice]]:
    c, rules = _read(file, all_tasks, offset, False), _read(file, all_tasks, offset, True)
    for table in _TABLES:
        assert all(type(s) is Slice for s in c[0][table]), table
        # repr tells 1 from 1.0 and True, and each arg's place in its dict
        assert [repr(s) for s in _as_dicts(c[0][table], rules[0][table])] == \
            [repr(s) for s in rules[0][table]], table
    assert c[1:] == rules[1:]
    return c[0]


def _as_dicts(c: list[Slice], rules: list[Slice]) -> list[Slice]:
    """C's slices with their args as JSON text (most of them) given the rules' dict, where the text is
    what orjson makes of that dict (the Chrome JSON writer's output: each key, its place, its value
    and the value's type) and decodes to it (the Perfetto writer's args)."""
    same = []
    for s, rule in zip(c, rules, strict=False):
        if type(s.args) is bytes:
            assert type(rule.args) is dict and rule.args, (s, rule)
            assert s.args == orjson.dumps(rule.args), (s, rule)
            assert repr(decoded_args(s.args)) == repr(rule.args), (s, rule)
            s = s._replace(args=rule.args)
        same.append(s)
    return same


def _untyped(db: sqlite3.Connection, table: str) -> None:
    """The table's columns without a type: any value stays as written (some versions write TEXT
    times and strings); its indexes dropped (SQLite then sorts)."""
    columns = [row[1] for row in db.execute(f'PRAGMA table_info("{table}")')]
    db.execute(f"ALTER TABLE {table} RENAME TO old")
    db.execute(f"CREATE TABLE {table} ({', '.join(columns)})")
    db.execute(f"INSERT INTO {table} SELECT * FROM old")
    db.execute("DROP TABLE old")


_ODD = """
UPDATE TASK SET startNs = CAST(startNs AS TEXT) WHERE rowid % 17 = 1;
UPDATE TASK SET endNs = startNs - 5 WHERE rowid % 19 = 2;
UPDATE TASK SET startNs = NULL WHERE rowid % 23 = 3;
UPDATE TASK SET startNs = 1e300 WHERE rowid % 29 = 4;
UPDATE TASK SET streamId = NULL WHERE rowid % 31 = 5;
UPDATE TASK SET streamId = 'two' WHERE rowid % 61 = 6;
UPDATE TASK SET taskType = 'AI_CORE' WHERE rowid % 37 = 6;
UPDATE TASK SET taskType = 555555 WHERE rowid % 41 = 7;
UPDATE COMPUTE_TASK_INFO SET opType = 999999 WHERE rowid % 11 = 0;
UPDATE COMPUTE_TASK_INFO SET name = 'Direct' WHERE rowid % 13 = 1;
UPDATE COMPUTE_TASK_INFO SET name = '3' WHERE rowid % 13 = 2;
UPDATE COMPUTE_TASK_INFO SET name = ' 7 ' WHERE rowid % 13 = 3;
UPDATE COMPUTE_TASK_INFO SET inputShapes = NULL, taskType = NULL WHERE rowid % 7 = 3;
UPDATE COMPUTE_TASK_INFO SET outputShapes = 4.0 WHERE rowid % 41 = 4;
UPDATE COMPUTE_TASK_INFO SET outputShapes = 4.5 WHERE rowid % 41 = 5;
UPDATE COMPUTE_TASK_INFO SET outputFormats = 900001 WHERE rowid % 43 = 5;
UPDATE COMPUTE_TASK_INFO SET outputFormats = 900002 WHERE rowid % 47 = 6;
UPDATE COMPUTE_TASK_INFO SET inputFormats = X'3132' WHERE rowid % 53 = 7;
UPDATE COMPUTE_TASK_INFO SET opType = 900003, taskType = 900004 WHERE rowid % 59 = 8;
UPDATE COMPUTE_TASK_INFO SET blockDim = 'x', waitNs = 2.5 WHERE rowid % 67 = 9;
UPDATE COMMUNICATION_TASK_INFO SET name = 888888 WHERE rowid % 5 = 0;
UPDATE COMMUNICATION_TASK_INFO SET groupName = 'direct group' WHERE rowid % 7 = 0;
UPDATE CANN_API SET name = 777777 WHERE rowid % 13 = 0;
UPDATE CANN_API SET startNs = CAST(startNs AS TEXT) WHERE rowid % 17 = 0;
UPDATE CANN_API SET globalTid = NULL WHERE rowid % 19 = 0;
UPDATE CANN_API SET type = 5000 WHERE rowid % 3 = 0;
INSERT INTO STRING_IDS VALUES (900001, NULL), (900002, X'41'), (900003, ''), (900004, 'N/A');
UPDATE STRING_IDS SET value = value || '"\\' || char(1, 0, 31, 127, 233, 8232, 128512) || '\n'
    WHERE id % 4 = 1;
CREATE TABLE PYTORCH_API (startNs, endNs, globalTid, connectionId, name, sequenceNumber, fwdThreadId,
                          inputDtypes, inputShapes, type);
CREATE TABLE CONNECTION_IDS (id, connectionId);
CREATE TABLE MSTX_EVENTS (startNs, endNs, message, globalTid, connectionId, eventType, category, domainId);
"""


def _odd_database(tmp_path: Path, seed: int) -> Path:
    """A generated database with odd rows: TEXT, NULL, REAL and reversed times, unknown string ids,
    strings stored as TEXT (one numeric, which the join finds as an id), REAL and BLOB ids, ids whose
    value is NULL or a BLOB, empty and N/A strings, HCCL tasks; PyTorch ops (TEXT times and INTEGER
    ones, their links) and MSTX events."""
    file = write_ascend_db(tmp_path, steps=3, tasks_per_step=60, planes=2, seed=seed)["file"]
    db = sqlite3.connect(file)
    for table in ("TASK", "COMPUTE_TASK_INFO", "COMMUNICATION_TASK_INFO", "CANN_API"):
        _untyped(db, table)
    db.executescript(_ODD)
    start = db.execute("SELECT MIN(startNs) FROM TASK WHERE typeof(startNs) = 'integer'").fetchone()[0]
    names = db.execute("SELECT id FROM STRING_IDS ORDER BY id LIMIT 5").fetchall()
    for i in range(200):
        t = start + i * 7_000
        times = (str(t), str(t + 900)) if i % 3 == 0 else (t, t + 900 + i % 2)
        name = names[i % 5][0] if i % 4 else ("Enqueue" if i % 8 == 0 else 999_999)
        db.execute("INSERT INTO PYTORCH_API VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (*times, 13471134862269421 + i % 3, i // 2, name, i, None if i % 5 else 7,
                    names[1][0] if i % 6 else None, names[2][0], 1 if i % 2 else None))
        db.execute("INSERT INTO CONNECTION_IDS VALUES (?, ?)", (i // 2, 1000 + i))
        db.execute("INSERT INTO MSTX_EVENTS VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                   (t + 11, t + 500 - (i % 7 == 0) * 1000, names[i % 5][0] if i % 9 else "mark", 5, None,
                    i % 3, None, 1))
    db.commit()
    db.close()
    return file


@pytest.mark.parametrize("all_tasks", [True, False])
@pytest.mark.parametrize("seed", [0, 1])
def test_odd_rows_read_in_c_as_the_rules_read_them(tmp_path, seed, all_tasks):
    read = _same_both_ways(_odd_database(tmp_path, seed), all_tasks, offset=-12_345 * seed)
    assert len(read["TASK"]) > 100 and len(read["PYTORCH_API"]) > 100 and read["MSTX_EVENTS"]


@pytest.mark.parametrize("spread", [1, 1 << 20])
def test_string_ids_far_apart_read_in_c_as_the_rules_read_them(tmp_path, spread):
    """STRING_IDS' ids multiples of 2**20: placed by value in C's cache they would all collide, so
    it hashes them; the same strings read either way."""
    file = write_ascend_db(tmp_path, steps=3, tasks_per_step=150, planes=2, seed=3)["file"]
    db = sqlite3.connect(file)
    strings = {"STRING_IDS": ("id",), "TASK": ("taskType",), "COMPUTE_TASK_INFO": ascend_db._COMPUTE_STRINGS,
               "COMMUNICATION_TASK_INFO": ("name", "taskType", "groupName"), "CANN_API": ("name",)}
    for table, columns in strings.items():
        for column in columns:
            db.execute(f"UPDATE {table} SET {column} = {column} * ? WHERE typeof({column}) = 'integer'",
                       (spread,))
    db.commit()
    db.close()
    read = _same_both_ways(file, True, 0)
    assert len(read["TASK"]) > 400


def test_generated_database_read_in_c_as_the_rules_read_it(tmp_path):
    """The schema as the generator writes it, its indexes too (SQLite reads TASK in their order)."""
    file = write_ascend_db(tmp_path, steps=4, tasks_per_step=100, planes=4, seed=5)["file"]
    for all_tasks in (True, False):
        read = _same_both_ways(file, all_tasks, offset=1_000)
        assert len(read["CANN_API"]) == 4 * 100 + 4 * (1 + 4 * 4) + 1


def test_text_times_spelled_as_integers_are_read_in_c(tmp_path, monkeypatch):
    """PYTORCH_API's times are TEXT in torch_npu's databases (ascend-pt-db): the rows C reads, not
    the rules (~4x the CPU; the largest table of a real database), giving the slices the rules give."""
    file = _odd_database(tmp_path, 0)
    db = sqlite3.connect(file)
    db.execute("UPDATE PYTORCH_API SET startNs = CAST(startNs AS TEXT), endNs = CAST(endNs AS TEXT)")
    db.commit()
    db.close()
    ruled: list[tuple] = []
    monkeypatch.setattr(_Reader, "_host_row",
                        lambda self, table, row: ruled.append(row) if table == "PYTORCH_API" else None)
    read = _read(file, True, 0, by_rules=False)[0]
    # what the rules got: the 25 rows naming an id STRING_IDS lacks (999999), none for its times
    assert len(ruled) == 25 and {row[4] for row in ruled} == {999_999}
    assert len(read["PYTORCH_API"]) == 200 - 25


def test_hccl_tasks_are_read_in_c(tmp_path, monkeypatch):
    """The HCCL tasks whose times, stream and strings are as expected: the rows C reads, not the rules
    (~0.03 CPU s of a real-shape rank's ~0.3), giving the slices the rules give (the tests above)."""
    file = _odd_database(tmp_path, 0)
    ruled: list[tuple] = []
    monkeypatch.setattr(_Reader, "_task_rules", lambda self, row: ruled.append(row))
    read = _read(file, True, 0, by_rules=False)[0]
    hccl = [row for row in ruled if row[ascend_db._KIND] == ascend_db._COMM]
    # what the rules got of them: the rows naming an id STRING_IDS lacks (_ODD's 888888 and 555555), or
    # whose times or stream are odd
    at = ascend_db._TASK_AT
    assert hccl and all(row[ascend_db._COMM_AT + 1] == 888_888 or row[at["taskType"]] == 555_555 or
                        not _as_expected(row[at["startNs"]], row[at["endNs"]], row[at["streamId"]])
                        for row in hccl)
    db = sqlite3.connect(file)
    tasks = db.execute("SELECT COUNT(*) FROM COMMUNICATION_TASK_INFO").fetchone()[0]
    db.close()
    made = sum(s.layer is Layer.COMM_TASK for s in read["TASK"])
    assert made + len(hccl) == tasks and made >= len(hccl)


def _as_expected(start: object, end: object, stream: object) -> bool:
    """Whether a task's times are integers (or TEXT spelling them), the end not before the start, and
    its stream an integer."""
    spelled = [t if type(t) is int else int(t) if type(t) is str and t.isascii() and t.lstrip("-").isdigit()
               and t == str(int(t)) else None for t in (start, end)]
    return type(stream) is int and None not in spelled and spelled[1] >= spelled[0]


@pytest.mark.parametrize("change", ["ALTER TABLE STRING_IDS RENAME TO OTHER_IDS", "unkeyed"])
def test_string_ids_missing_or_without_a_key(tmp_path, change):
    """No STRING_IDS (or no id and value in it): a string column's TEXT is its string, a number an
    unknown id; one without a key on its id: SQLite's joins resolve the strings."""
    file = _odd_database(tmp_path, 2)
    db = sqlite3.connect(file)
    if change == "unkeyed":
        _untyped(db, "STRING_IDS")
    else:
        db.execute(change)
    db.commit()
    db.close()
    _same_both_ways(file, True, 0)


def test_a_database_under_a_folder_name_that_is_no_utf8_reads(tmp_path):
    """C opens the URI's bytes as the sqlite3 module does (a path from a Latin-1 system)."""
    folder = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"job-\xff\xfe")))
    file = write_ascend_db(folder, steps=2, tasks_per_step=20, seed=1)["file"]
    rank = RankInfo(rank=0, format="ascend_pt", path=folder)
    assert sum(len(step.slices) for step in read_db(rank, file, Diagnostics(), detail=True)) > 40


def test_a_damaged_page_met_by_c_is_a_damaged_database(tmp_path, monkeypatch):
    """A page SQLite cannot read, met by C mid-query (the middle of the file: TASK's rows and
    their info), ends as read_db's InputError, as the sqlite3 module's error did."""
    file = write_ascend_db(tmp_path, steps=4, tasks_per_step=400, planes=2, seed=1)["file"]
    data = bytearray(file.read_bytes())
    db = sqlite3.connect(file)
    page_size = db.execute("PRAGMA page_size").fetchone()[0]
    db.close()
    at = len(data) // page_size // 2 * page_size
    data[at:at + page_size] = b"\xa5" * page_size
    file.write_bytes(bytes(data))
    raised = []

    class Spy:  # a Rows noting what its TASK rows raised
        def __init__(self, *args: object) -> None:
            self.rows = rows(*args)

        def tasks(self, *args: object) -> int | None:
            try:
                return self.rows.tasks(*args)
            except sqlite3.DatabaseError as e:
                raised.append(str(e))
                raise

        def host(self, *args: object) -> int | None:
            return self.rows.host(*args)

    rows = ascend_db._Rows
    monkeypatch.setattr(ascend_db, "_Rows", Spy)
    rank = RankInfo(rank=0, format="ascend_pt", path=tmp_path)
    with pytest.raises(InputError, match="damaged SQLite database .database disk image is malformed"):
        list(read_db(rank, file, Diagnostics(), detail=True))
    assert raised == ["database disk image is malformed"]


_ID = st.integers(0, 6)  # STRING_IDS holds 0-4
_STRING = st.one_of(st.none(), _ID, _ID.map(str), st.sampled_from(("MatMul", "", "N/A", " 2", "2.0", "x7")),
                    st.text(st.characters(blacklist_categories=("Cs",)), max_size=4),
                    st.sampled_from((2.0, 2.5, b"1", b"\xff")))
_TIME = st.one_of(st.integers(-5, 50), st.integers(-5, 50).map(str), st.none(),
                  st.sampled_from((1e300, 2.0, 2**62 + 3, -(2**62), "12abc", 2**62 - 1, 1 - 2**62,
                                   2**63 - 10, -(2**63))),  # the limits, and past int64 with the offset
                  # TEXT that int() reads but spells no integer as SQLite prints one, or past int64
                  st.sampled_from(("007", "-0", "+5", " 7", "7 ", "1e3", "", "-", "9223372036854775808",
                                   "-9223372036854775808", "-9223372036854775809", "4611686018427387903")))
_NUMBER = st.one_of(st.none(), st.integers(-2, 2**40), st.sampled_from(("", "N/A", 1.5)))
# an HCCL task's values where C reads them as the rules do: enums (N/A, INVALID, unnamed, a name that is NULL,
# a REAL equal to N/A), notify ids (-1 is 2**64 - 1), sizes (0, negative, past a double's exact ints, REAL),
# planes
_ENUM = st.one_of(_NUMBER, st.sampled_from((0, 1, 2, 7, 65534, 65535, 65534.0, "1", b"1")))
_NOTIFY = st.one_of(_NUMBER, st.sampled_from((-1, -(2**63), 2**63 - 1, -1.0, "7")))
_SIZE = st.one_of(_NUMBER, st.sampled_from((0, -3, 2**53 + 1, -(2**53) - 1, 2**63 - 1, -(2**63), 7.0, 2.5,
                                            "8")))
_KNOWN = st.one_of(st.none(), st.integers(0, 4), st.sampled_from(("", "HCCL", "3")))  # strings resolved
_KNOWN_ENUM = st.one_of(st.none(), st.sampled_from((0, 1, 2, 7, 65534, 65535)))
_PLANE = st.one_of(_NUMBER, st.sampled_from((-1, 1.0, "p", b"p", 2**63 - 1)))
_VALUES = st.one_of(st.none(), st.sampled_from(("MatMul", "", "N/A", "Enqueue", 7, 2.5, b"z", "\u4e2d")),
                    st.text(st.characters(blacklist_categories=("Cs",)), max_size=6))  # quotes, controls...


@st.composite
def _database(draw) -> dict[str, list[tuple]]:
    """Rows of TASK, its compute and HCCL info, STRING_IDS, CANN_API and PYTORCH_API, any value of
    any type where the schema expects ids and times."""
    n = draw(st.integers(0, 12))
    tasks, compute, comm = [], [], []
    for g in range(n):
        kind = draw(st.sampled_from("cmnh"))
        if kind == "h":  # an HCCL task C reads (its times, stream, strings and enums as expected)
            start = draw(st.integers(-5, 50))
            end = start + draw(st.one_of(st.integers(0, 9), st.sampled_from((2**53 + 1, 2**62 - 1))))
            tasks.append((start, end, draw(st.integers(0, 3)), *(draw(_NUMBER) for _ in range(4)),
                          draw(_KNOWN), g))
            comm.append((g, draw(_KNOWN), draw(_KNOWN), draw(st.one_of(st.none(), st.integers(-1, 3))),
                         draw(_KNOWN), draw(_NOTIFY), draw(_KNOWN_ENUM), draw(_NUMBER), draw(_NUMBER),
                         draw(_KNOWN_ENUM), draw(_SIZE), draw(_KNOWN_ENUM), draw(_KNOWN_ENUM), draw(_NUMBER)))
            continue
        start = draw(_TIME)
        end = draw(st.one_of(_TIME, st.integers(0, 9).map(lambda d, s=start: s + d if type(s) is int else s)))
        tasks.append((start, end, draw(st.one_of(st.integers(0, 3), st.none(), st.just("s"))), draw(_NUMBER),
                      draw(_NUMBER), draw(_NUMBER), draw(_NUMBER), draw(_STRING), g))
        if kind == "c":
            compute.append((g, *(draw(_STRING) for _ in range(3)), draw(_NUMBER), draw(_NUMBER),
                            *(draw(_STRING) for _ in range(6)), draw(_NUMBER)))
        elif kind == "m":
            comm.append((g, draw(_STRING), draw(_STRING), draw(_PLANE), draw(_STRING), draw(_NOTIFY),
                         draw(_ENUM), draw(_NUMBER), draw(_NUMBER), draw(_ENUM), draw(_SIZE), draw(_ENUM),
                         draw(_ENUM), draw(_NUMBER)))
    tid = st.one_of(st.integers(-1, 2**40), st.none())
    host = [(draw(_TIME), draw(_TIME), draw(tid), draw(_NUMBER), draw(_STRING),
             draw(st.sampled_from((None, 5000, 20000)))) for _ in range(draw(st.integers(0, 8)))]
    pytorch = [(draw(_TIME), draw(_TIME), draw(st.integers(0, 3)), draw(st.integers(0, 3)), draw(_STRING),
                draw(_NUMBER), draw(_NUMBER), draw(_STRING), draw(_STRING), draw(_NUMBER))
               for _ in range(draw(st.integers(0, 6)))]
    strings = [(i, draw(_VALUES)) for i in range(5)]
    return {"TASK": tasks, "COMPUTE_TASK_INFO": compute, "COMMUNICATION_TASK_INFO": comm,
            "STRING_IDS": strings, "CANN_API": host, "PYTORCH_API": pytorch,
            "CONNECTION_IDS": [(i, i + 1) for i in range(3)], **_HCCL_ENUMS}


_HCCL_ENUMS = {  # a name that is NULL, one for N/A, an id that is TEXT
    "ENUM_HCCL_TRANSPORT_TYPE": [(0, "SDMA"), (1, "RDMA"), (2, None), (65534, "N/A"), ("7", "seven")],
    "ENUM_HCCL_DATA_TYPE": [(0, "INT8"), (1, "FP32"), (7, "BFP16")],
    "ENUM_HCCL_LINK_TYPE": [(0, "HCCS"), (1, "PCIE")],
    "ENUM_HCCL_RDMA_TYPE": [(0, "RDMA_SEND_NOTIFY"), (2, None)],
}


_COLUMNS = {
    "TASK": "startNs, endNs, streamId, taskId, modelId, contextId, connectionId, taskType, globalTaskId",
    "COMPUTE_TASK_INFO": "globalTaskId, name, taskType, opType, blockDim, mixBlockDim, inputShapes, "
                         "inputDataTypes, inputFormats, outputShapes, outputDataTypes, outputFormats, waitNs",
    "COMMUNICATION_TASK_INFO": "globalTaskId, name, taskType, planeId, groupName, notifyId, rdmaType, "
                               "srcRank, dstRank, transportType, size, dataType, linkType, opId",
    "STRING_IDS": "id INTEGER PRIMARY KEY, value",
    "CANN_API": "startNs, endNs, globalTid, connectionId, name, type",
    "PYTORCH_API": "startNs, endNs, globalTid, connectionId, name, sequenceNumber, fwdThreadId, inputDtypes, "
                   "inputShapes, type",
    "CONNECTION_IDS": "id, connectionId",
    **dict.fromkeys(_HCCL_ENUMS, "id, name"),
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_database(), st.booleans(), st.integers(-10**6, 10**6), st.booleans())
def test_any_rows_read_in_c_as_the_rules_read_them(tables, all_tasks, offset, keyed):
    """``keyed``: STRING_IDS' id its primary key (C looks ids up), or no key (SQLite's joins)."""
    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "ascend_pytorch_profiler_0.db"
        db = sqlite3.connect(file)
        for table, rows in tables.items():
            columns = _COLUMNS[table] if keyed or table != "STRING_IDS" else "id, value"
            db.execute(f"CREATE TABLE {table} ({columns})")
            if rows:
                db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        db.commit()
        db.close()
        _same_both_ways(file, all_tasks, offset)


_SAMPLE_VALUE = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(allow_nan=False),
                          st.sampled_from(("7", b"1", True, 2**53 + 1)))
_COUNTER_VALUE = st.one_of(_SAMPLE_VALUE, st.just("x"))  # the counters' rules count it: the memory's raise
_SAMPLE_TIME = st.one_of(_TIME, st.integers(-(2**63), 2**63 - 1))
_SAMPLE_KEY = st.sampled_from((None, 0, 1, 1.0, True, "1", 2, "GE", "PTA", 7, b"1", 2.5))


@st.composite
def _sample_tables(draw) -> dict[str, tuple[str, list[tuple]]]:
    """Counter and memory tables (their columns, their rows): any value of any type where the schema
    expects ids, times and numbers; ids that STRING_IDS holds (7 is unknown) and equal keys of other
    types (1, 1.0, "1")."""
    def rows(*columns):
        return [tuple(draw(c) for c in columns) for _ in range(draw(st.integers(0, 10)))]
    return {
        "HBM": ("deviceId, timestampNs, bandwidth, hbmId, type",
                rows(st.just(0), _SAMPLE_TIME, _COUNTER_VALUE, _SAMPLE_KEY, st.sampled_from((0, 1)))),
        "NPU_MODULE_MEM": ("moduleId, timestampNs, totalReserved, deviceId",
                           rows(_SAMPLE_KEY, _SAMPLE_TIME, _COUNTER_VALUE, st.just(0))),
        "AICORE_FREQ": ("deviceId, timestampNs, freq", rows(st.just(0), _SAMPLE_TIME, _COUNTER_VALUE)),
        "MEMORY_RECORD": ("component, timestamp, totalAllocated, totalReserved, totalActive",
                          rows(_SAMPLE_KEY, _SAMPLE_TIME, _SAMPLE_VALUE, _SAMPLE_VALUE, _SAMPLE_VALUE)),
        "STRING_IDS": ("id INTEGER PRIMARY KEY, value", [(0, "Read"), (1, "PTA"), (2, "GE"), (3, "")]),
        "ENUM_MODULE": ("id INTEGER PRIMARY KEY, name", [(0, "APP"), (1, "SLOG")]),
    }


def _samples_read(file: Path, offset: int) -> tuple:
    """The counters' samples and what the reader noted, the memory's samples or the error its rules
    raise (on a value float() refuses: C must leave them that row too), and the warnings."""
    diag = Diagnostics()
    rank = RankInfo(rank=1, format="ascend_pt", path=file.parent, clock_offset_ns=offset)
    with read_only(file, diag) as db:
        schema = Schema(db, file)
        reader = _Reader(rank, file, diag, True, schema, _enums(db, schema))
        counters = [repr(s) for table in ("HBM", "NPU_MODULE_MEM", "AICORE_FREQ")
                    for s in reader.counters(db, table)]
    try:
        memory = [repr(s) for s in ascend_db.memory(rank, file, diag)]
    except ValueError as e:
        memory = [repr(e)]
    return counters, reader.unknown_strings, memory, diag.messages()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_sample_tables(), st.sampled_from((0, -5, 2**62 - 10, 1 - 2**62)))
@example({"HBM": ("deviceId, timestampNs, bandwidth, hbmId, type",
                  [(0, 10, 5, 1, 0), (0, 11, 6, 1.0, 0)] * 2),  # 1 == 1.0: their lanes differ
          "MEMORY_RECORD": ("component, timestamp, totalAllocated, totalReserved, totalActive",
                            [(1, 10, 1, 2, 3), (1.0, 11, 1, 2, 3), ("1", 12, 1, 2, 3)] * 2)}, 0)
def test_any_counter_and_memory_rows_read_in_c_as_the_rules_read_them(tables, offset):
    """``_db_core.samples`` against the rules it leaves rows to, every row given to them."""
    def every_row_to_the_rules(rows, keys, lanes, rank, offset, sample, rules, out):
        for row in rows:
            out.extend(rules(row))

    with tempfile.TemporaryDirectory() as folder:
        file = Path(folder) / "ascend_pytorch_profiler_0.db"
        db = sqlite3.connect(file)
        for table, (columns, rows) in tables.items():
            db.execute(f"CREATE TABLE {table} ({columns})")
            if rows:
                db.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)
        db.commit()
        db.close()
        c = _samples_read(file, offset)
        with pytest.MonkeyPatch.context() as patched:
            patched.setattr(ascend_db, "_samples", every_row_to_the_rules)
            patched.setattr(ascend_db_memory, "samples", every_row_to_the_rules)
            rules = _samples_read(file, offset)
    assert c == rules
