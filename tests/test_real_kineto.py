"""The Kineto reader against real PyTorch profiler traces, and against HTA's figures for them.

``kineto-2rank``: two ranks of a 128-rank GPU/NCCL job (HTA's own test data); ``kineto-gloo-2rank``:
PyTorch 2.13 on CPU with gloo; ``kineto-1.8-resnet50``: one GPU of PyTorch 1.8/1.9, whose categories
have older names (``Kernel``, ``Runtime``, ``Operator``, ...). The traces are read here
independently (json, exact decimals).
"""

from __future__ import annotations

import gzip
import json
import random
import shutil
from collections import Counter
from decimal import Decimal
from pathlib import Path

import pytest
from conftest import real_data
from test_trace_processor import imported
from trace_check import comparable, read_chrome_json, read_perfetto

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
from converters.cli import main
from converters.intervals import intersect, total_ns
from converters.model import ALLGATHER, ALLREDUCE, ALLTOALL, GPU_KERNEL, comm_kind


def _events(path: Path) -> tuple[dict, list[dict]]:
    """The trace's top-level keys and events, numbers as exact decimals."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        data = json.load(f, parse_float=Decimal)
    return data, data["traceEvents"]


def _ns(us: Decimal | int, base: int) -> int:
    return int(Decimal(us) * 1000) + base


def _traces(name: str) -> list[Path]:
    return sorted(p for p in real_data(name).iterdir() if p.name.endswith((".json", ".json.gz")))


@pytest.mark.parametrize("sample", ["kineto-2rank", "kineto-gloo-2rank", "kineto-1.8-resnet50"])
def test_every_event_of_a_real_trace_is_drawn_exactly_once_in_detail(sample):
    expected: Counter = Counter()
    for path in _traces(sample):
        data, events = _events(path)
        rank, base = data.get("distributedInfo", {}).get("rank", 0), int(data.get("baseTimeNanoseconds", 0))
        for e in events:
            if e.get("ph") in ("X", "i"):
                name = e["name"]
                if name.startswith("ProfilerStep#"):
                    name = f"Step {name[13:]}"
                expected[rank, name, _ns(e["ts"], base)] += 1
    ranks = discover(real_data(sample))
    batches = read_profile(ranks, Options(kind="detail"), Diagnostics())
    drawn = Counter((s.rank, s.name, s.start_ns) for batch in batches for s in batch.slices
                    if s.layer is not Layer.OVERLAP)
    assert drawn == expected
    assert sum(expected.values()) > 1000


def _union_ns(intervals: list[tuple[int, int]]) -> int:
    total, reach = 0, None
    for start, end in sorted(intervals):
        if reach is None or start > reach:
            total, reach = total + end - start, end
        elif end > reach:
            total, reach = total + end - reach, end
    return total


def test_a_pytorch_1_8_trace_has_its_steps_and_every_kernel_as_compute():
    """PyTorch 1.8-1.9 named the categories ``Kernel``, ``Memcpy``, ``Memset``, ``Runtime``,
    ``Operator`` and a stream's tid ``"stream 7"``: read as today's. Every kernel is compute on its
    stream's lane, the steps are the ``ProfilerStep#N`` operators, and Computing over the steps is
    what the kernels cover."""
    [path] = _traces("kineto-1.8-resnet50")
    _, events = _events(path)
    kernels = [(_ns(e["ts"], 0), _ns(e["ts"] + e["dur"], 0)) for e in events if e.get("cat") == "Kernel"]
    copies = Counter(e["cat"] for e in events if e.get("cat") in ("Memcpy", "Memset"))
    steps = sorted(int(e["name"][13:]) for e in events if e.get("name", "").startswith("ProfilerStep#"))
    assert len(kernels) == 8772 and steps == [5, 6, 7, 8, 9, 10]
    summary = list(read_profile(discover(path), Options(), Diagnostics()))
    assert [b.step_id for b in summary] == steps and all(b.has_device for b in summary)
    drawn = [s for b in summary for s in b.slices if s.layer is Layer.STREAM]
    assert sorted((s.start_ns, s.end_ns) for s in drawn) == sorted(kernels)
    assert {(s.lane, s.task_type) for s in drawn} == {("GPU 0 Stream 7", GPU_KERNEL)}
    detail = [s for b in read_profile(discover(path), Options(kind="detail"), Diagnostics())
              for s in b.slices]
    assert Counter(s.task_type for s in detail if s.layer is Layer.STREAM) == {
        GPU_KERNEL: 8772, "MEMCPY": copies["Memcpy"], "MEMSET": copies["Memset"]}
    assert sum(step_overlap(b).computing_ns for b in summary) == _union_ns(kernels)
    rows = overlap_report(path)
    assert [r.step for r in rows] == steps and all(r.computing_ns > 0 and r.free_ns is not None for r in rows)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # HTA's use of pandas
def test_a_pytorch_1_8_trace_launches_the_gpu_work_holistic_trace_analysis_counts():
    """HTA's ``get_temporal_breakdown`` of the 1.8 trace (run here) counts the kernels launched in
    steps 5-9 (it leaves the last step out) as compute and the copies as non-compute: the same
    sums over the GPU work our arrows link to the launches on the host in those steps."""
    analysis = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is a test extra")
    sample = real_data("kineto-1.8-resnet50")
    theirs = analysis.TraceAnalysis(trace_dir=str(sample)).get_temporal_breakdown(visualize=False).iloc[0]
    batches = list(read_profile(discover(sample), Options(kind="detail"), Diagnostics()))
    launched = {f for b in batches if b.step_id in range(5, 10) for s in b.slices
                if s.layer is Layer.HOST for f in s.flows_out}
    work = [s for b in batches for s in b.slices if s.layer is Layer.STREAM and set(s.flows_in) & launched]
    compute_us = sum(s.dur_ns for s in work if s.task_type == GPU_KERNEL) / 1000
    copies_us = sum(s.dur_ns for s in work if s.task_type in ("MEMCPY", "MEMSET")) / 1000
    assert compute_us == pytest.approx(theirs["compute_time(us)"], rel=0.005) and compute_us > 400_000
    assert copies_us == pytest.approx(theirs["non_compute_time(us)"], rel=0.005) and copies_us > 1000


def test_a_pytorch_1_8_trace_reads_the_same_in_any_event_order(tmp_path):
    """Its streams are known by their tid ("stream 7"), not by metadata, and its steps by name:
    shuffled, with the metadata last, the same slices on the same lanes."""
    [source] = _traces("kineto-1.8-resnet50")
    data = json.loads(gzip.decompress(source.read_bytes()))
    events = data["traceEvents"]
    random.Random(18).shuffle(events)
    events.sort(key=lambda e: e.get("ph") == "M")
    shuffled = tmp_path / "shuffled.pt.trace.json"
    shuffled.write_text(json.dumps(data))

    def drawn(path: Path) -> Counter:
        return Counter((b.step_id, s.layer, s.lane, s.name, s.start_ns, s.dur_ns, s.task_type)
                       for b in read_profile(discover(path), Options(kind="detail"), Diagnostics())
                       for s in b.slices)

    found = drawn(shuffled)
    assert found == drawn(source)
    assert sum(n for key, n in found.items() if key[6] == GPU_KERNEL) == 8772
    assert {key[0] for key in found} == set(range(5, 11))


def test_a_trace_exported_under_any_json_name_converts_alone_and_in_its_folder(tmp_path, capsys):
    """``prof.export_chrome_trace("resnet50.json")`` takes any name: a ``*.json`` is a Kineto trace
    by its header (the 1.8 sample's ``deviceProperties``), alone and in a folder."""
    [source] = _traces("kineto-1.8-resnet50")
    trace = tmp_path / "run" / "resnet50.json"
    trace.parent.mkdir()
    trace.write_bytes(gzip.decompress(source.read_bytes()))
    for given in (trace, trace.parent):
        assert [(r.rank, r.format, r.path) for r in discover(given)] == [(0, "kineto", trace)]
        assert main([str(given), "-o", str(tmp_path / "out.pftrace"), "--strict", "-q"]) == 0
    batches = list(read_profile(discover(trace), Options(), Diagnostics()))
    assert len(batches) == 6 and sum(s.task_type == GPU_KERNEL for b in batches for s in b.slices) == 8772


def test_ranks_come_from_distributed_info_not_file_names(tmp_path):
    for path in _traces("kineto-gloo-2rank"):  # copied under names that sort the other way round
        data, _ = _events(path)
        shutil.copy(path, tmp_path / f"{1 - data['distributedInfo']['rank']}.pt.trace.json")
    ranks = discover(tmp_path)
    assert [(r.rank, r.path.name) for r in ranks] == [(0, "1.pt.trace.json"), (1, "0.pt.trace.json")]
    assert all(r.groups == {"default_pg": (0, 1)} for r in ranks)


def test_each_launch_links_to_the_kernels_it_launched():
    path = _traces("kineto-2rank")[0]
    _, events = _events(path)
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    launched = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                and e["args"].get("correlation") in launches
                and e["ts"] >= launches[e["args"]["correlation"]]["ts"]]
    batches = list(read_profile(discover(path), Options(kind="detail"), Diagnostics()))
    slices = [s for b in batches for s in b.slices]
    arrows_out = sum(len(s.flows_out) for s in slices if s.layer is Layer.HOST)
    arrows_in = {f: s for s in slices for f in s.flows_in}
    assert arrows_out == len(arrows_in) == len(launched) > 1000
    assert {s.layer for s in arrows_in.values()} == {Layer.STREAM, Layer.COMM_OP}  # NCCL kernels too


def test_nccl_kernels_are_communication_and_gpu_streams_are_lanes_of_their_own():
    batches = list(read_profile(discover(real_data("kineto-2rank")), Options(kind="detail"), Diagnostics()))
    ops = {s.name for b in batches for s in b.slices if s.layer is Layer.COMM_OP}
    assert ops and all(name.startswith("ncclKernel_") for name in ops)
    lanes = {s.lane for b in batches for s in b.slices if s.layer is Layer.STREAM}
    expected = set()
    for path in _traces("kineto-2rank"):
        _, events = _events(path)
        expected |= {f"GPU {e['pid']} Stream {e['tid']}" for e in events
                     if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "nccl" not in e["name"]}
    assert lanes == expected and len(lanes) >= 6
    tasks = Counter(s.task_type for b in batches for s in b.slices if s.layer is Layer.STREAM)
    assert set(tasks) == {GPU_KERNEL, "MEMCPY", "MEMSET"}
    device = [s for b in batches for s in b.slices if s.layer is Layer.STREAM]
    shown = {GPU_KERNEL: "KERNEL"}  # the args show Kineto's word, the record says the model's
    assert all(json.loads(bytes(s.args))["Task Type"] == shown.get(s.task_type, s.task_type) for s in device)
    communication = [s for b in batches for s in b.slices if s.layer is Layer.COMM_OP]
    assert all(json.loads(bytes(s.args))["Task Type"] == "NCCL" for s in communication)
    # ncclKernel_SendRecv_* kernels, typed by the c10d ops that launched them (test_kineto_launches.py)
    assert {comm_kind(s) for s in communication} == {ALLTOALL, ALLREDUCE, ALLGATHER}


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")  # HTA's use of pandas
def test_overlap_and_time_breakdown_agree_with_holistic_trace_analysis():
    """HTA's ``get_comm_comp_overlap`` and ``get_temporal_breakdown`` (run here) against our overlap
    rows. HTA counts the kernels launched before the last ProfilerStep starts, which here are
    those of step 551. Its idle time counts memory copies as busy; our Free is docs/design.md §5's (what
    neither compute nor communication covers, as torch_npu counts it on NPUs), so the copies that
    lie in our Free are taken off before comparing, and they are said in HTA's non-compute."""
    analysis = pytest.importorskip("hta.trace_analysis", reason="HolisticTraceAnalysis is a test extra")
    hta = analysis.TraceAnalysis(trace_dir=str(real_data("kineto-2rank")))
    overlap = hta.get_comm_comp_overlap(visualize=False).set_index("rank")["comp_comm_overlap_pctg"]
    breakdown = hta.get_temporal_breakdown(visualize=False).set_index("rank")
    step_551 = Options(steps=frozenset([551]), kind="detail")
    batches = {b.rank: b for b in read_profile(discover(real_data("kineto-2rank")), step_551, Diagnostics())}
    rows = {row.rank: row for row in overlap_report(real_data("kineto-2rank")) if row.step == 551}
    assert sorted(rows) == sorted(batches) == sorted(overlap.index) == [0, 1]
    for rank, row in rows.items():
        theirs = breakdown.loc[rank]
        copies = [(s.start_ns, s.end_ns) for s in batches[rank].slices if s.task_type in ("MEMCPY", "MEMSET")]
        copying_ns = total_ns(intersect(step_overlap(batches[rank]).free, copies))
        span_us = (row.computing_ns + row.not_overlapped_ns + row.free_ns) / 1000
        assert span_us == pytest.approx(theirs["kernel_time(us)"], rel=0.005)
        assert 100 * row.overlapped_ns / row.communication_ns == pytest.approx(overlap[rank], rel=0.005)
        assert row.computing_ns / 1000 == pytest.approx(theirs["compute_time(us)"], rel=0.005)
        assert (row.free_ns - copying_ns) / 1000 == pytest.approx(theirs["idle_time(us)"], rel=0.005)
        assert (row.not_overlapped_ns + copying_ns) / 1000 == pytest.approx(theirs["non_compute_time(us)"],
                                                                            rel=0.005)


def test_a_cpu_only_trace_says_it_has_no_device_activity_and_measures_its_collectives(capsys):
    rows = overlap_report(real_data("kineto-gloo-2rank"))
    assert {(r.rank, r.step) for r in rows} == {(r, s) for r in (0, 1) for s in (2, 3, 4)}
    assert all(r.computing_ns is None and r.free_ns is None for r in rows)
    assert all(r.communication_ns > 0 for r in rows)
    assert main(["overlap", str(real_data("kineto-gloo-2rank"))]) == 0
    assert " - " in capsys.readouterr().out  # unknown, not zero


def test_each_gloo_collective_is_one_communication_op_its_c10d_call_none(capsys):
    """A gloo collective is in the trace twice: the ``c10d::`` op that called it (main thread) and
    the ``gloo:`` range of gloo's worker that ran it. ``comm`` lists it once, the run, so every
    figure across ranks (Last, Wait Caused) counts each collective once: one row per raw ``gloo:``
    range of the kept steps, counted here from the JSON."""
    expected: Counter = Counter()
    for path in _traces("kineto-gloo-2rank"):
        data = json.loads(path.read_bytes())
        events = [e for e in data["traceEvents"] if e.get("ph") == "X"]
        steps = [(int(e["name"].split("#")[1]), e["ts"], e["ts"] + e["dur"]) for e in events
                 if e["name"].startswith("ProfilerStep#")]
        for e in events:
            if e.get("cat") == "user_annotation" and e["name"].startswith("gloo:"):
                step = next(n for n, a, b in steps if a <= e["ts"] < b)
                expected[data["distributedInfo"]["rank"], step, e["name"]] += 1
    assert main(["comm", str(real_data("kineto-gloo-2rank")), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["ops"]
    assert Counter((r["Rank"], r["Step"], r["Op"]) for r in rows) == expected
    assert main(["comm", str(real_data("kineto-gloo-2rank")), "--slow-ranks", "--format", "json"]) == 0
    ranks = json.loads(capsys.readouterr().out)["slow_ranks"]
    per_rank_step = sum(expected.values()) // 6  # 2 ranks x 3 steps, the same collectives in each
    assert sum(r["Last Arrivals"] for r in ranks) == 3 * per_rank_step


def test_a_gzipped_trace_cut_off_by_a_crash_converts_its_whole_events_with_a_warning(tmp_path):
    source = _traces("kineto-2rank")[0]
    whole = gzip.decompress(source.read_bytes())
    cut = tmp_path / "rank0.json.gz"
    cut.write_bytes(gzip.compress(whole)[: len(gzip.compress(whole)) * 2 // 3])
    result = convert(cut, tmp_path / "out.pftrace", kind="detail")
    assert result.slices > 1000
    assert any("cut off" in w for w in result.warnings)


def test_a_mixed_folder_of_two_real_runs_is_refused_naming_both(out_dir, tmp_path, capsys):
    """A GPU rank of 2023 beside an Ascend rank of 2025 are two runs, never one job (the mixed
    fleet of one run: tests/test_two_runs.py)."""
    ascend = real_data("ascend-pt-2rank") / "rank1_ascend_pt"
    shutil.copytree(ascend, tmp_path / ascend.name)
    gpu = _traces("kineto-2rank")[0]  # rank 0
    shutil.copy(gpu, tmp_path / gpu.name)
    assert main([str(tmp_path), "-o", str(out_dir / "job.pftrace")]) == 2
    err = capsys.readouterr().err
    assert "two runs" in err and gpu.name in err and ascend.name in err
    assert not (out_dir / "job.pftrace").exists()


def test_two_traces_of_one_rank_at_one_time_are_a_usage_error_naming_both(tmp_path, capsys):
    gpu = _traces("kineto-2rank")[0]
    shutil.copy(gpu, tmp_path / "a.json.gz")
    shutil.copy(gpu, tmp_path / "b.json.gz")
    assert main([str(tmp_path), "-o", str(tmp_path / "out.pftrace")]) != 0
    err = capsys.readouterr().err
    assert "a.json.gz" in err and "b.json.gz" in err and "rank 0" in err


def test_an_ascend_rank_and_a_pytorch_rank_of_one_number_are_a_usage_error(tmp_path, capsys):
    shutil.copytree(real_data("ascend-pt-2rank") / "rank0_ascend_pt", tmp_path / "rank0_ascend_pt")
    gpu = _traces("kineto-2rank")[0]  # rank 0 too
    shutil.copy(gpu, tmp_path / gpu.name)
    assert main([str(tmp_path), "-o", str(tmp_path / "out.pftrace")]) == 2
    err = capsys.readouterr().err
    assert "rank 0 is claimed by" in err and "kineto" in err and "ascend_pt" in err


def test_both_writers_draw_the_same_slices_of_a_gpu_job(tmp_path):
    decoded = []
    for name in ("job.pftrace", "job.json"):
        convert(real_data("kineto-2rank"), tmp_path / name, kind="detail", max_bytes=None)
        data = (tmp_path / name).read_bytes()
        decoded.append(read_perfetto(data) if name.endswith(".pftrace") else read_chrome_json(data))
    assert comparable(decoded[0]) == comparable(decoded[1])
    assert len(decoded[0].slices) > 9000 and decoded[0].flows == decoded[1].flows > 2000
    groups = {s.track[0] for s in decoded[0].slices}
    assert "GPU" in groups and "Ascend Hardware" not in groups


def test_communication_not_named_nccl_is_communication_not_compute(tmp_path):
    """``kineto-b200-vllm``'s all-reduce is torch SymmetricMemory's ``multimem_all_reduce_kernel``
    (73 kernels): Communication in ``overlap`` (with the one NCCL kernel), not in Computing, and
    absent from ``ops``' compute rows, which hold every other kernel of the raw trace; drawn in the
    Communication group of a trace that loads clean."""
    from converters.analyses.ops import ops_report
    from converters.intervals import union

    [path] = _traces("kineto-b200-vllm")
    data, events = _events(path)
    base = int(data.get("baseTimeNanoseconds", 0))
    kernels = [e for e in events if e.get("cat") == "kernel" and e.get("ph") == "X"]
    talking = [e for e in kernels
               if "multimem_all_reduce_kernel" in e["name"] or e["name"].startswith("nccl")]
    assert sum("multimem_all_reduce_kernel" in e["name"] for e in talking) == 73
    spans = {id(e): (_ns(e["ts"], base), _ns(e["ts"] + e["dur"], base)) for e in kernels}
    rows = overlap_report(real_data("kineto-b200-vllm"))
    assert sum(r.communication_ns for r in rows) == total_ns(union(spans[id(e)] for e in talking))
    computing = [spans[id(e)] for e in kernels if e not in talking]
    assert sum(r.computing_ns for r in rows) == total_ns(union(computing))
    named = Counter(r.name for r in ops_report(real_data("kineto-b200-vllm"), by="name"))
    assert not any("multimem" in name for name in named)
    assert sum(named.values()) == len({e["name"] for e in kernels if e not in talking})
    convert(real_data("kineto-b200-vllm"), tmp_path / "job.pftrace", kind="detail", max_bytes=None)
    problems, _ = imported(tmp_path / "job.pftrace", tmp_path)
    assert not problems
    drawn = read_perfetto((tmp_path / "job.pftrace").read_bytes())
    assert sum("multimem_all_reduce_kernel" in s.name and s.track[0] == "Communication"
               for s in drawn.slices) == 73


def test_summary_and_detail_match_the_same_collectives(tmp_path):
    """``kineto-2rank``'s communication is all NCCL SendRecv kernels (the raw traces'), which its c10d
    ops launched as all-to-alls, all-reduces and all-gathers: collectives, matched across the ranks
    alike in summary and detail (their Wait lanes), as the ops keep what they do in both kinds."""
    names = {e["name"] for path in _traces("kineto-2rank") for e in _events(path)[1]
             if e.get("cat") == "kernel" and e["name"].startswith("nccl")}
    assert names and all(name.startswith("ncclKernel_SendRecv_") for name in names)
    waits = {}
    for kind in ("summary", "detail"):
        convert(real_data("kineto-2rank"), tmp_path / f"{kind}.json", kind=kind, max_bytes=None)
        problems, _ = imported(tmp_path / f"{kind}.json", tmp_path)
        assert not problems
        drawn = read_chrome_json((tmp_path / f"{kind}.json").read_bytes())
        waits[kind] = {(s.process, s.name, s.start_ns) for s in drawn.slices
                       if s.name.startswith("Wait for rank")}
    assert waits["summary"] and waits["summary"] == waits["detail"]
