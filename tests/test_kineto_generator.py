"""The PyTorch profiler (Kineto) trace generator, ``fixtures.kineto_gen``.

Everything is recomputed from the written files; the real-data tests compare the generated traces with
the real ones in ``$TRACE2PERFETTO_REALDATA`` (``kineto-2rank``: 2023 GPU/NCCL as re-serialised by HTA;
``kineto-gloo-2rank``: PyTorch 2.13 CPU gloo, written by libkineto) and skip when it is unset.
"""

from __future__ import annotations

import gzip
import re
import time
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest
from conftest import real_data

from fixtures.kineto_gen import NEW_ARG_KEYS, NEW_TOP_LEVEL_KEYS, generate, main, write_kineto_traces

TRIMONTH_NS = 7_889_238 * 10**9
LAUNCH = {"cudaLaunchKernel", "cuLaunchKernelEx", "cudaMemcpyAsync", "cudaMemsetAsync"}
GPU_CATS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation")
NAME = re.compile(r"^[\w.-]+_\d+\.\d{19}\.pt\.trace\.json(\.gz)?$")


# --------------------------------------------------------------------------- helpers


def load(p: Path) -> dict:
    raw = p.read_bytes()
    return orjson.loads(gzip.decompress(raw) if p.name.endswith(".gz") else raw)


def ns(x: float) -> int:
    return round(x * 1000)


def by_rank(paths: list[Path]) -> dict[int, dict]:
    out = {}
    for p in paths:
        d = load(p)
        out[d["distributedInfo"]["rank"]] = d
    return out


def arg_types(traces: list[dict]) -> dict[tuple, dict[str, set[str]]]:
    """(ph, cat or M name) -> arg key -> JSON value types."""
    out: dict[tuple, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for d in traces:
        for e in d["traceEvents"]:
            key = (e["ph"], e["name"] if e["ph"] == "M" else e.get("cat"))
            for k, v in (e.get("args") or {}).items():
                out[key][k].add(type(v).__name__)
    return out


def union(xs):
    out = []
    for s, e in sorted(xs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def overlap(a, b) -> int:
    return sum(max(0, min(x[1], y[1]) - max(x[0], y[0])) for x in a for y in b)


@pytest.fixture(scope="module")
def gpu(tmp_path_factory) -> tuple[list[Path], dict, dict[int, dict]]:
    out = tmp_path_factory.mktemp("gpu") / "run"
    res = write_kineto_traces(out, ranks=3, steps=2, seed=11)
    return res.paths, res.manifest, by_rank(res.paths)


@pytest.fixture(scope="module")
def gloo(tmp_path_factory) -> tuple[list[Path], dict, dict[int, dict]]:
    out = tmp_path_factory.mktemp("gloo") / "run"
    res = write_kineto_traces(out, ranks=2, steps=3, seed=4, cpu_gloo=True)
    return res.paths, res.manifest, by_rank(res.paths)


# --------------------------------------------------------------------------- files and layout


def test_cli_writes_one_tensorboard_named_file_per_rank(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([str(out), "--ranks", "4", "--steps", "1", "--seed", "3"]) == 0
    assert "4 ranks x 1 steps (gpu-nccl)" in capsys.readouterr().out
    files = sorted(p for p in out.iterdir())
    assert all(NAME.match(p.name) for p in files), files
    ranks = [load(p)["distributedInfo"]["rank"] for p in files]
    assert sorted(ranks) == [0, 1, 2, 3]
    assert ranks != sorted(ranks), "the file-name order must not be the rank order"
    assert not any(p.name.startswith("_") for p in files)     # no manifest unless asked
    assert main([str(tmp_path / "bad"), "--ranks", "2", "--world-size", "1"]) == 2


def test_generate_returns_paths_by_rank_and_manifest_on_request(tmp_path):
    paths = generate(tmp_path / "a", ranks=2, steps=1, seed=1)
    assert [load(p)["distributedInfo"]["rank"] for p in paths] == [0, 1]
    res = write_kineto_traces(tmp_path / "b", ranks=2, steps=1, seed=1, write_manifest=True)
    assert orjson.loads((tmp_path / "b" / "_manifest.json").read_bytes()) == orjson.loads(
        orjson.dumps(res.manifest))
    assert [r["file"] for r in res.manifest["rank_files"]] == [p.name for p in res.paths]


def test_header_times_and_kineto_byte_layout(gpu):
    paths, man, traces = gpu
    for p in paths:
        raw = p.read_bytes()
        assert raw.startswith(b' {\n    "schemaVersion": 1,\n    "deviceProperties": [{"id": 0, ')
        assert raw.endswith(f'\n  ],"traceName": "run/{p.name}" }}'.encode())
        d = orjson.loads(raw)
        keys = list(d)
        assert keys[0] == "schemaVersion" and keys[-1] == "traceName" and keys[-2] == "traceEvents"
        assert d["displayTimeUnit"] == "ms"
        assert d["baseTimeNanoseconds"] % TRIMONTH_NS == 0          # ChromeTraceBaseTime: 3-month floor
        # every ts / dur is written as µs with exactly 3 decimals (ns), relative to the base
        assert not re.search(rb'"(ts|dur)": (?!\d+\.\d{3}[,\n ])', raw)
        ts = [e["ts"] for e in d["traceEvents"]]
        assert 0 < min(ts) and max(ts) < TRIMONTH_NS / 1000
        assert len(d["deviceProperties"]) == 8 and d["deviceProperties"][0]["numSms"] == 132
        di = d["distributedInfo"]
        assert di["backend"] == "nccl" and di["world_size"] == 3 and di["nccl_version"]
        assert di["pg_config"] == [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                    "pg_size": 3, "ranks": [0, 1, 2]}]
    assert len({load(p)["baseTimeNanoseconds"] for p in paths}) == 1


def test_metadata_quirks(gpu):
    _, _, traces = gpu
    for rank, d in traces.items():
        ev = d["traceEvents"]
        meta = [e for e in ev if e["ph"] == "M"]
        assert ev[: len(meta) - 1] == meta[:-1]            # metadata first (the Spans sort index later)
        labels = {e["pid"]: e["args"]["labels"] for e in meta if e["name"] == "process_labels"}
        cpu_pid = next(p for p, v in labels.items() if v == "CPU")
        assert {p: v for p, v in labels.items() if p != cpu_pid} == {g: f"GPU {g}" for g in range(16)}
        sort = {e["pid"]: e["args"]["sort_index"] for e in meta if e["name"] == "process_sort_index"}
        assert sort[cpu_pid] == cpu_pid and sort[3] == 5_000_003 and sort["Spans"] == 0x20000000
        names = {e["args"]["name"] for e in meta if e["name"] == "process_name"}
        assert names == {"python"}                          # the same name on every pid
        streams = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta
                   if e["name"] == "thread_name" and e["pid"] != cpu_pid}
        dev = rank % 8
        assert streams == {(dev, 7): "stream 7 ", (dev, 84): "stream 84 "}   # trailing space
        threads = Counter(e["tid"] for e in meta if e["name"] == "thread_name" and e["pid"] == cpu_pid)
        assert sorted(threads.values()) == [1, 2]           # one worker thread is named twice
        gpu_pids = {e["pid"] for e in ev if e.get("cat") in GPU_CATS}
        assert gpu_pids == {dev}
        span = [e for e in ev if e.get("cat") == "Trace"]
        assert span[0]["pid"] == "Spans" and span[0]["tid"] == "PyTorch Profiler"
        inst = [e for e in ev if e["ph"] == "i"]
        assert [(e["name"], e["pid"], e["tid"]) for e in inst] == [
            ("Iteration Start: PyTorch Profiler", "Traces", "Trace PyTorch Profiler"),
            ("Record Window End", "", "")]
        assert ev[-1]["name"] == "Record Window End"


def test_deterministic_per_seed(tmp_path):
    a = write_kineto_traces(tmp_path / "a" / "out", ranks=2, steps=2, seed=9, with_stack=True)
    b = write_kineto_traces(tmp_path / "b" / "out", ranks=2, steps=2, seed=9, with_stack=True)
    c = write_kineto_traces(tmp_path / "c" / "out", ranks=2, steps=2, seed=10, with_stack=True)
    assert [p.read_bytes() for p in a.paths] == [p.read_bytes() for p in b.paths]
    assert a.manifest == b.manifest
    assert a.paths[0].read_bytes() != c.paths[0].read_bytes()


def test_size_near_target_and_fast(tmp_path):
    started = time.perf_counter()
    res = write_kineto_traces(tmp_path / "big", ranks=2, seed=2, target_mb=25)
    elapsed = time.perf_counter() - started
    for p, r in zip(res.paths, res.manifest["rank_files"], strict=True):
        assert p.stat().st_size == r["bytes"]
        assert 0.97 * 25e6 < r["bytes"] < 1.04 * 25e6
    assert len(res.manifest["steps"]) > 3
    assert elapsed < 30, f"50 MB took {elapsed:.1f} s"
    orjson.loads(res.paths[0].read_bytes())


# --------------------------------------------------------------------------- content


def test_manifest_counts_match_the_files(gpu):
    paths, man, traces = gpu
    for rf in man["rank_files"]:
        d = traces[rf["rank"]]
        c = Counter()
        for e in d["traceEvents"]:
            c["M" if e["ph"] == "M" else "i" if e["ph"] == "i" else f"{e['ph']}/{e['cat']}"] += 1
        assert {k: v for k, v in rf["events"].items() if k.count("/") <= 1} == dict(c)


def test_cpu_blocks_ids_and_nesting(gpu):
    _, man, traces = gpu
    for rank, d in traces.items():
        ev = d["traceEvents"]
        cpu = [e for e in ev if e["ph"] == "X" and "Ev Idx" in e.get("args", {})]
        assert [e["args"]["Ev Idx"] for e in cpu] == list(range(len(cpu)))    # file order, contiguous
        ext = [e["args"]["External id"] for e in cpu if e["cat"] != "python_function"]
        assert len(ext) == len(set(ext))
        # thread blocks: the autograd thread's events, then the main thread's, never interleaved
        tids = [e["tid"] for e in cpu]
        assert tids == sorted(tids, key=tids.index) and len(set(tids)) == 2
        by_tid = defaultdict(list)
        for e in ev:
            if e["ph"] == "X" and isinstance(e["pid"], int) and e["pid"] > 100:
                by_tid[e["tid"]].append((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])))
        for xs in by_tid.values():                                  # properly nested per thread
            stack: list[int] = []
            for s, e in sorted(xs, key=lambda x: (x[0], -x[1])):
                while stack and s >= stack[-1]:
                    stack.pop()
                assert not stack or e <= stack[-1]
                stack.append(e)
        steps = [e for e in ev if e.get("cat") == "user_annotation" and e["name"].startswith("ProfilerStep#")]
        assert [ (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in steps] == [
            (s["start_ns"], s["end_ns"]) for s in man["rank_files"][rank]["steps"]]


def test_ac2g_flows_link_launches_to_gpu_records(gpu, tmp_path):
    _, man, traces = gpu
    for rank, d in traces.items():
        ev = d["traceEvents"]
        s = {e["id"]: e for e in ev if e["ph"] == "s" and e["cat"] == "ac2g"}
        f = {e["id"]: e for e in ev if e["ph"] == "f" and e["cat"] == "ac2g"}
        assert all(e["name"] == "ac2g" for e in [*s.values(), *f.values()])
        assert all(e["bp"] == "e" for e in f.values()) and not any("bp" in e for e in s.values())
        runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") in ("cuda_runtime", "cuda_driver")}
        device = {e["args"]["correlation"]: e for e in ev
                  if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")}
        for cid, r in runtime.items():
            if r["name"] in LAUNCH:                       # a launch: s on the call, f on its GPU record
                g = device[cid]
                assert s[cid]["tid"] == r["tid"] and s[cid]["ts"] == r["ts"]
                assert (f[cid]["pid"], f[cid]["tid"], f[cid]["ts"]) == (g["pid"], g["tid"], g["ts"])
                assert g["args"]["External id"] == r["args"]["External id"]
                assert g["ts"] > r["ts"]
        # the rest, as libkineto writes them: sync calls start a flow nothing ends (no CUDA sync
        # events), calls that correlate nothing (cudaEventRecord...) end one nothing started
        lone_s = set(s) - set(f)
        lone_f = set(f) - set(s)
        assert {runtime[i]["name"] for i in lone_s} == {"cudaStreamWaitEvent", "cudaStreamSynchronize"}
        assert {runtime[i]["name"] for i in lone_f} == {"cudaEventRecord", "cudaStreamIsCapturing"}
        assert all(f[i]["tid"] == runtime[i]["tid"] for i in lone_f)
        rf = man["rank_files"][rank]["events"]
        assert (len(lone_s), len(lone_f)) == (rf["s/ac2g/sync"], rf["f/ac2g/orphan"])
        assert any("External id" not in runtime[i]["args"] for i in lone_s)   # DDP's final callback
    res = write_kineto_traces(tmp_path / "sync", ranks=1, steps=1, seed=11, cuda_sync_events=True)
    ev = load(res.paths[0])["traceEvents"]
    s = {e["id"] for e in ev if e["ph"] == "s" and e["cat"] == "ac2g"}
    f = {e["id"] for e in ev if e["ph"] == "f" and e["cat"] == "ac2g"}
    assert s <= f                                           # with sync events every s has its f
    rows = [e for e in ev if e["ph"] == "M" and e["name"] == "thread_name" and e["tid"] == 1_000_007]
    assert [e["args"]["name"] for e in rows] == ["stream 7 (sync)"]


def test_fwdbwd_flows_pair(gpu, gloo):
    for _, _, traces in (gpu, gloo):
        for d in traces.values():
            ev = d["traceEvents"]
            s = [e for e in ev if e["ph"] == "s" and e["cat"] == "fwdbwd"]
            f = [e for e in ev if e["ph"] == "f" and e["cat"] == "fwdbwd"]
            assert s and sorted(e["id"] for e in s) == sorted(e["id"] for e in f)
            start = {(e["tid"], e["ts"]): e for e in ev if e["ph"] == "X" and "Sequence number" in e["args"]}
            sf = {e["id"]: e for e in s}
            for e in f:                         # f on "XBackward0", s on the forward op of the same seq
                node, fwd = start[(e["tid"], e["ts"])], start[(sf[e["id"]]["tid"], sf[e["id"]]["ts"])]
                assert node["name"].endswith("Backward0") and node["args"]["Fwd thread id"] == 1
                assert node["args"]["Sequence number"] == fwd["args"]["Sequence number"]
                assert fwd["args"]["Fwd thread id"] == 0


def test_nccl_overlaps_compute_partially(gpu):
    _, man, traces = gpu
    nccl_ends: dict[int, list[list[int]]] = {}
    for rank, d in traces.items():
        ev = d["traceEvents"]
        kernels = [(e["tid"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
                   for e in ev if e.get("cat") == "kernel"]
        nccl_ends[rank] = []
        for st in man["rank_files"][rank]["steps"]:
            a, b = st["start_ns"], st["end_ns"]
            comp = union([(s, e) for tid, s, e in kernels if tid != 84 and a <= s < b])
            comm = sorted((s, e) for tid, s, e in kernels if tid == 84 and a <= s < b)
            assert comm and all(e <= b for _, e in comm)               # inside the ProfilerStep
            assert comp == st["compute"] and comm == [tuple(c) for c in st["comm"]]
            ov = overlap(comp, union(comm))
            assert ov == st["overlap_ns"]
            assert 0 < ov < st["comm_ns"], "NCCL must overlap compute, but not entirely"
            nccl_ends[rank].append([e for _, e in comm])
        names = {e["name"] for e in ev if e.get("cat") == "kernel" and e["tid"] == 84}
        assert names == {"ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
                         "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"}
    # a collective ends at the same instant on every rank (the last arrival + the transfer)
    assert nccl_ends[0] == nccl_ends[1] == nccl_ends[2]


def test_collective_args_on_cpu_op_and_kernel(gpu):
    _, _, traces = gpu
    for rank, d in traces.items():
        ev = d["traceEvents"]
        ops = {e["args"]["External id"]: e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")}
        nccl = [e for e in ev if e.get("cat") == "kernel" and e["tid"] == 84]
        seqs = []
        for k in nccl:
            op = ops[k["args"]["External id"]]
            assert op["name"] == "record_param_comms"            # the inner one, linked to the launch
            a, b = k["args"], op["args"]
            for key in ("Collective name", "In msg nelems", "Out msg nelems", "Group size", "dtype",
                        "In split size", "Out split size", "Process Group Name", "Process Group Description",
                        "Process Group Ranks", "Seq", "Comms Id"):
                assert a[key] == b[key], key
            assert b["Rank"] == rank and b["Group size"] == 3 and b["Process Group Ranks"] == "[0, 1, 2]"
            assert isinstance(b["Is asynchronized op"], bool)
            seqs.append(a["Seq"])
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    # the same collective has the same Seq and Comms Id on every rank
    ids = [sorted((e["args"]["Seq"], e["args"]["Comms Id"]) for e in d["traceEvents"]
                  if e.get("cat") == "kernel" and e["tid"] == 84) for d in traces.values()]
    assert ids[0] == ids[1] == ids[2]


def test_gpu_user_annotations(gpu):
    _, _, traces = gpu
    d = traces[0]
    ev = d["traceEvents"]
    gua = [e for e in ev if e.get("cat") == "gpu_user_annotation"]
    names = Counter(e["name"] for e in gua)
    assert {n for n in names if n.startswith("ProfilerStep#")} and names["nccl:all_reduce"] > 0
    ops = {e["args"]["External id"]: e for e in ev if e.get("cat") == "user_annotation"}
    for e in gua:
        assert ops[e["args"]["External id"]]["name"] == e["name"]
        inside = [k for k in ev if k.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and k["tid"] == e["tid"] and ns(e["ts"]) < ns(k["ts"])
                  and ns(k["ts"]) + ns(k["dur"]) < ns(e["ts"]) + ns(e["dur"])]
        assert inside
        assert min(ns(k["ts"]) for k in inside) == ns(e["ts"]) + 1      # starts 1 ns before its first op


def test_with_stack_python_functions(tmp_path):
    res = write_kineto_traces(tmp_path / "st", ranks=1, steps=2, seed=5, with_stack=True)
    d = load(res.paths[0])
    assert d["with_stack"] == 1
    py = [e for e in d["traceEvents"] if e.get("cat") == "python_function"]
    assert len(py) > 50
    ids = {e["args"]["Python id"]: e for e in py}
    roots = [e for e in py if "Python parent id" not in e["args"]]
    assert roots and all(e["name"].startswith("train.py(") for e in roots)
    for e in py:
        if "Python parent id" in e["args"]:
            parent = ids[e["args"]["Python parent id"]]
            assert parent["ts"] <= e["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"]
        assert ("Python module id" in e["args"]) == e["name"].startswith("nn.Module: ")


def test_old_nccl_names_and_launch(tmp_path):
    res = write_kineto_traces(tmp_path / "old", ranks=2, steps=1, seed=3, nccl="old")
    ev = load(res.paths[0])["traceEvents"]
    names = {e["name"] for e in ev if e.get("cat") == "kernel" and e["tid"] == 84}
    assert names == {"ncclKernel_AllReduce_RING_LL_Sum_bfloat16(ncclDevComm*, unsigned long, ncclWork*)",
                     "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"}
    assert not [e for e in ev if e.get("cat") == "cuda_driver"]


def test_symmetric_memory_all_reduce_is_launched_by_no_communication_op(tmp_path):
    made = write_kineto_traces(tmp_path / "symm", ranks=2, steps=1, seed=3, nccl="symm")
    ev = load(made.paths[0])["traceEvents"]
    kernels = [e for e in ev if e.get("cat") == "kernel" and "multimem_all_reduce_kernel<" in e["name"]]
    assert kernels and not [e for e in ev if e.get("cat") == "kernel" and e["name"].startswith("nccl")]
    assert {e["args"]["stream"] for e in kernels} == {7}  # the compute stream, as in the vLLM sample
    assert not [e for e in ev if str(e.get("name")).startswith(("record_param_comms", "nccl:", "c10d::"))]
    assert not [e for e in kernels if "Collective name" in e["args"]]
    launches = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    ops = [e for e in ev if e.get("name") == "symm_mem::multimem_all_reduce_"]
    for k in kernels:
        launch = launches[k["args"]["correlation"]]
        assert launch["name"] == "cudaLaunchKernel"
        assert any(o["tid"] == launch["tid"] and o["ts"] <= launch["ts"] <= o["ts"] + o["dur"] for o in ops)


def test_symmetric_memory_kernel_named_as_the_real_sample(tmp_path):
    real = load(real_data("kineto-b200-vllm") / "eager_trace.json.gz")["traceEvents"]
    names = {e["name"] for e in real if e.get("cat") == "kernel" and "multimem" in e["name"]}
    made = write_kineto_traces(tmp_path / "symm", ranks=1, steps=1, seed=3, nccl="symm")
    ev = load(made.paths[0])["traceEvents"]
    assert names and names <= {e["name"] for e in ev if e.get("cat") == "kernel"}


def test_no_steps_writes_the_same_work_without_step_ranges(tmp_path):
    def kernels(**kw) -> int:
        made = write_kineto_traces(tmp_path / ("bare" if kw else "stepped"), ranks=1, steps=2, seed=3, **kw)
        ev = load(made.paths[0])["traceEvents"]
        assert bool(kw) != any(str(e.get("name")).startswith("ProfilerStep#") for e in ev)
        return sum(e.get("cat") == "kernel" for e in ev)

    assert kernels(no_steps=True) == kernels()


# --------------------------------------------------------------------------- adversarial options


def test_shuffle_keeps_the_events(tmp_path):
    plain = write_kineto_traces(tmp_path / "p" / "o", ranks=1, steps=2, seed=6)
    shuf = write_kineto_traces(tmp_path / "s" / "o", ranks=1, steps=2, seed=6, shuffle=True)
    a, b = load(plain.paths[0])["traceEvents"], load(shuf.paths[0])["traceEvents"]
    assert sorted(map(orjson.dumps, a)) == sorted(map(orjson.dumps, b)) and a != b
    main_tid = plain.manifest["rank_files"][0]["threads"]["main"]
    ts = [e["ts"] for e in b if e["ph"] == "X" and e["tid"] == main_tid]
    assert ts != sorted(ts)


def test_metadata_last(tmp_path):
    res = write_kineto_traces(tmp_path / "m", ranks=1, steps=1, seed=6, metadata_last=True)
    ev = load(res.paths[0])["traceEvents"]
    first_m = next(i for i, e in enumerate(ev) if e["ph"] == "M")
    assert all(e["ph"] == "M" for e in ev[first_m:]) and first_m > 0.9 * len(ev)


def test_truncate_cuts_inside_an_event(tmp_path):
    whole = write_kineto_traces(tmp_path / "w" / "o", ranks=2, steps=1, seed=8)
    cut = write_kineto_traces(tmp_path / "c" / "o", ranks=2, steps=1, seed=8, truncate=True)
    for w, c, rf in zip(whole.paths, cut.paths, cut.manifest["rank_files"], strict=True):
        data = c.read_bytes()
        assert rf["truncated_at"] and len(data) == rf["bytes"] < w.stat().st_size
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(data)
        assert not data.rstrip().endswith((b"},", b"}", b"]"))
        assert w.read_bytes().startswith(data[: rf["truncated_at"]])


def test_gzip(tmp_path):
    plain = write_kineto_traces(tmp_path / "p" / "o", ranks=2, steps=1, seed=7)
    gz = write_kineto_traces(tmp_path / "g" / "o", ranks=2, steps=1, seed=7, gzip=True)
    for p, g in zip(plain.paths, gz.paths, strict=True):
        assert g.name == p.name + ".gz" and NAME.match(g.name)
        a, b = load(p), load(g)
        # torch exports to a NamedTemporaryFile(suffix=".json") before gzipping: traceName is that path
        assert re.fullmatch(r"/tmp/tmp\w{8}\.json", b.pop("traceName")) and a.pop("traceName")
        assert a == b


# --------------------------------------------------------------------------- against the real samples


def real_traces(folder: str, pattern: str) -> list[dict]:
    return [load(p) for p in sorted(real_data(folder).glob(pattern))]


def test_gpu_matches_real_keys_cats_and_types(gpu):
    paths, _, traces = gpu
    gen = list(traces.values())
    r23 = real_traces("kineto-2rank", "*.json.gz")
    r26 = real_traces("kineto-gloo-2rank", "*.pt.trace.json")
    # top level: everything the current (2.13) writer has, plus only the documented GPU additions
    real_top, gen_top = set(r26[0]), set(gen[0])
    assert real_top <= gen_top and set(r23[0]) <= gen_top
    assert gen_top - real_top == set(NEW_TOP_LEVEL_KEYS) - {"with_stack"}
    for k in real_top:
        assert type(gen[0][k]) is type(r26[0][k]), k
    assert set(r26[0]["distributedInfo"]) | {"nccl_version"} == set(gen[0]["distributedInfo"])
    # categories and metadata names
    cats = lambda ts: {(e["ph"], e.get("cat")) for t in ts for e in t["traceEvents"]}   # noqa: E731
    new = {("X", "cuda_driver"), ("X", "gpu_user_annotation"), ("s", "ac2g"), ("f", "ac2g")}
    assert cats(r23) <= cats(gen) <= cats(r23) | cats(r26) | new
    mnames = lambda ts: {e["name"] for t in ts for e in t["traceEvents"] if e["ph"] == "M"}   # noqa: E731
    assert mnames(gen) == mnames(r23) == mnames(r26)
    # arg keys and value types
    real, mine = arg_types(r23 + r26), arg_types(gen)
    for key, args in arg_types(r23).items():               # every key the 2023 GPU sample has
        assert set(args) <= set(mine[key]), (key, set(args) - set(mine[key]))
    for key, args in mine.items():
        for k, types in args.items():
            if k in real.get(key, {}):
                assert types <= real[key][k], (key, k, types, real[key][k])
            else:
                assert k in NEW_ARG_KEYS.get(key[1], {}), (key, k)
    # the envelope: per phase, the keys in the order the 2.13 writer puts them (args aside)
    def orders(ts):
        out = defaultdict(set)
        for t in ts:
            for e in t["traceEvents"]:
                out[e["ph"]].add(tuple(k for k in e if k != "args"))
        return out
    want, have = orders(r26), orders(gen)
    assert set(have) == set(want) and all(have[ph] <= want[ph] for ph in have), (have, want)
    # a kernel the way the real sample has it: grid/block lists of 3 ints, a blocks-per-SM number
    k = next(e for e in gen[0]["traceEvents"] if e.get("cat") == "kernel")
    rk = next(e for e in r23[0]["traceEvents"] if e.get("cat") == "kernel")
    assert [type(x) for x in k["args"]["grid"]] == [type(x) for x in rk["args"]["grid"]] == [int] * 3


def test_gloo_matches_the_real_gloo_sample(gloo):
    paths, _, traces = gloo
    real = real_traces("kineto-gloo-2rank", "*.pt.trace.json")
    gen = list(traces.values())
    assert [list(d) for d in gen] == [list(d) for d in real]      # same top-level keys, same order
    for d, r in zip(gen, real, strict=True):
        assert d["distributedInfo"] == r["distributedInfo"]
        assert d["deviceProperties"] == [] and isinstance(d["baseTimeNanoseconds"], int)
    cats = lambda ts: Counter((e["ph"], e.get("cat")) for t in ts for e in t["traceEvents"])  # noqa: E731
    assert set(cats(gen)) == set(cats(real))
    rt, gt = arg_types(real), arg_types(gen)
    assert {k: dict(v) for k, v in rt.items()} == {k: dict(v) for k, v in gt.items()}
    xnames = lambda ts: {e["name"] for t in ts for e in t["traceEvents"] if e["ph"] == "X"}   # noqa: E731
    assert xnames(real) - {"PyTorch Profiler (0)"} <= xnames(gen)
    # thread layout: two gloo threads with the gloo ranges, one named twice, blocks in file order
    for d in gen:
        meta = [e for e in d["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"]
        assert sorted(Counter(e["tid"] for e in meta).values()) == [1, 1, 2]
        gl = {e["tid"] for e in d["traceEvents"] if e.get("name", "").startswith("gloo:")}
        last_name = {e["tid"]: e["args"]["name"] for e in meta}         # the later name wins
        assert len(gl) == 2 and all(last_name[t].endswith("(pt_gloo_runloop)") for t in gl)
    # the bytes: every non-args line of a generated file has the shape of a line of a real one
    def skeleton(p: Path) -> set[bytes]:
        out = set()
        for line in p.read_bytes().split(b"\n"):
            if line.startswith(b"      ") and not line.startswith(b'      "trace_id"'):
                continue                                         # args content, header metadata values
            out.add(re.sub(rb'"[^"]*"', b'"s"', re.sub(rb"-?\d+(\.\d+)?", b"9", line)))
        return out
    real_skel = set().union(*(skeleton(p) for p in sorted(real_data("kineto-gloo-2rank").glob("*.json"))))
    for p in paths:
        assert skeleton(p) <= real_skel, skeleton(p) - real_skel


def test_gloo_collectives_line_up_across_ranks(gloo):
    _, man, traces = gloo
    ends = []
    for d in traces.values():
        g = sorted((ns(e["ts"]) + ns(e["dur"]), e["name"]) for e in d["traceEvents"]
                   if e.get("name", "").startswith("gloo:"))
        ends.append(g)
        c10d = [e for e in d["traceEvents"] if e.get("name", "").startswith("c10d::")]
        assert len(c10d) == len(g) == 3 * len(man["steps"])
    assert ends[0] == ends[1]


def test_gloo_manifest_comm_is_the_gloo_ranges(gloo):
    _, man, traces = gloo
    for rf in man["rank_files"]:
        ev = traces[rf["rank"]]["traceEvents"]
        ranges = sorted([ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])] for e in ev
                        if e["name"].startswith("gloo:"))
        assert ranges == sorted(c for st in rf["steps"] for c in st["comm"])
        assert all(st["compute"] == [] and st["comm_ops"] == 3 for st in rf["steps"])


def test_a_few_ranks_of_a_big_job(tmp_path):
    res = write_kineto_traces(tmp_path / "big", ranks=2, steps=1, seed=2, world_size=64)
    d = load(res.paths[1])
    assert d["distributedInfo"]["world_size"] == 64 and d["distributedInfo"]["rank"] == 1
    assert d["distributedInfo"]["pg_config"][0]["ranks"] == list(range(64))
    rpc = next(e for e in d["traceEvents"] if e["name"] == "record_param_comms")
    # saveNcclMeta truncates the rank list past 30 entries (kTruncateLength)
    assert rpc["args"]["Process Group Ranks"] == "[" + ", ".join(map(str, range(29))) + ", ..., 63]"
    assert rpc["args"]["Group size"] == 64
