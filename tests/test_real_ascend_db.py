"""The database reader against the profilers' own analysis of the real databases.

``ascend-pt-db``: torch_npu's ``ascend_pytorch_profiler_{rank}.db`` with ``analysis.db`` beside it,
whose ``StepTraceTime`` is torch_npu's own per-step breakdown (µs), and (rank 0) the database's
``OVERLAP_ANALYSIS`` lanes. ``msprof-db``: CANN's ``msprof_0.db`` with its ``OVERLAP_ANALYSIS``.
The truth is read here with plain SQL from copies (a WAL-mode file opened the usual way grows a
``-shm`` beside it).

Text form against database form (``ascend-pt-2rank`` and ``ascend-pt-db``: one job family at
profiler level 1, not one run): rank 0 has the same streams (0, 2, 3, 4), the same HCCL planes
(0-7) and the same four allReduces per step (``hcom_allReduce__N_{0..3}_1``), and communication
dwarfs compute alike (8.9 ms of compute against 102-106 ms of communication). What differs: the
runs (timings, the ops' instance numbers 586 and 210) and the op lane, which the text form names
after trace_view's thread ("Group 0 Communication") and the database after its group name.
"""

from __future__ import annotations

import re
import shutil
import sqlite3
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from conftest import real_data

from converters import (
    Diagnostics,
    Layer,
    Options,
    convert,
    discover,
    overlap_report,
    read_profile,
    step_overlap,
)
from converters.intervals import NOT_COMPUTE

LANES = {0: "Computing", 1: "Communication", 2: "Communication (not overlapped)", 3: "Free"}


def _copy(path: Path, tmp_path: Path) -> sqlite3.Connection:
    target = tmp_path / f"{path.parent.parent.name}-{path.name}"
    shutil.copy(path, target)
    return sqlite3.connect(target)


@pytest.fixture
def torch_db() -> Path:
    return real_data("ascend-pt-db")


@pytest.fixture
def cann_db() -> Path:
    return real_data("msprof-db")


def _database(root: Path, rank: int) -> Path:
    return root / f"rank{rank}_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db"


def test_breakdown_equals_torch_npus_step_trace_time(torch_db, tmp_path):
    rows = {(r.rank, r.step): r for r in overlap_report(torch_db)}
    assert set(rows) == {(0, 50), (1, 50)}
    for rank in (0, 1):
        analysis = _copy(_database(torch_db, rank).with_name("analysis.db"), tmp_path)
        (step, computing, not_overlapped, overlapped, communication, free, stage, bubble, excluding,
         preparing) = analysis.execute("SELECT step, computing, communication_not_overlapped, overlapped, "
                                       "communication, free, stage, bubble, "
                                       "communication_not_overlapped_and_exclude_receive, preparing "
                                       "FROM StepTraceTime").fetchone()
        mine = rows[rank, int(step)]
        for ours, theirs in ((mine.computing_ns, computing), (mine.not_overlapped_ns, not_overlapped),
                             (mine.overlapped_ns, overlapped), (mine.communication_ns, communication),
                             (mine.free_ns, free), (mine.stage_ns, stage), (mine.bubble_ns, bubble),
                             (mine.not_overlapped_excluding_receive_ns, excluding),
                             (mine.preparing_ns, preparing)):
            assert ours / 1000 == pytest.approx(theirs, rel=1e-3, abs=1e-3), (rank, theirs)


def _lanes(db: sqlite3.Connection) -> dict[str, list[tuple[int, int]]]:
    lanes: dict[str, list[tuple[int, int]]] = {lane: [] for lane in LANES.values()}
    for kind, start, end in db.execute("SELECT type, startNs, endNs FROM OVERLAP_ANALYSIS"):
        lanes[LANES[kind]].append((start, end))
    return {lane: sorted(intervals) for lane, intervals in lanes.items()}


@pytest.mark.parametrize("which", ["torch_npu", "cann"])
def test_overlap_lanes_equal_the_databases_own_interval_by_interval(which, torch_db, cann_db, tmp_path):
    path = _database(torch_db, 0) if which == "torch_npu" else cann_db / "msprof_0.db"
    expected = _lanes(_copy(path, tmp_path))
    ranks = [r for r in discover(path.parent.parent if which == "torch_npu" else cann_db) if r.rank == 0]
    batches = list(read_profile(ranks, Options(), Diagnostics()))
    assert len(batches) == 1
    mine = step_overlap(batches[0]).lanes()
    for lane, intervals in expected.items():
        assert len(mine[lane]) == len(intervals), lane
        for (s1, e1), (s2, e2) in zip(mine[lane], intervals, strict=True):
            assert abs(s1 - s2) <= 1000 and abs(e1 - e2) <= 1000, lane
    assert sum(map(len, expected.values())) > 20


@pytest.mark.parametrize("which", ["torch_npu", "cann"])
def test_detail_holds_every_task_once_with_host_lanes_flows_and_counters(which, torch_db, cann_db, tmp_path):
    root = torch_db if which == "torch_npu" else cann_db
    paths = [_database(torch_db, r) for r in (0, 1)] if which == "torch_npu" else [cann_db / "msprof_0.db"]
    expected = {}
    for rank, path in enumerate(paths):
        db = _copy(path, tmp_path)
        expected[rank] = {
            "tasks": db.execute("SELECT count(*) FROM TASK").fetchone()[0],
            "host": sum(db.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                        for t in ("PYTORCH_API", "CANN_API", "MSTX_EVENTS")
                        if db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (t,)).fetchone()),
        }
    batches = list(read_profile(discover(root), Options(kind="detail"), Diagnostics()))
    for rank, counts in expected.items():
        mine = [s for b in batches if b.rank == rank for s in b.slices]
        tasks = sum(s.layer in (Layer.STREAM, Layer.COMM_TASK) for s in mine)
        assert tasks == counts["tasks"]
        assert sum(s.layer is Layer.HOST for s in mine) == counts["host"]
        assert sum(len(b.samples) for b in batches if b.rank == rank) > 0
    flows = [f for b in batches for s in b.slices for f in s.flows_out]
    assert flows and len(flows) == len(set(flows))


def test_text_and_database_forms_of_one_job_family_agree(torch_db):
    text = real_data("ascend-pt-2rank")
    shapes = {}
    for root in (text, torch_db):
        batches = [b for b in read_profile(discover(root), Options(kind="detail"), Diagnostics())
                   if b.rank == 0]
        slices = [s for b in batches for s in b.slices]
        ops = sorted(re.sub(r"__\d+_", "__N_", s.name) for s in slices if s.layer is Layer.COMM_OP)
        rows = overlap_report(root, ranks=[0])
        shapes[root] = ({s.lane for s in slices if s.layer is Layer.STREAM},
                        {s.lane for s in slices if s.layer is Layer.COMM_TASK}, ops,
                        rows[0].computing_ns / rows[0].communication_ns)
    assert shapes[text][:3] == shapes[torch_db][:3]
    assert shapes[text][3] == pytest.approx(shapes[torch_db][3], abs=0.01)  # 0.084 and 0.087
    assert shapes[text][2] == [f"hcom_allReduce__N_{i}_1" for i in range(4)]


def test_pytorch_ops_arrows_reach_the_tasks_and_ops_connection_ids_name(torch_db, tmp_path):
    """A ``PYTORCH_API`` row's ``connectionId`` is an ``id`` of ``CONNECTION_IDS``, whose
    ``connectionId``s are those of the tasks and communication ops it launched (torch_npu's
    ``async_npu`` arrows of the text form; HCCL's plane tasks take none there, nor here)."""
    batches = list(read_profile(discover(torch_db), Options(kind="detail"), Diagnostics()))
    for rank in (0, 1):
        db = _copy(_database(torch_db, rank), tmp_path)
        launched = """SELECT p.startNs, s.value, x.startNs FROM PYTORCH_API p
            JOIN STRING_IDS s ON s.id = p.name JOIN CONNECTION_IDS i ON i.id = p.connectionId JOIN ({}) x
            ON x.connectionId = i.connectionId WHERE x.startNs >= CAST(p.startNs AS INTEGER)"""
        tasks = ("SELECT startNs, connectionId FROM TASK WHERE globalTaskId NOT IN "
                 "(SELECT globalTaskId FROM COMMUNICATION_TASK_INFO)")
        expected = sorted((int(start), name, at) for query in (tasks, "SELECT * FROM COMMUNICATION_OP")
                          for start, name, at in db.execute(launched.format(query)))
        slices = [s for b in batches if b.rank == rank for s in b.slices]
        ends = {f: s for s in slices for f in s.flows_in}
        got = sorted((s.start_ns, s.name, ends[f].start_ns) for s in slices
                     if s.lane.startswith("PyTorch") for f in s.flows_out if ends[f].layer is not Layer.HOST)
        assert got == expected
        assert len(got) == 208  # 187 compute tasks, 17 others (copies), the 4 allreduces
        from_ops = {f for s in slices if s.lane.startswith("PyTorch") for f in s.flows_out}
        compute = [s for s in slices if s.layer is Layer.STREAM and s.task_type != NOT_COMPUTE]
        assert len(compute) == 187 and all(from_ops.intersection(s.flows_in) for s in compute)


# The pairs of PyTorch ops two rows of CONNECTION_IDS join (one connection id, two ids PYTORCH_API
# rows name), each op filed under its step as the reader files it (the last step started at or before
# it, the first for those before), the first of a connection id in a step to each later one there.
_OP_PAIRS = """
WITH ops AS (
    SELECT CAST(p.startNs AS INTEGER) AS start, s.value AS name, c.connectionId AS link,
           COALESCE((SELECT id FROM STEP_TIME WHERE startNs <= CAST(p.startNs AS INTEGER)
                     ORDER BY startNs DESC LIMIT 1),
                    (SELECT id FROM STEP_TIME ORDER BY startNs LIMIT 1)) AS step
    FROM PYTORCH_API p JOIN STRING_IDS s ON s.id = p.name JOIN CONNECTION_IDS c ON c.id = p.connectionId)
SELECT a.link, a.name, a.start, b.name, b.start FROM ops a JOIN ops b
    ON b.link = a.link AND b.step = a.step AND b.start > a.start
WHERE NOT EXISTS (SELECT 1 FROM ops e WHERE e.link = a.link AND e.step = a.step AND e.start < a.start)
"""
# Each arrow between host slices in a trace: its rank's process, and the names and times of its ends
_HOST_ARROWS = """
select hex(p.name) as process, hex(so.name) as name_out, so.ts as ts_out, hex(si.name) as name_in,
  si.ts as ts_in
from flow f join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in
  join track t_out on t_out.id = so.track_id join track t_in on t_in.id = si.track_id
  left join thread_track tt on so.track_id = tt.id left join thread t using (utid)
  left join process_track pt on so.track_id = pt.id
  join process p on p.upid = coalesce(t.upid, pt.upid)
where t_out.name like 'PyTorch%' and t_in.name like 'PyTorch%';
"""


def _op_pairs(db: sqlite3.Connection) -> dict[str, list[tuple]]:
    """The database's pairs of linked PyTorch ops by kind: a task queue's Enqueue to its Dequeue@...,
    else a forward op to its backward; where the sample's own ``connectionCats`` names the kind
    (rank 0), it must agree."""
    cats = dict(db.execute("SELECT connectionId, cat FROM connectionCats")) \
        if db.execute("SELECT 1 FROM sqlite_master WHERE name = 'connectionCats'").fetchone() else {}
    pairs: dict[str, list[tuple]] = {"async_task_queue": [], "fwdbwd": []}
    for link, *pair in db.execute(_OP_PAIRS):
        kind = "async_task_queue" if pair[0] == "Enqueue" and pair[2].startswith("Dequeue@") else "fwdbwd"
        assert cats.get(link, kind) == kind
        pairs[kind].append(tuple(pair))
    return {kind: sorted(found) for kind, found in pairs.items()}


def test_pytorch_ops_sharing_a_connection_id_are_linked_as_the_text_form_links_them(torch_db, tmp_path):
    """Two ``PYTORCH_API`` rows whose ids ``CONNECTION_IDS`` lists with one connection id are linked:
    the text form's ``async_task_queue`` (``Enqueue`` to its ``Dequeue@...``, 159 a rank, as in
    ``ascend-pt-2rank``) and ``fwdbwd`` (forward op to its backward, 27). The detail trace holds
    exactly the pairs a query of the database gives, from the earlier op to the later, and loads in
    the trace processor with nothing repaired and every arrow we wrote."""
    from test_trace_processor import imported, trace_processor
    from trace_check import read_perfetto

    copy = Path(shutil.copytree(torch_db, tmp_path / "ascend-pt-db"))
    expected = {}
    for rank in (0, 1):
        db = sqlite3.connect(f"file:{_database(copy, rank)}?mode=ro&immutable=1", uri=True)
        expected[rank] = _op_pairs(db)
        db.close()
        assert {kind: len(pairs) for kind, pairs in expected[rank].items()} == {"async_task_queue": 159,
                                                                                 "fwdbwd": 27}
    out = tmp_path / "out.pftrace"
    convert(copy, out, kind="detail", max_bytes=None)
    problems, (_, _, flows) = imported(out, tmp_path)
    assert problems == []
    assert flows == read_perfetto(out.read_bytes()).flows
    query = tmp_path / "host_arrows.sql"
    query.write_text(_HOST_ARROWS)
    done = subprocess.run([str(trace_processor()), "-q", str(query), str(out)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    drawn: dict[int, list[tuple]] = {0: [], 1: []}
    for row in done.stdout.split()[1:]:
        process, name_out, ts_out, name_in, ts_in = (field.strip('"') for field in row.split(","))
        rank = int(re.match(r"Rank (\d+)", bytes.fromhex(process).decode())[1])
        drawn[rank].append((bytes.fromhex(name_out).decode(), int(ts_out), bytes.fromhex(name_in).decode(),
                            int(ts_in)))
    for rank, pairs in expected.items():
        assert sorted(drawn[rank]) == sorted(pairs["async_task_queue"] + pairs["fwdbwd"])
    assert flows == 1889  # 1,517 before these 2 x 186 (the rest: host to device, and the collectives')


def test_a_tiled_database_reads_as_that_many_copies_of_the_sample(torch_db, tmp_path):
    """``bench/real_db.py`` (the database form at a real job's shape, for ``make bench``): the sample
    tiled three times reads as three steps holding three times each slice (its lane, name and
    duration) and each counter value of the sample, and three times its arrows."""
    from bench.real_db import tile

    def read(root: Path) -> list:
        return list(read_profile(discover(root), Options(kind="detail"), Diagnostics()))

    def records(steps: list) -> Counter:  # ids (connection_id) and times differ from copy to copy
        # an allocation never released lasts to the profile's end: the last copy's
        return Counter([(s.layer.value, s.lane, s.name, s.dur_ns if s.layer is not Layer.MEMORY else None)
                        for step in steps for s in step.slices if s.layer is not Layer.STEP] +
                       [("sample", c.lane, c.value) for step in steps for c in step.samples])

    shutil.copytree(torch_db / "rank0_ascend_pt", tmp_path / "one/rank0_ascend_pt")
    shutil.copytree(torch_db / "rank0_ascend_pt", tmp_path / "tiled/rank0_ascend_pt")
    tile(_database(torch_db, 0), _database(tmp_path / "tiled", 0), 3)
    (sample,), tiled = read(tmp_path / "one"), read(tmp_path / "tiled")
    assert [s.step_id for s in tiled] == [sample.step_id + k for k in range(3)]
    once = records([sample])
    assert sum(once.values()) > 5000
    assert records(tiled) == Counter({record: 3 * n for record, n in once.items()})
    arrows = sum(len(s.flows_out) for s in sample.slices)
    assert sum(len(s.flows_out) for step in tiled for s in step.slices) == 3 * arrows > 500
