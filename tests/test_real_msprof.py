"""The msprof reader and overlap analysis against the real 2-rank sample and CANN's own lanes."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import orjson
import pytest

from converters import Diagnostics, Layer, Options, discover, read_profile, step_overlap
from converters.cli import main

CANN_LANES = {
    "Computing": "Computing",
    "Communication": "Communication",
    "Communication(Not Overlapped)": "Communication (not overlapped)",
    "Free": "Free",
}


def _cann_overlap(msprof_file: Path, offset_ns: int) -> dict[str, list[tuple[int, int]]]:
    """CANN's Overlap Analysis lanes of one msprof_* file, in epoch ns, read independently."""
    events = orjson.loads(msprof_file.read_bytes())
    pids = {e["pid"] for e in events if e.get("name") == "process_name"
            and e["args"]["name"] == "Overlap Analysis"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("name") == "thread_name" and e["pid"] in pids}
    lanes: dict[str, list[tuple[int, int]]] = {lane: [] for lane in CANN_LANES.values()}
    for e in events:
        if e.get("ph") == "X" and e["pid"] in pids:
            start = round(e["ts"] * 1000) + offset_ns
            lanes[CANN_LANES[threads[e["pid"], e["tid"]]]].append((start, start + round(e["dur"] * 1000)))
    return {lane: sorted(v) for lane, v in lanes.items()}


def _clock_offset(device_dir: Path) -> int:
    device = device_dir.name.split("_")[1]
    start = orjson.loads((device_dir / f"start_info.{device}").read_bytes())
    return int(start["collectionTimeBegin"]) * 1000 - int(start["clockMonotonicRaw"])


def test_overlap_lanes_equal_canns_own_interval_by_interval(msprof_2rank):
    ranks = discover(msprof_2rank)
    assert [r.rank for r in ranks] == [0, 1]
    compared = 0
    for batch in read_profile(ranks, Options(), Diagnostics()):
        device_dir = next(r.path for r in ranks if r.rank == batch.rank)
        name = f"msprof_{device_dir.name.split('_')[1]}_{batch.graph}_{batch.step_id}.json"
        expected = _cann_overlap(device_dir / "timeline" / name, _clock_offset(device_dir))
        mine = step_overlap(batch).lanes()
        for lane, intervals in expected.items():
            assert len(mine[lane]) == len(intervals), (batch.rank, batch.step_id, lane)
            for (s1, e1), (s2, e2) in zip(mine[lane], intervals, strict=True):
                assert abs(s1 - s2) <= 1000 and abs(e1 - e2) <= 1000, (batch.rank, batch.step_id, lane)
            compared += len(intervals)
    assert compared > 1000


def test_ten_steps_per_rank_from_the_step_trace(msprof_2rank):
    batches = list(read_profile(discover(msprof_2rank), Options(), Diagnostics()))
    per_rank = Counter(b.rank for b in batches if b.step is not None)
    assert per_rank == {0: 10, 1: 10}
    assert all(b.step.start_ns <= s.start_ns for b in batches for s in b.slices if s.layer is Layer.STREAM)


def _input_tasks(msprof_2rank: Path) -> Counter:
    """(rank, lane, name, ts µs) of every device task and HCCL event in the task_time/hccl files."""
    tasks: Counter = Counter()
    for info in msprof_2rank.glob("PROF_*/device_*/info.json.[0-9]"):
        rank = orjson.loads(info.read_bytes())["rank_id"]
        for path in info.parent.glob("timeline/*.json"):
            if not re.match(r"(task_time|hccl)_", path.name):
                continue
            for e in orjson.loads(path.read_bytes()):
                if e.get("ph") == "X":
                    tasks[rank, e["name"], round(e["dur"] * 1000)] += 1
    return tasks


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_detail_holds_every_device_and_hccl_task_exactly_once(msprof_2rank, tmp_path, suffix):
    from trace_check import read_chrome_json, read_perfetto

    out = tmp_path / f"job{suffix}"
    assert main([str(msprof_2rank), "--kind", "detail", "-o", str(out)]) == 0
    decoded = (read_perfetto if suffix == ".pftrace" else read_chrome_json)(out.read_bytes())
    written: Counter = Counter()
    for s in decoded.slices:
        if s.track[0] in ("Ascend Hardware", "Communication"):
            rank = int(s.process.split()[1])
            written[rank, s.name, s.dur_ns] += 1
    assert written == _input_tasks(msprof_2rank)


def test_unknown_graph_is_a_usage_error_listing_the_graphs(msprof_2rank, capsys):
    assert main([str(msprof_2rank), "--graphs", "7", "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "unknown graph 7" in err and "0,2" in err
