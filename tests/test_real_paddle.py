"""The Paddle reader against real Paddle 3.3.1 profiler output (CPU), in both export forms, and
against the summary Paddle printed for the same run (``summary.txt``)."""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import real_data

from converters import Diagnostics, Layer, Options, convert, discover, read_profile
from converters.intervals import union
from converters.readers import paddle_nodetree_pb2 as pb

PHASES = ("Dataloader", "Forward", "Backward", "Optimization")


def _file(sample: str) -> Path:
    (path,) = [p for p in real_data(sample).iterdir() if ".paddle_trace." in p.name]
    return path


def _records(path: Path, kind: str = "detail") -> list:
    return list(read_profile(discover(path), Options(kind=kind), Diagnostics()))


def _model_summary(path: Path) -> dict[str, float]:
    """Paddle's "Model Summary" table: CPU total (ms) per phase."""
    text = path.read_text()
    table = text[text.index("Model Summary"):]
    found = {}
    for name in ("ProfileStep", *PHASES):
        match = re.search(rf"^\s*{name}\s+\d+\s+([\d.]+) /", table, re.MULTILINE)
        found[name] = float(match[1])
    return found


@pytest.mark.parametrize("sample", ["paddle-cpu-chrome", "paddle-cpu-protobuf"])
@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_phase_totals_equal_paddles_own_model_summary(sample, kind):
    expected = _model_summary(real_data(sample) / "summary.txt")
    batches = _records(real_data(sample), kind)
    lanes: dict[str, list] = {name: [] for name in ("Steps", *PHASES)}
    for batch in batches:
        for s in batch.slices:
            if s.layer is Layer.STEP:
                lanes[s.lane].append((s.start_ns, s.end_ns))
    assert {b.step_id for b in batches} == {3, 4, 5, 6, 7}
    totals = {lane: sum(end - start for start, end in union(v)) / 1e6 for lane, v in lanes.items()}
    assert totals.pop("Steps") == pytest.approx(expected.pop("ProfileStep"), rel=0.01)
    for phase, ms in expected.items():
        assert totals[phase] == pytest.approx(ms, rel=0.01, abs=0.006), phase  # the table rounds to 0.01 ms


def test_every_event_of_the_json_export_is_drawn_once_at_its_exact_start():
    """This run lasted 19 ms: every start_time (float32 µs) is exact to the ns and agrees with ts."""
    path = _file("paddle-cpu-chrome")
    events = json.loads(path.read_text(), parse_float=Decimal)["traceEvents"]
    expected = Counter()
    for e in events:
        if e.get("ph") == "X":
            name = re.sub(r"\[[^\]]*\]$", "", e["name"])
            name = f"Step {name[12:]}" if name.startswith("ProfileStep#") else name
            start = int(Decimal(e["args"]["start_time"].removesuffix(" us")) * 1000)
            expected[name, start] += 1
    (rank,) = discover(path)
    drawn = Counter((s.name, s.start_ns - rank.clock_offset_ns) for b in _records(path) for s in b.slices
                    if s.layer is not Layer.OVERLAP)
    assert drawn == expected and sum(expected.values()) == 530
    # the offset is the epoch of start_time zero: each ts is it plus start_time, cut to the µs
    first = next(e for e in events if e.get("ph") == "X")
    start_ns = rank.clock_offset_ns + int(Decimal(first["args"]["start_time"].removesuffix(" us")) * 1000)
    assert 0 <= start_ns - first["ts"] * 1000 < 1000


def test_every_node_of_the_protobuf_export_is_drawn_once_at_its_exact_start():
    path = _file("paddle-cpu-protobuf")
    trees = pb.NodeTreesProto.FromString(path.read_bytes())
    expected = Counter()
    for tree in trees.thread_trees:
        for node in tree.host_nodes:
            event = node.host_trace_event
            if event.name == "root node":
                continue
            name = f"Step {event.name[12:]}" if event.name.startswith("ProfileStep#") else event.name
            expected[name, event.start_ns, event.end_ns - event.start_ns] += 1
    drawn = Counter((s.name, s.start_ns, s.dur_ns) for b in _records(path) for s in b.slices
                    if s.layer is not Layer.OVERLAP)
    assert drawn == expected and sum(expected.values()) == 530


def test_both_export_forms_draw_the_same_lanes():
    lanes = []
    for sample in ("paddle-cpu-chrome", "paddle-cpu-protobuf"):
        slices = [s for b in _records(real_data(sample)) for s in b.slices]
        found = {(s.layer, re.sub(r"\d+", "N", s.lane)) for s in slices}
        lanes.append(found)
    assert lanes[0] == lanes[1]
    assert (Layer.HOST, "thread N:MainThread(C++)") in lanes[0]


def test_a_cpu_run_has_no_device_activity_and_says_so():
    batches = _records(real_data("paddle-cpu-chrome"), "summary")
    assert batches and not any(b.has_device for b in batches)


def test_a_protobuf_export_cut_off_by_a_crash_converts_its_whole_nodes_with_a_warning(tmp_path):
    data = _file("paddle-cpu-protobuf").read_bytes()
    cut = tmp_path / "host_xpid_1_time_2026_01_01_00_00_00_000000.paddle_trace.pb"
    cut.write_bytes(data[: len(data) // 2])
    result = convert(cut, tmp_path / "out.pftrace", kind="detail", max_bytes=None)
    assert 100 < result.slices < 530
    assert any("cut off" in w for w in result.warnings)


def test_ranks_come_from_worker_names_else_one_per_file_in_name_order(tmp_path):
    source = _file("paddle-cpu-chrome")
    named = tmp_path / "named"
    named.mkdir()
    for rank in (3, 1):
        shutil.copy(source, named / f"worker_rank{rank}_time_x.paddle_trace.json")
    assert [r.rank for r in discover(named)] == [1, 3]
    plain = tmp_path / "plain"
    plain.mkdir()
    for name in ("b", "a"):
        shutil.copy(source, plain / f"host_{name}pid_1_time_x.paddle_trace.json")
    diag = Diagnostics()
    assert [(r.rank, r.host) for r in discover(plain, diag)] == [(0, "a"), (1, "b")]
    assert any("name order" in note for note in diag.notes.values())
