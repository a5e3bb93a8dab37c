"""The critical path (``trace2perfetto critical``): the graph algebra's properties, hand-built graphs
with known answers, a generated job with a known straggler and pipeline, and the real 2-rank
torch_npu sample against ``comm``'s own matching."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from converters import communication
from converters.analyses import critical as analysis
from converters.analyses.comm import comm_report
from converters.cli import main
from converters.dependency_graph import Graph, Node, Segment, contract, segments, shorter
from converters.model import StepKey
from converters.profile import Kind, Options, Profile
from fixtures.ascend_pt_gen import write_ascend_pt_profile

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "critical.schema.json").read_text())
REAL = os.environ.get("TRACE2PERFETTO_REALDATA")


# -- the algebra ----------------------------------------------------------------------------------

@st.composite
def graphs(draw) -> Graph:
    """A DAG of slices in start order, each after some earlier ones that ended before it began."""
    graph = Graph()
    t = 0
    for _ in range(draw(st.integers(1, 25))):
        t += draw(st.integers(0, 50))
        ended = [i for i, n in enumerate(graph.nodes) if n.end_ns <= t]
        preds = draw(st.lists(st.sampled_from(ended), max_size=3)) if ended else []
        rank, dur, kind = draw(st.integers(0, 2)), draw(st.integers(0, 80)), draw(st.sampled_from(["A", "B"]))
        graph.add(Node(rank, "compute", f"op{len(graph.nodes)}", t, dur, kind), preds)
    return graph


def _longest(graph: Graph) -> tuple[list[int], list[int], int]:
    durs = graph.durations()
    starts = graph.schedule(durs)
    last = max(range(len(graph.nodes)), key=lambda i: (starts[i] + durs[i], i))
    return graph.chain(last, starts, durs), starts, starts[last] + durs[last]


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_the_unchanged_graph_recomputes_to_what_was_observed(graph):
    assert graph.schedule() == [n.start_ns for n in graph.nodes]


@settings(max_examples=200, deadline=None)
@given(graphs())
def test_the_path_tiles_the_span_in_time_order(graph):
    chain, starts, end = _longest(graph)
    begin = min(n.start_ns for n in graph.nodes)
    path = segments([(graph.nodes[i], starts[i], graph.nodes[i].dur_ns) for i in chain], begin, end)
    assert sum(s.dur_ns for s in path) == end - begin
    assert all(a.start_ns + a.dur_ns == b.start_ns for a, b in zip(path, path[1:], strict=False))
    assert not path or path[0].start_ns == begin


@settings(max_examples=200, deadline=None)
@given(graphs(), st.data())
def test_a_what_if_saves_no_more_than_it_changes_and_nothing_off_the_path(graph, data):
    chain, _, end = _longest(graph)
    i = data.draw(st.integers(0, len(graph.nodes) - 1))
    cut = data.draw(st.integers(0, graph.nodes[i].dur_ns))
    durs = graph.durations({i: graph.nodes[i].dur_ns - cut})
    starts = graph.schedule(durs)
    saved = end - max(s + d for s, d in zip(starts, durs, strict=True))
    assert 0 <= saved <= cut
    if i not in chain:
        assert saved == 0


def test_a_straggler_before_a_collective_sets_the_path():
    """Two ranks into one collective: rank 1 computes 30 ns longer; the path enters the collective
    from rank 1, and removing its delay saves those 30 ns."""
    steps = []
    key = communication.Key("hccl group 1", StepKey(0, 1), "hcom_allReduce__1_0_1", 0)
    for rank, work in ((0, 100), (1, 130)):
        graph = Graph()
        a = graph.add(Node(rank, "compute", "matmul", 0, work, "MatMul"))
        arrival = graph.add(Node(rank, "", "hcom_allReduce__1_0_1", work + 5, 0), [a])
        done = graph.add_lagged(Node(rank, "communication", key.name, work + 5, 140 - work), [])
        graph.add(Node(rank, "compute", "add", 150, 20, "Add"), [done])
        sync = analysis.Sync(key, key.name, arrival, done, work + 5, 145, None, None, False, key.group, None,
                             "")
        steps.append(analysis.reduced(_bare(rank, sync), graph))
    found = analysis.step_path(steps)
    assert found.step_ns == 170
    assert sum(s.dur_ns for s in found.path) == 170
    kinds = [(s.rank, s.kind, s.name) for s in found.path]
    assert (1, "compute", "matmul") in kinds and (0, "compute", "matmul") not in kinds
    top = found.what_if[0]
    assert (top.kind, top.rank, top.saved_ns) == ("late_arrival", 1, 30)


def test_collectives_matched_against_a_ranks_own_order_are_left_unjoined_not_a_crash():
    """Rank 0 runs the allReduce then the broadcast, rank 1 the broadcast then the allReduce (an
    NCCL kernel of one step run late into the next on one rank: the bench's 2-rank Paddle GPU job).
    Matched by name and index, each waits on the other: a cycle. The path leaves the matches on it
    out (each side completes after its own arrival), says how many, and still tiles the step."""
    steps = []
    keys = [communication.Key("hccl group 1", StepKey(0, 1), name, 0)
            for name in ("hcom_allReduce__1_0_1", "hcom_broadcast__1_0_1")]
    for rank, order in ((0, keys), (1, keys[::-1])):
        graph = Graph()
        a = graph.add(Node(rank, "compute", "matmul", 0, 100, "MatMul"))
        syncs = []
        for (arrive, end_ns), key in zip(((100, 150), (160, 200)), order, strict=True):
            arrival = graph.add(Node(rank, "", key.name, arrive, 0), [a])
            a = graph.add_lagged(Node(rank, "communication", key.name, arrive, end_ns - arrive), [])
            syncs.append(analysis.Sync(key, key.name, arrival, a, arrive, end_ns, None, None, False,
                                       key.group, None, ""))
        graph.add(Node(rank, "compute", "add", 200, 10, "Add"), [a])
        bare = analysis.RankStep(rank, None, 1, StepKey(0, 1), 0, 0, syncs, [], {})
        steps.append(analysis.reduced(bare, graph))
    found = analysis.step_path(steps)
    assert found.unjoined >= 1
    assert found.step_ns == 210 and sum(s.dur_ns for s in found.path) == 210


def _stage(rank: int, before: tuple[int, int] | None, op: tuple[str, int, int], after: tuple[int, int] | None,
           peer: int) -> analysis.RankStep:
    """One pipeline stage's step: compute, a send or receive (name, arrival, end), compute."""
    graph = Graph()
    preds = [graph.add(Node(rank, "compute", f"fwd{rank}", *before, "MatMul"))] if before else []
    name, arrive, end_ns = op
    arrival = graph.add(Node(rank, "", name, arrive, 0), preds)
    done = graph.add_lagged(Node(rank, "communication", name, arrive, end_ns - arrive), [])
    if after:
        graph.add(Node(rank, "compute", f"fwd{rank}b", *after, "MatMul"), [done])
    kind = "receive" if "receive" in name else "send"
    sync = analysis.Sync(None, name, arrival, done, arrive, end_ns, None, None, False, "hccl group 9", peer,
                         kind)
    return analysis.reduced(_bare(rank, sync), graph)


def _bare(rank: int, sync: analysis.Sync) -> analysis.RankStep:
    return analysis.RankStep(rank, None, 1, StepKey(0, 1), 0, 0, [sync], [], {})


def test_a_two_stage_pipeline_runs_through_the_send_and_its_receive():
    """Stage 0 computes 0-100 and sends (done at 150); stage 1's receive waits from 20, then it
    computes 150-250: the path is stage 0's compute, the transfer, stage 1's compute."""
    found = analysis.step_path([_stage(0, (0, 100), ("hcom_send__9_0_1", 100, 150), None, 1),
                                _stage(1, None, ("hcom_receive__9_0_1", 20, 150), (150, 100), 0)])
    assert found.step_ns == 250
    assert [(s.rank, s.kind, s.start_ns, s.dur_ns) for s in found.path] == [
        (0, "compute", 0, 100), (1, analysis.UNSPLIT, 100, 50), (1, "compute", 150, 100)]  # no plane tasks
    saved = {(w.kind, w.rank): w.saved_ns for w in found.what_if}
    assert saved[("late_arrival", 0)] == 80  # the send arrives with its receive: at 20
    assert saved[("overlap_comm", 1)] == 50
    assert saved[("op_type", 0)] == 10 and saved[("op_type", 1)] == 10


# -- generated jobs -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def slow_job(tmp_path_factory):
    root = tmp_path_factory.mktemp("critical_slow")
    truth = write_ascend_pt_profile(root, ranks=4, steps=2, tasks_per_step=30, slow_rank=2, slow_ns=2_000_000,
                                    seed=3)
    return root, truth


def test_the_path_goes_through_the_slow_rank_and_removing_its_delay_saves_it(slow_job):
    root, truth = slow_job
    for found in analysis.critical_report(root):
        assert sum(s.dur_ns for s in found.path) == found.step_ns
        late = [w for w in found.what_if if w.kind == "late_arrival"]
        assert late and late[0].rank == 2
        # the slack the generator's truth gives: the slow rank's lead over the one before it
        slack = {c.name: sorted(c.starts_ns.values())[-1] - sorted(c.starts_ns.values())[-2]
                 for c in truth.collectives if c.step == found.step}
        assert abs(late[0].saved_ns - slack[late[0].target]) <= 0.05 * slack[late[0].target]
        assert 2 in {s.rank for s in found.path if s.kind == "compute"}


def test_a_pipeline_s_path_crosses_its_stages_through_send_and_receive(tmp_path):
    write_ascend_pt_profile(tmp_path, ranks=4, steps=2, tasks_per_step=20, pp=2, seed=5)
    stages = ({0, 2}, {1, 3})  # the generator's pipelines: ranks r and r + 2
    for found in analysis.critical_report(tmp_path):
        ranks = {s.rank for s in found.path}
        assert any(stage <= ranks for stage in stages), ranks
        assert any("send" in s.name or "receive" in s.name for s in found.path
                   if s.kind in ("communication", analysis.UNSPLIT))
        assert sum(s.dur_ns for s in found.path) == found.step_ns
        pairs = zip(found.path, found.path[1:], strict=False)
        assert all(a.start_ns + a.dur_ns == b.start_ns for a, b in pairs)


# -- the real 2-rank torch_npu sample -------------------------------------------------------------

@pytest.fixture(scope="module")
def real(tmp_path_factory):
    if not REAL:
        pytest.skip("TRACE2PERFETTO_REALDATA is not set")
    copy = tmp_path_factory.mktemp("critical_real") / "ascend-pt-2rank"
    shutil.copytree(Path(REAL) / "ascend-pt-2rank", copy)
    for own in copy.glob("*/ASCEND_PROFILER_OUTPUT/communication.json"):
        own.unlink()  # the profiler's own analysis: what we compute must not come from it
    return copy


def test_real_the_path_enters_each_allreduce_from_the_rank_that_arrived_last(real):
    report = comm_report(real)
    last = {(op.step, op.name): op.last_rank for op in report.ops if op.last_rank is not None}
    lateness = {(op.step, op.name): op.skew_ns for op in report.ops if op.skew_ns is not None}
    paths = list(analysis.critical_report(real))
    assert paths
    for found in paths:
        assert abs(sum(s.dur_ns for s in found.path) - found.step_ns) <= found.step_ns / 100
        for before, seg in zip(found.path, found.path[1:], strict=False):
            entering = seg.kind in ("wait", "communication") and before.name != seg.name
            if entering and (found.step, seg.name) in last:
                assert before.rank == last[found.step, seg.name], seg  # what ran up to the collective
        # ranks 2-7 of its 8-rank allreduces are not in the sample: the tasks name them, so the time
        # after the last profiled arrival is mostly a wait for them, the rest transit
        wait = sum(s.dur_ns for s in found.path if s.kind == "wait")
        assert wait > 10 * sum(s.dur_ns for s in found.path if s.kind == "communication") > 0
        top = found.what_if[0]
        if top.kind == "late_arrival":
            assert top.rank == last[found.step, top.target]
            assert top.saved_ns <= lateness[found.step, top.target]


def test_real_op_type_what_ifs_name_the_types_ops_lists(real, capsys):
    """trace_view.json names each kernel, not its op type: the what-if takes it from
    kernel_details.csv beside it, as ``ops --by type`` does (docs/analysis.md, section 11)."""
    assert main(["ops", str(real), "--by", "type", "--format", "json", "-q"]) == 0
    listed = {(row["Rank"], row["OP Type"]) for row in json.loads(capsys.readouterr().out)}
    assert main(["critical", str(real), "--format", "json", "-q"]) == 0
    (step,) = [d for d in json.loads(capsys.readouterr().out) if d["step"] == 50]
    targets = {(w["rank"], w["target"]) for w in step["what_if"] if w["kind"] == "op_type"}
    assert targets and targets <= listed, targets - listed


def test_real_an_open_profile_gives_the_same_paths(real):
    opened = Profile.open(real, Options(ranks=[0, 1], kind=Kind.SUMMARY))
    assert list(analysis.critical_report(opened)) == list(analysis.critical_report(real))


def test_real_cli_json_table_and_csv(real, capsys):
    assert main(["critical", str(real), "--format", "json", "-q"]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, SCHEMA)
    assert [d["step"] for d in document] == [50]
    step = document[0]
    assert abs(sum(s["dur_us"] for s in step["path"]) - step["step_us"]) < step["step_us"] / 1000
    assert step["what_if"][0]["kind"] == "late_arrival" and step["what_if"][0]["rank"] == 1
    assert main(["critical", str(real), "-q"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split()[:3] == ["Graph", "Step", "Step(us)"] and "rank 1 arrives" in table[1]
    assert main(["critical", str(real), "--format", "csv", "-q", "--align", "collectives"]) == 0
    assert capsys.readouterr().out.startswith("Graph,Step,Step(us),Compute(us)")


def test_segments_of_an_empty_chain_are_one_idle_piece():
    assert segments([], 0, 10) == [Segment(-1, "idle", "idle", 0, 10)]


@st.composite
def local_graphs(draw):
    """One rank's graph with synchronisation points: arrivals (points) and, after each, a
    completion without local predecessors that starts no earlier than its arrival, as the step's
    graph across ranks makes it start."""
    graph = Graph()
    t = 0
    through: dict[int, int] = {}
    for _ in range(draw(st.integers(1, 20))):
        t += draw(st.integers(0, 40))
        ended = [i for i, n in enumerate(graph.nodes) if n.end_ns <= t and n.kind]
        preds = draw(st.lists(st.sampled_from(ended), max_size=3)) if ended else []
        if draw(st.integers(0, 4)) == 0 and preds:
            arrival = graph.add(Node(0, "", "op", t, 0), preds)
            t += draw(st.integers(0, 30))
            done = Node(0, "communication", "op", t, draw(st.integers(0, 30)))
            through[arrival] = graph.add_lagged(done, [])
        else:
            dur, op_type = draw(st.integers(0, 60)), draw(st.sampled_from("AB"))
            graph.add(Node(0, "compute", "k", t, dur, op_type), preds)
    ends = [i for i, n in enumerate(graph.nodes) if n.kind]
    end = graph.add(Node(0, "", "end", max(graph.nodes[i].end_ns for i in ends), 0), ends)
    return graph, through, end


def _through_contraction(graph, edges, sources: dict[int, int], durs=None, by_type=None) -> dict[int, int]:
    """Each sink's start from the contracted edges, the sources ending at ``sources``."""
    out: dict[int, int] = {}
    for c in edges:
        lag = c.by_type.get(by_type, c.lag_ns) if by_type else c.lag_ns
        begin = 0 if c.source is None else sources[c.source]
        out[c.sink] = max(out.get(c.sink, -(1 << 62)), begin + lag)
    return out


@settings(max_examples=200, deadline=None)
@given(local_graphs(), st.data())
def test_the_contraction_gives_each_sink_the_time_the_whole_graph_gives(built, data):
    """With the completions moved later (other ranks arriving later), the contracted chains give
    each arrival and the end the start the whole local graph gives; with an op type 10% shorter,
    the same (all pairs kept: the pruning assumes the observed durations)."""
    graph, through, end = built
    sinks = [*through, end]
    for by_type, pruned in ((None, True), ("A", False)):
        durs = [shorter(n.dur_ns) if by_type and n.op_type == by_type else n.dur_ns for n in graph.nodes]
        anchors: dict[int, int] = {}
        starts = graph.schedule(durs)
        for arrival, done in sorted(through.items()):  # each completion after its arrival, in order
            anchors[done] = starts[arrival] + data.draw(st.integers(0, 50))
            starts = graph.schedule(durs, anchors=anchors)
        edges = contract(graph, list(through.values()), sinks, through if pruned else None).edges
        ends = {done: starts[done] + durs[done] for done in through.values()}
        found = _through_contraction(graph, edges, ends, by_type=by_type)
        for sink in sinks:
            assert found[sink] == starts[sink], (sink, by_type)
