"""MindSpore's CPU profiler, on the real samples: the ``*_ascend_ms`` runs' FRAMEWORK files (memory
record, CPU ops) and the MindSpore 2.0 ``profiler/`` layout; every figure computed here from the
files themselves (csv, json), never by the code under test."""

from __future__ import annotations

import csv
import json
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import real_data
from test_trace_processor import imported
from trace_check import read_perfetto

from converters import convert, discover
from converters.analyses.memory import memory_report
from converters.analyses.ops import ops_report
from converters.cli import main
from converters.errors import Diagnostics

RUNS = ("pynative-profile", "graph-legacy-Profiler", "pynative-profile-memory")


def _run(name: str) -> Path:
    return next((real_data("mindspore-cpu") / name).glob("*_ascend_ms"))


def _file_ops(framework: Path) -> dict[str, list[int]]:
    """Per op type (cpu_op_detail_info's), [runs, total ns] from cpu_op_execute_timestamp_0.txt."""
    detail = csv.DictReader(open(framework / "cpu_op_detail_info_0.csv"))
    types = {r["full_op_name"]: r["op_type"] for r in detail}
    found: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for line in (framework / "cpu_op_execute_timestamp_0.txt").read_text().splitlines():
        if not line.strip():
            continue
        name, _, runs = line.split(";", 2)
        for run in runs.split():
            entry = found[types[name]]
            entry[0] += 1
            entry[1] += int(Decimal(run.split(",")[1]) * 1_000_000)
    return found


@pytest.mark.parametrize("run", RUNS)
def test_ops_rows_are_the_cpu_ops_and_cpu_op_type_info(run):
    folder = _run(run)
    rows = {r.name: r for r in ops_report(folder)}
    truth = _file_ops(folder / "FRAMEWORK")
    assert {name: [r.count, r.total_ns] for name, r in rows.items()} == truth
    for row in csv.DictReader(open(folder / "FRAMEWORK" / "cpu_op_type_info_0.csv")):
        mine = rows[row["op_type"]]
        assert mine.count == int(row["type_occurrences"]) and mine.core_type == "CPU"
        assert mine.total_ns / 1e6 == pytest.approx(float(row["total_compute_time"]), rel=1e-5)  # 6 digits
        assert mine.avg_ns / 1e6 == pytest.approx(float(row["avg_time(ms)"]), rel=1e-5)


def test_memory_is_cpu_ms_memory_record():
    folder = _run("pynative-profile-memory")
    rows = list(csv.DictReader(open(folder / "FRAMEWORK" / "cpu_ms_memory_record_0.txt")))
    [row] = memory_report(folder)
    assert row.component == "MindSpore CPU"
    for kind in ("Allocated", "Reserved", "Active"):
        values = [int(r[f"Total {kind}(Byte)"]) for r in rows]
        assert row.peaks[kind] == max(values)
    allocated = [int(r["Total Allocated(Byte)"]) for r in rows]
    assert row.times["Allocated"] == int(rows[allocated.index(max(allocated))]["Timestamp(ns)"])


def test_a_run_without_the_memory_record_has_no_memory_rows():
    diag = Diagnostics()
    assert memory_report(_run("pynative-profile"), diag=diag) == []


# -- MindSpore 2.0's profiler/ layout ------------------------------------------------------------------

def _v2() -> Path:
    return real_data("mindspore-2.0-cpu") / "profiler"


def test_the_2_0_layout_is_a_rank_on_its_own_clock_with_its_steps(tmp_path):
    diag = Diagnostics()
    [info] = discover(_v2(), diag)
    assert (info.rank, info.format, info.wall_clock) == (0, "mindspore_cpu", False)
    assert "monotonic" in " ".join(diag.messages())
    events = json.loads((_v2() / "cpu_timeline_display_0.json").read_text())
    steps = sorted(int(e["name"]) for e in events if e.get("ph") == "X" and e.get("tid") == 100000)
    assert steps == list(range(1, 13))
    out = tmp_path / "v2.pftrace"
    convert(_v2(), out, kind="detail", max_bytes=None)
    problems, _ = imported(out, tmp_path)
    assert problems == []
    slices = read_perfetto(out.read_bytes()).slices
    drawn = sorted(s.name for s in slices if s.track[-1].startswith("Steps"))
    assert drawn == sorted(f"Step {n}" for n in steps)
    ops = [e for e in events if e.get("ph") == "X" and str(e.get("tid")).startswith("HostCpuOps")]
    assert sorted((s.name, s.dur_ns) for s in slices if s.track[-1].startswith("CPU OP")) == \
        sorted((e["name"], round(Decimal(repr(e["dur"])) * 1000)) for e in ops)


def test_the_2_0_ops_are_cpu_op_type_info():
    rows = {r.name: r for r in ops_report(_v2())}
    for row in csv.DictReader(open(_v2() / "cpu_op_type_info_0.csv")):
        mine = rows[row["op_type"]]
        assert mine.count == int(row["type_occurrences"])
        assert mine.total_ns / 1e6 == pytest.approx(float(row["total_compute_time"]), rel=1e-5)
    assert len(rows) == len(list(csv.DictReader(open(_v2() / "cpu_op_type_info_0.csv"))))


def test_the_2_0_clock_is_said_not_wall_clock(capsys):
    assert main(["info", str(_v2())]) == 0
    out = capsys.readouterr()
    assert "monotonic" in out.out + out.err


def test_every_2_0_event_lands_once_in_detail(tmp_path):
    """Every complete event of the timeline but MindSpore's own overlap lanes (pid 12000, "Op
    Overlap Analyse": the converter draws its own) is one slice of the detail trace."""
    events = json.loads((_v2() / "cpu_timeline_display_0.json").read_text())
    truth = sum(1 for e in events if e.get("ph") == "X" and str(e.get("pid")) != "12000")
    out = tmp_path / "v2.pftrace"
    convert(_v2(), out, kind="detail", max_bytes=None)
    drawn = [s for s in read_perfetto(out.read_bytes()).slices if s.track[0] != "Overlap Analysis"]
    assert len(drawn) == truth == 492
