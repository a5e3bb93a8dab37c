"""fixtures/paddle_gen.py against the real Paddle 3.3.1 CPU samples, and its GPU side against the
rules of Paddle's exporter (chrometracing_logger.cc, serialization_logger.cc, event_node.cc)."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest
from conftest import real_data
from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from converters.readers import paddle_nodetree_pb2 as pb
from fixtures import paddle_gen
from fixtures.paddle_gen import dur_display, generate, generate_profile, ns_to_us_float

SUFFIX = re.compile(r"^(.*)\[(\d+\.\d{3}) (ms|us)\]$")
DEFAULT_NAME = re.compile(r"^host_(.+)pid_(\d+)_time_\d{4}(_\d{2}){5}_\d{6}\.paddle_trace\.(json|pb)$")
# the CPU run of make_sample.py: Linear(32, 64), ReLU, Linear(64, 4)
REAL_SHAPE = {"gpu": False, "layers": 1, "hidden": 64, "steps": 5}


# -- helpers ---------------------------------------------------------------------------------

def _real_json() -> Path:
    return next(real_data("paddle-cpu-chrome").glob("*.paddle_trace.json"))


def _real_pb() -> Path:
    return next(real_data("paddle-cpu-protobuf").glob("*.paddle_trace.pb"))


def _load(path: Path) -> dict:
    return json.loads(path.read_text())


def _load_pb(path: Path) -> pb.NodeTreesProto:
    m = pb.NodeTreesProto()
    m.ParseFromString(path.read_bytes())
    return m


def _pb_type(e) -> int:
    """The host event type as on the wire (15 = DygraphKernelLaunch is an unknown enum value)."""
    if e.HasField("type"):
        return e.type
    (raw,) = [f.data for f in unknown_fields.UnknownFieldSet(e) if f.field_number == 2]
    return raw


def _skeletons(path: Path) -> collections.Counter:
    """Each event block of the file with strings and numbers blanked: the hand-written layout."""
    out: collections.Counter = collections.Counter()
    for block in path.read_text().split("\n  \n  {"):
        block = re.sub(r'"(?:[^"\\]|\\.)*"', '"S"', block)
        out[re.sub(r"-?\d+(\.\d+)?", "N", block)] += 1
    return out


def _kind(e: dict) -> tuple:
    return (e.get("ph"), e.get("cat"))


def _vtypes(d: dict) -> tuple:
    return tuple((k, type(v).__name__) for k, v in d.items())


def _depths(events: list[dict]) -> list[int]:
    """Nesting depth of each host X event (one OS thread: both lanes together), in file order."""
    xs = [e for e in events if e.get("ph") == "X" and isinstance(e.get("tid"), str)
          and e["cat"] != "CudaRuntime"]
    def us(e: dict, key: str) -> float:       # relative µs with 3 decimals: finer than ``ts``
        return float(e["args"][key].split()[0])

    spans = sorted(((us(e, "start_time"), us(e, "end_time"), i) for i, e in enumerate(xs)),
                   key=lambda s: (s[0], -s[1]))
    depth = [0] * len(xs)
    stack: list[float] = []
    for s, end, i in spans:
        while stack and stack[-1] <= s:
            stack.pop()
        depth[i] = len(stack)
        stack.append(end)
    return depth


def _suffix_ok(e: dict) -> bool:
    """Name suffix and ``dur`` both follow from one ns duration through utils.h's float32 math."""
    m = SUFFIX.match(e["name"])
    if not m:
        return False
    base = round(e["dur"] * 1000)
    return any(f"{ns_to_us_float(ns):.3f}" == f"{e['dur']:.3f}"
               and dur_display(ns) == f"{m.group(2)} {m.group(3)}" for ns in range(base - 4, base + 5))


def _step_signatures(m: pb.NodeTreesProto) -> set[tuple]:
    t = m.thread_trees[0]
    nodes = {h.id: h for h in t.host_nodes}
    kids = collections.defaultdict(list)
    for h in t.host_nodes:
        kids[h.parentid].append(h.id)

    def walk(i: int, d: int, out: list) -> list:
        e = nodes[i].host_trace_event
        out.append((d, "STEP" if e.name.startswith("ProfileStep#") else e.name, _pb_type(e)))
        for c in sorted(kids[i], key=lambda c: nodes[c].host_trace_event.start_ns):
            walk(c, d + 1, out)
        return out

    return {tuple(walk(s, 0, [])) for s in kids[0]}


def _fields(msg) -> tuple[str, ...]:
    return tuple(f.name for f, _ in msg.ListFields())


# -- CPU: the generated files against the real samples ------------------------------------------

def test_chrome_cpu_layout_is_the_real_one(tmp_path):
    real = _real_json()
    gen = generate(tmp_path, **REAL_SHAPE)[0]
    # the same hand-written blocks (header, X events of each template, metadata, {}, ExtraInfo)
    assert set(_skeletons(gen)) == set(_skeletons(real))
    r, g = _load(real), _load(gen)
    assert list(g) == list(r)
    assert g["schemaVersion"] == r["schemaVersion"] == "1.0.2" and g["span_index"] == r["span_index"]
    assert r["traceEvents"][-1] == g["traceEvents"][-1] == {}
    assert not g["traceEvents"][0]["name"].startswith("process_name")
    text = gen.read_text()
    assert text.startswith('\n  {\n    "displayTimeUnit": "ms",') and text.endswith("\n  }\n  ")


def test_chrome_cpu_keys_cats_args_types_match_real(tmp_path):
    r = _load(_real_json())["traceEvents"][:-1]
    g = _load(generate(tmp_path, **REAL_SHAPE)[0])["traceEvents"][:-1]

    def shapes(evs):
        out = collections.defaultdict(set)
        for e in evs:
            out[_kind(e)].add((_vtypes(e), _vtypes(e.get("args", {}))))
        return dict(out)

    assert shapes(g) == shapes(r)
    assert {e.get("cat") for e in g} == {e.get("cat") for e in r}
    lanes = {(e["cat"], e["tid"].split("(")[1]) for e in r if e.get("ph") == "X"}
    assert {(e["cat"], e["tid"].split("(")[1]) for e in g if e.get("ph") == "X"} == lanes
    assert ("ProfileStep", "Python)") in lanes and ("Operator", "C++)") in lanes
    meta = [(e["name"], type(e["tid"]).__name__) for e in r if e["ph"] == "M"]
    assert sorted((e["name"], type(e["tid"]).__name__) for e in g if e["ph"] == "M") == sorted(meta)
    for e in r + g:
        if e.get("ph") == "X":
            assert _suffix_ok(e), e["name"]
            assert isinstance(e["ts"], int) and isinstance(e["dur"], float)
            assert re.fullmatch(r"\d+\.\d{3} us", e["args"]["start_time"])
    first = [e for e in g if e.get("cat") == "ProfileStep"][0]
    assert first["args"]["start_time"] == "0.000 us"


def test_chrome_cpu_names_bfs_order_and_extra_info_match_real(tmp_path):
    rd = _load(_real_json())
    gd = _load(generate(tmp_path, **REAL_SHAPE)[0])

    def names(evs):
        return {(e["cat"], SUFFIX.match(e["name"]).group(1)) for e in evs if e.get("ph") == "X"}

    assert names(gd["traceEvents"]) == names(rd["traceEvents"])
    for d in (rd, gd):          # Paddle's breadth-first order: depth never decreases in the file
        depths = _depths(d["traceEvents"])
        assert depths == sorted(depths) and depths[0] == 0 and max(depths) >= 5
        keys = list(d["ExtraInfo"])
        pid = d["traceEvents"][0]["pid"]
        assert keys == [str(pid), "Process Cpu Utilization", "System Cpu Utilization"]
        assert d["ExtraInfo"][str(pid)] == "MainThread"
        assert all(re.fullmatch(r"\d+\.\d{6}", d["ExtraInfo"][k]) for k in keys[1:])


def test_pb_cpu_matches_real(tmp_path):
    r = _load_pb(_real_pb())
    gp = generate(tmp_path, form="protobuf", **REAL_SHAPE)[0]
    g = _load_pb(gp)
    assert _fields(g) == _fields(r) == ("version", "span_index", "thread_trees", "extra_info")
    assert (g.version, g.span_index) == (r.version, r.span_index) == ("1.0.2", 0)
    assert not r.IsInitialized() and not g.IsInitialized()        # the type-15 nodes
    assert [e.key for e in g.extra_info][1:] == [e.key for e in r.extra_info][1:]
    for m in (r, g):
        (t,) = m.thread_trees
        assert m.extra_info[0].key == str(t.thread_id)
        nodes = list(t.host_nodes)
        assert [h.id for h in nodes] == list(range(len(nodes)))       # BFS index
        root = nodes[0]
        real_root = r.thread_trees[0].host_nodes[0]
        assert root.parentid == -1 and _fields(root.host_trace_event) == _fields(real_root.host_trace_event)
        e = root.host_trace_event
        assert (e.name, e.type, e.start_ns, e.end_ns, e.process_id, e.thread_id) == (
            "root node", 7, 0, 2 ** 64 - 1, 0, 0)
        parents = [h.parentid for h in nodes[1:]]
        assert parents == sorted(parents)
        assert all(0 <= p < h.id for p, h in zip(parents, nodes[1:], strict=True))
        steps = [h for h in nodes if h.parentid == 0]
        assert all(h.host_trace_event.name.startswith("ProfileStep#") for h in steps)
        for h in nodes[1:]:
            assert h.host_trace_event.process_id == h.host_trace_event.thread_id == t.thread_id
            assert not h.runtime_nodes and not h.mem_nodes and not h.op_supplement_nodes
            assert h.host_trace_event.start_ns > 1_700_000_000 * 10 ** 9           # epoch ns
            assert "[" not in h.host_trace_event.name                               # no suffix
    # the same fields set per type, the same types (15 included), the same step trees
    def per_type(m):
        return {(_pb_type(h.host_trace_event), _fields(h), _fields(h.host_trace_event))
                for h in m.thread_trees[0].host_nodes[1:]}

    assert per_type(g) == per_type(r)
    assert 15 in {t for t, _, _ in per_type(g)}
    assert _step_signatures(g) == _step_signatures(r)


def test_chrome_and_pb_agree_with_truth(tmp_path):
    """Same seed, two forms: the same events; the truth counts what each file holds."""
    cj = generate_profile(tmp_path / "j", seed=4, **REAL_SHAPE).files[0]
    cp = generate_profile(tmp_path / "p", form="protobuf", seed=4, **REAL_SHAPE).files[0]
    ev = _load(cj.path)["traceEvents"][:-1]
    cats = collections.Counter(e.get("cat") for e in ev if e.get("ph") == "X")
    assert {k: v for k, v in cj.counts.items() if k in cats} == dict(cats)
    assert cj.counts["events"] == len(ev) and cj.counts["metadata"] == 7
    m = _load_pb(cp.path)
    types = collections.Counter(paddle_gen.TYPE_NAMES[_pb_type(h.host_trace_event)]
                                for h in m.thread_trees[0].host_nodes[1:])
    assert dict(types) == dict(cats) == {k: v for k, v in cp.counts.items() if k in types}
    assert cp.counts["host_nodes"] == sum(types.values()) + 1
    assert [s.phases for s in cj.steps] == [s.phases for s in cp.steps]
    nodes = m.thread_trees[0].host_nodes
    for st, step in zip(cp.steps, [h for h in nodes if h.parentid == 0], strict=True):
        e = step.host_trace_event
        assert (e.name, e.start_ns, e.end_ns) == (f"ProfileStep#{st.number}", st.start_ns, st.end_ns)
        sums = dict.fromkeys(paddle_gen.PHASES, 0)
        for h in nodes:
            if h.parentid == step.id and paddle_gen.TYPE_NAMES[h.host_trace_event.type] in sums:
                sums[paddle_gen.TYPE_NAMES[h.host_trace_event.type]] += (h.host_trace_event.end_ns
                                                                        - h.host_trace_event.start_ns)
        assert sums == st.phases and all(sums.values())


# the Python lane of a step of a real Paddle 3.3.1 CPU run of ``make_sample.py record`` (both
# exports; made outside the repository), nesting shown by indent
RECORD_STEP = """\
Dataloader _DataLoaderIterSingleProcess
PythonUserDefined my_block
  PythonUserDefined my_forward
    Forward Sequential
      Forward Linear
      Forward ReLU
      Forward Linear
    Forward CrossEntropyLoss
  PythonUserDefined my_backward
    Backward Gradient Backward
  Optimization Optimization Step"""


def _python_lane(path: Path, index: int) -> str:
    """The Python-lane events inside step ``index`` of a JSON export, nested by time."""
    events = [e for e in _load(path)["traceEvents"] if e.get("ph") == "X" and "(Python)" in str(e.get("tid"))]
    step = [e for e in events if e["cat"] == "ProfileStep"][index]
    inside = sorted((e for e in events if e is not step and 0 <= e["ts"] - step["ts"] <= step["dur"]),
                    key=lambda e: (e["ts"], -e["dur"]))
    lines, open_ends = [], []
    for e in inside:
        while open_ends and e["ts"] >= open_ends[-1]:
            open_ends.pop()
        lines.append("  " * len(open_ends) + f"{e['cat']} {SUFFIX.match(e['name'])[1]}")
        open_ends.append(e["ts"] + e["dur"])
    return "\n".join(lines)


def _paddles_phases(path: Path) -> list[dict[str, int]]:
    """Per step, Paddle's Model Summary phases from the protobuf's tree (``EventSummary.parse``:
    from each step down through any other node, the first phase node on each path, whole)."""
    nodes = _load_pb(path).thread_trees[0].host_nodes
    children = collections.defaultdict(list)
    for h in nodes:
        children[h.parentid].append(h)
    out = []
    for step in (h for h in nodes if h.parentid == 0):
        sums = dict.fromkeys(paddle_gen.PHASES, 0)
        todo = list(children[step.id])
        while todo:
            h = todo.pop()
            e = h.host_trace_event
            name = paddle_gen.TYPE_NAMES[_pb_type(e)]
            if name in sums:
                sums[name] += e.end_ns - e.start_ns
            else:
                todo += children[h.id]
        out.append(sums)
    return out


@pytest.mark.parametrize("recompute", [False, True])
def test_user_ranges_nest_the_phases_as_a_real_record_run_and_the_truth_is_paddles(tmp_path, recompute):
    made = generate_profile(tmp_path / "j", seed=5, user_ranges=True, recompute=recompute, **REAL_SHAPE)
    lane = _python_lane(made.files[0].path, 1)
    head, tail = lane.split("    Backward Gradient Backward\n")
    again, rest = tail.split("  Optimization")
    assert again.splitlines() == (["      Forward Linear"] * 2 if recompute else [])  # one per Linear
    assert f"{head}    Backward Gradient Backward\n  Optimization{rest}" == RECORD_STEP
    proto = generate_profile(tmp_path / "p", form="protobuf", seed=5, user_ranges=True, recompute=recompute,
                             **REAL_SHAPE).files[0]
    truth = [s.phases for s in proto.steps]
    assert _paddles_phases(proto.path) == truth == [s.phases for s in made.files[0].steps]
    assert all(all(s.phases.values()) for s in proto.steps)


# -- GPU: Paddle's exporter rules ------------------------------------------------------------

KERNEL_ARGS = ("start_time", "end_time", "device", "context", "stream", "correlation id",
               "registers per thread", "shared memory", "blocks per SM", "warps per SM", "grid", "block",
               "theoretical achieved occupancy %")
MEMCPY_ARGS = ("start_time", "end_time", "stream", "correlation id", "bytes", "memory bandwidth (GB/s)")
MEMSET_ARGS = ("start_time", "end_time", "device", "context", "stream", "correlation id", "bytes", "value")


@pytest.fixture(scope="module")
def gpu2(tmp_path_factory):
    return generate_profile(tmp_path_factory.mktemp("gpu2"), ranks=2, steps=4, seed=7, memory=True)


@pytest.fixture(scope="module")
def gpu2_pb(tmp_path_factory):
    return generate_profile(tmp_path_factory.mktemp("gpu2pb"), form="protobuf", ranks=2, steps=4, seed=7,
                            memory=True)


def test_gpu_chrome_device_events_and_flows(gpu2):
    for f in gpu2.files:
        d = _load(f.path)
        ev = d["traceEvents"][:-1]
        assert [p["id"] for p in d["deviceProperties"]] == [f.device_id]
        runtime = {e["args"]["correlation id"]: e for e in ev if e.get("cat") == "CudaRuntime"}
        dev = [e for e in ev if e.get("cat") in ("Kernel", "Memcpy", "Memset")]
        assert dev and {e["cat"] for e in dev} == {"Kernel", "Memcpy", "Memset"}
        for e in dev:
            assert e["args"]["correlation id"] in runtime            # every device event has its launch
            assert e["pid"] == f.device_id and isinstance(e["tid"], int) and e["tid"] == e["args"]["stream"]
            assert e["cname"] == "cq_build_failed" and _suffix_ok(e)
            want = {"Kernel": KERNEL_ARGS, "Memcpy": MEMCPY_ARGS, "Memset": MEMSET_ARGS}[e["cat"]]
            assert tuple(e["args"]) == want
        for e in runtime.values():
            assert e["tid"] == f"{f.tid}(C++)" and e["cname"] == "thread_state_running" and _suffix_ok(e)
        s = [e for e in ev if e.get("ph") == "s"]
        fl = [e for e in ev if e.get("ph") == "f"]
        assert sorted(e["id"] for e in s) == sorted(runtime)      # one "s" per runtime event
        assert len(fl) == len(dev) and len(s) > len(fl)           # syncs / event calls: "s" alone
        by_corr = {e["args"]["correlation id"]: e for e in dev}
        for e in fl:
            k = by_corr[e["id"]]
            assert (e["pid"], e["tid"], e["cat"], e["name"]) == (k["pid"], k["tid"], "async", "launch")
            assert ("bp" in e) == (k["dur"] >= 1.0)                # nsToUs(dur) == 0: no "bp"
        assert any("bp" not in e for e in fl)
        meta = {(e["pid"], e["tid"]): e["args"] for e in ev if e.get("name") == "process_name"
                and isinstance(e["tid"], int)}
        assert set(meta) == {(f.device_id, 7), (f.device_id, 19)}
        assert all(a["name"] == f"Device {f.device_id} (GPU)" for a in meta.values())
        # the profiler's own device sync hangs under the root: logged first, though last in time
        last_step = max(e["ts"] + e["dur"] for e in ev if e.get("cat") == "ProfileStep")
        assert ev[0]["cat"] == "CudaRuntime" and ev[0]["ts"] > last_step
        assert ev[0]["name"].startswith("cudaSetDevice_v3020[")
        assert sum(e.get("cat") == "Communication" for e in ev) == 3 * len(f.steps)
        mem = [e for e in ev if e.get("ph") == "i"]
        assert f.counts["memory"] == len(mem) and {e["cat"] for e in mem} == {
            "Allocate", "Free", "ReservedAllocate"}
        assert all(e["name"] == "[memory]" and e["tid"] == f"{f.tid}(C++)"
                   and isinstance(e["args"]["addr"], str)
                   and e["args"]["place"] == f"Place(gpu:{f.device_id})" for e in mem)


def test_gpu_comm_overlaps_compute_and_ends_in_lockstep(gpu2):
    a, b = gpu2.files
    for sa, sb in zip(a.steps, b.steps, strict=True):
        ca = [k for k in sa.device if k["comm"]]
        cb = [k for k in sb.device if k["comm"]]
        assert len(ca) == len(cb) == 3
        assert [k["end_ns"] for k in ca] == [k["end_ns"] for k in cb]      # a collective ends together
        assert {k["stream"] for k in ca} == {19} and all(k["name"].startswith("ncclDevKernel_AllReduce")
                                                        for k in ca)
        compute = [k for k in sa.device if not k["comm"]]
        assert any(c["start_ns"] < k["end_ns"] and k["start_ns"] < c["end_ns"] for k in ca for c in compute)
        adam = [k for k in compute if "Adam" in k["name"]]
        assert adam and min(k["start_ns"] for k in adam) >= max(k["end_ns"] for k in ca)
        for s in (sa, sb):
            streams = collections.defaultdict(list)
            for k in s.device:
                streams[k["stream"]].append((k["start_ns"], k["end_ns"]))
            for spans in streams.values():                # one stream runs one thing at a time
                spans.sort()
                assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:], strict=False))


def test_gpu_pb_tree_follows_paddles_rules(gpu2_pb):
    for f in gpu2_pb.files:
        m = _load_pb(f.path)
        assert _fields(m) == ("version", "span_index", "thread_trees", "extra_info", "device_property")
        (prop,) = m.device_property
        assert prop.id == f.device_id and prop.sm_count == 108 and prop.IsInitialized()
        nodes = list(m.thread_trees[0].host_nodes)
        assert [n.id for n in nodes] == list(range(len(nodes)))
        spans = [(n.host_trace_event.start_ns, n.host_trace_event.end_ns, n.id) for n in nodes]
        parent_of = {n.id: n.parentid for n in nodes}

        def innermost(lo, hi, spans=spans):
            best = None
            for s, e, i in spans:
                if s <= lo and hi <= e and (best is None or (s, -e) > best[:2]):
                    best = (s, -e, i)
            return best[2]

        corr_seen = set()
        n_dev = n_rt = 0
        for n in nodes:
            for rt in n.runtime_nodes:
                r = rt.runtime_trace_event
                assert innermost(r.start_ns, r.end_ns) == n.id          # event_node.cc's attachment
                assert r.IsInitialized() and r.correlation_id not in corr_seen
                corr_seen.add(r.correlation_id)
                n_rt += 1
                for dn in rt.device_nodes:
                    d = dn.device_event
                    assert d.correlation_id == r.correlation_id and d.device_id == f.device_id
                    assert d.start_ns >= r.start_ns and d.IsInitialized()
                    info = {4: "kernel_info", 5: "memcpy_info", 6: "memset_info"}[d.type]
                    assert _fields(d)[-1] == info
                    n_dev += 1
                    if d.type == 5:
                        assert (d.memcpy_info.copy_kind, d.memcpy_info.src_kind, d.memcpy_info.dst_kind) == (
                            "", "MEMCPY_HtoD", "MEMCPY_HtoA")
            for mm in n.mem_nodes:
                assert innermost(mm.mem_event.timestamp_ns, mm.mem_event.timestamp_ns) == n.id
            e = n.host_trace_event
            if e.name.endswith("kernel launch"):
                assert not e.HasField("type") and _pb_type(e) == 15
            if e.name == "reshard dygraph":
                assert e.type == 12 and nodes[parent_of[n.id]].host_trace_event.name == "backward"
        assert nodes[0].runtime_nodes and [rt.runtime_trace_event.name for rt in nodes[0].runtime_nodes] == [
            "cudaSetDevice_v3020", "cudaDeviceSynchronize_v3020", "cudaSetDevice_v3020"]
        assert n_rt == f.counts["CudaRuntime"]
        assert n_dev == f.counts["Kernel"] + f.counts["Memcpy"] + f.counts["Memset"]
        # the truth's device intervals are the file's, exactly
        got = sorted((d.device_event.start_ns, d.device_event.end_ns, d.device_event.name)
                     for n in nodes for rt in n.runtime_nodes for d in rt.device_nodes)
        want = sorted((k["start_ns"], k["end_ns"], k["name"]) for s in f.steps for k in s.device)
        assert got == want


def test_chrome_and_pb_hold_the_same_gpu_run(gpu2, gpu2_pb):
    for fj, fp in zip(gpu2.files, gpu2_pb.files, strict=True):
        assert fj.steps == fp.steps and fj.pid == fp.pid
        ev = _load(fj.path)["traceEvents"]
        kern = sorted((e["ts"], e["args"]["correlation id"]) for e in ev if e.get("cat") == "Kernel")
        want = sorted((k["start_ns"] // 1000, k["correlation_id"]) for s in fp.steps for k in s.device
                      if k["type"] == "Kernel")
        assert kern == want


@pytest.mark.parametrize(("comm", "nccl", "launch", "kernel"), [
    ("dp", "2.12", "cudaLaunchKernel_v7000", "ncclKernel_AllReduce_RING_LL_Sum_float("),
    ("reshard", "2.21", "Runtime API 652", "ncclDevKernel_AllReduce_Sum_f32_RING_LL("),
])
def test_comm_variants(tmp_path, comm, nccl, launch, kernel):
    f = generate_profile(tmp_path, ranks=2, steps=2, comm=comm, nccl=nccl).files[0]
    ev = _load(f.path)["traceEvents"][:-1]
    rt = {e["args"]["correlation id"]: e for e in ev if e.get("cat") == "CudaRuntime"}
    nccl_k = [e for e in ev if e.get("cat") == "Kernel" and e["name"].startswith("nccl")]
    assert nccl_k and all(e["name"].startswith(kernel) for e in nccl_k)
    assert {SUFFIX.match(rt[e["args"]["correlation id"]]["name"]).group(1) for e in nccl_k} == {launch}
    assert any(e.get("cat") == "Communication" for e in ev) == (comm == "reshard")


# -- determinism, adversarial variants, names, size --------------------------------------------

@pytest.mark.parametrize("form", ["chrome", "protobuf"])
def test_deterministic_per_seed(tmp_path, form):
    a = generate(tmp_path / "a", form=form, ranks=2, steps=2, seed=11)
    b = generate(tmp_path / "b", form=form, ranks=2, steps=2, seed=11)
    c = generate(tmp_path / "c", form=form, ranks=2, steps=2, seed=12)
    assert [p.name for p in a] == [p.name for p in b]
    assert [p.read_bytes() for p in a] == [p.read_bytes() for p in b]
    assert [p.read_bytes() for p in a] != [p.read_bytes() for p in c]


def test_truncate_cuts_inside_an_event(tmp_path):
    full = generate_profile(tmp_path / "full", steps=3, seed=2).files[0]
    cut = generate_profile(tmp_path / "cut", steps=3, seed=2, truncate=True).files[0]
    assert cut.path.stat().st_size == cut.truncated_at < full.size
    text = cut.path.read_text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)
    tail = text[text.rindex("\n  {"):]
    assert "}" not in tail and re.search(r'"ts": \d+$', tail)       # mid-event, mid-number
    assert full.path.read_text().startswith(text)

    fullp = generate_profile(tmp_path / "fullp", form="protobuf", steps=3, seed=2).files[0]
    cutp = generate_profile(tmp_path / "cutp", form="protobuf", steps=3, seed=2, truncate=True).files[0]
    data = cutp.path.read_bytes()
    assert len(data) == cutp.truncated_at < fullp.size and fullp.path.read_bytes().startswith(data)
    with pytest.raises(DecodeError):
        pb.NodeTreesProto().ParseFromString(data)


def test_shuffle_keeps_the_events(tmp_path):
    plain = generate(tmp_path / "plain", steps=4, seed=5)[0]
    mixed = generate(tmp_path / "mixed", steps=4, seed=5, shuffle=True)[0]
    a, b = _load(plain)["traceEvents"], _load(mixed)["traceEvents"]
    assert b[-1] == {} and b != a
    assert sorted(map(json.dumps, a)) == sorted(map(json.dumps, b))
    ts = [e["ts"] for e in b if e.get("ph") == "X"]
    assert ts != sorted(ts)
    depths = _depths(b)
    assert depths != sorted(depths)                                  # no longer breadth-first

    pp = _load_pb(generate(tmp_path / "pp", form="protobuf", steps=4, seed=5)[0])
    pm = _load_pb(generate(tmp_path / "pm", form="protobuf", steps=4, seed=5, shuffle=True)[0])
    na, nb = pp.thread_trees[0].host_nodes, pm.thread_trees[0].host_nodes
    assert [n.id for n in nb] != sorted(n.id for n in nb)
    key = sorted((n.id, n.parentid, n.SerializePartialToString()) for n in na)
    assert key == sorted((n.id, n.parentid, n.SerializePartialToString()) for n in nb)


def test_file_names_and_ranks(tmp_path):
    files = generate_profile(tmp_path / "d", ranks=3, steps=1).files
    names = [DEFAULT_NAME.match(f.path.name) for f in files]
    assert all(names) and len({m.group(2) for m in names}) == 3 and {m.group(1) for m in names} == {"vm"}
    assert [f.device_id for f in files] == [0, 1, 2]
    assert [int(m.group(2)) for m in names] == [f.pid for f in files]
    for f in files:      # in the data the rank shows only as the GPU
        ev = _load(f.path)["traceEvents"]
        assert {e["args"]["name"] for e in ev if e.get("name") == "process_name"} == {
            f"Process {f.pid} (CPU)", f"Device {f.rank} (GPU)"}
    named = generate(tmp_path / "w", form="protobuf", ranks=2, steps=1, worker_name="rank{rank}")
    assert [re.sub(r"_time_.*", "", p.name) for p in named] == ["rank0", "rank1"]
    assert all(p.name.endswith(".paddle_trace.pb") for p in named)
    cpu = generate(tmp_path / "c", gpu=False, steps=1)[0]
    assert "deviceProperties" not in _load(cpu) and DEFAULT_NAME.match(cpu.name)
    with pytest.raises(ValueError):
        generate(tmp_path / "x", gpu=False, ranks=2)


def test_target_size_and_cli(tmp_path, capsys):
    f = generate_profile(tmp_path / "big", target_mb=1.5, steps=1, seed=1).files[0]
    assert f.size >= 1_500_000 and len(f.steps) > 1 and f.steps[-1].number == 3 + len(f.steps) - 1
    truth = tmp_path / "truth.json"
    assert paddle_gen.main([str(tmp_path / "cli"), "--form", "protobuf", "--steps", "2", "--seed", "3",
                            "--ranks", "2", "--truncate", "--truth", str(truth)]) == 0
    got = json.loads(truth.read_text())
    assert [Path(g["path"]).name for g in got] == sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert all(g["truncated_at"] == Path(g["path"]).stat().st_size for g in got)
    assert "2 steps" in capsys.readouterr().out
    assert paddle_gen.main([str(tmp_path / "bad"), "--cpu", "--ranks", "2"]) == 2
