"""The MindSpore 1.x reader against generated legacy profiles, every variant of the layout."""

from __future__ import annotations

import csv
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from trace_check import comparable, read_chrome_json, read_perfetto

from converters import Diagnostics, Kind, Options, discover, overlap_report, read_profile
from converters.cli import main
from converters.readers.mindspore1x import ms_to_ns
from fixtures import vendor_intervals as vi
from fixtures.mindspore1x_gen import write_mindspore1x_profile


def _convert(profile: Path, out: Path, *args: str):
    assert main([str(profile), "--kind", "detail", "--max-size", "0", "-o", str(out), *args]) == 0
    data = out.read_bytes()
    return read_perfetto(data) if out.suffix == ".pftrace" else read_chrome_json(data)


def _timeline_rows(folder: Path, file_id: int) -> list[tuple[str, int, int, int]]:
    """(full name, stream, start ns, dur ns) of output_timeline_data, read independently."""
    lines = (folder / f"output_timeline_data_{file_id}.txt").read_text().splitlines()[1:]
    rows = []
    for line in lines:
        name, stream, start, dur = line.split(",")
        rows.append((name, int(stream), int(Decimal(start) * 10**6), int(Decimal(dur) * 10**6)))
    return rows


@pytest.mark.parametrize("layout", ["shared", "per-rank"])
def test_every_record_once_and_ranks_aligned_through_host_start_log(out_dir, tmp_path, layout):
    gen = write_mindspore1x_profile(tmp_path, ranks=3, steps=3, ops_per_step=30, streams=3, comm_ops=2,
                                    planes=3, layout=layout, seed=2)
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    assert trace.processes == ["Rank 0", "Rank 1", "Rank 2"]
    for rank in gen.ranks:
        mine = [s for s in trace.slices if s.process == f"Rank {rank.rank}"]
        lanes = Counter(s.track for s in mine)
        device = sum(n for t, n in lanes.items() if t[0] == "Ascend Hardware" and t[1] != "AI CPU")
        assert device == rank.device_ops
        assert lanes["Ascend Hardware", "AI CPU"] == rank.aicpu_ops
        assert sum(n for t, n in lanes.items() if t[-1].startswith("Plane")) == rank.hccl_tasks
        ops = sorted((s.start_ns, s.start_ns + s.dur_ns) for s in mine
                     if s.track[0] == "Communication" and not s.track[-1].startswith("Plane"))
        assert ops == sorted((a + rank.epoch_offset_ns, b + rank.epoch_offset_ns)
                             for _, _, a, b in rank.comm_op_bounds_ns)
        steps = sorted((s.start_ns, s.dur_ns) for s in mine if s.name.startswith("Step "))
        assert steps == [(a + rank.epoch_offset_ns, b - a) for _, a, b in rank.step_bounds_ns]
        ops_in = Counter((s.name, s.track[-1], s.dur_ns) for s in mine
                         if s.track[0] == "Ascend Hardware" and s.track[-1] != "AI CPU")
        rows = _timeline_rows(rank.folder, rank.file_id)
        assert ops_in == Counter((name.split("/")[-1], f"Stream {stream}", dur)
                                 for name, stream, _, dur in rows)
    first_steps = [min(s.start_ns for s in trace.slices
                       if s.process == f"Rank {r.rank}" and s.name == "Step 1") for r in gen.ranks]
    assert max(first_steps) - min(first_steps) < 5_000  # SysCnt bases 10^4 s apart, aligned in epoch


def test_both_writers_yield_the_same_slices(out_dir, tmp_path):
    write_mindspore1x_profile(tmp_path, ranks=2, steps=2, seed=3)
    assert comparable(_convert(tmp_path, out_dir / "a.pftrace")) == comparable(
        _convert(tmp_path, out_dir / "a.json"))


@pytest.mark.parametrize("framework_layout", ["1.0", "2.0", "2024"])
def test_framework_raw_gives_every_op_its_type_and_full_name(out_dir, tmp_path, framework_layout):
    write_mindspore1x_profile(tmp_path, ranks=1, steps=1, framework_layout=framework_layout, seed=4)
    folder = tmp_path / "profiler"
    with open(next(folder.glob("framework_raw_*.csv")), newline="") as f:
        rows = list(csv.DictReader(f))
    types = {r.get("full_op_name") or r["full_kernel_name"]: r.get("op_type") or r["kernel_type"]
             for r in rows}
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    device = [s for s in trace.slices if s.track[0] == "Ascend Hardware" and s.track[-1] != "AI CPU"]
    assert device and all(types[s.args["fullname"]] == s.args["type"] for s in device)
    assert all(s.args["fullname"].endswith("/" + s.name) for s in device)


@pytest.mark.parametrize("aicpu", ["csv", "txt"])
def test_ai_cpu_ops_from_either_file(out_dir, tmp_path, aicpu):
    gen = write_mindspore1x_profile(tmp_path, ranks=1, steps=2, aicpu=aicpu, seed=5)
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    cpu = [s for s in trace.slices if s.track == ("Ascend Hardware", "AI CPU")]
    assert len(cpu) == gen.ranks[0].aicpu_ops > 0
    assert any(s.name == "InitData" for s in cpu)


@pytest.mark.parametrize("comm_in_timeline", [False, True])
def test_overlap_of_compute_and_the_step_traces_communication_ops(tmp_path, comm_in_timeline):
    gen = write_mindspore1x_profile(tmp_path, ranks=2, steps=3, comm_ops=3, comm_in_timeline=comm_in_timeline,
                                    seed=6)
    rows = {(r.rank, r.step): r for r in overlap_report(tmp_path)}
    for rank in gen.ranks:
        offset = rank.epoch_offset_ns
        compute = [(start + offset, start + dur + offset)
                   for name, _, start, dur in _timeline_rows(rank.folder, rank.file_id)
                   if not any(kind in name for kind in ("AllReduce", "AllGather", "ReduceScatter"))]
        for step, start, _ in rank.step_bounds_ns:
            following = [b for s, b, _ in rank.step_bounds_ns if s == step + 1]
            until = following[0] + offset if following else None
            mine = [c for c in compute if start + offset <= c[0] and (until is None or c[0] < until)]
            comm = [(a + offset, b + offset) for s, _, a, b in rank.comm_op_bounds_ns if s == step]
            row = rows[rank.rank, step]
            assert row.communication_ns == vi.total(vi.union(comm))
            computed = vi.union(mine + _aicpu(rank, step, start + offset, until))
            assert row.computing_ns == vi.total(computed)
            assert row.not_overlapped_ns == vi.total(vi.subtract(vi.union(comm), computed))


def _aicpu(rank, step: int, start: int, until: int | None) -> list[tuple[int, int]]:
    with open(rank.folder / f"aicpu_intermediate_{rank.file_id}.csv", newline="") as f:
        spans = [(int(Decimal(r["run_start"]) * 1000) + rank.epoch_offset_ns,
                  int(Decimal(r["run_end"]) * 1000) + rank.epoch_offset_ns) for r in csv.DictReader(f)]
    return [s for s in spans if start <= s[0] and (until is None or s[0] < until)]


def test_without_host_start_log_each_rank_keeps_its_own_clock_and_says_so(out_dir, tmp_path, capsys):
    gen = write_mindspore1x_profile(tmp_path, ranks=2, steps=2, host_start=False, seed=7)
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    for rank in gen.ranks:
        steps = sorted(s.start_ns for s in trace.slices if s.process == f"Rank {rank.rank}"
                       and s.name.startswith("Step "))
        assert steps == [a for _, a, _ in rank.step_bounds_ns]  # the SysCnt ns, untouched
    err = capsys.readouterr().err
    assert "rank 0-1: times are device SysCnt" in err and "NOT aligned" in err


def test_one_line_traces_with_hex_sizes(out_dir, tmp_path):
    gen = write_mindspore1x_profile(tmp_path, ranks=2, steps=2, hccl_one_line=True, seed=8)
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    tasks = [s for s in trace.slices if s.track[-1].startswith("Plane")]
    assert len(tasks) == sum(r.hccl_tasks for r in gen.ranks)
    data = [s for s in tasks if s.name in ("Memcpy", "Reduce Inline")]
    assert data and all(isinstance(s.args["size"], int) and s.args["size"] > 0 for s in data)


def test_summary_reads_no_hccl_task_and_steps_filter(tmp_path):
    write_mindspore1x_profile(tmp_path, ranks=2, steps=4, seed=9)
    ranks = discover(tmp_path)
    summary = list(read_profile(ranks, Options(kind=Kind.SUMMARY, steps=frozenset({2, 3})), Diagnostics()))
    assert sorted({b.step_id for b in summary}) == [2, 3]
    assert not any(s.layer.value == "HCCL" for b in summary for s in b.slices)
    assert all(s.args is None for b in summary for s in b.slices if s.layer.value == "Ascend Hardware")


def test_a_cut_off_timeline_converts_up_to_its_last_whole_row(out_dir, tmp_path, capsys):
    gen = write_mindspore1x_profile(tmp_path, ranks=1, steps=2, seed=10)
    path = gen.ranks[0].folder / f"output_timeline_data_{gen.ranks[0].file_id}.txt"
    data = path.read_bytes()
    path.write_bytes(data[:-3])  # inside the last row's duration: it would parse, wrongly
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    device = [s for s in trace.slices if s.track[0] == "Ascend Hardware" and s.track[-1] != "AI CPU"]
    assert len(device) == gen.ranks[0].device_ops - 1
    assert f"{path}: line {gen.ranks[0].device_ops + 1} is cut off" in capsys.readouterr().err


@given(ticks=st.integers(0, 10**16), zeros=st.booleans())
def test_ms_text_converts_to_the_exact_ns(ticks, zeros):
    """Whatever the SysCnt value, ``str(ticks / 1e5)`` as MindSpore writes it, or the exact decimal."""
    text = f"{Decimal(ticks) / 100_000:f}" if zeros or ticks >= 10**15 else str(ticks / 1e5)
    assert ms_to_ns(text) == int(Decimal(text) * 1_000_000)
    if ticks < 10**15:
        assert ms_to_ns(str(ticks / 1e5)) == ticks * 10


def test_a_single_rank_folder_owns_its_hccl_traces_whatever_their_device(tmp_path):
    gen = write_mindspore1x_profile(tmp_path, ranks=1, steps=2, seed=11)
    hccl = gen.ranks[0].folder / "hccl_info"
    for op_dir in list(hccl.iterdir()):  # rank 0 ran on device 4 (file suffix: rank, since 1.6)
        op_dir.rename(hccl / f"{op_dir.name}_dev4")
    ranks = discover(tmp_path)
    assert [r.rank for r in ranks] == [gen.ranks[0].file_id]
    tasks = [s for b in read_profile(ranks, Options(kind=Kind.DETAIL), Diagnostics()) for s in b.slices
             if s.layer.value == "HCCL"]
    assert len(tasks) == gen.ranks[0].hccl_tasks


def test_step_trace_with_the_points_first_and_parallel_names(tmp_path):
    """The other layout (mindinsight ``step_trace_raw_10``): start/end pairs only, named by stream."""
    folder = tmp_path / "profiler"
    folder.mkdir()
    (folder / "step_trace_raw_10_detail_time.csv").write_text(
        "step_num,start_point,end_point,total,fp_point,bp_point,iteration_interval,fp_and_bp,tail,"
        "stream_10_parallel_0_start_point,stream_10_parallel_0_end_point\n"
        "1,1000,2000,1000,1100,1800,100,700,200,1500,1900\n"
        "-,1000,2000,1000,1100,1800,100,700,200,1500,1900\n")
    (folder / "output_timeline_data_10.txt").write_text(
        "op_name, stream_id, start_time(ms), duration(ms)\nDefault/MatMul-op1,5,0.011,0.004\n")
    [batch] = read_profile(discover(tmp_path), Options(kind=Kind.DETAIL), Diagnostics())
    ops = [(s.lane, s.name, s.start_ns, s.dur_ns) for s in batch.slices if s.layer.value == "Communication"]
    assert ops == [("Stream 10", "parallel_0", 15_000, 4_000)]
    phases = {s.name: (s.start_ns, s.dur_ns) for s in batch.slices if s.layer.value == "Step Trace"}
    assert phases == {"Step 1": (10_000, 10_000), "Iteration Interval": (10_000, 1_000),
                      "FP/BP": (11_000, 7_000), "Tail": (18_000, 2_000)}
    assert [(s.name, s.start_ns, s.dur_ns) for s in batch.slices if s.layer.value == "Ascend Hardware"] == [
        ("MatMul-op1", 11_000, 4_000)]


def test_ranks_with_only_their_step_trace_give_steps_ops_and_no_made_up_compute(tmp_path):
    write_mindspore1x_profile(tmp_path, ranks=4, steps=3, ops_per_step=20, seed=9)
    folder = tmp_path / "profiler"
    for path in list(folder.rglob("*")):
        if path.is_file() and not path.name.startswith(("step_trace_raw_", "host_start")):
            path.unlink()
    expected = {}  # (rank, step) -> total ns of its ops' column pairs, read with csv alone
    for rank in range(4):
        with open(folder / f"step_trace_raw_{rank}_detail_time.csv", newline="") as f:
            for row in csv.DictReader(f):
                if row["step_num"] in ("-", "0") or row["start_point"] == "0":
                    continue
                pairs = [(int(row[c]), int(row[c[: -len("start_point")] + "end_point"]))
                         for c in row if c.endswith("_start_point") and c != "start_point"]
                ticks = vi.union([(a * 10, b * 10) for a, b in pairs])
                expected[rank, int(row["step_num"])] = vi.total(ticks)
    rows = overlap_report(folder)
    assert {(r.rank, r.step): r.communication_ns for r in rows} == expected
    assert all(r.computing_ns is None and r.free_ns is None for r in rows)
    assert any(v > 0 for v in expected.values())
