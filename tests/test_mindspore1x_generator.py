"""The MindSpore 1.x fixture generator writes what docs/formats.md §2 and the real samples describe."""

from __future__ import annotations

import csv
import gc
import io
import json
import os
import re
import tracemalloc
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

import pytest

from fixtures.mindspore1x_gen import (
    HCCL_EVENT_KEYS,
    GeneratedLegacyProfile,
    GeneratedLegacyRank,
    main,
    write_mindspore1x_profile,
)

ARGS = dict(ranks=2, steps=3, ops_per_step=200, streams=3, comm_ops=3, planes=2, seed=5)
STEP_HEADER = ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point",
               "iteration_interval", "fp_and_bp", "tail"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> GeneratedLegacyProfile:
    return write_mindspore1x_profile(tmp_path_factory.mktemp("shared"), **ARGS)


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory) -> GeneratedLegacyProfile:
    return write_mindspore1x_profile(tmp_path_factory.mktemp("per_rank"), layout="per-rank",
                                     framework_layout="2024", aicpu="txt", hccl_one_line=True,
                                     comm_in_timeline=True, **ARGS)


def _ticks(ms: str, scale: int = 10**5) -> int:
    value = Decimal(ms) * scale
    assert value == value.to_integral_value(), ms
    return int(value)


def _timeline(rank: GeneratedLegacyRank) -> list[tuple[str, int, int, int]]:
    """(name, stream, start ticks, duration ticks) per row."""
    lines = (rank.folder / f"output_timeline_data_{rank.file_id}.txt").read_text().splitlines()
    assert lines[0] == "op_name, stream_id, start_time(ms), duration(ms)"
    rows = []
    for line in lines[1:]:
        name, sid, start, dur = line.split(",")
        rows.append((name, int(sid), _ticks(start), _ticks(dur)))
    return rows


def _step_trace(rank: GeneratedLegacyRank) -> tuple[list[str], list[list[str]]]:
    path = rank.folder / f"step_trace_raw_{rank.file_id}_detail_time.csv"
    raw = path.read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n")  # csv.writer: CRLF
    rows = list(csv.reader(io.StringIO(raw.decode())))
    return rows[0], rows[1:]


def _traces(rank: GeneratedLegacyRank) -> dict[tuple[str, int], Path]:
    root = rank.folder / "hccl_info"
    return {(d, int(p.stem[4:])): p for d in rank.hccl_dirs for p in (root / d).glob("iter*.trace")}


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_file_sets_per_layout(shared, per_rank):
    names = {p.name for p in (shared.root / "profiler").iterdir()}
    per_id = ["output_timeline_data_{}.txt", "framework_raw_{}.csv", "aicpu_intermediate_{}.csv",
              "step_trace_raw_{}_detail_time.csv", "host_start.log.{}", "min_cycle_counter_{}.txt",
              "ascend_timeline_summary_{}.json", "output_op_compute_time_{}.txt", "minddata_aicpu_{}.txt"]
    expected = {f.format(i) for f in per_id for i in (0, 1)}
    assert names == expected | {"hccl_info", "step_trace_point_info.json"}
    assert [r.file_id for r in shared.ranks] == [0, 1]
    assert all(r.folder == shared.root / "profiler" for r in shared.ranks)
    hccl = {p.name for p in (shared.root / "profiler" / "hccl_info").iterdir()}
    dirs = ("allReduce_1_1", "allReduce_2_1", "allGather_1_1")
    assert hccl == {f"{d}_dev{i}" for d in dirs for i in (0, 1)}
    for rank in per_rank.ranks:
        assert rank.folder == per_rank.root / f"rank_{rank.rank}" / "profiler"
        assert (rank.folder / f"output_data_preprocess_aicpu_{rank.file_id}.txt").is_file()
        assert not list(rank.folder.glob("aicpu_intermediate_*"))
        assert sorted(rank.hccl_dirs) == ["allGather_1_1", "allReduce_1_1", "allReduce_2_1"]
        assert sorted(_traces(rank)) == sorted((d, s) for d in rank.hccl_dirs for s in (1, 2, 3))
    assert shared.bytes_written == sum(map(len, _files(shared.root).values()))


def test_timeline_numbers_are_exact_ticks_written_as_python_floats(shared):
    for rank in shared.ranks:
        lines = (rank.folder / f"output_timeline_data_{rank.file_id}.txt").read_text().splitlines()[1:]
        rows = _timeline(rank)
        assert len(rows) == rank.device_ops
        for line, (_, _, start, dur) in zip(lines, rows, strict=True):
            _, _, s, d = line.split(",")
            assert (s, d) == (repr(start / 1e5), repr(dur / 1e5))  # MindSpore wrote str(float)
        starts = [r[2] for r in rows]
        assert starts == sorted(starts)
        assert any(re.fullmatch(r"\d+\.0", line.split(",")[2]) for line in lines)   # whole ms
        assert any(re.fullmatch(r"\de-05", line.split(",")[3]) for line in lines)   # < 100 ns
        assert sorted({r[1] for r in rows}) == rank.streams == [518, 519, 520]
        scopes = {r[0].split("/", 1)[0] for r in rows}
        assert scopes == {"Default", "Gradients", "recompute_Default"}
        assert not any("AllReduce" in r[0] for r in rows)
        by_stream: dict[int, list[tuple[int, int]]] = {}
        for _, sid, start, dur in rows:
            by_stream.setdefault(sid, []).append((start, start + dur))
        for spans in by_stream.values():  # a stream runs one op at a time
            assert all(a[1] <= b[0] for a, b in pairwise(spans))
        mcc = (rank.folder / f"min_cycle_counter_{rank.file_id}.txt").read_text()
        assert _ticks(mcc) == starts[0]


def test_step_trace_rows_are_consistent_and_contiguous(shared):
    for rank in shared.ranks:
        header, rows = _step_trace(rank)
        assert header[:9] == STEP_HEADER
        cols = [c for c in header[9:] if not c.endswith(("_start_point", "_end_point"))]
        assert cols == ["stream_24_0_AllReduce-op" + cols[0].rsplit("op", 1)[1], cols[1], cols[2]]
        assert [re.sub(r"-op\d+$", "", c) for c in cols] == [
            "stream_24_0_AllReduce", "stream_24_1_AllReduce", "stream_24_2_AllGather"]
        assert header[9:] == [x for c in cols for x in (c, f"{c}_start_point", f"{c}_end_point")]
        steps = [list(map(int, r)) for r in rows[:3]]
        assert [r[0] for r in steps] == [1, 2, 3]
        assert rows[3][:6] == ["0"] * 6 and int(rows[3][6]) > 0 and set(rows[3][7:]) == {"0"}
        assert rows[4][0] == "-" and len(rows) == 5
        for _, start, end, total, fp, bp, interval, fp_bp, tail, *comm in steps:
            assert (total, interval, fp_bp, tail) == (end - start, fp - start, bp - fp, end - bp)
            assert start <= fp < bp < end
            for k in range(0, len(comm), 3):
                dur, s, e = comm[k:k + 3]
                assert dur == e - s > 0 and fp < s < e < end
        assert steps[0][6] == 0  # step 1 starts at its FP point
        assert all(a[2] == b[1] for a, b in pairwise(steps))
        average = [round(Decimal(sum(col)) / 2) for col in zip(*steps[1:], strict=True)][1:]  # 2..n
        assert list(map(int, rows[4][1:])) == average
        assert rank.step_bounds_ns == [(r[0], r[1] * 10, r[2] * 10) for r in steps]
        expected = [(r[0], c, r[10 + 3 * k] * 10, r[11 + 3 * k] * 10)
                    for r in steps for k, c in enumerate(cols)]
        assert rank.comm_op_bounds_ns == expected
        assert rank.comm_ops == 9 and rank.zero_row


def test_device_ops_lie_inside_steps_except_the_unfinished_iterations(shared):
    for rank in shared.ranks:
        bounds = [(s // 10, e // 10) for _, s, e in rank.step_bounds_ns]
        before = after = 0
        for _, _, start, dur in _timeline(rank):
            if start < bounds[0][0]:
                before += 1
            elif start >= bounds[-1][1]:
                after += 1
            else:
                step = next(b for b in bounds if b[0] <= start < b[1])
                assert start + dur <= step[1]
        assert (before, after) == (2, 2)  # the prologue of step 1 and of the unfinished step


def test_hccl_tasks_lie_inside_their_ops(shared):
    for rank in shared.ranks:
        ops = {(step, col): (s // 10, e // 10) for step, col, s, e in rank.comm_op_bounds_ns}
        cols = list(dict.fromkeys(col for _, col, _, _ in rank.comm_op_bounds_ns))
        dirs = dict(zip(rank.hccl_dirs, cols, strict=True))
        total = 0
        for (d, step), path in _traces(rank).items():
            text = path.read_text()
            doc = json.loads(text)
            assert text == json.dumps(doc, indent=4)
            assert list(doc) == ["device id", "iteration", "traceEvents"]
            assert doc["device id"] == str(rank.device_id) and doc["iteration"] == step
            lo, hi = ops[step, dirs[d]]
            sid = int(dirs[d].split("_")[1])
            events = doc["traceEvents"]
            assert [e["ts"] for e in events] == sorted(e["ts"] for e in events)
            for e in events:
                assert list(e) == ["tid", "pid", "ts", "dur", "ph", "name", "args"]
                assert list(e["args"]) == list(HCCL_EVENT_KEYS)
                assert e["pid"] == str(rank.device_id) and e["ph"] == "X"
                assert e["name"] == e["args"]["task type"]
                ts, dur = _ticks(repr(e["ts"]), 100), _ticks(repr(e["dur"]), 100)
                assert lo < ts and ts + dur < hi
                if e["tid"] == rank.planes - 1:
                    assert e["args"]["stream id"] == sid
                size = e["args"]["size"]
                if e["name"] in ("Reduce Inline", "Memcpy"):
                    assert isinstance(size, int) and size > 0 and e["args"]["notify id"] == 0
                    assert e["args"]["bandwidth"] == round(size / e["dur"] / 1000, 2)
                else:
                    assert size is None and e["args"]["bandwidth"] == "NULL"
                    assert int(e["args"]["notify id"], 16) > 0
            assert {e["tid"] for e in events} == set(range(rank.planes))
            assert {e["args"]["src rank"] for e in events if e["name"] == "Memcpy"} >= {4294967295}
            assert {e["args"]["transport type"] for e in events} == {"SDMA", "LOCAL"}
            total += len(events)
        assert total == rank.hccl_tasks == 9 * rank.planes * 19


def test_one_line_traces_hold_hex_sizes(per_rank):
    rank = per_rank.ranks[1]
    for path in _traces(rank).values():
        text = path.read_text()
        assert "\n" not in text and text == json.dumps(json.loads(text))
        for e in json.loads(text)["traceEvents"]:
            size = e["args"]["size"]
            assert size is None or (size.startswith("0x") and int(size, 16) > 0)


def test_host_start_aligns_ranks_in_epoch_but_not_in_raw_ticks(shared):
    raw, epoch = [], []
    for rank in shared.ranks:
        text = (rank.folder / f"host_start.log.{rank.file_id}").read_text()
        m = re.fullmatch(r"\[Device(\d+)\]\nclock_realtime: (\d+)\nclock_monotonic_raw: (\d+)\n", text)
        assert m and int(m[1]) == rank.file_id
        offset = int(m[2]) - int(m[3])
        assert offset == rank.epoch_offset_ns
        start_ns = rank.step_bounds_ns[0][1]
        raw.append(start_ns)
        epoch.append(start_ns + offset)
    assert abs(epoch[0] - epoch[1]) <= 5_000
    assert abs(raw[0] - raw[1]) > 10**9


def test_framework_raw_has_one_row_per_distinct_timeline_op(shared, per_rank, tmp_path):
    v20 = write_mindspore1x_profile(tmp_path, ranks=1, steps=1, ops_per_step=30, framework_layout="2.0")
    cases = [(shared.ranks[0], "1.0"), (v20.ranks[0], "2.0"), (per_rank.ranks[0], "2024")]
    headers = {
        "1.0": "task_id,stream_id,block_dim,full_op_name,op_name,op_type,subgraph,op_info",
        "2.0": "task_id,stream_id,block_dim,full_op_name,op_name,op_type,subgraph,op_info,graph_id",
        "2024": "task_id,stream_id,block_dim,full_kernel_name,op_name,kernel_name,kernel_type,subgraph,"
                "op_info,graph_id"}
    for rank, layout in cases:
        raw = (rank.folder / f"framework_raw_{rank.file_id}.csv").read_bytes()
        assert raw.startswith(headers[layout].encode() + b"\r\n")
        assert raw.count(b"\r\n") == raw.count(b"\n")
        rows = list(csv.DictReader(io.StringIO(raw.decode())))
        full = "full_kernel_name" if layout == "2024" else "full_op_name"
        timeline = {(name, sid) for name, sid, _, _ in _timeline(rank)}
        assert len(rows) == len(timeline) == rank.framework_ops
        assert {(r[full], int(r["stream_id"])) for r in rows} == timeline
        for r in rows:
            short = r[full].rsplit("/", 1)[1]
            info = json.loads(r["op_info"])
            assert "input_0" in info and "output_0" in info
            if layout == "2024":
                assert r["op_name"] == r[full] and r["kernel_name"] == short
                assert short.startswith(r["kernel_type"] + "-op")
            else:
                assert r["op_name"] == short and short.startswith(r["op_type"] + "-op")
                shape = info["input_0"]["shape"]
                assert isinstance(shape, str) if layout == "1.0" else isinstance(shape, list)
            top = r[full].split("/", 1)[0]
            assert r["subgraph"] == (top if top in ("Default", "Gradients") else "")


def test_collectives_as_timeline_rows(per_rank):
    for rank in per_rank.ranks:
        comm = [r for r in _timeline(rank) if r[1] == 24]
        assert 24 in rank.streams and rank.comm_in_timeline
        spans = sorted((s * 10, (s + d) * 10) for _, _, s, d in comm)
        assert spans == sorted((s, e) for _, _, s, e in rank.comm_op_bounds_ns)
        assert all(name.split("/")[-1] in col for (name, *_), (_, col, _, _)
                   in zip(comm, rank.comm_op_bounds_ns, strict=True))


def test_aicpu_files(shared, per_rank):
    rank = shared.ranks[0]
    raw = (rank.folder / f"aicpu_intermediate_{rank.file_id}.csv").read_bytes()
    assert raw.count(b"\r\n") == raw.count(b"\n")
    rows = list(csv.DictReader(io.StringIO(raw.decode())))
    assert list(rows[0]) == ["serial_number", "kernel_type", "total_time", "dispatch_time",
                             "execution_time", "run_start", "run_end"]
    assert len(rows) == rank.aicpu_ops == 1 + 3 * 3 + 1  # InitData, 3 per step, unfinished GetNext
    assert [r["serial_number"] for r in rows] == [str(i) for i in range(1, len(rows) + 1)]
    assert rows[0]["kernel_type"] == "InitData" and rows[-1]["kernel_type"] == "GetNext"
    for r in rows:
        start, end = _ticks(r["run_start"], 100), _ticks(r["run_end"], 100)
        assert start < end
        if r["kernel_type"] in ("GetNext", "EndOfSequence", "InitData"):
            assert r["run_start"].isdigit() and r["run_end"].isdigit()
    assert any("." in r["run_start"] for r in rows if r["kernel_type"].startswith("DropoutGenMask-op"))
    getnext = [_ticks(r["run_start"], 100) for r in rows if r["kernel_type"] == "GetNext"]
    bounds = [(s // 10, e // 10) for _, s, e in rank.step_bounds_ns]
    assert getnext[0] < bounds[0][0] and getnext[-1] >= bounds[-1][1]
    for (s, e), t in zip(bounds[1:], getnext[1:-1], strict=True):
        assert s <= t < e
    txt = per_rank.ranks[0]
    lines = (txt.folder / f"output_data_preprocess_aicpu_{txt.file_id}.txt").read_text().splitlines()
    assert lines[0] == "serial_number node_type_name total_time(ms) dispatch_time(ms) run_start run_end"
    body = [line.split(" ") for line in lines[1:-1]]
    assert len(body) == txt.aicpu_ops and all(len(f) == 6 for f in body)
    total = sum(Decimal(f[2]) for f in body)
    assert lines[-1] == f"AI CPU Total Time(ms): {float(total):f}"


def test_single_rank_is_device_1_with_the_sample_quirks(tmp_path):
    prof = write_mindspore1x_profile(tmp_path, ranks=1, steps=1, ops_per_step=20, streams=1,
                                     comm_ops=0, aicpu="none", seed=1)
    rank = prof.ranks[0]
    assert rank.file_id == rank.device_id == 1 and rank.streams == [519]
    folder = tmp_path / "profiler"
    assert (folder / "host_start.log.1").read_text().startswith("[Device0]\n")  # as the real sample
    assert not (folder / "hccl_info").exists() and rank.hccl_dirs == [] and rank.aicpu_ops == 0
    assert not list(folder.glob("*aicpu_intermediate*")) and not list(folder.glob("*preprocess*"))
    header, rows = _step_trace(rank)
    assert header == STEP_HEADER and len(rows) == 2
    assert rows[1][:6] == ["0"] * 6 and int(rows[1][6]) > 0 and rows[1][7:] == ["0", "0"]
    plain = write_mindspore1x_profile(tmp_path / "plain", ranks=1, steps=1, ops_per_step=20, zero_row=False)
    _, rows = _step_trace(plain.ranks[0])
    assert rows[1] == ["0"] * len(rows[1])  # one step: MindSpore's "average" is all zeros
    no_clock = write_mindspore1x_profile(tmp_path / "nc", ranks=1, steps=1, ops_per_step=20, host_start=False)
    assert no_clock.ranks[0].epoch_offset_ns is None
    assert not list((tmp_path / "nc" / "profiler").glob("host_start*"))


def test_same_seed_writes_the_same_bytes(tmp_path):
    small = dict(ranks=2, steps=2, ops_per_step=30, comm_ops=2)
    write_mindspore1x_profile(tmp_path / "a", seed=3, **small)
    write_mindspore1x_profile(tmp_path / "b", seed=3, **small)
    write_mindspore1x_profile(tmp_path / "c", seed=4, **small)
    assert _files(tmp_path / "a") == _files(tmp_path / "b")
    assert _files(tmp_path / "a") != _files(tmp_path / "c")


def test_memory_does_not_grow_with_steps(tmp_path):
    def peak(steps: int) -> int:
        sizes = []
        for attempt in range(2):  # the least of two: a garbage collection can fall into either run
            gc.collect()
            tracemalloc.start()
            write_mindspore1x_profile(tmp_path / f"{steps}-{attempt}", ranks=1, steps=steps,
                                      ops_per_step=1500, comm_ops=2, planes=1)
            sizes.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        return min(sizes)

    small, large = peak(2), peak(8)
    assert large < small * 1.3


def test_argument_errors_list_every_problem(tmp_path):
    with pytest.raises(ValueError) as err:
        write_mindspore1x_profile(tmp_path, ranks=0, steps=0, ops_per_step=3, streams=9, planes=0,
                                  framework_layout="1.5", aicpu="bin", layout="flat", hccl_size="dec")
    msg = str(err.value)
    for word in ("ranks", "steps", "ops_per_step", "streams", "planes", "framework_layout", "aicpu",
                 "layout", "hccl_size"):
        assert word in msg
    assert not list(tmp_path.iterdir())


def test_cli_prints_a_one_line_summary(tmp_path, capsys):
    assert main([str(tmp_path), "--ranks", "3", "--steps", "2", "--ops-per-step", "30",
                 "--layout", "per-rank", "--aicpu", "txt", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("3 ranks") and "device ops" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank_0", "rank_1", "rank_2"]
    assert main([str(tmp_path), "--steps", "0"]) == 2


def test_headers_match_the_real_samples(shared):
    real = os.environ.get("TRACE2PERFETTO_REALDATA")
    if not real:
        pytest.skip("TRACE2PERFETTO_REALDATA is not set; the real mindspore-1x samples are needed")
    single = Path(real, "mindspore-1x", "single-device")
    rank = shared.ranks[0]

    def first_line(path: Path) -> bytes:
        return path.read_bytes().split(b"\n", 1)[0]

    for ours, theirs in (("output_timeline_data_{}.txt", "output_timeline_data_1.txt"),
                         ("framework_raw_{}.csv", "framework_raw_1.csv"),
                         ("aicpu_intermediate_{}.csv", "aicpu_intermediate_1.csv")):
        assert first_line(rank.folder / ours.format(rank.file_id)) == first_line(single / theirs)
    real_steps = first_line(single / "step_trace_raw_1_detail_time.csv")
    assert first_line(rank.folder / "step_trace_raw_0_detail_time.csv").startswith(real_steps[:-1])
    trace = json.loads(Path(real, "mindspore-1x", "hccl-rank6", "hccl_info", "allReduce_1_1",
                            "iter1.trace").read_text())
    theirs_events = trace["traceEvents"]
    ours_events = json.loads(next(iter(_traces(rank).values())).read_text())["traceEvents"]
    assert list(trace) == ["device id", "iteration", "traceEvents"]
    assert list(ours_events[0]) == list(theirs_events[0])
    assert list(ours_events[0]["args"]) == list(theirs_events[0]["args"])
    assert {e["name"] for e in ours_events} == {e["name"] for e in theirs_events}


def test_pipeline_stages_send_and_receive_on_one_stream_number(tmp_path):
    """pp=2: per stage its own op names; stage 0 sends while stage 1 receives and back, all on
    stream 11; a receive starts before its send (posted early) and both end together."""
    prof = write_mindspore1x_profile(tmp_path, ranks=4, steps=2, comm_ops=1, pp=2, seed=2)
    assert [r.stage for r in prof.ranks] == [0, 0, 1, 1]
    columns = {r.rank: _step_trace(r)[0][len(STEP_HEADER)::3] for r in prof.ranks}
    assert columns[0] == columns[1] and columns[2] == columns[3]
    assert [re.sub(r"-op\d+$", "", c) for c in columns[0]] == ["stream_11_0_Send", "stream_11_1_Receive",
                                                              "stream_24_0_AllReduce"]
    assert [re.sub(r"-op\d+$", "", c) for c in columns[2]] == ["stream_11_0_Receive", "stream_11_1_Send",
                                                              "stream_24_0_AllReduce"]
    assert not set(columns[0]) & set(columns[2])
    epoch = {r.rank: {(step, column[:12]): (s + r.epoch_offset_ns, e + r.epoch_offset_ns)
                      for step, column, s, e in r.comm_op_bounds_ns} for r in prof.ranks}
    for rank in (0, 1):
        for step in (1, 2):
            for peer in (2, 3):
                for link in ("stream_11_0_", "stream_11_1_"):
                    send, receive = (epoch[rank], epoch[peer]) if link.endswith("0_") else (epoch[peer],
                                                                                           epoch[rank])
                    assert abs(send[step, link][1] - receive[step, link][1]) <= 2000
                    assert receive[step, link][0] <= send[step, link][0] + 2000
    assert all("send" not in d and "receive" not in d for r in prof.ranks for d in r.hccl_dirs)
