"""The ascend_pt reader (torch_npu / MindSpore >= 2.3) against the real 2-rank sample."""

from __future__ import annotations

import csv
import re
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from conftest import real_data
from trace_check import read_perfetto

from converters import Diagnostics, Layer, Options, discover, overlap_report, read_profile, step_overlap
from converters.cli import main

LANES = {"Computing": "Computing", "Communication": "Communication",
         "Communication(Not Overlapped)": "Communication (not overlapped)", "Free": "Free"}


def _ns(us: str | float) -> int:
    return int(Decimal(str(us)) * 1000)


def _vendor_overlap(rank_dir: Path) -> dict[str, list[tuple[int, int]]]:
    """torch_npu's own Overlap Analysis lanes in trace_view.json, read independently."""
    events = orjson.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
    pid = next(e["pid"] for e in events if e.get("name") == "process_name"
               and e["args"]["name"] == "Overlap Analysis")
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e.get("name") == "thread_name" and e["pid"] == pid}
    lanes: dict[str, list[tuple[int, int]]] = {lane: [] for lane in LANES.values()}
    for e in events:
        if e.get("ph") == "X" and e["pid"] == pid:
            start = _ns(e["ts"])
            lanes[LANES[threads[e["tid"]]]].append((start, start + _ns(e["dur"])))
    return {lane: sorted(v) for lane, v in lanes.items()}


@pytest.fixture
def sample() -> Path:
    return real_data("ascend-pt-2rank")


def test_ranks_and_steps_from_profiler_info_and_profiler_steps(sample):
    ranks = discover(sample)
    assert [(r.rank, r.format) for r in ranks] == [(0, "ascend_pt"), (1, "ascend_pt")]
    batches = list(read_profile(ranks, Options(), Diagnostics()))
    assert [(b.rank, b.step_id) for b in batches] == [(0, 50), (1, 50)]


def test_overlap_lanes_equal_the_vendors_interval_by_interval(sample):
    ranks = discover(sample)
    for batch in read_profile(ranks, Options(), Diagnostics()):
        expected = _vendor_overlap(next(r.path for r in ranks if r.rank == batch.rank))
        mine = step_overlap(batch).lanes()
        for lane, intervals in expected.items():
            assert len(mine[lane]) == len(intervals), (batch.rank, lane)
            for (s1, e1), (s2, e2) in zip(mine[lane], intervals, strict=True):
                assert abs(s1 - s2) <= 1000 and abs(e1 - e2) <= 1000, (batch.rank, lane, s1, s2)


@pytest.fixture
def kernel_details_only(sample, tmp_path) -> Path:
    """The real sample without trace_view.json, as profiles often come (it is large)."""
    import shutil

    copy = tmp_path / "no_trace_view"
    shutil.copytree(sample, copy, ignore=shutil.ignore_patterns("trace_view.json"))
    return copy


@pytest.mark.parametrize("source", ["trace_view", "kernel_details"])
def test_step_totals_match_step_trace_time_csv(sample, kernel_details_only, source):
    ranks = discover(sample if source == "trace_view" else kernel_details_only)
    for batch in read_profile(ranks, Options(), Diagnostics()):
        rank_dir = sample / next(r.path for r in ranks if r.rank == batch.rank).name
        with open(rank_dir / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
            row = next(r for r in csv.DictReader(f) if r["Step"] == str(batch.step_id))
        o = step_overlap(batch)
        mine = {"Computing": o.computing_ns, "Communication(Not Overlapped)": o.not_overlapped_ns,
                "Overlapped": o.overlapped_ns, "Communication": o.communication_ns, "Free": o.free_ns}
        for column, value_ns in mine.items():
            expected_ns = float(row[column]) * 1000
            assert abs(value_ns - expected_ns) <= max(0.001 * expected_ns, 1000), (batch.rank, column)


def test_detail_holds_every_device_and_hccl_task_once(sample, tmp_path):
    out = tmp_path / "pt.pftrace"
    assert main([str(sample), "--kind", "detail", "-o", str(out)]) == 0
    decoded = read_perfetto(out.read_bytes())
    expected = 0
    for rank_dir in sorted(sample.glob("*_ascend_pt")):
        events = orjson.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
        names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
        expected += sum(1 for e in events if e.get("ph") == "X"
                        and names.get(e["pid"]) in ("Ascend Hardware", "HCCL"))
    written = sum(1 for s in decoded.slices if s.track[0] in ("Ascend Hardware", "Communication"))
    assert written == expected
    layers = {s.track[0] for s in decoded.slices}
    assert {"Step Trace", "Overlap Analysis", "Ascend Hardware", "Communication", "Host"} <= layers


def test_string_timestamps_are_exact_to_the_ns(sample):
    ranks = discover(sample)
    batch = next(iter(read_profile(ranks[:1], Options(kind="detail"), Diagnostics())))
    starts = {s.start_ns for s in batch.slices if s.layer is Layer.STREAM}
    assert 1736408883704643212 in starts  # "1736408883704643.212", the first TransData task


def test_a_trace_view_cut_off_by_a_crash_converts_with_one_warning(sample, tmp_path, capsys):
    import shutil

    copy = tmp_path / "crashed"
    shutil.copytree(sample, copy)
    victim = copy / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    victim.chmod(0o644)
    data = victim.read_bytes()
    victim.write_bytes(data[: int(len(data) * 0.8)])
    out = tmp_path / "out.pftrace"
    assert main([str(copy), "--kind", "detail", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("cut off at byte") == 1 and "trace_view.json" in err and "more like it" not in err
    assert [p.split()[1] for p in read_perfetto(out.read_bytes()).processes] == ["0", "1"]


def test_kernel_details_alone_give_every_kernel_and_communication_op(kernel_details_only, tmp_path):
    ranks = discover(kernel_details_only)
    assert [r.source_paths[0].name for r in ranks] == ["kernel_details.csv"] * 2
    out = tmp_path / "kd.json"
    assert main([str(kernel_details_only), "--kind", "detail", "-o", str(out)]) == 0
    from trace_check import read_chrome_json

    decoded = read_chrome_json(out.read_bytes())
    rows = 0
    for rank_dir in sorted(kernel_details_only.glob("*_ascend_pt")):
        with open(rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="") as f:
            rows += sum(1 for _ in csv.DictReader(f))
    assert sum(1 for s in decoded.slices if s.track[0] in ("Ascend Hardware", "Communication")) == rows
    assert {s.name for s in decoded.slices if s.track[0] == "Step Trace"} == {"Step 50"}


def test_two_runs_of_one_rank_keep_the_newer_with_a_warning(sample, tmp_path, capsys):
    import shutil

    job = tmp_path / "job"
    shutil.copytree(sample, job)
    older = job / "rank0_old_ascend_pt"
    shutil.copytree(job / "rank0_ascend_pt", older)
    info = older / "profiler_info_0.json"
    info.chmod(0o644)
    data = orjson.loads(info.read_bytes())
    data["end_info"]["collectionTimeEnd"] -= 3_600_000_000_000  # an hour earlier
    info.write_bytes(orjson.dumps(data))
    ranks = discover(job)
    assert [r.path.name for r in ranks] == ["rank0_ascend_pt", "rank1_ascend_pt"]
    assert main([str(job), "-o", str(tmp_path / "x.pftrace")]) == 0
    assert "rank 0 is in" in capsys.readouterr().err
    data["end_info"]["collectionTimeEnd"] += 3_600_000_000_000  # the same run twice: an error
    info.write_bytes(orjson.dumps(data))
    assert main([str(job), "-o", str(tmp_path / "x.pftrace")]) == 1
    assert "rank 0 is also claimed by" in capsys.readouterr().err


def test_counters_become_counter_tracks_in_detail_only(sample, tmp_path):
    from trace_check import read_chrome_json

    expected = 0
    for rank_dir in sorted(sample.glob("*_ascend_pt")):
        events = orjson.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
        expected += sum(isinstance(v, (int, float)) for e in events if e.get("ph") == "C"
                        for v in e["args"].values())
    proto, js = tmp_path / "c.pftrace", tmp_path / "c.json"
    for out in (proto, js):
        assert main([str(sample), "--kind", "detail", "--max-size", "0", "-o", str(out)]) == 0
    in_proto = read_perfetto(proto.read_bytes()).counters
    in_json = read_chrome_json(js.read_bytes()).counters
    # trace_view.json's counters; the memory files' apart: memory_record.csv's in their group,
    # npu_module_mem.csv's as the database's module memory lanes
    assert {path[0] for _, path, _, _ in in_proto} == {"Counters", "Memory"}
    in_proto = [c for c in in_proto if c[1][0] == "Counters" and not c[1][1].startswith("Module memory/")]
    in_json = [c for c in in_json if not c[1][0].startswith(("Memory ", "Module memory/"))]
    assert len(in_proto) == len(in_json) == expected > 1000
    assert any(path[1] == "HBM 0/Read [Read(MB/s)]" for _, path, _, _ in in_proto)
    summary = tmp_path / "s.pftrace"
    assert main([str(sample), "-o", str(summary)]) == 0
    assert not read_perfetto(summary.read_bytes()).counters


def test_flows_become_arrows_between_the_slices_they_bind(sample, tmp_path, capsys):
    from collections import Counter

    from trace_check import read_chrome_json

    arrows = backwards_events = finishes = unended = 0
    op_starts: dict[str, set[str]] = {}  # each collective's start on each rank
    for rank_dir in sorted(sample.glob("*_ascend_pt")):
        events = orjson.loads((rank_dir / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
        for e in events:
            if e.get("ph") == "X" and e["name"].startswith("hcom_"):
                op_starts.setdefault(e["name"], set()).add(e["ts"])
        ends = Counter((e["cat"], e["id"], e["ph"]) for e in events if e.get("ph") in ("s", "f"))
        arrows += sum(n for (cat, flow, ph), n in ends.items() if ph == "f" and (cat, flow, "s") in ends)
        finishes += sum(n for (_, _, ph), n in ends.items() if ph == "f")
        unended += sum(n for (cat, flow, ph), n in ends.items() if ph == "s" and (cat, flow, "f") not in ends)
        starts = {(e["cat"], e["id"]): float(e["ts"]) for e in events if e.get("ph") == "s"}
        backwards_events += sum(1 for e in events if e.get("ph") == "f" and float(e["ts"]) < starts.get(
            (e["cat"], e["id"]), float("-inf")))
    proto, js = tmp_path / "f.pftrace", tmp_path / "f.json"
    for out in (proto, js):
        assert main([str(sample), "--kind", "detail", "-o", str(out)]) == 0
    # arrows that would run backwards (clock skew: 72 end events lie before their start) are said
    err = capsys.readouterr().err
    said = re.findall(r"(\d+) arrows whose end begins before", err)
    assert len(said) == 4  # each rank, each output
    backwards = sum(map(int, said)) // 2
    assert 0 < backwards <= backwards_events
    arrows -= backwards
    # every flow event is drawn or counted: each end joins a start (an arrow drawn, or one left out
    # backwards), and each start is joined (a start may have two ends): no flow event made no arrow
    assert "made no arrow" not in err and unended == 0
    assert finishes == arrows + backwards
    # and one arrow per collective from the rank that came first to the one that came last
    arrows += sum(len(starts) == 2 for starts in op_starts.values())
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    trace = pb.Trace()
    trace.ParseFromString(proto.read_bytes())
    read_perfetto(proto.read_bytes())  # every flow id starts once and ends once, on slices
    assert sum(len(p.track_event.flow_ids) for p in trace.packet) == arrows > 600
    events = orjson.loads(js.read_bytes())
    read_chrome_json(js.read_bytes())
    assert sum(1 for e in events if e.get("ph") == "f") == arrows


@pytest.mark.parametrize("source", ["trace_view", "kernel_details"])
def test_overlap_command_csv_equals_step_trace_time_column_by_column(sample, kernel_details_only, source,
                                                                     capsys):
    import io

    root = sample if source == "trace_view" else kernel_details_only
    assert main(["overlap", str(root), "--format", "csv"]) == 0
    mine = {(r["Rank"], r["Step"]): r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    for rank in (0, 1):
        path = sample / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv"
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                ours = mine[str(rank), row["Step"]]
                for column, value in row.items():
                    # kernel_details.csv has no host step start, so no Preparing time either
                    if column != "Step" and not (column == "Preparing" and source == "kernel_details"):
                        assert float(ours[column]) == pytest.approx(float(value), rel=1e-3, abs=1), column


@pytest.fixture
def host_only() -> Path:
    """MindSpore 2.10 on a CPU: processes "CPU OP" and "Scope Layer", ``ts`` and ``dur`` strings."""
    return real_data("mindspore-cpu") / "graph-legacy-Profiler"


def test_a_host_only_trace_is_drawn_event_by_event_on_lanes_named_after_its_processes(host_only, tmp_path):
    (trace,) = host_only.glob("*_ascend_ms/ASCEND_PROFILER_OUTPUT/trace_view.json")
    events = orjson.loads(trace.read_bytes())
    processes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    expected = sorted((f"{processes[e['pid']]} / {threads.get((e['pid'], e['tid']), e['tid'])}", e["name"],
                       _ns(e["ts"]), _ns(e["dur"])) for e in events if e["ph"] == "X")
    (batch,) = read_profile(discover(host_only), Options(kind="detail"), diag := Diagnostics())
    assert not diag and not batch.has_device and batch.step_id is None
    assert sorted((s.lane, s.name, s.start_ns, s.dur_ns) for s in batch.slices) == expected
    assert {s.layer for s in batch.slices} == {Layer.HOST} and len(expected) == 537
    out = tmp_path / "cpu.pftrace"
    assert main([str(host_only), "--kind", "detail", "-o", str(out)]) == 0
    assert len(read_perfetto(out.read_bytes()).slices) == 537


def test_a_host_only_trace_in_summary_says_what_it_left_out_and_knows_no_device_figure(host_only):
    (row,) = overlap_report(host_only, diag=(diag := Diagnostics()))
    assert (row.computing_ns, row.free_ns, row.stage_ns, row.preparing_ns) == (None, None, None, None)
    (message,) = diag.messages()
    assert "trace_view.json: 537 events of processes CPU OP, Scope Layer were not read: " in message
