"""Ranks with only the profiler's analysis files (step_trace_time.csv, communication.json,
analysis.db) are ranks of the job: their steps and communication ops are read from those files,
equal to what the files say (read here with csv, json and sqlite3), and every rank left out is named."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
import statistics
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import real_data
from test_trace_processor import imported
from trace_check import read_perfetto

from converters import comm_report, convert, discover, overlap_report
from converters.analyses.report import report_data
from converters.cli import main
from converters.errors import Diagnostics
from fixtures.ascend_pt_gen import write_ascend_pt_profile

OUTPUT = "ASCEND_PROFILER_OUTPUT"
ANALYSIS = ("step_trace_time.csv", "communication.json", "analysis.db")
FIGURES = ("Computing", "Communication(Not Overlapped)", "Overlapped", "Communication", "Free", "Stage",
           "Bubble", "Communication(Not Overlapped and Exclude Receive)", "Preparing")
DB_FIGURES = ("computing", "communication_not_overlapped", "overlapped", "communication", "free", "stage",
              "bubble", "communication_not_overlapped_and_exclude_receive", "preparing")
ROW_FIELDS = ("computing_ns", "not_overlapped_ns", "overlapped_ns", "communication_ns", "free_ns", "stage_ns",
              "bubble_ns", "not_overlapped_excluding_receive_ns", "preparing_ns")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """A 4-rank pipeline-parallel torch_npu job (2 stages) whose ranks 1 and 3 keep only the
    analysis files; rank 1 arrives last at every allreduce of its stage."""
    root = tmp_path_factory.mktemp("pp-analysis")
    truth = write_ascend_pt_profile(root, ranks=4, steps=3, pp=2, analysis_only=(1, 3), slow_rank=1,
                                    slow_ns=2_000_000, seed=4)
    return root, {r.rank: r.path for r in truth.ranks}


def _ns(text, per_us: int = 1) -> int:
    """µs (or ms, ``per_us`` 1000) as the file wrote them, in ns, exactly."""
    return int((Decimal(str(text).strip()) * per_us * 1000).to_integral_value())


def _db_rows(path: Path, sql: str) -> list[sqlite3.Row]:
    with sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True) as db:
        db.row_factory = sqlite3.Row
        return db.execute(sql).fetchall()


def _file_ops_from_db(db: Path) -> list[tuple]:
    return sorted((int(r["step"][4:]), r["hccl_op_name"], _ns(repr(r["start_timestamp"])),
                   _ns(repr(r["elapse_time"]), 1000), _ns(repr(r["transit_time"]), 1000),
                   _ns(repr(r["wait_time"]), 1000), _ns(repr(r["synchronization_time"]), 1000))
                  for r in _db_rows(db, "SELECT * FROM CommAnalyzerTime"))


def _file_ops_from_json(path: Path) -> list[tuple]:
    """communication.json's ops, their numbers parsed from the text as written."""
    document = json.loads(path.read_text(), parse_float=Decimal)
    out = []
    for key, kinds in document.items():
        for ops in kinds.values():
            for name, info in ops.items():
                if name == "Total Op Info":
                    continue
                t = info["Communication Time Info"]
                times = ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)")
                out.append((int(key[4:]), name.split("@")[0], _ns(t["Start Timestamp(us)"]),
                            *(_ns(t[k], 1000) for k in times)))
    return sorted(out)


def _our_ops(report, rank: int) -> list[tuple]:
    return sorted((op.step, op.name, op.start_ns, op.elapse_ns, op.transit_ns, op.wait_ns, op.sync_ns)
                  for op in report.ops if op.rank == rank)


def _our_rows(rows, rank: int) -> dict[int, tuple]:
    return {r.step: tuple(getattr(r, f) for f in ROW_FIELDS) for r in rows if r.rank == rank}


def test_comm_and_report_see_every_rank_and_the_true_straggler(job):
    root, _ = job
    comm = comm_report(root)
    assert sorted(r.rank for r in comm.slow_ranks) == [0, 1, 2, 3]
    assert comm.slow_ranks[0].rank == 1 and comm.slow_ranks[0].wait_caused_ns > 0
    report = report_data(root)
    assert report.ranks == [0, 1, 2, 3]
    assert report.slow_ranks[0].rank == 1
    assert {f.rank for f in report.steps} == {0, 1, 2, 3}


def test_the_ops_read_are_analysis_db_s(job):
    """analysis.db is read where it is: every op of CommAnalyzerTime, its start, Elapse, Transit,
    Wait and Synchronization to the ns of the values stored."""
    root, paths = job
    report = comm_report(root)
    for rank in (1, 3):
        theirs = _file_ops_from_db(paths[rank] / OUTPUT / "analysis.db")
        assert len(theirs) == 3 * (3 + 2) and _our_ops(report, rank) == theirs  # 3 p2p + 2 allreduces a step


def test_the_overlap_rows_are_step_trace_time_s(job):
    root, paths = job
    rows = overlap_report(root)
    for rank in (1, 3):
        theirs = {int(r["step"]): tuple(_ns(repr(r[c])) for c in DB_FIGURES)
                  for r in _db_rows(paths[rank] / OUTPUT / "analysis.db", "SELECT * FROM StepTraceTime")}
        assert _our_rows(rows, rank) == theirs and len(theirs) == 3


def test_the_text_files_alone_are_read_alike(job, tmp_path):
    """Without analysis.db, step_trace_time.csv and communication.json give the same."""
    root, paths = job
    copy = tmp_path / "job"
    shutil.copytree(root, copy)
    rank_dir = copy / paths[3].name
    (rank_dir / OUTPUT / "analysis.db").unlink()
    report = comm_report(copy)
    assert _our_ops(report, 3) == _file_ops_from_json(rank_dir / OUTPUT / "communication.json")
    with open(rank_dir / OUTPUT / "step_trace_time.csv", newline="") as f:
        theirs = {int(r["Step"]): tuple(_ns(r[c]) for c in FIGURES) for r in csv.DictReader(f)}
    assert _our_rows(overlap_report(copy), 3) == theirs
    assert sorted(r.rank for r in report.slow_ranks) == [0, 1, 2, 3]


def test_step_time_is_preparing_stage_and_bubble(job, capsys):
    root, paths = job
    assert main(["comm", str(root), "--slow-ranks", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    row = next(r for r in document["slow_ranks"] if r["Rank"] == 1)
    steps = _db_rows(paths[1] / OUTPUT / "analysis.db", "SELECT * FROM StepTraceTime")
    step_ns = [_ns(repr(r["preparing"])) + _ns(repr(r["stage"])) + _ns(repr(r["bubble"])) for r in steps]
    assert row["Mean Step(ms)"] == pytest.approx(statistics.mean(step_ns) / 1e6, abs=1e-6)
    computing = [_ns(repr(r["computing"])) for r in steps]
    assert row["Mean Computing(ms)"] == pytest.approx(statistics.mean(computing) / 1e6, abs=1e-6)


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_the_trace_draws_what_is_known_and_says_where_it_comes_from(job, tmp_path, kind):
    """No step slice and no Computing or Free lane (their times are not there), the ops and the
    Communication lane at their times; the rank's description says it is the profiler's analysis."""
    root, _ = job
    out = tmp_path / f"{kind}.pftrace"
    convert(root, out, kind=kind, max_bytes=None)
    problems, _ = imported(out, tmp_path)
    assert problems == []
    decoded = read_perfetto(out.read_bytes())
    mine = [s for s in decoded.slices if s.process.startswith("Rank 1")]
    lanes = {s.track for s in mine}
    assert ("Overlap Analysis", "Communication") in lanes
    assert not any(track[0] == "Step Trace" or track[-1] in ("Computing", "Free") for track in lanes)
    assert any(track[0] == "Overlap Analysis" and track[-1] == "Computing"
               for track in {s.track for s in decoded.slices if s.process.startswith("Rank 0")})
    info = next(i for i in discover(root) if i.rank == 1)
    assert "the profiler's analysis only" in info.description
    if kind == "detail":
        assert sum(1 for s in mine if s.track[0] == "Communication") == 3 * 5


def test_a_real_rank_with_only_its_analysis_files(tmp_path):
    """ascend-pt-2rank's rank 0 reduced to its analysis files beside the whole rank 1: what is read
    equals its communication.json and step_trace_time.csv; its collectives match rank 1's."""
    real = real_data("ascend-pt-2rank")
    kept = tmp_path / "rank0_ascend_pt"
    (kept / OUTPUT).mkdir(parents=True)
    for name in ("profiler_info_0.json", "profiler_metadata.json"):
        shutil.copy(real / "rank0_ascend_pt" / name, kept / name)
    for name in ("step_trace_time.csv", "communication.json"):
        shutil.copy(real / "rank0_ascend_pt" / OUTPUT / name, kept / OUTPUT / name)
    shutil.copytree(real / "rank1_ascend_pt", tmp_path / "rank1_ascend_pt")
    report = comm_report(tmp_path)
    assert _our_ops(report, 0) == _file_ops_from_json(kept / OUTPUT / "communication.json")
    assert report.instances == 4 and all(op.ranks == 2 for op in report.ops)
    with open(kept / OUTPUT / "step_trace_time.csv", newline="") as f:
        theirs = {int(r["Step"]): tuple(_ns(r[c]) for c in FIGURES) for r in csv.DictReader(f)}
    assert _our_rows(overlap_report(tmp_path), 0) == theirs


def test_a_real_rank_with_only_its_analysis_db(tmp_path):
    real = real_data("ascend-pt-db") / "rank1_ascend_pt"
    kept = tmp_path / "rank1_ascend_pt"
    (kept / OUTPUT).mkdir(parents=True)
    shutil.copy(real / "profiler_info_1.json", kept / "profiler_info_1.json")
    shutil.copy(real / OUTPUT / "analysis.db", kept / OUTPUT / "analysis.db")
    report = comm_report(tmp_path)
    db = kept / OUTPUT / "analysis.db"
    assert _our_ops(report, 1) == _file_ops_from_db(db) and len(report.ops) == 4
    theirs = {int(r["step"]): _ns(repr(r["stage"])) for r in _db_rows(db, "SELECT * FROM StepTraceTime")}
    assert {r.step: r.stage_ns for r in overlap_report(tmp_path)} == theirs


def test_the_warning_names_every_rank_it_leaves_out(tmp_path):
    """Two rank folders with nothing to read beside a whole rank: both named, not "and 1 more"."""
    real = real_data("ascend-pt-2rank")
    for rank in (0, 1):
        empty = tmp_path / "left" / f"rank{rank}_ascend_pt"
        empty.mkdir(parents=True)
        shutil.copy(real / f"rank{rank}_ascend_pt" / f"profiler_info_{rank}.json", empty)
    shutil.copytree(real / "rank1_ascend_pt", tmp_path / "rank1_ascend_pt")
    diag = Diagnostics()
    assert [r.rank for r in discover(tmp_path, diag)] == [1]
    [line] = diag.messages()
    assert f"rank 0 ({tmp_path / 'left' / 'rank0_ascend_pt'})" in line
    assert f"rank 1 ({tmp_path / 'left' / 'rank1_ascend_pt'})" in line


def test_diagnostics_name_every_subject_only_where_each_has_one():
    diag, other = Diagnostics(), Diagnostics()
    diag.warn("left_out", "rank 0: left out", "rank 0")
    other.warn("left_out", "rank 5: left out", "rank 5")
    other.warn("bad_row", "f: line 3: bad")
    other.warn("bad_row", "f: line 4: bad")
    diag.merge(other)
    assert diag.messages() == ["rank 0: left out (and 1 more like it: rank 5)",
                               "f: line 3: bad (and 1 more like it)"]
