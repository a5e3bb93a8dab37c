"""The MindSpore 1.x reader against the real legacy samples and MindSpore's own outputs."""

from __future__ import annotations

import csv
from collections import Counter
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from conftest import real_data
from trace_check import read_chrome_json, read_perfetto

from converters import overlap_report
from converters.cli import main
from fixtures import vendor_intervals as vi


@pytest.fixture
def single_device() -> Path:
    return real_data("mindspore-1x/single-device")


@pytest.fixture
def hccl_rank6() -> Path:
    return real_data("mindspore-1x/hccl-rank6")


def _convert(profile: Path, out: Path, *args: str) -> tuple:
    assert main([str(profile), "--kind", "detail", "-o", str(out), *args]) == 0
    data = out.read_bytes()
    return read_perfetto(data) if out.suffix == ".pftrace" else read_chrome_json(data)


def _ms_ns(text: str) -> int:
    return int(Decimal(text) * 1_000_000)


def _timeline_ops(path: Path) -> list[tuple[str, str, int, int]]:
    """(short name, stream, start ns, dur ns) of output_timeline_data, read independently."""
    rows = path.read_text().splitlines()[1:]
    out = []
    for row in rows:
        name, stream, start, dur = row.split(",")
        out.append((name.split("/")[-1], stream, _ms_ns(start), _ms_ns(dur)))
    return out


def test_every_device_op_once_on_its_stream_as_mindspore_shows_it(single_device, tmp_path, capsys):
    trace = _convert(single_device, tmp_path / "out.pftrace")
    mine = Counter((s.name, s.track[-1].removeprefix("Stream "), s.dur_ns) for s in trace.slices
                   if s.track[0] == "Ascend Hardware" and s.track[-1].startswith("Stream"))
    ops = _timeline_ops(single_device / "output_timeline_data_1.txt")
    assert mine == Counter((name, stream, dur) for name, stream, _, dur in ops)
    assert sum(mine.values()) == 107
    display = orjson.loads((single_device / "ascend_timeline_display_1.json").read_bytes())
    theirs = Counter((e["name"], e["tid"], round(e["dur"] * 100) * 10) for e in display if e["pid"] == 1)
    assert mine == theirs
    # the full scope name and the framework_raw metadata come along as args
    conv = next(s for s in trace.slices if s.name.startswith("Conv2D-op"))
    assert conv.args["type"] == "Conv2D" and conv.args["fullname"].endswith(conv.name)
    assert "not aligned to wall time" in capsys.readouterr().err.lower()


def test_ai_cpu_ops_on_their_own_lane(single_device, tmp_path):
    trace = _convert(single_device, tmp_path / "out.pftrace")
    mine = Counter((s.name, s.dur_ns) for s in trace.slices if s.track[-1] == "AI CPU")
    display = orjson.loads((single_device / "ascend_timeline_display_1.json").read_bytes())
    assert mine == Counter((e["name"], round(e["dur"] * 1000)) for e in display if e["pid"] == 9000)
    # on the device's timebase: InitData starts 6042909.56 µs before AssignAdd-op142, as MindSpore shows
    def first(name: str) -> int:
        return min(s.start_ns for s in trace.slices if s.name == name)

    assert first("AssignAdd-op142") - first("InitData") == 6_042_909_560


def test_steps_from_the_step_trace_and_both_writers_agree(single_device, tmp_path):
    pftrace = _convert(single_device, tmp_path / "out.pftrace")
    steps = [s for s in pftrace.slices if s.track[0] == "Step Trace" and s.name.startswith("Step ")]
    with open(single_device / "step_trace_raw_1_detail_time.csv", newline="") as f:
        row = next(csv.DictReader(f))
    assert [(s.name, s.start_ns, s.dur_ns) for s in steps] == [
        ("Step 1", int(row["start_point"]) * 10, int(row["total"]) * 10)]
    json = _convert(single_device, tmp_path / "out.json")
    shift = min(s.start_ns for s in pftrace.slices) - min(s.start_ns for s in json.slices)
    assert {(s.track, s.name, s.start_ns + shift, s.dur_ns) for s in json.slices} == {
        (s.track, s.name, s.start_ns, s.dur_ns) for s in pftrace.slices}


def test_computing_is_the_union_of_the_steps_device_ops(single_device):
    ops = _timeline_ops(single_device / "output_timeline_data_1.txt")
    with open(single_device / "aicpu_intermediate_1.csv", newline="") as f:
        cpu = [(int(r["run_start"]) * 1000, int(r["run_end"]) * 1000) for r in csv.DictReader(f)]
    with open(single_device / "step_trace_raw_1_detail_time.csv", newline="") as f:
        start = int(next(csv.DictReader(f))["start_point"]) * 10
    intervals = [(s, s + d) for _, _, s, d in ops] + cpu
    expected = vi.total(vi.union([i for i in intervals if i[0] >= start]))
    rows = {row.step: row for row in overlap_report(single_device)}
    assert rows[1].computing_ns == expected
    assert rows[None].computing_ns == vi.total(vi.union([i for i in intervals if i[0] < start]))


def test_hccl_tasks_on_their_planes_inside_the_op_of_their_step(hccl_rank6, tmp_path):
    trace = _convert(hccl_rank6, tmp_path / "out.pftrace")
    ops = sorted((s.start_ns, s.start_ns + s.dur_ns, s.name) for s in trace.slices
                 if s.track[0] == "Communication" and s.track[-1] == "Stream 24")
    with open(hccl_rank6 / "step_trace_raw_6_detail_time.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["step_num"] != "-"]
    column = "stream_24_0_AllReduce-op3143"
    assert ops == [(int(r[f"{column}_start_point"]) * 10, int(r[f"{column}_end_point"]) * 10,
                    "AllReduce-op3143") for r in rows]
    tasks = [s for s in trace.slices if s.track[-1].startswith("Plane")]
    traces = [orjson.loads(p.read_bytes()) for p in sorted((hccl_rank6 / "hccl_info").glob("*/iter*.trace"))]
    assert len(tasks) == sum(len(t["traceEvents"]) == 19 and len(t["traceEvents"]) for t in traces) == 38
    for trace_file in traces:
        start, end, _ = ops[trace_file["iteration"] - 1]
        for event in trace_file["traceEvents"]:
            ts = round(event["ts"] * 1000)
            match = [t for t in tasks if t.start_ns == ts and t.name == event["name"]]
            assert len(match) == 1 and match[0].track[-1] == f"Plane {event['tid']}"
            assert start <= match[0].start_ns and match[0].start_ns + match[0].dur_ns <= end
    reduce = next(t for t in tasks if t.name == "Reduce Inline")
    assert reduce.args["size"] == 0x2CFE300 and reduce.args["transport type"] == "SDMA"


def test_communication_per_step_equals_mindsporess_hccl_raw(hccl_rank6):
    with open(hccl_rank6 / "hccl_raw_6.csv", newline="") as f:
        cost_ms = {int(r["step_num"]): float(r["communication_cost"]) for r in csv.DictReader(f)
                   if r["step_num"] != "-"}
    rows = overlap_report(hccl_rank6)
    assert [r.step for r in rows] == [1, 2]
    for row in rows:
        assert row.communication_ns / 1e6 == pytest.approx(cost_ms[row.step], rel=0.01)


def test_a_rank_without_host_start_log_says_it_is_not_aligned(hccl_rank6, tmp_path, capsys):
    out = tmp_path / "out.pftrace"
    assert main([str(hccl_rank6), "--strict", "-o", str(out)]) == 0  # a fact about the input, not damage
    assert b"NOT aligned to wall time" in out.read_bytes()  # the rank's process description
    assert "rank 6: times are device SysCnt" in capsys.readouterr().err


def test_step_phases_equal_mindsporess_cluster_analysis(single_device, tmp_path):
    trace = _convert(single_device, tmp_path / "out.pftrace")
    with open(single_device / "ascend_cluster_analyse_data-parallel_1_1_1.csv", newline="") as f:
        row = {k.strip(): int(v) for k, v in next(csv.DictReader(f, skipinitialspace=True)).items()}
    phases = {s.name: s.dur_ns for s in trace.slices if s.track == ("Step Trace", "Steps")}
    assert phases["FP/BP"] == row["fp_and_bp"] * 10 and phases["Tail"] == row["tail"] * 10
    assert row["iteration_interval"] == 0 and "Iteration Interval" not in phases  # FP starts the step


def test_a_folder_with_only_the_step_trace_converts_and_says_compute_is_unknown(hccl_rank6, tmp_path, capsys):
    """A pipeline-parallel job's folder often keeps only the step trace and hccl_raw."""
    folder = tmp_path / "profiler"
    folder.mkdir()
    for name in ("step_trace_raw_6_detail_time.csv", "hccl_raw_6.csv"):
        (folder / name).write_bytes((hccl_rank6 / name).read_bytes())
    with open(hccl_rank6 / "step_trace_raw_6_detail_time.csv", newline="") as f:
        truth = {int(r["step_num"]): r for r in csv.DictReader(f) if r["step_num"] != "-"}
    with open(hccl_rank6 / "hccl_raw_6.csv", newline="") as f:
        costs = {int(r["step_num"]): orjson.loads(r["communication_operator_cost"]) for r in csv.DictReader(f)
                 if r["step_num"] != "-"}
    rows = overlap_report(folder)
    assert [(r.rank, r.step) for r in rows] == [(6, 1), (6, 2)]
    for row in rows:
        op = "stream_24_0_AllReduce-op3143"
        assert row.communication_ns == (int(truth[row.step][f"{op}_end_point"])
                                        - int(truth[row.step][f"{op}_start_point"])) * 10
        assert (row.computing_ns, row.free_ns, row.not_overlapped_ns, row.stage_ns, row.preparing_ns) == (
            None, None, None, None, None)
    trace = _convert(folder, tmp_path / "out.json")
    ops = [s for s in trace.slices if s.track[0] == "Communication"]
    assert [(s.name, s.args["communication cost(ms)"]) for s in ops] == [
        ("AllReduce-op3143", costs[step][op][1]) for step in (1, 2)]
    assert {s.track for s in trace.slices if s.track[0] == "Overlap Analysis"} == {
        ("Overlap Analysis", "Communication")}  # the lanes compute would need are not made up
    assert "step trace only: no device tasks" in capsys.readouterr().err
    assert main(["overlap", str(folder), "--format", "csv"]) == 0
    line = capsys.readouterr().out.splitlines()[1].split(",")
    assert line[:4] == ["6", "", "1", ""] and line[6] == "4540.8"  # Computing empty; Communication
