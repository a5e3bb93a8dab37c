"""The C schedule ``contract`` walks (``converters._dependency_graph``, via ``_Packed``) is the
Python one: ``Graph.schedule`` from a source's anchors with an op type 10% shorter, and the chain
``Graph.chain`` walks back along binding predecessors (``_chains_rule``: a source's chains as one tree,
each with the op types on it), on random graphs (ties, unreached nodes, negative lags, sources late
in the order)."""

from __future__ import annotations

from array import array

from hypothesis import given, settings
from hypothesis import strategies as st

from converters.dependency_graph import (
    HOST,
    NEVER,
    OP,
    TASK,
    Contracted,
    Graph,
    Node,
    RankItems,
    Schedules,
    _chains_in_c,
    _chains_rule,
    _Packed,
    _pairs_in_c,
    _pairs_rule,
    _typed_chains,
    _typed_chains_rule,
    rank_edges,
    rank_edges_rule,
    shorter,
    unfollowed,
)

TYPES = ("MatMul", "Conv", None)


@st.composite
def graphs(draw) -> Graph:
    graph = Graph()
    for i in range(draw(st.integers(1, 40))):
        node = Node(0, draw(st.sampled_from(("compute", "host", ""))), f"n{i}", draw(st.integers(0, 1000)),
                    draw(st.integers(0, 300)), draw(st.sampled_from(TYPES)))
        preds = draw(st.lists(st.integers(0, i - 1), max_size=4)) if i else []
        if draw(st.booleans()):  # the observed lag on every edge in
            graph.add(node, preds)
        else:  # lags of their own, some negative, repeated predecessors
            graph.add_lagged(node, [(p, draw(st.integers(-200, 200))) for p in preds])
    return graph


def python_anchors(graph: Graph, sources: set[int], source: int | None) -> dict[int, int | None]:
    """The anchors contract schedules from, as Graph.schedule takes them."""
    out: dict[int, int | None] = {}
    for i, edges in enumerate(graph.preds):
        if not edges:
            if source is None:
                out[i] = None if i in sources else graph.nodes[i].start_ns
            else:
                out[i] = graph.nodes[i].start_ns if i == source else None
    return out


@settings(max_examples=300, deadline=None)
@given(graphs(), st.data())
def test_the_c_schedule_is_graph_schedule(graph: Graph, data) -> None:
    anchored = [i for i, edges in enumerate(graph.preds) if not edges]
    sources = set(data.draw(st.lists(st.sampled_from(anchored), max_size=3)))
    source = data.draw(st.sampled_from([None, *sorted(sources)]))
    op_type = data.draw(st.sampled_from(TYPES))
    first = 0 if source is None else source
    packed = _Packed(graph)

    stop = data.draw(st.integers(first, len(graph.nodes)))

    starts, binding = packed.schedule(packed.anchors(sources, source), first, op_type, stop)

    durs = [shorter(n.dur_ns) if op_type is not None and n.op_type == op_type else n.dur_ns
            for n in graph.nodes]
    expected = graph.schedule(durs, anchors=python_anchors(graph, sources, source), first=first)
    assert list(starts) == expected[first:stop]  # the window: no node in it depends on one after
    assert all(start == NEVER for start in expected[:first])
    starts, binding = packed.schedule(packed.anchors(sources, source), first, op_type)
    sinks = data.draw(st.lists(st.integers(0, len(graph.nodes) - 1), max_size=6))
    assert [list(c) for c in _pairs_in_c(packed, sorted(sources), sinks)] == [
        list(c) for c in _pairs_rule(packed, sorted(sources), sinks)]
    if op_type is None:  # every reached node a sink, in an order drawn: later chains go on from earlier ones
        reached = data.draw(st.permutations([i for i, start in enumerate(expected) if start != NEVER]))
        whole = [-1] * first + binding.tolist()  # binding is of the nodes from first on
        chains, types = _chains_rule(reached, whole, [n.op_type for n in graph.nodes])
        assert _chains_in_c(packed, reached, binding, first) == (chains, types)
        for i in reached:
            assert chains.chain(i) == graph.chain(i, expected, durs)
            assert types[i] == {graph.nodes[k].op_type for k in chains.chain(i)} - {None}
        assert sorted(chains.nodes) == sorted({k for i in reached for k in chains.chain(i)})  # each once


@settings(max_examples=300, deadline=None)
@given(graphs(), st.data())
def test_a_sources_chains_and_op_type_lags_in_c_are_the_rule(graph: Graph, data) -> None:
    """``_typed_chains`` (one C call per source: its schedule, its chains, one schedule per op type
    on them, each begun at that type's first node) gives the chains and every edge's ``by_type`` the
    rule's schedules give, in the same order, from the anchors and from a source alike."""
    anchored = [i for i, edges in enumerate(graph.preds) if not edges]
    sources = set(data.draw(st.lists(st.sampled_from(anchored), max_size=3)))
    source = data.draw(st.sampled_from([None, *sorted(sources)]))
    packed = _Packed(graph)
    first = 0 if source is None else source
    starts, _ = packed.schedule(packed.anchors(sources, source), first)
    reached = [first + k for k, start in enumerate(starts) if start != NEVER and first + k != source]
    if not reached:
        return
    sinks = data.draw(st.lists(st.sampled_from(reached), min_size=1, unique=True))

    def edges() -> list[Contracted]:
        return [Contracted(source, sink, 0, {}) for sink in sinks]

    mine, theirs = edges(), edges()
    assert _typed_chains(packed, sources, source, mine) == _typed_chains_rule(packed, sources, source, theirs)
    assert [list(c.by_type.items()) for c in mine] == [list(c.by_type.items()) for c in theirs]


@settings(max_examples=400, deadline=None)
@given(graphs(), st.sampled_from(TYPES))
def test_an_end_after_the_unfollowed_work_is_the_end_after_all_of_it(graph: Graph, op_type) -> None:
    """The rank's end after only the work no other work follows at a lag >= 0 (``unfollowed``)
    starts when, and binds to what, the end after every slice does, in a schedule with an op type
    10% shorter too (the contraction's)."""
    ends = [i for i, n in enumerate(graph.nodes) if n.kind]
    if not ends:
        return
    kept = unfollowed(graph, ends)
    found = []
    for before in (ends, kept):
        whole = Graph()
        whole.nodes, whole.preds = list(graph.nodes), [list(edges) for edges in graph.preds]
        end = whole.add_lagged(Node(0, "", "end", 0, 0), [(i, 0) for i in before])
        packed = _Packed(whole)
        starts, binding = packed.schedule(packed.anchors(set(), None), 0, op_type)
        found.append((starts[end], binding[end]))
    assert found[0] == found[1] and len(kept) <= len(ends)


@st.composite
def rank_items(draw) -> RankItems:
    """A rank's launches, tasks and ops as ``rank_edges`` takes them: ties in time and kind, few
    lanes, arrows launched once or more, before or after their work, or never."""
    n = draw(st.integers(0, 30))
    kinds = draw(st.lists(st.sampled_from((OP, HOST, TASK)), min_size=n, max_size=n))
    starts = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n))
    at = [start + draw(st.integers(-3, 3)) for start in starts]  # an op's slice begins near the op
    durs = draw(st.lists(st.integers(0, 20), min_size=n, max_size=n))
    ends = [start + dur + draw(st.integers(0, 2)) for start, dur in zip(starts, durs, strict=True)]
    lanes = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    flows = [draw(st.lists(st.integers(0, 6), max_size=3)) for _ in range(n)]
    ins = [f if kind != HOST else [] for f, kind in zip(flows, kinds, strict=True)]
    outs = [f if kind == HOST else [] for f, kind in zip(flows, kinds, strict=True)]

    def packed(per_item: list[list[int]]) -> tuple[array, array]:
        offsets = array("q", [0])
        for mine in per_item:
            offsets.append(offsets[-1] + len(mine))
        return offsets, array("q", [f for mine in per_item for f in mine])

    return RankItems(*(array("q", column) for column in (kinds, starts, at, durs, ends, lanes)),
                     *packed(ins), *packed(outs))


@settings(max_examples=500, deadline=None)
@given(rank_items())
def test_a_rank_step_made_a_graph_in_c_is_the_rule(items: RankItems) -> None:
    """``rank_edges`` (in C: the items sorted, each node's edges from its arrows, lane and the latest
    device work ended) gives the order and the packed edges of ``rank_edges_rule``."""
    found, expected = rank_edges(items), rank_edges_rule(items)
    assert [list(column) for column in found] == [list(column) for column in expected]


@settings(max_examples=300, deadline=None)
@given(graphs(), st.data())
def test_a_what_ifs_schedule_in_c_is_graph_schedule(graph: Graph, data) -> None:
    """``Schedules.starts`` (the what-ifs' schedules, in C) is ``Graph.schedule`` with the same
    durations, lags and shifts changed: shifts on anchors and on nodes with edges in, lags of
    repeated predecessors, edges the graph does not have."""
    count = len(graph.nodes)
    durs = data.draw(st.dictionaries(st.integers(0, count - 1), st.integers(0, 500), max_size=4))
    edges = [(p, i) for i, mine in enumerate(graph.preds) for p, _ in mine] + [(count, count)]
    lags = data.draw(st.dictionaries(st.sampled_from(edges), st.integers(-300, 300), max_size=4))
    shift = data.draw(st.dictionaries(st.integers(0, count - 1), st.integers(-400, 400), max_size=3))

    found = Schedules(graph).starts(durs=durs, lags=lags, shift=shift)

    assert list(found) == graph.schedule(graph.durations(durs), shift=shift, lags=lags)
    assert list(Schedules(graph).starts()) == graph.schedule()


def _dominated_by_definition(found, through):
    """The pairs a chain through one synchronisation point is as long as, tried pair by pair against
    every synchronisation point: the definition ``_undominated`` had in Python (quadratic)."""
    lag = {(c.source, c.sink): c.lag_ns for c in found}
    return [c for c in found
            if not any(arrival != c.sink and (c.source, arrival) in lag and (done, c.sink) in lag
                       and lag[c.source, arrival] + lag[done, c.sink] >= c.lag_ns
                       for arrival, done in through.items())]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 7)), st.integers(0, 7), st.integers(-50, 50)),
                max_size=40, unique_by=lambda p: p[:2]),
       st.dictionaries(st.integers(0, 7), st.integers(0, 7), max_size=6))
def test_pairs_dominated_through_a_synchronisation_point_are_left_out(pairs, through) -> None:
    """``_undominated`` (in C) and ``_undominated_rule`` keep what the pair-by-pair definition
    keeps, in ``found``'s order, on random pairs (the anchors' source None, negative lags, a
    synchronisation point whose arrival or completion no pair names)."""
    from converters.dependency_graph import Contracted, _undominated, _undominated_rule

    found = [Contracted(source, sink, lag, {}) for source, sink, lag in pairs]
    expected = _dominated_by_definition(found, through)
    assert _undominated_rule(found, through) == expected
    assert _undominated(*_pair_columns(pairs), through) == expected


def _pair_columns(pairs: list[tuple[int | None, int, int]]) -> list[array]:
    return [array("q", [-1 if source is None else source for source, _, _ in pairs]),
            array("q", [sink for _, sink, _ in pairs]), array("q", [lag for _, _, lag in pairs])]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.integers(0, 5)), st.integers(0, 60), st.integers(-50, 50)),
                min_size=100, max_size=300, unique_by=lambda p: p[:2]),
       st.dictionaries(st.integers(0, 60), st.integers(0, 5), min_size=5, max_size=30))
def test_pairs_dominated_among_many_are_left_out(pairs, through) -> None:
    """Where a few sources have many pairs (a held sink looked up among a completion's pairs, or the
    completion's pairs walked, whichever ``_undominated`` finds cheaper; sinks in any order) it
    keeps what the pair-by-pair definition keeps."""
    from converters.dependency_graph import Contracted, _undominated

    found = [Contracted(source, sink, lag, {}) for source, sink, lag in pairs]
    assert _undominated(*_pair_columns(pairs), through) == _dominated_by_definition(found, through)
