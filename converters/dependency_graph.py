"""The critical path's algebra: a dependency graph of real slices, its as-soon-as-possible schedule,
the longest path, and its contraction to what crosses ranks (docs/analysis.md, section 11).

A node is one real slice (a device task, a host launch, a communication op's arrival or its
completion) or a point (an arrival lasts 0 ns). A node without predecessors starts where it was
observed (an anchor); any other starts at ``max(end(p) + lag(p, n))`` over its predecessors, and
lasts its duration. The lag of each edge is what was observed: a node built with ``Graph.add``
gets ``lag = its start - the latest end of its predecessors`` on every edge in, so the schedule of
the unchanged graph is the observed one to the nanosecond, and a what-if is the same schedule with
other durations, lags or shifts. Shortening a predecessor that did not end last saves nothing;
shortening the one that did saves up to the slack to the next one.

``contract`` reduces one rank's graph to edges between its synchronisation points (sources: the
completions of its collectives, whose times other ranks set; sinks: its arrivals and its end),
each the longest local chain between them, so the job's graph per step holds ranks x collectives
nodes, not every task.
"""

from __future__ import annotations

import bisect
import functools
import itertools
from array import array
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from ._dependency_graph import chains as _chains
from ._dependency_graph import pairs as _pairs
from ._dependency_graph import rank_edges as _rank_edges
from ._dependency_graph import schedule as _schedule
from ._dependency_graph import typed as _typed
from ._dependency_graph import undominated as _undominated_in_c

NEVER = -(1 << 62)  # no chain reaches the node


class Node(NamedTuple):
    """One slice of the graph. ``kind``: compute, communication, wait, host, or "" for a point
    (an arrival, an end) that draws nothing; ``op_type`` the op type of a compute task."""

    rank: int
    kind: str
    name: str
    start_ns: int
    dur_ns: int
    op_type: str | None = None

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


class Graph:
    """A DAG whose nodes are added in a topological order (every predecessor before its node)."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []
        self.preds: list[list[tuple[int, int]]] = []  # per node: (predecessor, lag ns)

    def add(self, node: Node, preds: Iterable[int] = ()) -> int:
        """Add ``node`` after ``preds``, with the lag observed: its start minus their latest end."""
        preds = sorted(set(preds))
        nodes = self.nodes  # add_lagged's work, inline: a rank's step adds a node per task
        assert not preds or preds[-1] < len(nodes), "predecessors come first"
        lag = node.start_ns - max([nodes[p].start_ns + nodes[p].dur_ns for p in preds], default=0)
        nodes.append(node)
        self.preds.append([(p, lag) for p in preds])
        return len(nodes) - 1

    def add_lagged(self, node: Node, preds: Iterable[tuple[int, int]]) -> int:
        """Add ``node`` with these edges in: (predecessor, lag ns)."""
        edges = list(preds)
        assert all(p < len(self.nodes) for p, _ in edges), "predecessors come first"
        self.nodes.append(node)
        self.preds.append(edges)
        return len(self.nodes) - 1

    def durations(self, changed: Mapping[int, int] | None = None) -> list[int]:
        durs = [n.dur_ns for n in self.nodes]
        for i, d in (changed or {}).items():
            durs[i] = d
        return durs

    def schedule(self, durs: list[int] | None = None, shift: Mapping[int, int] | None = None,
                 lags: Mapping[tuple[int, int], int] | None = None,
                 anchors: Mapping[int, int] | None = None, first: int = 0) -> list[int]:
        """Each node's start, as soon as its predecessors allow: ``durs`` (default: observed),
        ``shift``: ns added to a node's start (a rank arriving earlier: negative), ``lags``: an
        edge's lag instead of the observed ((pred, node) -> ns), ``anchors``: the start of a node
        without predecessors instead of the observed (None in it: the node is never reached);
        ``first``: the nodes before it are never reached (a schedule from one source)."""
        durs = self.durations() if durs is None else durs
        shift, lags, anchors = shift or {}, lags or {}, anchors or {}
        starts = [NEVER] * len(self.nodes)
        for i in range(first, len(self.nodes)):
            node, edges = self.nodes[i], self.preds[i]
            if edges:
                start = NEVER
                for p, lag in edges:
                    if starts[p] != NEVER:
                        start = max(start, starts[p] + durs[p] + lags.get((p, i), lag))
            else:
                start = anchors.get(i, node.start_ns)
                start = NEVER if start is None else start
            starts[i] = start if start == NEVER else start + shift.get(i, 0)
        return starts

    def binding(self, i: int, starts: list[int], durs: list[int]) -> int | None:
        """The predecessor that set ``i``'s start (the latest end plus lag; ties: the latest added,
        the nearest in the chain), None for an anchor."""
        best, best_at = None, NEVER
        for p, lag in self.preds[i]:
            if starts[p] == NEVER:
                continue
            at = starts[p] + durs[p] + lag
            if at > best_at or (at == best_at and best is not None and p > best):
                best, best_at = p, at
        return best

    def chain(self, last: int, starts: list[int], durs: list[int]) -> list[int]:
        """The longest path into ``last``, walked back along binding predecessors to an anchor,
        first node first."""
        out = [last]
        while (p := self.binding(out[-1], starts, durs)) is not None:
            out.append(p)
        return out[::-1]


OP, HOST, TASK = 1, 2, 3  # a rank's items (``rank_edges``) at one time: an op first, then a launch, a task


class RankItems(NamedTuple):
    """One rank's step as ``rank_edges`` takes it, a column each, an item a row (its host launches,
    device tasks and communication ops, in any order): ``kinds`` (``OP``, ``HOST``, ``TASK``);
    ``starts`` (an op's own start, which its arrival and completion take); ``at`` (where the work
    before it is looked for: a launch's or task's start, an op's slice's); ``durs`` (an op's: its
    completion's); ``ends`` (of the device work a task or op ends, for what follows it); ``lanes``
    (numbered: a host thread and a device stream apart); ``flows_in`` and ``flows_out`` (numbered
    arrows: item k's are ``flows_in[in_offsets[k]:in_offsets[k + 1]]``, and likewise out). Columns
    of int64 (``array('q')``)."""

    kinds: Sequence[int]
    starts: Sequence[int]
    at: Sequence[int]
    durs: Sequence[int]
    ends: Sequence[int]
    lanes: Sequence[int]
    in_offsets: Sequence[int]
    flows_in: Sequence[int]
    out_offsets: Sequence[int]
    flows_out: Sequence[int]


def rank_edges(items: RankItems) -> tuple[array, array, array, array]:
    """``rank_edges_rule`` in C (``_dependency_graph.rank_edges``)."""
    found = _rank_edges(*items)
    return tuple(_int64s(column) for column in found)


def rank_edges_rule(items: RankItems) -> tuple[array, array, array, array]:
    """The order the items are taken in (by start, then kind; ties: as given) and the graph they
    make, node by node in that order (an op: its arrival, then its completion), packed: the edges
    of node n are ``preds[offsets[n]:offsets[n + 1]]`` with ``lags`` likewise. Device work (a task,
    an op's arrival) follows the launches its arrows come from, the last work on its lane, and the
    latest device work that ended at or before ``at`` (no holes in a path); a launch follows the
    one before on its thread and that latest device work (a host that waited for the device); a
    completion has no edge in (other ranks set its start). A node's edges carry one lag: its start
    less its predecessors' latest end (``Graph.add``)."""
    order = sorted(range(len(items.kinds)), key=lambda i: (items.starts[i], items.kinds[i]))
    node_ends: list[int] = []
    last: dict[int, int] = {}  # lane -> its last node
    ended: list[tuple[int, int]] = []  # (end, node) of device work so far, by end
    launched: dict[int, int] = {}  # arrow -> host node
    offsets, preds, lags = array("q", [0]), array("q"), array("q")

    def add(start: int, dur: int, before: list[int]) -> int:
        before = sorted(set(before))
        lag = start - max([node_ends[p] for p in before], default=0)
        preds.extend(before)
        lags.extend([lag] * len(before))
        offsets.append(len(preds))
        node_ends.append(start + dur)
        return len(node_ends) - 1

    def latest(i: int) -> list[int]:
        k = bisect.bisect_right(ended, (items.at[i], 1 << 62)) - 1
        return [ended[k][1]] if k >= 0 else []

    for i in order:
        kind, lane = items.kinds[i], items.lanes[i]
        before = [last[lane]] if lane in last else []
        if kind == HOST:
            n = add(items.starts[i], items.durs[i], before + latest(i))
            for f in items.flows_out[items.out_offsets[i]:items.out_offsets[i + 1]]:
                launched[f] = n
            last[lane] = n
            continue
        arrows = items.flows_in[items.in_offsets[i]:items.in_offsets[i + 1]]
        device = [launched[f] for f in arrows if f in launched]
        if kind == TASK:
            n = add(items.starts[i], items.durs[i], device + before + latest(i))
        else:
            add(items.starts[i], 0, device + before + latest(i))  # the arrival
            n = add(items.starts[i], items.durs[i], [])  # the completion
        last[lane] = n
        bisect.insort(ended, (items.ends[i], n))
    return array("q", order), offsets, preds, lags


def unfollowed(graph: Graph, nodes: list[int]) -> list[int]:
    """Those of ``nodes`` none of the others follows at a lag >= 0: a node after them ends as late as
    after all of them, and binds to the same one, in every schedule (a follower ends no earlier; on
    a tie, it is the later added). A rank's end goes after these, not after each of its slices
    (every walk of ``contract`` took each edge into the end: 45,000 of them on rocprof-908's step)."""
    mine = set(nodes)
    followed = {p for i in nodes for p, lag in graph.preds[i] if lag >= 0 and p in mine}
    return [i for i in nodes if i not in followed]


class Segment(NamedTuple):
    """One piece of a critical path: a real slice, or the gap between two (idle), on one rank."""

    rank: int
    kind: str  # compute, communication, wait, idle, host
    name: str
    start_ns: int
    dur_ns: int


def segments(chain: list[tuple[Node, int, int]], begin_ns: int, end_ns: int) -> list[Segment]:
    """A chain of (node, start, duration) as segments tiling ``begin_ns``..``end_ns``: each node's
    slice (clipped where the next one starts before it ends), the gaps between them idle on the
    rank of the node after (before the first: its rank); before a host launch, the gap is the host's
    own time between launches (host)."""
    out: list[Segment] = []
    cursor = begin_ns
    for k, (node, start, dur) in enumerate(chain):
        start = max(start, cursor)
        if start > cursor:
            host = node.kind == "host"
            out.append(Segment(node.rank, "host" if host else "idle", "between launches" if host else "idle",
                               cursor, start - cursor))
        limit = chain[k + 1][1] if k + 1 < len(chain) else end_ns
        end = max(start, min(start + dur, limit, end_ns))
        if node.kind and end > start:
            out.append(Segment(node.rank, node.kind, node.name, start, end - start))
            cursor = end
        else:
            cursor = start
    if end_ns > cursor:
        out.append(Segment(chain[-1][0].rank if chain else -1, "idle", "idle", cursor, end_ns - cursor))
    return out


def topological(count: int, preds: list[list[tuple[int, int]]]) -> list[int]:
    """An order of ``count`` nodes with every predecessor before its node (Kahn's)."""
    order = _ordered(count, preds)
    if len(order) != count:
        raise ValueError("the dependency graph has a cycle")
    return order


def _ordered(count: int, preds: list[list[tuple[int, int]]]) -> list[int]:
    """Kahn's order of the nodes that have one: all but those on a cycle or after one."""
    succs: list[list[int]] = [[] for _ in range(count)]
    waiting = [len(p) for p in preds]
    for i, edges in enumerate(preds):
        for p, _ in edges:
            succs[p].append(i)
    ready = [i for i in range(count) if not waiting[i]][::-1]
    order = []
    while ready:
        i = ready.pop()
        order.append(i)
        for j in succs[i]:
            waiting[j] -= 1
            if not waiting[j]:
                ready.append(j)
    return order


def cycle(count: int, preds: list[list[tuple[int, int]]]) -> list[int]:
    """The nodes of one cycle of the graph (each a predecessor of the next, the last of the first);
    empty where it has none."""
    left = set(range(count)) - set(_ordered(count, preds))  # on a cycle, or after one
    if not left:
        return []
    seen: dict[int, int] = {}
    node = min(left)
    while node not in seen:  # back along predecessors that are left: each has one, so it loops
        seen[node] = len(seen)
        node = next(p for p, _ in preds[node] if p in left)
    walked = list(seen)
    return walked[seen[node]:][::-1]


def built(nodes: list[Node], preds: list[list[tuple[int, int]]]) -> tuple[Graph, list[int]]:
    """A ``Graph`` of nodes given in any order with their edges in ((predecessor, lag) by the
    given indices), and where each given node went in it."""
    order = topological(len(nodes), preds)
    where = [0] * len(nodes)
    for new, old in enumerate(order):
        where[old] = new
    graph = Graph()
    for old in order:
        graph.add_lagged(nodes[old], [(where[p], lag) for p, lag in preds[old]])
    return graph, where


class Contracted(NamedTuple):
    """The longest local chain from a source (None: the rank's anchors, time 0) to a sink:
    ``lag_ns``, the sink's start minus the source's end along it; ``by_type``: per op type on it,
    the lag with that type 10% shorter. Its nodes: its source's ``Chains``."""

    source: int | None
    sink: int
    lag_ns: int
    by_type: dict[str, int]


class Chains(NamedTuple):
    """One source's longest local chains to its sinks. The binding predecessors are a tree, so the
    chains share their beginnings and each node is held once: ``nodes[k]`` comes after
    ``nodes[before[k]]`` on its chain (-1: it is the chain's first); ``tips``: a sink's place in
    ``nodes``. Held whole, a chain per pair copied its shared beginning: 50 M nodes for 2.6 M on HTA's
    df_index_resolver trace. The nodes are the graph's indices, in an array (pickled as its bytes)."""

    nodes: array
    before: array
    tips: dict[int, int]

    def chain(self, sink: int) -> list:
        """The chain to ``sink``, first node first."""
        out, k = [], self.tips[sink]
        while k >= 0:
            out.append(self.nodes[k])
            k = self.before[k]
        return out[::-1]


class Contraction(NamedTuple):
    """``contract``'s answer: the pairs kept, and by source the nodes of their chains (the graph's
    indices)."""

    edges: list[Contracted]
    chains: dict[int | None, Chains]


class StepChains(NamedTuple):
    """A rank's step's chains by source, their nodes as the graph's indices into ``nodes`` (a node
    lies on many sources' chains: 464,594 places for 44,401 nodes on rocprof-908's step, pickled
    as arrays and each node once)."""

    nodes: list[Node]
    by_source: dict[int | None, Chains]

    def chain(self, source: int | None, sink: int) -> list[Node]:
        """The slices of the chain from ``source`` to ``sink``, first first."""
        return [self.nodes[i] for i in self.by_source[source].chain(sink)]

    def __reduce__(self) -> tuple:
        # pickled as plain tuples: a NamedTuple pickles through a Python call each (0.1 CPU s for
        # rocprof-908's 45,000 nodes)
        return _step_chains, (list(map(tuple, self.nodes)), self.by_source)


def _step_chains(rows: list[tuple], by_source: dict[int | None, Chains]) -> StepChains:
    # each row whole (the Node's every field), so made as ``Node._make`` makes it, less its checks:
    # 0.04 -> 0.013 CPU s for rocprof-908's 45,000 nodes
    return StepChains(list(map(_as_node, rows)), by_source)


_as_node = functools.partial(tuple.__new__, Node)


NO_CHAINS = StepChains([], {})


SHORTER = 0.9  # the op-type what-if: each op of the type 10% shorter


def shorter(dur_ns: int) -> int:
    return round(dur_ns * SHORTER)


def contract(graph: Graph, sources: list[int], sinks: list[int],
             through: Mapping[int, int] | None = None) -> Contraction:
    """Per source (and the anchors, source None) and sink it reaches, the longest local chain.
    ``sources`` are nodes without local predecessors whose start other ranks set; ``through``
    maps an arrival (a sink) to its completion (a source). A pair is left out where the chain
    through one synchronisation point (to its arrival, then from its completion) is as long: a
    completion ends no earlier than its own rank's arrival in every what-if, so that pair never
    sets a time. The schedules are ``Graph.schedule``'s and the chains ``Graph.chain``'s, walked
    in C (``_Packed``): one per source for the lags; then, per source with a pair kept, one for its
    chains and one per op type on them (most pairs are left out: walked first, 9 in 10 of HTA's
    df_index_resolver trace were)."""
    source_set = set(sources)
    packed = _Packed(graph)
    found = _pairs_in_c(packed, sources, sinks)
    edges = _undominated(*found, through or {})
    kept: dict[int | None, list[Contracted]] = {}
    for c in edges:
        kept.setdefault(c.source, []).append(c)
    return Contraction(edges, {source: _typed_chains(packed, source_set, source, mine)
                               for source, mine in kept.items()})


def _typed_chains(packed: _Packed, sources: set[int], source: int | None, edges: list[Contracted]) -> Chains:
    """``_typed_chains_rule`` in C (``_dependency_graph.typed``): the source's schedule, chains and
    op-type schedules in one call."""
    first = 0 if source is None else source
    stop = max(c.sink for c in edges) + 1
    found = _typed(packed.offsets, packed.preds, packed.lags, packed.packed_durs, packed.short, packed.types,
                   packed.anchors(sources, source), first, stop, array("q", [c.sink for c in edges]),
                   -1 if source is None else source)
    nodes, before, tips, offsets, columns, lags = (_int64s(column) for column in found)
    names = packed.type_names
    for j, c in enumerate(edges):  # by op type in the order of their names (C gives them so), as the rule
        a, b = offsets[j], offsets[j + 1]
        c.by_type.update(zip(map(names.__getitem__, columns[a:b]), lags[a:b], strict=True))
    return Chains(nodes, before, {c.sink: tips[j] for j, c in enumerate(edges)})


def _typed_chains_rule(packed: _Packed, sources: set[int], source: int | None, edges: list[Contracted]
                       ) -> Chains:
    """The chains of a source's ``edges``, each edge's ``by_type`` filled: one schedule per op type
    on a chain."""
    anchors = packed.anchors(sources, source)
    first = 0 if source is None else source
    stop = max(c.sink for c in edges) + 1  # no node after the last sink sets its time
    _, binding = packed.schedule(anchors, first, stop=stop)
    chains, types = _chains_in_c(packed, [c.sink for c in edges], binding, first)
    on_type: dict[str, list[Contracted]] = {}
    for c in edges:
        for op_type in types[c.sink]:
            on_type.setdefault(op_type, []).append(c)
    for op_type in sorted(on_type):
        again, _ = packed.schedule(anchors, first, op_type, stop)
        began = 0 if source is None else again[0] + packed.duration(source, op_type)
        for c in on_type[op_type]:
            c.by_type[op_type] = again[c.sink - first] - began
    return chains


def _chains_in_c(packed: _Packed, sinks: list[int], binding: memoryview, first: int
                 ) -> tuple[Chains, dict[int, frozenset[str]]]:
    """``_chains_rule`` in C (``_dependency_graph.chains``); ``binding`` of the nodes from ``first``
    on, as ``_Packed.schedule`` gives it."""
    found = _chains(binding, first, array("q", sinks), packed.types)
    nodes, before, tips, offsets, columns = (_int64s(column) for column in found)
    names = packed.type_names
    types = {sink: frozenset([names[t] for t in columns[offsets[j]:offsets[j + 1]]])
             for j, sink in enumerate(sinks)}
    return Chains(nodes, before, dict(zip(sinks, tips, strict=True))), types


def _int64s(data: bytes) -> array:
    out = array("q")
    out.frombytes(data)
    return out


def _chains_rule(sinks: list[int], binding: Sequence[int], op_types: list[str | None]
                 ) -> tuple[Chains, dict[int, frozenset[str]]]:
    """The ``Chains`` of ``sinks``, each ``Graph.chain`` from the binding predecessor of every node
    (-1: none), and per sink the op types on its chain. Each node is walked once, where a chain
    first reaches it; a later chain through it goes on from there."""
    at: dict[int, int] = {}  # a node walked -> its place
    nodes: list[int] = []
    before = array("q")
    typed: list[frozenset[str]] = []  # per place: the op types from its chain's first to it
    tips: dict[int, int] = {}
    types: dict[int, frozenset[str]] = {}
    for sink in sinks:
        if sink not in at:
            walked = [sink]
            while (p := binding[walked[-1]]) >= 0 and p not in at:
                walked.append(p)
            link = at[p] if p >= 0 else -1
            seen = typed[link] if link >= 0 else frozenset()
            for node in reversed(walked):
                op_type = op_types[node]
                if op_type is not None and op_type not in seen:
                    seen = seen | {op_type}
                at[node] = len(nodes)
                nodes.append(node)
                before.append(link)
                typed.append(seen)
                link = at[node]
        tips[sink] = at[sink]
        types[sink] = typed[at[sink]]
    return Chains(array("q", nodes), before, tips), types


class _Packed:
    """A graph packed once as the C schedule takes it (``_dependency_graph.schedule``: arrays of int64),
    for the many schedules ``contract`` makes of it."""

    def __init__(self, graph: Graph) -> None:
        nodes = graph.nodes
        self.op_types = [n.op_type for n in nodes]
        self.durs = [n.dur_ns for n in nodes]
        self.type_names = sorted(set(self.op_types) - {None})
        self.columns = {t: k for k, t in enumerate(self.type_names)}
        self.offsets = array("q", [0, *itertools.accumulate(len(edges) for edges in graph.preds)])
        self.preds = array("q", [p for edges in graph.preds for p, _ in edges])
        self.lags = array("q", [lag for edges in graph.preds for _, lag in edges])
        self.packed_durs = array("q", self.durs)
        self.short = array("q", [shorter(d) for d in self.durs])
        self.types = array("q", [-1 if t is None else self.columns[t] for t in self.op_types])
        self.observed = array("q", [n.start_ns for n in nodes])
        self.anchored = [i for i, edges in enumerate(graph.preds) if not edges]

    def anchors(self, sources: set[int], source: int | None) -> array:
        """The local graph seen from one source, as ``Graph.schedule``'s anchors: from the anchors
        (source None) each at its observed start but the other sources, never reached; from a
        source, only it, at its observed start."""
        out = array("q", [NEVER]) * len(self.durs)
        if source is None:
            for i in self.anchored:
                if i not in sources:
                    out[i] = self.observed[i]
        else:
            out[source] = self.observed[source]
        return out

    def schedule(self, anchors: array, first: int, op_type: str | None = None, stop: int | None = None
                 ) -> tuple[memoryview, memoryview]:
        """``Graph.schedule`` from these anchors, the nodes before ``first`` never reached, with
        ``op_type``'s nodes ``shorter`` (None: as observed); and each node's binding predecessor:
        of the nodes ``first`` to ``stop`` (None: the last) only, node i at [i - first]."""
        column = self.columns.get(op_type, -1)  # None, or a type no node has: none shorter
        stop = len(self.durs) if stop is None else stop
        starts, binding = _schedule(self.offsets, self.preds, self.lags, self.packed_durs, self.short,
                                    self.types, anchors, first, stop, column)
        return memoryview(starts).cast("q"), memoryview(binding).cast("q")

    def duration(self, i: int, op_type: str) -> int:
        return shorter(self.durs[i]) if self.op_types[i] == op_type else self.durs[i]


class Schedules:
    """A graph packed once for many schedules of it, in C (``_dependency_graph.schedule``):
    ``Graph.schedule`` with some durations, edges' lags or nodes' starts changed, every node
    scheduled again (the what-ifs of a step's graph across ranks: in Python, each cost 7 ms on HTA's
    df_index_resolver trace, for 6,000 edges)."""

    def __init__(self, graph: Graph) -> None:
        self._packed = _Packed(graph)
        self._edges: dict[tuple[int, int], list[int]] = {}  # (predecessor, node) -> its edges' places
        for k, (p, i) in enumerate((p, i) for i, edges in enumerate(graph.preds) for p, _ in edges):
            self._edges.setdefault((p, i), []).append(k)

    def starts(self, durs: Mapping[int, int] | None = None, lags: Mapping[tuple[int, int], int] | None = None,
               shift: Mapping[int, int] | None = None) -> memoryview:
        """``Graph.schedule(durs, shift, lags)`` with only the changed durations given (node -> ns)."""
        packed = self._packed
        # the anchors: the observed starts, read for the nodes without edges in only
        new_durs, new_lags, anchors = packed.packed_durs, packed.lags, packed.observed
        if durs:
            new_durs = array("q", new_durs)
            for i, dur in durs.items():
                new_durs[i] = dur
        if lags or shift:
            new_lags = array("q", new_lags)
            for edge, lag in (lags or {}).items():
                for k in self._edges.get(edge, ()):
                    new_lags[k] = lag
        if shift:
            anchors = array("q", anchors)
        for i, ns in (shift or {}).items():  # a node's start moved: every edge in, or its anchor
            for k in range(packed.offsets[i], packed.offsets[i + 1]):
                new_lags[k] += ns
            anchors[i] += ns
        starts, _ = _schedule(packed.offsets, packed.preds, new_lags, new_durs, packed.short, packed.types,
                              anchors, 0, len(packed.durs), -1)
        return memoryview(starts).cast("q")


Pairs = tuple[memoryview, memoryview, memoryview]  # contract's pairs: sources (-1: the anchors), sinks, lags


def _pairs_in_c(packed: _Packed, sources: list[int], sinks: list[int]) -> Pairs:
    """``_pairs_rule`` in C (``_dependency_graph.pairs``)."""
    found = _pairs(packed.offsets, packed.preds, packed.lags, packed.packed_durs, packed.observed,
                   array("q", sources), array("q", sinks))
    return tuple(memoryview(column).cast("q") for column in found)


def _pairs_rule(packed: _Packed, sources: list[int], sinks: list[int]) -> Pairs:
    """Per source (first the anchors, -1) and sink it reaches, but itself, the sink's start less the
    source's end, scheduled from the source (``_Packed.anchors``)."""
    found: tuple[array, array, array] = (array("q"), array("q"), array("q"))
    for source in [None, *sources]:
        first = 0 if source is None else source
        starts, _ = packed.schedule(packed.anchors(set(sources), source), first)
        base = 0 if source is None else starts[0] + packed.durs[source]
        for sink in sinks:
            if sink != source and sink >= first and starts[sink - first] != NEVER:
                found[0].append(-1 if source is None else source)
                found[1].append(sink)
                found[2].append(starts[sink - first] - base)
    return tuple(memoryview(column) for column in found)


def _undominated(sources: Sequence[int], sinks: Sequence[int], lags: Sequence[int], through: Mapping[int, int]
                 ) -> list[Contracted]:
    """``_undominated_rule`` in C (``_dependency_graph.undominated``): the pairs kept, each with its
    ``by_type`` to fill."""
    if not sources:
        return []
    kept = _undominated_in_c(sources, sinks, lags, array("q", through.keys()), array("q", through.values()))
    # most pairs are left out (383,000 of 388,000 on rocprof-908's step): only the kept reach Python
    return [Contracted(None if source < 0 else source, sink, lag, {})
            for source, sink, lag in itertools.compress(zip(sources, sinks, lags, strict=True), kept)]


def _undominated_rule(found: list[Contracted], through: Mapping[int, int]) -> list[Contracted]:
    """``found`` less each pair (source, sink) whose chain through one synchronisation point, from
    the source to an arrival (another sink) and on from its completion to the sink, is as long.
    Each source's arrivals are walked with the sinks their completions reach (looking at every
    arrival for every pair was quadratic: 51 M tests on HTA's 54 MB df_index_resolver trace)."""
    reached: dict[int | None, list[tuple[int, int]]] = {}  # source -> its (sink, lag) pairs
    for c in found:
        reached.setdefault(c.source, []).append((c.sink, c.lag_ns))
    dominated: set[tuple[int | None, int]] = set()
    for source, pairs in reached.items():
        longest: dict[int, int] = {}  # a sink -> its longest lag through one synchronisation point
        for arrival, to_arrival in pairs:
            done = through.get(arrival)
            for sink, from_done in reached.get(done, ()) if done is not None else ():
                if sink != arrival and to_arrival + from_done > longest.get(sink, -1 << 63):
                    longest[sink] = to_arrival + from_done
        dominated.update((source, sink) for sink, lag in pairs if sink in longest and longest[sink] >= lag)
    return [c for c in found if (c.source, c.sink) not in dominated]
