"""The msprof fixture generator writes what docs/formats.md §3 and the real sample describe."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

import orjson
import pytest

from fixtures.msprof_gen import GeneratedProfile, GeneratedRank, main, write_msprof_profile

ARGS = dict(ranks=2, graphs=(2, 4), odd_rank_graphs=(0, 3), steps=3, seed=7)
NON_COMPUTE = {"NOTIFY_WAIT", "NOTIFY_RECORD", "EVENT_RECORD", "EVENT_WAIT", "EVENT_RESET",
               "MEMCPY_ASYNC", "REDUCE_ASYNC_V2"}


@pytest.fixture(scope="module")
def timeline(tmp_path_factory) -> GeneratedProfile:
    return write_msprof_profile(tmp_path_factory.mktemp("timeline"), **ARGS)


@pytest.fixture(scope="module")
def cann8(tmp_path_factory) -> GeneratedProfile:
    return write_msprof_profile(tmp_path_factory.mktemp("cann8"), layout="cann8", slices=2,
                                **ARGS)


def _ns(us: float) -> int:
    return round(us * 1000)


def _span(e: dict) -> tuple[int, int]:
    return _ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])


def _files(rank: GeneratedRank, kind: str) -> list[Path]:
    return sorted((rank.prof_dir / f"device_{rank.device}" / "timeline").glob(f"{kind}_*.json"))


def _cann8_files(rank: GeneratedRank) -> list[Path]:
    return sorted((rank.prof_dir / "mindstudio_profiler_output").glob("msprof_*.json"))


def _cann8_device_tasks(rank: GeneratedRank) -> list[dict]:
    """Device tasks of all slices; every slice carries its own metadata."""
    return [e for p in _cann8_files(rank) for e in _split(_load(p))["device"]]


def _load(path: Path) -> list[dict]:
    events = orjson.loads(path.read_bytes())
    assert isinstance(events, list), path
    return events


def _lanes(events: list[dict]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    """pid -> process name and (pid, tid) -> thread name, from the metadata events."""
    procs, threads = {}, {}
    for e in events:
        if e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e["name"] == "thread_name":
            threads[e["pid"], e["tid"]] = e["args"]["name"]
    return procs, threads


def _split(events: list[dict]) -> dict[str, list[dict]]:
    """X events by kind: device tasks, step trace, plane tasks, ops, overlap lanes."""
    procs, threads = _lanes(events)
    out = defaultdict(list)
    for e in events:
        if e["ph"] != "X":
            continue
        proc = procs[e["pid"]]
        if proc == "Ascend Hardware":
            step = threads[e["pid"], e["tid"]].startswith("Step Trace")
            out["step" if step else "device"].append(e)
        elif proc == "HCCL":
            out["op" if e["tid"] == 70000 else "plane"].append(e)
        else:
            out[proc].append(e)
    return out


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [tuple(x) for x in out]


def test_manifest_counts_equal_the_events_in_the_files(timeline):
    for rank in timeline.ranks:
        task_time = [e for p in _files(rank, "task_time") for e in _load(p) if e["ph"] == "X"]
        hccl = [e for p in _files(rank, "hccl") for e in _load(p) if e["ph"] == "X"]
        merged = defaultdict(list)
        for p in _files(rank, "msprof"):
            for kind, events in _split(_load(p)).items():
                merged[kind] += events
        assert len(task_time) == len(merged["device"]) == rank.device_tasks
        assert sum(e["tid"] != 70000 for e in hccl) == len(merged["plane"]) == rank.hccl_tasks
        assert sum(e["tid"] == 70000 for e in hccl) == len(merged["op"]) == rank.hccl_ops
        assert len(_files(rank, "msprof")) == len(rank.graphs) * rank.steps == ARGS["steps"] * 2


def test_rank_comes_from_info_json_and_differs_from_device(timeline):
    for rank in timeline.ranks:
        dev_dir = rank.prof_dir / f"device_{rank.device}"
        info = orjson.loads((dev_dir / f"info.json.{rank.device}").read_bytes())
        assert (info["rank_id"], info["DeviceInfo"][0]["id"]) == (rank.rank, rank.device)
        done = (dev_dir / f"info.json.{rank.device}.done").read_text()
        assert done == f"filesize:{(dev_dir / f'info.json.{rank.device}').stat().st_size}\n"
    assert [r.device for r in timeline.ranks] == [1, 0]
    assert [r.graphs for r in timeline.ranks] == [(2, 4), (0, 3)]


@pytest.mark.parametrize("layout", ["timeline", "cann8"])
def test_tasks_on_one_stream_never_overlap(layout, timeline, cann8):
    prof = timeline if layout == "timeline" else cann8
    for rank in prof.ranks:
        if layout == "timeline":
            tasks = [e for p in _files(rank, "task_time") for e in _split(_load(p))["device"]]
        else:
            tasks = _cann8_device_tasks(rank)
        streams = defaultdict(list)
        for e in tasks:
            streams[e["tid"]].append(_span(e))
        for tid, spans in streams.items():
            spans.sort()
            assert all(b[0] >= a[1] for a, b in pairwise(spans)), (rank.rank, tid)


def test_plane_tasks_lie_inside_their_op(timeline):
    for rank in timeline.ranks:
        for p in _files(rank, "hccl"):
            kinds = _split(_load(p))
            ops = sorted(_span(e) for e in kinds["op"])
            for e in kinds["plane"]:
                start, end = _span(e)
                assert any(a <= start and end <= b for a, b in ops), (p.name, e)


def test_plane_tasks_are_mirrored_by_device_tasks(timeline):
    rank = timeline.ranks[0]
    for p in _files(rank, "msprof"):
        kinds = _split(_load(p))
        device = {(e["args"]["Stream Id"], e["args"]["Task Id"]): _span(e) for e in kinds["device"]}
        for e in kinds["plane"]:
            assert device[e["args"]["stream id"], e["args"]["task id"]] == _span(e)


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    cuts = sorted({x for span in a + b for x in span})

    def inside(spans: list[tuple[int, int]], x: int) -> bool:
        return any(s <= x < e for s, e in spans)

    return _union([(x, y) for x, y in pairwise(cuts) if inside(a, x) and not inside(b, x)])


def test_overlap_lanes_follow_cann_definition(timeline):
    partly_overlapped = 0
    for rank in timeline.ranks:
        for p in _files(rank, "msprof"):
            kinds = _split(_load(p))
            compute = _union([_span(e) for e in kinds["device"]
                              if e["args"]["Task Type"] not in NON_COMPUTE])
            comm = _union([_span(e) for e in kinds["op"]])
            busy = _union(compute + comm)
            lanes = defaultdict(list)
            for e in kinds["Overlap Analysis"]:
                lanes[e["name"]].append(_span(e))
            assert lanes["Computing"] == compute
            assert lanes["Communication"] == comm
            assert lanes["Communication(Not Overlapped)"] == _minus(comm, compute)
            assert lanes["Free"] == [(a[1], b[0]) for a, b in pairwise(busy)]
            partly_overlapped += lanes["Communication(Not Overlapped)"] != comm
    assert partly_overlapped > 0


def test_step_trace_files_hold_all_iterations(timeline):
    rank = timeline.ranks[1]
    paths = _files(rank, f"step_trace_{rank.device}_{rank.graphs[0]}")
    assert len(paths) == rank.steps and len({p.read_bytes() for p in paths}) == 1
    events = _load(paths[0])
    names = [e["name"] for e in events if e.get("cat") == "Iteration Time"]
    assert names == ["Iteration 1", "Iteration 2", "Iteration 3"]
    phases = defaultdict(dict)  # iteration -> cat -> span; the phases nest
    for e in events:
        if e["ph"] == "X":
            phases[e["args"]["Iteration ID"]][e["cat"]] = _span(e)
    for p in phases.values():
        (it0, it1), (fp0, fp1) = p["Iteration Time"], p["FP_BP Time"]
        (tail0, tail1), (red0, red1) = p["Iteration Refresh"], p["Reduce"]
        assert it0 <= fp0 < fp1 == tail0 <= red0 < red1 <= tail1 == it1


def test_ranks_line_up_in_epoch_time_but_not_in_raw_clock(timeline):
    raw, epoch = [], []
    for rank in timeline.ranks:
        dev_dir = rank.prof_dir / f"device_{rank.device}"
        start = orjson.loads((dev_dir / f"start_info.{rank.device}").read_bytes())
        first = next(e for e in _load(_files(rank, "step_trace")[0]) if e["name"] == "Iteration 1")
        ts_ns = _ns(first["ts"])
        raw.append(ts_ns)
        epoch.append(ts_ns + int(start["collectionTimeBegin"]) * 1000
                     - int(start["clockMonotonicRaw"]))
        assert epoch[-1] == ts_ns + rank.epoch_offset_ns
    assert abs(epoch[0] - epoch[1]) < 1_000_000
    assert abs(raw[0] - raw[1]) > 1_000_000_000


def test_process_names_match_the_real_sample(timeline):
    real = os.environ.get("TRACE2PERFETTO_REALDATA")
    if not real:
        pytest.skip("TRACE2PERFETTO_REALDATA is not set; the real msprof-2rank sample is needed")

    def names(paths) -> set[str]:
        return {e["args"]["name"] for p in paths for e in _load(p) if e["name"] == "process_name"}

    real_paths = sorted(Path(real, "msprof-2rank").glob("PROF_*/device_*/timeline/*.json"))
    ours = [p for r in timeline.ranks for p in (r.prof_dir).glob("device_*/timeline/*.json")]
    assert real_paths
    assert names(ours) == names(real_paths)


def test_cann8_holds_the_same_device_tasks_as_timeline(timeline, cann8):
    def key(e: dict) -> tuple:
        a = e["args"]
        return e["name"], e["tid"], e["ts"], e["dur"], a["Task Type"], a["Task Id"]

    for tl, c8 in zip(timeline.ranks, cann8.ranks, strict=True):
        paths = _cann8_files(c8)
        assert [p.name.split("_")[:3] for p in paths] == [["msprof", "slice", "0"],
                                                           ["msprof", "slice", "1"]]
        ours = _cann8_device_tasks(c8)
        theirs = [e for p in _files(tl, "task_time") for e in _load(p) if e["ph"] == "X"]
        assert Counter(map(key, ours)) == Counter(map(key, theirs))
        assert {e["args"]["Model Id"] for e in ours} == set(c8.graphs)
        assert c8.device_tasks == tl.device_tasks == len(ours)


def test_same_seed_writes_the_same_bytes(tmp_path):
    def contents(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    small = dict(ranks=2, steps=2, tasks_per_step=20)
    write_msprof_profile(tmp_path / "a", seed=3, **small)
    write_msprof_profile(tmp_path / "b", seed=3, **small)
    write_msprof_profile(tmp_path / "c", seed=4, **small)
    assert contents(tmp_path / "a") == contents(tmp_path / "b")
    assert contents(tmp_path / "a") != contents(tmp_path / "c")


def test_cli_prints_a_one_line_summary(tmp_path, capsys):
    assert main([str(tmp_path), "--ranks", "3", "--graphs", "2,4", "--steps", "2",
                 "--tasks-per-step", "50", "--layout", "cann8", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and out.startswith("3 ranks") and "device tasks" in out
    assert main([str(tmp_path), "--steps", "0"]) == 2
