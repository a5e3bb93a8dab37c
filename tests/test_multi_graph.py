"""A job of several graphs (issue 23): CANN numbers iterations per graph, so graphs 2 and 5 both
have a step 1, and ranks of one job number the same graph differently (msprof-2rank: model 2 on
rank 0 is model 0 on rank 1). Every consumer names a step as the job does (``model.StepKey``: the
graph by the order each rank's graphs first ran, and the step id), never by its id alone.

The profile: 8 ranks on 2 nodes, graph 2 then graph 5 (odd ranks call them 0 and 3), 3 iterations
each, one graph after the other. The generator's own counts and CANN's overlap lanes (which it
writes beside the tasks, computed apart from the converter) are the truth.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path

import jsonschema
import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from trace_check import read_chrome_json, read_perfetto

from converters import Diagnostics, Options, convert, discover, read_profile
from converters.analyses.comm import comm_report
from converters.analyses.report import Thresholds, report_data, report_json
from converters.cli import main
from converters.model import StepRecords
from converters.profile import keyed
from fixtures.msprof_gen import OVERLAP_LANES, write_msprof_profile

GRAPHS, ODD_GRAPHS, STEPS, RANKS = (2, 5), (0, 3), 3, 8
OUR_LANES = dict(zip(OVERLAP_LANES, ("Computing", "Communication", "Communication (not overlapped)", "Free"),
                     strict=True))


def _job(root: Path, layout: str = "timeline"):
    return write_msprof_profile(root, ranks=RANKS, graphs=GRAPHS, odd_rank_graphs=ODD_GRAPHS, steps=STEPS,
                                graphs_in_turn=False, ranks_per_host=4, tasks_per_step=60, layout=layout,
                                seed=23)


@pytest.fixture(scope="module", params=["timeline", "cann8"])
def job(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(f"multi-graph-{request.param}")
    return root, _job(root, request.param)


def _cann_overlap(generated) -> dict[tuple[int, str], list[tuple[int, int]]]:
    """CANN's Overlap Analysis lanes the generator wrote into each rank's msprof files, epoch ns."""
    lanes: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for r in generated.ranks:
        pid = r.host_pid * 100 + 12  # the generator's Overlap Analysis process
        for path in r.prof_dir.rglob("msprof_*.json"):
            for e in orjson.loads(path.read_bytes()):
                if e.get("ph") == "X" and e["pid"] == pid:
                    start = round(e["ts"] * 1000) + r.epoch_offset_ns
                    lane = OUR_LANES[OVERLAP_LANES[e["tid"]]]
                    lanes[r.rank, lane].append((start, start + round(e["dur"] * 1000)))
    return {key: sorted(v) for key, v in lanes.items()}


def _written_overlap(trace) -> dict[tuple[int, str], list[tuple[int, int]]]:
    lanes: dict[tuple[int, str], list[tuple[int, int]]] = defaultdict(list)
    for s in trace.slices:
        if s.track[0] == "Overlap Analysis" and s.track[1] in OUR_LANES.values():
            lanes[int(s.process.split()[1]), s.track[1]].append((s.start_ns, s.start_ns + s.dur_ns))
    return {key: sorted(v) for key, v in lanes.items()}


def _device_slices(trace) -> Counter:
    return Counter(int(s.process.split()[1]) for s in trace.slices
                   if s.track[0] in ("Ascend Hardware", "Communication"))


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_detail_keeps_every_task_of_every_graph_and_the_overlap_of_every_step(job, tmp_path, suffix, capsys):
    root, generated = job
    out = tmp_path / f"job{suffix}"
    assert main([str(root), "--kind", "detail", "--max-size", "0", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"{RANKS} ranks, {len(GRAPHS) * STEPS} steps" in err
    assert "warning" not in err  # nothing left out, out of order or otherwise
    trace = (read_perfetto if suffix == ".pftrace" else read_chrome_json)(out.read_bytes())
    truth = {r.rank: r.device_tasks + r.hccl_tasks + r.hccl_ops for r in generated.ranks}
    assert _device_slices(trace) == truth
    written, truth = _written_overlap(trace), _cann_overlap(generated)
    if suffix == ".json":  # relative to the JSON origin: compare the lanes' shapes from the first slice
        shift = min(a for v in truth.values() for a, _ in v) - min(a for v in written.values() for a, _ in v)
        written = {k: [(a + shift, b + shift) for a, b in v] for k, v in written.items()}
    assert written == truth  # interval by interval, to the ns


def test_every_step_of_every_graph_is_one_step_of_the_job(job):
    root, _ = job
    keys = defaultdict(set)
    for batch in read_profile(discover(root), Options(), Diagnostics()):
        keys[batch.key].add((batch.rank, batch.graph))
    assert len(keys) == len(GRAPHS) * STEPS
    for key, members in keys.items():  # each step of the job: every rank, the same graph by its order
        ranks = {rank for rank, _ in members}
        assert ranks == set(range(RANKS))
        assert {graph for rank, graph in members if rank % 2 == 0} == {GRAPHS[key.graph]}
        assert {graph for rank, graph in members if rank % 2} == {ODD_GRAPHS[key.graph]}


def test_steps_option_keeps_that_step_of_every_graph(job, tmp_path):
    root, _ = job
    result = convert(root, tmp_path / "s.pftrace", steps=[2], kind="summary")
    assert result.steps == len(GRAPHS) and not result.warnings
    trace = read_perfetto((tmp_path / "s.pftrace").read_bytes())
    named = {(int(s.process.split()[1]), s.track[1], s.name) for s in trace.slices
             if s.track[0] == "Step Trace" and s.name.startswith("Step ")}
    assert named == {(r, f"Graph {g}", "Step 2") for r in range(RANKS)
                     for g in (ODD_GRAPHS if r % 2 else GRAPHS)}


def test_a_cut_detail_keeps_whole_steps_of_the_job_in_time_order(job, tmp_path):
    root, _ = job
    whole = convert(root, tmp_path / "whole.pftrace", kind="detail", max_bytes=None)
    summary = convert(root, tmp_path / "summary.pftrace", kind="summary", max_bytes=None)
    cap = summary.bytes_written + (whole.bytes_written - summary.bytes_written) // 2
    result = convert(root, tmp_path / "cut.pftrace", kind="detail", max_bytes=cap)
    assert result.cut and result.steps == len(GRAPHS) * STEPS
    trace = read_perfetto((tmp_path / "cut.pftrace").read_bytes())
    steps = sorted((s.start_ns, s.start_ns + s.dur_ns, int(s.process.split()[1]), s.track[1], s.name)
                   for s in trace.slices if s.track[0] == "Step Trace" and s.name.startswith("Step "))
    tasks = defaultdict(list)
    for s in trace.slices:
        if s.track[0] == "Ascend Hardware":
            tasks[int(s.process.split()[1])].append(s.start_ns)
    with_detail = [any(start <= t < end for t in tasks[rank]) for start, end, rank, _, _ in steps]
    # in time order, the steps with detail come first, then those without: whole steps of the job
    assert any(with_detail) and not all(with_detail)
    assert with_detail == sorted(with_detail, reverse=True)
    assert f"detail for graph {GRAPHS[0]} step" in result.cut


def test_spread_and_waits_compare_the_same_step_of_the_same_graph(job):
    root, _ = job
    report = comm_report(root)
    assert len(report.spread) == len(GRAPHS) * STEPS
    assert {(s.graph, s.step) for s in report.spread} == {(g, n) for g in GRAPHS for n in range(1, STEPS + 1)}
    assert all(s.ranks == RANKS for s in report.spread)
    assert report.instances == len(GRAPHS) * STEPS  # one allreduce per step of each graph, on all ranks
    assert all(op.ranks == RANKS for op in report.ops)


def test_report_judges_a_rank_against_every_rank_of_its_step(job):
    root, _ = job
    # every rank-step passes this straggler threshold, so each says how many ranks it was judged among
    report = report_data(root, thresholds=Thresholds(straggler_step_excess=-1.0))
    judged = [d.evidence["ranks_in_step"] for d in report.diagnoses if d.kind == "straggler"]
    assert len(judged) == RANKS * len(GRAPHS) * STEPS and set(judged) == {RANKS}
    document = report_json(report_data(root))
    jsonschema.validate(document, json.loads((Path(__file__).parents[1] / "schemas" / "report.schema.json")
                                             .read_text()))
    assert sorted((s["graph"], s["step"], s["ranks"]) for s in document["spread"]) == [
        (g, n, RANKS) for g in GRAPHS for n in range(1, STEPS + 1)]


def test_comm_json_names_each_step_of_the_spread_by_its_graph(job, capsys):
    root, _ = job
    assert main(["comm", str(root), "--slow-ranks", "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, json.loads((Path(__file__).parents[1] / "schemas" / "comm.schema.json")
                                             .read_text()))
    assert sorted((s["Graph"], s["Step"]) for s in document["spread"]) == [
        (g, n) for g in GRAPHS for n in range(1, STEPS + 1)]


# -- the key itself, as a property -------------------------------------------------------------------

def _runs():
    """A rank's steps as it reads them: runs of graphs (a graph may run again, numbering anew), each
    run's steps rising, the runs one after the other or in turn, step by step."""
    run = st.tuples(st.integers(0, 3), st.integers(1, 5), st.integers(1, 4))  # graph, first step, steps
    return st.tuples(st.lists(run, min_size=1, max_size=4), st.booleans())


def _renamed(runs: list[int]) -> list[int]:
    """Runs numbered by the order of their first step read."""
    first = list(dict.fromkeys(runs))
    return [first.index(run) for run in runs]


def _read_order(runs, in_turn: bool) -> list[tuple[int, int, int]]:
    """(run, graph, step) in the order read; a graph's runs never overlap (a new run of a graph
    numbers its steps anew, from at most the last's)."""
    last: dict[int, int] = {}
    fixed = []
    for graph, first, count in runs:
        first = min(first, last.get(graph, first))  # a graph running again starts from its last or lower
        fixed.append((graph, list(range(first, first + count))))
        last[graph] = first
    if not in_turn:
        return [(i, g, s) for i, (g, steps) in enumerate(fixed) for s in steps]
    out, cursor = [], [0] * len(fixed)
    while any(c < len(steps) for c, (_, steps) in zip(cursor, fixed, strict=True)):
        for i, (g, steps) in enumerate(fixed):
            busy = any(fixed[j][0] == g and cursor[j] < len(fixed[j][1]) for j in range(i))
            if cursor[i] < len(steps) and not busy:  # one run of a graph at a time
                out.append((i, g, steps[cursor[i]]))
                cursor[i] += 1
    return out


@settings(max_examples=300, deadline=None)
@given(_runs(), st.permutations(range(4)))
def test_keys_name_the_same_steps_on_ranks_that_number_their_graphs_differently(runs, renumber):
    order = _read_order(*runs)
    assume(order)
    mine = [StepRecords(0, graph, step, None, []) for _, graph, step in order]
    theirs = [StepRecords(1, renumber[graph], step, None, []) for _, graph, step in order]
    keys = [b.key for b in keyed(mine)]
    assert keys == [b.key for b in keyed(theirs)]  # the graph ids do not matter, only their order
    assert len(set(keys)) == len(keys)  # every step of the rank a step of its own
    for graph in {g for _, g, _ in order}:  # a graph's keys rise as read: its chunks are never out of order
        of_graph = [k for k, (_, g, _) in zip(keys, order, strict=True) if g == graph]
        assert of_graph == sorted(of_graph)
    began = list(dict.fromkeys(k.graph for k in keys))
    assert began == list(range(len(began)))  # runs numbered in the order they began
    assert [k.graph for k in keys] == [began[run] for run in _renamed([run for run, _, _ in order])]
