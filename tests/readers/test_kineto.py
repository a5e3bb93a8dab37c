"""The Kineto reader on generated PyTorch GPU jobs (``fixtures.kineto_gen``, checked against the
real traces in tests/test_kineto_generator.py), against the generator's manifest, in every order
real files come in: names last, events out of order, gzipped, cut off by a crash."""

from __future__ import annotations

from collections import Counter

import pytest
from trace_check import comparable, read_perfetto

from converters import Diagnostics, Layer, Options, convert, discover, overlap_report, read_profile
from fixtures.kineto_gen import write_kineto_traces

ORDERS = {"ordered": {},
          "names last, shuffled, gzipped": {"metadata_last": True, "shuffle": True, "gzip": True}}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    return {name: (root := tmp_path_factory.mktemp("kineto"),
                   write_kineto_traces(root, ranks=2, steps=3, seed=4, **options).manifest)
            for name, options in ORDERS.items()}


def _slices(root, kind="detail"):
    return [s for b in read_profile(discover(root), Options(kind=kind), Diagnostics()) for s in b.slices]


@pytest.mark.parametrize("order", ORDERS)
def test_every_event_is_drawn_once_and_every_launch_linked_to_its_work(jobs, order):
    root, manifest = jobs[order]
    slices = _slices(root)
    for file in manifest["rank_files"]:
        events = file["events"]
        mine = Counter(s.layer for s in slices if s.rank == file["rank"] and s.layer is not Layer.OVERLAP)
        drawn = sum(n for kind, n in events.items() if kind.startswith("X/") and kind.count("/") == 1)
        assert sum(mine.values()) == drawn + events.get("i", 0)
        arrows = events["f/ac2g"] - events.get("f/ac2g/orphan", 0) + events["f/fwdbwd"]  # launches, autograd
        assert sum(len(s.flows_in) for s in slices if s.rank == file["rank"]) == arrows > 100


def test_launches_that_start_no_arrow_are_not_counted_as_flow_events_lost(jobs):
    """Kineto's arrows come from the correlation ids of launches and kernels, slices drawn anyway
    (most runtime calls launch nothing); its flow events, orphans too, are left out by design."""
    root, manifest = jobs["ordered"]
    assert any(file["events"].get("f/ac2g/orphan") for file in manifest["rank_files"])
    diag = Diagnostics()
    assert list(read_profile(discover(root), Options(kind="detail"), diag))
    assert not any(kind.startswith("unjoined_flows") for kind in diag.counts)


@pytest.mark.parametrize("order", ORDERS)
def test_overlap_per_step_equals_the_generators_truth(jobs, order):
    root, manifest = jobs[order]
    rows = {(r.rank, r.step): r for r in overlap_report(root)}
    checked = 0
    for file in manifest["rank_files"]:
        for step in file["steps"]:
            row = rows[file["rank"], step["step"]]
            assert row.computing_ns == step["compute_ns"]
            assert row.communication_ns == step["comm_ns"]
            assert row.overlapped_ns == step["overlap_ns"]
            checked += 1
    assert checked == 6


def test_names_last_shuffled_and_gzipped_draws_exactly_what_the_ordered_file_draws(jobs, tmp_path):
    traces = []
    for order in ORDERS:
        out = tmp_path / f"{len(traces)}.pftrace"
        convert(jobs[order][0], out, kind="detail", max_bytes=None)
        traces.append(comparable(read_perfetto(out.read_bytes())))
    assert traces[0] == traces[1] and len(traces[0]) > 1000


def test_a_trace_cut_off_by_a_crash_keeps_its_whole_events_with_a_warning(tmp_path):
    whole = write_kineto_traces(tmp_path / "whole", ranks=1, steps=3, seed=4).manifest
    write_kineto_traces(tmp_path / "cut", ranks=1, steps=3, seed=4, truncate=True, gzip=True)
    diag = Diagnostics()
    batches = read_profile(discover(tmp_path / "cut"), Options(kind="detail"), diag)
    kept = [s for b in batches for s in b.slices if s.layer is not Layer.OVERLAP]
    assert 0 < len(kept) < sum(n for k, n in whole["rank_files"][0]["events"].items() if k.startswith("X/"))
    assert any("cut off" in m for m in diag.messages())


def test_gloo_collectives_are_communication_on_a_job_without_device_activity(tmp_path):
    manifest = write_kineto_traces(tmp_path, ranks=2, steps=3, seed=4, cpu_gloo=True).manifest
    rows = {(r.rank, r.step): r for r in overlap_report(tmp_path)}
    for file in manifest["rank_files"]:
        for step in file["steps"]:
            row = rows[file["rank"], step["step"]]
            assert row.computing_ns is None and row.free_ns is None
            assert row.communication_ns >= step["comm_ns"] > 0


def test_a_trace_cut_off_inside_its_header_is_an_error_naming_it_not_passed_over(out_dir, tmp_path, capsys):
    from converters.cli import main

    (tmp_path / "worker0.123.pt.trace.json").write_bytes(b'{"schemaVersion": 1, "distributedInfo": {"ra')
    assert main([str(tmp_path), "-o", str(out_dir / "out.pftrace")]) == 1
    err = capsys.readouterr().err
    assert "worker0.123.pt.trace.json: rank 0: byte" in err and "no profiler output" not in err


def _own_truth(path) -> tuple[int, list[tuple[int, int, int]], list[tuple[int, int]]]:
    """A CPU gloo trace read with json and Decimal alone: its rank, its steps (number, start, end)
    and its communication: the ``gloo:`` ranges (the collectives as gloo ran them; the ``c10d::``
    ops are their calls), in ns."""
    import json
    from decimal import Decimal

    data = json.loads(path.read_bytes(), parse_float=Decimal)
    base = int(data.get("baseTimeNanoseconds", 0))
    steps, comm = [], []
    for e in data["traceEvents"]:
        if e.get("ph") != "X":
            continue
        start = int(Decimal(e["ts"]) * 1000) + base
        end = start + int(Decimal(e["dur"]) * 1000)
        if e["name"].startswith("ProfilerStep#"):
            steps.append((int(e["name"].split("#")[1]), start, end))
        elif e["name"].startswith("gloo:"):
            comm.append((start, end))
    return data["distributedInfo"]["rank"], steps, sorted(comm)


def _covered(intervals: list[tuple[int, int]], start: int, end: int) -> int:
    """How long at least one of the (sorted) intervals runs between start and end."""
    total, reached = 0, start
    for a, b in intervals:
        a, b = max(a, reached), min(b, end)
        if a < b:
            total, reached = total + b - a, b
    return total


@pytest.mark.parametrize("steps", [3, 1])  # into the next step; past the last one
def test_a_gloo_range_that_outlasts_its_step_counts_in_the_steps_it_runs_into(tmp_path, out_dir, steps):
    traces = write_kineto_traces(tmp_path, ranks=2, steps=steps, seed=4, cpu_gloo=True,
                                 gloo_overrun_ns=50_000_000)
    rows = {(r.rank, r.step): r for r in overlap_report(tmp_path)}
    outlasting = 0
    for path in traces.paths:
        rank, own_steps, comm = _own_truth(path)
        for number, start, end in own_steps:
            outlasting += any(a < end < b for a, b in comm)
            assert rows.pop((rank, number)).communication_ns == _covered(comm, start, end) <= end - start
    assert not rows and outlasting  # every step, and the first one outlasted by its all-reduce
    convert(tmp_path, out_dir / "summary.pftrace")  # the lanes drawn: each within its step
    trace = read_perfetto((out_dir / "summary.pftrace").read_bytes())
    bounds = {(s.process.split()[1], s.start_ns, s.start_ns + s.dur_ns) for s in trace.slices
              if s.track[0] == "Step Trace" and s.name.startswith("Step ")}
    lanes = [s for s in trace.slices if s.track == ("Overlap Analysis", "Communication")]
    assert lanes and all(any(rank == s.process.split()[1] and a <= s.start_ns and s.start_ns + s.dur_ns <= b
                             for rank, a, b in bounds) for s in lanes)


# -- a 2022 trace kept in the repository (fixtures/public: HTA's trace_file_list data, MIT) ---------

def test_a_headless_trace_of_the_older_categories_is_found_and_read_whole(tmp_path):
    """Kineto of 2022 named its GPU categories as PyTorch 1.8 did (``Kernel``, ``Runtime``) and its
    launch arrows ``async_gpu``; this file has no ``.pt.trace.json`` name and its ``distributedInfo``
    comes last: it is found by its events' categories, its rank read from its end, every event
    drawn once, and each launch linked to its kernel once (the arrows are not read twice)."""
    import gzip
    import json
    import shutil
    from pathlib import Path

    from test_trace_processor import imported

    source = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "kineto-2022-hta"
    folder = tmp_path / "trace"
    shutil.copytree(source, folder)
    events = json.loads(gzip.decompress((folder / "inference_rank_1.json.gz").read_bytes()))["traceEvents"]
    (info,) = discover(folder)
    assert info.rank == 1
    diag = Diagnostics()
    slices = [s for b in read_profile([info], Options(kind="detail"), diag) for s in b.slices
              if s.layer not in (Layer.STEP, Layer.OVERLAP)]
    drawn = Counter((e["name"], e.get("dur", 0)) for e in events if e["ph"] in ("X", "i"))
    assert Counter((s.name, s.dur_ns // 1000) for s in slices) == drawn and sum(drawn.values()) == 14
    assert diag.messages() == []  # the async_gpu arrows no flow ends left unread
    out = tmp_path / "out.pftrace"
    convert(folder, out, kind="detail", max_bytes=None)
    problems, (_, _, flows) = imported(out, tmp_path)
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "Runtime"}
    kernels = {e["args"]["correlation"] for e in events if e.get("cat") == "Kernel"}
    assert problems == [] and flows == len(launches & kernels) == 4


def test_a_2022_trace_s_launch_arrows_are_its_correlation_ids_drawn_once(tmp_path):
    """Kineto of mid-2022 called its launch arrows ``async_cpu_to_gpu`` (today's ``ac2g``): they
    repeat the correlation ids, so each launched kernel, copy and memset has one arrow and no flow
    event is left unread (fixtures/public/kineto-2022-hta-8gpu: rank 3 of an 8-GPU A100 job, HTA's
    trace_diff data)."""
    import gzip
    import json
    from pathlib import Path

    from test_trace_processor import imported

    folder = Path(__file__).resolve().parents[2] / "fixtures" / "public" / "kineto-2022-hta-8gpu"
    events = json.loads(gzip.decompress((folder / "control.json.gz").read_bytes()))["traceEvents"]
    launches = {e["args"]["correlation"] for e in events if e.get("cat") == "cuda_runtime"}
    work = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    diag = Diagnostics()
    slices = [s for b in read_profile(discover(folder), Options(kind="detail"), diag) for s in b.slices]
    assert not any("not converted" in m for m in diag.messages())
    linked = sum(e["args"]["correlation"] in launches for e in work)
    assert sum(len(s.flows_in) for s in slices) == linked == 9450
    out = tmp_path / "out.pftrace"
    convert(folder, out, kind="detail", max_bytes=None)
    problems, (_, _, flows) = imported(out, tmp_path)
    assert problems == [] and flows == 9450
