"""The torch_npu / MindSpore (``*_ascend_pt`` / ``*_ascend_ms``) fixture generator.

Everything is recomputed here from the written files with this module's own code, so the
generator's manifest and its ``step_trace_time.csv`` are checked against what it actually wrote.
"""

from __future__ import annotations

import csv
import json
import re
from collections import Counter, defaultdict
from datetime import datetime, timezone
from decimal import Decimal
from pathlib import Path

import orjson
import pytest
from conftest import real_data

from fixtures.ascend_pt_gen import (
    KERNEL_DETAILS_HEADERS,
    STEP_TRACE_HEADER,
    main,
    write_ascend_pt_profile,
)

TS3 = re.compile(r"\d{16}\.\d{3}")
NOT_COMPUTE = ("NOTIFY", "EVENT", "WRITE VALUE", "PLACE_HOLDER", "DMA", "MEMCPY", "REDUCE")


# --------------------------------------------------------------------------- helpers


def ns(ts: str) -> int:
    whole, _, frac = ts.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


def dur_ns(e: dict) -> int:
    return round(e["dur"] * 1000)


def union(xs):
    out = []
    for s, e in sorted(xs):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        elif e > s:
            out.append([s, e])
    return [tuple(x) for x in out]


def covered(u) -> int:
    return sum(e - s for s, e in u)


def clip(u, v):
    """Intersection of two unions, by brute force over the boundaries."""
    pts = sorted({p for iv in u + v for p in iv})
    inside = lambda x, w: any(s <= x < e for s, e in w)  # noqa: E731
    return union([(a, b) for a, b in zip(pts, pts[1:], strict=False)
                  if inside(a, u) and inside(a, v)])


class Rank:
    """One written rank directory, parsed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        out = path / "ASCEND_PROFILER_OUTPUT"
        raw = (out / "trace_view.json").read_bytes()
        self.raw = raw
        self.events: list[dict] = orjson.loads(raw)
        self.proc = {e["pid"]: e["args"]["name"] for e in self.events
                     if e.get("ph") == "M" and e["name"] == "process_name"}
        with (out / "kernel_details.csv").open(newline="", encoding="utf-8") as f:
            rd = csv.reader(f)
            self.kd_header = next(rd)
            self.kd = [dict(zip(self.kd_header, row, strict=True)) for row in rd]
        with (out / "step_trace_time.csv").open(newline="", encoding="utf-8") as f:
            self.step_rows = list(csv.DictReader(f))
        info = sorted(path.glob("profiler_info*.json"))
        assert len(info) == 1
        self.info_name = info[0].name
        self.info = orjson.loads(info[0].read_bytes())
        self.meta = orjson.loads((path / "profiler_metadata.json").read_bytes())
        self._steps: dict[int, tuple[int, int]] | None = None

    def x(self, process: str, tid: int | None = None) -> list[dict]:
        return [e for e in self.events if e["ph"] == "X" and self.proc.get(e["pid"]) == process
                and (tid is None or e["tid"] == tid)]

    def steps(self) -> dict[int, tuple[int, int]]:
        if self._steps is None:
            self._steps = {}
            for e in self.events:
                if e["ph"] == "X" and e["name"].startswith("ProfilerStep#"):
                    self._steps[int(e["name"].split("#")[1])] = (ns(e["ts"]), ns(e["ts"]) + dur_ns(e))
        return self._steps

    def step_of(self, t: int) -> int | None:
        return next((n for n, (s, e) in self.steps().items() if s <= t < e), None)

    def recompute(self) -> dict[int, dict]:
        """Per step: compute / comm unions and the overlap breakdown, from the trace events."""
        comp, comm = defaultdict(list), defaultdict(list)
        steps = self.steps()
        for e in self.x("Ascend Hardware"):
            t = ns(e["ts"])
            if not any(w in e["args"]["Task Type"].upper() for w in NOT_COMPUTE):
                n = next(n for n, (s, end) in steps.items() if s <= t < end)
                comp[n].append((t, t + dur_ns(e)))
        for e in self.x("HCCL", 0):
            t = ns(e["ts"])
            comm[next(n for n, (s, end) in steps.items() if s <= t < end)].append(
                (t, t + dur_ns(e)))
        out = {}
        for n, (s, _) in steps.items():
            c, m = union(comp[n]), union(comm[n])
            both = union(c + m)
            ov = covered(clip(c, m))
            span = both[-1][1] - both[0][0] if both else 0
            out[n] = {"compute": c, "comm": m, "both": both, "Computing": covered(c),
                      "Communication": covered(m), "Overlapped": ov,
                      "Communication(Not Overlapped)": covered(m) - ov,
                      "Free": span - covered(both), "Stage": span,
                      "Preparing": both[0][0] - s if both else 0}
        return out


@pytest.fixture(scope="module")
def profile(tmp_path_factory):
    root = tmp_path_factory.mktemp("ascend_pt")
    prof = write_ascend_pt_profile(root, ranks=2, steps=3, tasks_per_step=60, seed=3)
    return prof, [Rank(r.path) for r in prof.ranks]


# --------------------------------------------------------------------------- layout


def test_layout_and_profiler_info(profile):
    prof, ranks = profile
    assert [r.rank for r in prof.ranks] == [0, 1]
    for gen, rk in zip(prof.ranks, ranks, strict=True):
        assert re.fullmatch(r"[\w.-]+_\d+_\d{17}_ascend_pt", rk.path.name), rk.path.name
        assert rk.path.name.split("_")[-4] == str(gen.host_pid)
        assert rk.info_name == f"profiler_info_{gen.rank}.json"
        assert rk.info["rank_id"] == gen.rank
        start, end = rk.info["start_info"], rk.info["end_info"]
        assert start["syscnt_enable"] is True and start["freq"] == 100
        p1 = end["collectionTimeEnd"]
        p0 = p1 - (end["MonotonicTimeEnd"] - start["start_monotonic"])
        for e in rk.events:
            if "ts" in e:
                t = ns(e["ts"])
                assert p0 <= t and t + (dur_ns(e) if e["ph"] == "X" else 0) <= p1, e
        groups = rk.meta["parallel_group_info"]
        assert len(groups) == 1
        g = next(iter(groups.values()))
        assert gen.rank in g["global_ranks"] and g["group_rank"] == gen.rank
        assert (rk.path / "ASCEND_PROFILER_OUTPUT" / ".trace_view.parts").exists() is False


def test_trace_view_format(profile):
    _, ranks = profile
    for rk in ranks:
        assert b"\n" not in rk.raw and rk.raw.startswith(b"[{") and rk.raw.endswith(b"}]")
        odd = []
        for e in rk.events:
            if "ts" not in e:
                continue
            assert isinstance(e["ts"], str), e
            if not TS3.fullmatch(e["ts"]):
                odd.append(e)
            if e["ph"] == "X":
                assert isinstance(e["dur"], float) and e["dur"] >= 0, e
                assert dur_ns(e) == pytest.approx(e["dur"] * 1000, abs=1e-6)
        # the real files end with one AI Core Freq sample whose ts has no decimals
        assert len(odd) == 1 and rk.proc[odd[0]["pid"]] == "AI Core Freq", odd
        assert re.fullmatch(r"\d{16}", odd[0]["ts"])
        assert set(rk.proc.values()) == {
            "Python", "CANN", "Ascend Hardware", "HCCL", "Overlap Analysis", "AI Core Freq",
            "HBM", "LLC", "NPU MEM", "Stars Soc Info", "Acc PMU", "QoS"}


def test_pids_threads_and_file_order(profile):
    prof, ranks = profile
    for gen, rk in zip(prof.ranks, ranks, strict=True):
        sort_index = {e["pid"]: e["args"]["sort_index"] for e in rk.events
                      if e["ph"] == "M" and e["name"] == "process_sort_index"}
        for pid, name in rk.proc.items():
            if name == "Python":
                assert pid == gen.host_pid
            else:
                assert pid == (gen.host_pid << 10) | (sort_index[pid] << 5) | gen.device_id
        threads = {(rk.proc[e["pid"]], e["tid"]): e["args"]["name"] for e in rk.events
                   if e["ph"] == "M" and e["name"] == "thread_name"}
        assert threads[("HCCL", 0)] == "Group 0 Communication"
        assert {threads[("HCCL", p + 1)] for p in range(8)} == {f"Plane {p}" for p in range(8)}
        assert [threads[("Overlap Analysis", i)] for i in range(4)] == [
            "Computing", "Communication", "Communication(Not Overlapped)", "Free"]
        for e in rk.x("Ascend Hardware"):
            assert threads[("Ascend Hardware", e["tid"])] == f"Stream {e['tid']}"
            assert e["args"]["Physic Stream Id"] == e["tid"]
            assert list(e["args"]) == ["Model Id", "Task Type", "Physic Stream Id", "Task Id",
                                       "Batch Id", "Subtask Id", "connection_id"]
        # Python events, then metadata, then NPU events sorted by ts, then async_npu flows
        kinds = [("M" if e["ph"] == "M" else "py" if rk.proc.get(e["pid"]) == "Python"
                  and e.get("cat") != "async_npu" else "async" if e.get("cat") == "async_npu"
                  else "npu") for e in rk.events]
        blocks = [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]
        assert blocks == ["py", "M", "npu", "async"]
        npu_ts = [ns(e["ts"]) for e, k in zip(rk.events, kinds, strict=True) if k == "npu"]
        assert npu_ts == sorted(npu_ts)


# --------------------------------------------------------------------------- counts


def test_manifest_counts(profile):
    prof, ranks = profile
    for gen, rk in zip(prof.ranks, ranks, strict=True):
        hw = rk.x("Ascend Hardware")
        assert gen.device_tasks == len(hw)
        assert gen.hccl_tasks == sum(1 for e in rk.x("HCCL") if e["tid"] > 0)
        assert gen.hccl_ops == len(rk.x("HCCL", 0)) > 0
        assert gen.trace_events == len(rk.events)
        assert gen.steps == sorted(rk.steps()) == [50, 51, 52]
        kernels = [e for e in hw if e["args"]["Task Type"] in ("AI_CORE", "MIX_AIV", "DSA_SQE")]
        assert len(kernels) == 60 * 3
        assert gen.kernel_rows == len(rk.kd) == len(kernels) + gen.hccl_ops
        types = Counter(e["args"]["Task Type"] for e in hw)
        assert set(types) == {"AI_CORE", "MIX_AIV", "Write Value", "Notify Wait", "SDMA",
                              "PCIE_DMA_SQE", "SDMA_SQE", "EVENT_RECORD_SQE", "EVENT_WAIT_SQE",
                              "PLACE_HOLDER_SQE", "DSA_SQE"}
        # every HCCL plane task is mirrored on the Ascend Hardware HCCL stream
        mirror = {"Notify_Record": "Write Value", "Notify_Wait": "Notify Wait",
                  "Memcpy": "SDMA", "Reduce_Inline": "SDMA"}
        planes = Counter((ns(e["ts"]), dur_ns(e), mirror[e["name"]], e["args"]["task id"],
                          e["args"]["context id"]) for e in rk.x("HCCL") if e["tid"] > 0)
        mirrors = Counter((ns(e["ts"]), dur_ns(e), e["name"], e["args"]["Task Id"],
                           e["args"]["Subtask Id"]) for e in hw
                          if e["args"]["Task Type"] in ("Write Value", "Notify Wait", "SDMA"))
        assert planes == mirrors


def test_kernel_details_match_trace(profile):
    _, ranks = profile
    for rk in ranks:
        assert tuple(rk.kd_header) == KERNEL_DETAILS_HEADERS["2025"]
        hw = {(e["tid"], e["args"]["Task Id"], ns(e["ts"])): e for e in rk.x("Ascend Hardware")}
        ops = {(e["name"], ns(e["ts"])): e for e in rk.x("HCCL", 0)}
        starts = []
        for row in rk.kd:
            start = row["Start Time(us)"]
            assert start.endswith("\t") and TS3.fullmatch(start[:-1]), start
            t = ns(start[:-1])
            starts.append(t)
            assert int(row["Step Id"]) == rk.step_of(t)
            if row["Accelerator Core"] == "HCCL":
                assert row["Task ID"] == row["Stream ID"] == "N/A"
                e = ops[(row["Name"], t)]
            else:
                e = hw[(int(row["Stream ID"]), int(row["Task ID"]), t)]
                assert e["name"] == row["Name"]
                assert row["Input Shapes"] == "N/A" or row["Input Shapes"].startswith('"')
            assert round(float(row["Duration(us)"]) * 1000) == dur_ns(e)
        assert starts == sorted(starts)
        text = (rk.path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").read_bytes()
        assert text.count(b"\r\n") == len(rk.kd) + 1 and b'"""' in text


# --------------------------------------------------------------------------- steps and overlap


def test_step_trace_time_equals_recomputation(profile):
    _, ranks = profile
    for rk in ranks:
        assert tuple(rk.step_rows[0]) == STEP_TRACE_HEADER
        ref = rk.recompute()
        assert [int(r["Step"]) for r in rk.step_rows] == sorted(ref)
        for row in rk.step_rows:
            want = ref[int(row["Step"])]
            for col in ("Computing", "Communication(Not Overlapped)", "Overlapped",
                        "Communication", "Free"):
                assert round(float(row[col]) * 1000) == want[col], (row["Step"], col)
            for col in ("Stage", "Preparing"):   # float epoch µs differences: 0.25 µs steps
                assert abs(float(row[col]) * 1000 - want[col]) <= 500, (row["Step"], col)
            assert row["Communication(Not Overlapped and Exclude Receive)"] == \
                row["Communication(Not Overlapped)"]
            assert row["Bubble"] == "0"
            c, n, f, st = (float(row[k]) for k in ("Computing", "Communication(Not Overlapped)",
                                                   "Free", "Stage"))
            assert abs(c + n + f - st) < 1.0
            assert want["Overlapped"] > 0 and want["Communication(Not Overlapped)"] > 0
            assert want["Free"] > 0


def test_overlap_lanes_equal_recomputation(profile):
    _, ranks = profile
    for rk in ranks:
        ref = rk.recompute()
        lanes = defaultdict(list)
        for e in rk.x("Overlap Analysis"):
            lanes[e["name"]].append((ns(e["ts"]), ns(e["ts"]) + dur_ns(e)))
        want = defaultdict(list)
        for r in ref.values():
            want["Computing"] += r["compute"]
            want["Communication"] += r["comm"]
            want["Free"] += [(a[1], b[0]) for a, b in zip(r["both"], r["both"][1:], strict=False)]
            comp = r["compute"]
            for s, e in r["comm"]:   # comm minus compute
                cur = s
                for cs, ce in comp:
                    if ce <= cur or cs >= e:
                        continue
                    if cs > cur:
                        want["Communication(Not Overlapped)"].append((cur, cs))
                    cur = max(cur, ce)
                if cur < e:
                    want["Communication(Not Overlapped)"].append((cur, e))
        for name in want:
            assert sorted(lanes[name]) == sorted(want[name]), name


def test_steps_enclose_their_device_work(profile):
    _, ranks = profile
    late = 0
    for rk in ranks:
        steps = rk.steps()
        host = rk.x("Python") + rk.x("CANN")
        for e in rk.x("Ascend Hardware") + rk.x("HCCL"):
            t = ns(e["ts"])
            n = rk.step_of(t)
            if n is None:
                assert e["args"].get("Task Type") == "PLACE_HOLDER_SQE", e
                continue
            end = t + dur_ns(e)
            assert end <= steps[n][1] + 15_000
            late += end > steps[n][1]
        for e in host:   # the launch chain: Python op -> CANN -> task, all inside the step
            if e["name"].startswith(("ProfilerStep", "main.py", "<string>", "multiprocessing")):
                continue
            assert rk.step_of(ns(e["ts"])) is not None, e
        py_steps = [e for e in rk.x("Python") if e["name"].startswith("ProfilerStep#")]
        assert all(e["cat"] == "cpu_op" for e in py_steps)
    assert late > 0   # some step's device work ends slightly after the step


def test_ranks_in_lockstep(profile):
    _, ranks = profile
    ends = [{e["name"]: ns(e["ts"]) + dur_ns(e) for e in rk.x("HCCL", 0)} for rk in ranks]
    assert ends[0].keys() == ends[1].keys()
    for name, t in ends[0].items():
        assert abs(t - ends[1][name]) < 30_000, name
    s0, s1 = ranks[0].steps(), ranks[1].steps()
    for n in s0:
        assert abs(s0[n][0] - s1[n][0]) < 10_000


def test_flows(profile):
    _, ranks = profile
    for rk in ranks:
        by_cat = defaultdict(lambda: defaultdict(list))
        for e in rk.events:
            if e["ph"] in ("s", "f"):
                by_cat[e["cat"]][e["id"]].append(e)
        assert set(by_cat) == {"HostToDevice", "async_npu", "async_task_queue", "fwdbwd"}
        hcl_pid = next(p for p, n in rk.proc.items() if n == "HCCL")
        for fid, evs in by_cat["HostToDevice"].items():
            assert isinstance(fid, str)
            s = [e for e in evs if e["ph"] == "s"]
            f = [e for e in evs if e["ph"] == "f"]
            assert len(s) == 1 and f and rk.proc[s[0]["pid"]] == "CANN"
            assert all(x["bp"] == "e" and ns(x["ts"]) >= ns(s[0]["ts"]) for x in f)
            if f[0]["pid"] == hcl_pid:   # op level: (Node@launch connection_id << 32) - 1
                op = next(e for e in rk.x("HCCL", 0) if e["ts"] == f[0]["ts"])
                assert int(fid) == (op["args"]["connection_id"] << 32) - 1
            else:
                task = [e for e in rk.x("Ascend Hardware") if e["args"]["connection_id"] ==
                        int(fid)]
                assert sorted(e["ts"] for e in task) == sorted(e["ts"] for e in f)
                node = [e for e in rk.x("CANN") if e["args"]["connection_id"] == int(fid)]
                assert len(node) == 1 and node[0]["ts"] == s[0]["ts"]
        assert any(len(v) == 3 for v in by_cat["HostToDevice"].values())   # one s, two f
        for cat in ("async_npu", "async_task_queue", "fwdbwd"):
            for fid, evs in by_cat[cat].items():
                assert isinstance(fid, int) and sorted(e["ph"] for e in evs) == ["f", "s"], evs
                if cat == "async_npu":
                    assert ns(next(e for e in evs if e["ph"] == "f")["ts"]) == fid


# --------------------------------------------------------------------------- variants


@pytest.mark.parametrize("version", ["2023", "2.7.1"])
def test_kernel_details_versions(tmp_path, version):
    prof = write_ascend_pt_profile(tmp_path, ranks=1, steps=1, tasks_per_step=12,
                                   kernel_details_version=version, seed=5)
    path = prof.ranks[0].path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert tuple(rows[0]) == KERNEL_DETAILS_HEADERS[version]
    assert len(rows) - 1 == prof.ranks[0].kernel_rows
    if version == "2023":
        assert "OP State" not in rows[0] and rows[0][:2] == ["Step Id", "Model ID"]
    else:
        assert rows[0][:3] == ["Step Id", "Device_id", "Model ID"]
        assert {r[1] for r in rows[1:]} == {str(prof.ranks[0].device_id)}
    assert all(len(r) == len(rows[0]) for r in rows)


def test_mindspore_single_card_and_options(tmp_path):
    ms = write_ascend_pt_profile(tmp_path / "ms", ranks=1, steps=1, tasks_per_step=10,
                                 framework="ms", seed=2)
    rk = Rank(ms.ranks[0].path)
    assert rk.path.name.endswith("_ascend_ms")
    assert "MindSpore" in rk.proc.values() and "Python" not in rk.proc.values()
    assert "ms_version" in rk.info and rk.info["rank_id"] == 0

    one = write_ascend_pt_profile(tmp_path / "one", single_card=True, steps=2, tasks_per_step=10)
    assert len(one.ranks) == 1 and one.ranks[0].hccl_ops == one.ranks[0].hccl_tasks == 0
    rk = Rank(one.ranks[0].path)
    assert rk.info_name == "profiler_info.json" and "rank_id" not in rk.info
    assert "parallel_group_info" not in rk.meta and "HCCL" not in rk.proc.values()
    assert all(float(r["Communication"]) == 0 for r in rk.step_rows)
    ref = rk.recompute()
    for row in rk.step_rows:
        assert round(float(row["Computing"]) * 1000) == ref[int(row["Step"])]["Computing"]

    bare = write_ascend_pt_profile(tmp_path / "bare", ranks=1, steps=1, with_trace_view=False,
                                   with_kernel_details=False)
    out = bare.ranks[0].path / "ASCEND_PROFILER_OUTPUT"
    assert sorted(p.name for p in out.iterdir()) == ["communication.json", "step_trace_time.csv"]
    with pytest.raises(ValueError, match="framework"):
        write_ascend_pt_profile(tmp_path / "bad", framework="tf")


def test_deterministic(tmp_path):
    a = write_ascend_pt_profile(tmp_path / "a", ranks=2, steps=1, tasks_per_step=20, seed=9)
    b = write_ascend_pt_profile(tmp_path / "b", ranks=2, steps=1, tasks_per_step=20, seed=9)
    for ra, rb in zip(a.ranks, b.ranks, strict=True):
        assert ra.path.name == rb.path.name
        for rel in ("ASCEND_PROFILER_OUTPUT/trace_view.json", "ASCEND_PROFILER_OUTPUT/"
                    "kernel_details.csv", "ASCEND_PROFILER_OUTPUT/step_trace_time.csv"):
            assert (ra.path / rel).read_bytes() == (rb.path / rel).read_bytes()


def test_cli(tmp_path, capsys):
    assert main([str(tmp_path / "out"), "--ranks", "2", "--steps", "3", "--seed", "1"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1 and "2 ranks" in lines[0] and "ProfilerStep#50-52" in lines[0]
    assert len(list((tmp_path / "out").glob("*_ascend_pt"))) == 2
    assert main([str(tmp_path / "bad"), "--steps", "0"]) == 2


# --------------------------------------------------------------------------- real sample


def test_matches_real_sample_names_and_header(tmp_path):
    real = real_data("ascend-pt-2rank")
    prof = write_ascend_pt_profile(tmp_path, ranks=2, steps=1, tasks_per_step=20, seed=4)
    for r in (0, 1):
        sample = real / f"rank{r}_ascend_pt"
        events = orjson.loads((sample / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_bytes())
        real_procs = {e["args"]["name"] for e in events
                      if e.get("ph") == "M" and e["name"] == "process_name"}
        ours = Rank(prof.ranks[r].path)
        assert set(ours.proc.values()) == real_procs
        with (sample / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").open(
                newline="", encoding="utf-8") as f:
            assert tuple(next(csv.reader(f))) == tuple(ours.kd_header)
        with (sample / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").open(
                newline="", encoding="utf-8") as f:
            assert tuple(next(csv.reader(f))) == STEP_TRACE_HEADER
        info = orjson.loads((sample / f"profiler_info_{r}.json").read_bytes())
        assert set(info["start_info"]) == set(ours.info["start_info"])
        assert set(info["end_info"]) == set(ours.info["end_info"])


def test_streams_are_sequential_except_hccl_mirrors(profile):
    """One task at a time per stream and per HCCL lane, except the FFTS mirrors on stream 4."""
    _, ranks = profile
    for rk in ranks:
        lanes = defaultdict(list)
        for e in rk.x("Ascend Hardware"):
            if e["args"]["Task Type"] not in ("Write Value", "Notify Wait", "SDMA"):
                lanes[("hw", e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + dur_ns(e)))
        for e in rk.x("HCCL"):
            lanes[("hccl", e["tid"])].append((ns(e["ts"]), ns(e["ts"]) + dur_ns(e)))
        for lane, ivs in lanes.items():
            ivs.sort()
            for (_, e0), (s1, _) in zip(ivs, ivs[1:], strict=False):
                assert s1 >= e0, lane


@pytest.mark.parametrize("kw", [dict(ranks=1, tasks_per_step=1, planes=1),
                                dict(ranks=3, tasks_per_step=2, planes=2),
                                dict(ranks=2, tasks_per_step=45, planes=4, first_step=0)])
def test_odd_shapes(tmp_path, kw):
    prof = write_ascend_pt_profile(tmp_path, steps=2, seed=11, **kw)
    assert len(prof.ranks) == kw["ranks"]
    for gen in prof.ranks:
        rk = Rank(gen.path)
        assert gen.steps == [kw.get("first_step", 50), kw.get("first_step", 50) + 1]
        assert gen.device_tasks == len(rk.x("Ascend Hardware"))
        assert gen.hccl_ops == len(rk.x("HCCL", 0)) and gen.kernel_rows == len(rk.kd)
        ref = rk.recompute()
        for row in rk.step_rows:
            for col in ("Computing", "Communication", "Overlapped", "Free"):
                assert round(float(row[col]) * 1000) == ref[int(row["Step"])][col], col


# --------------------------------------------------------------------------- pipeline parallelism


def _p2p_truth(rk: Rank) -> dict[int, dict[str, float]]:
    """step_trace_time.csv's columns recomputed from the written events with torch_npu's
    definitions: Bubble = time in hcom_receive ops, Stage = first to last compute or
    communication minus Bubble, Exclude Receive = Not Overlapped minus Bubble (µs)."""
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in rk.events
               if e["ph"] == "M" and e["name"] == "thread_name"}
    ops = [e for e in rk.x("HCCL") if threads[(e["pid"], e["tid"])].endswith("Communication")]
    steps = rk.steps()
    out = {}
    for n, (start, end) in steps.items():
        mine = [e for e in ops if start <= ns(e["ts"]) < end]
        compute = [(ns(e["ts"]), ns(e["ts"]) + dur_ns(e)) for e in rk.x("Ascend Hardware")
                   if start <= ns(e["ts"]) < end
                   and not any(w in e["args"]["Task Type"].upper() for w in NOT_COMPUTE)]
        comm = union([(ns(e["ts"]), ns(e["ts"]) + dur_ns(e)) for e in mine])
        both = union(union(compute) + comm)
        bubble = sum(dur_ns(e) for e in mine if e["name"].startswith("hcom_receive"))
        not_overlapped = covered(comm) - covered(clip(union(compute), comm))
        out[n] = {"Bubble": bubble / 1000, "Stage": (both[-1][1] - both[0][0] - bubble) / 1000,
                  "Communication(Not Overlapped and Exclude Receive)": (not_overlapped - bubble) / 1000,
                  "Communication": covered(comm) / 1000,
                  "kinds": [e["name"].split("__")[0] for e in sorted(mine, key=lambda e: ns(e["ts"]))]}
    return out


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    root = tmp_path_factory.mktemp("pp")
    prof = write_ascend_pt_profile(root, ranks=4, pp=2, steps=2, tasks_per_step=40, seed=7)
    return prof, [Rank(r.path) for r in prof.ranks]


def test_pipeline_step_trace_time_equals_recomputation_with_bubbles(pipeline):
    prof, ranks = pipeline
    assert [r.stage for r in prof.ranks] == [0, 0, 1, 1]
    for gen, rk in zip(prof.ranks, ranks, strict=True):
        truth = _p2p_truth(rk)
        assert gen.p2p_ops == 3 * 2 and gen.hccl_ops == gen.p2p_ops + 2 * 2  # + 2 allreduces a step
        for row in rk.step_rows:
            want = truth[int(row["Step"])]
            for column in ("Bubble", "Stage", "Communication(Not Overlapped and Exclude Receive)",
                           "Communication"):
                assert float(row[column]) == pytest.approx(want[column], abs=0.5), (gen.rank, column)
            assert want["Bubble"] > 50  # a receive waits for the other stage: a bubble
            # 1F1B with 2 microbatches: stage 0 sends, then sends and receives at once (the
            # batch is no bubble), then receives; stage 1 mirrors it; then the allreduces
            sequence = (["hcom_send", "hcom_batchSendRecv", "hcom_receive"] if gen.stage == 0 else
                        ["hcom_receive", "hcom_batchSendRecv", "hcom_send"])
            assert want["kinds"] == sequence + ["hcom_allReduce"] * 2


def test_pipeline_pairs_end_together_and_groups_name_both_parallelisms(pipeline):
    _, ranks = pipeline
    threads = {}
    for rk in ranks:
        threads = {e["tid"]: e["args"]["name"] for e in rk.events if e["ph"] == "M"
                   and e["name"] == "thread_name" and rk.proc[e["pid"]] == "HCCL"}
        assert "Group 1 Communication" in threads.values()
        groups = {g["group_name"]: g["global_ranks"] for g in rk.meta["parallel_group_info"].values()}
        rank = int(rk.info["rank_id"])
        assert groups == {"dp": [rank // 2 * 2, rank // 2 * 2 + 1], "pp": [rank % 2, rank % 2 + 2]}
    p2p = next(t for t, name in threads.items() if name == "Group 1 Communication")
    for a, b in ((0, 2), (1, 3)):  # the two pipelines: a stage-0 rank and its stage-1 peer
        ends = [sorted(ns(e["ts"]) + dur_ns(e) for e in ranks[r].x("HCCL", p2p)) for r in (a, b)]
        assert ends[0] == ends[1] and len(ends[0]) == 6


def test_pipeline_kernel_details_hold_every_point_to_point_op(pipeline):
    _, ranks = pipeline
    for rk in ranks:
        ops = Counter(row["Type"] for row in rk.kd if row["Accelerator Core"] == "HCCL")
        assert ops == {"hcom_send_": 2, "hcom_receive_": 2, "hcom_batchSendRecv_": 2, "hcom_allReduce_": 4}


@pytest.mark.parametrize("stages", [3, 4])
def test_deeper_pipelines_pair_every_op_and_keep_their_truth(tmp_path, stages):
    prof = write_ascend_pt_profile(tmp_path, ranks=stages, pp=stages, steps=1, tasks_per_step=24, seed=2)
    ends: Counter[int] = Counter()
    for gen in prof.ranks:
        rk = Rank(gen.path)
        p2p = [e for e in rk.x("HCCL") if e["name"].startswith(("hcom_send", "hcom_receive", "hcom_batch"))]
        assert len(p2p) == gen.p2p_ops > 0
        ends.update(ns(e["ts"]) + dur_ns(e) for e in p2p)
        truth = _p2p_truth(rk)
        for row in rk.step_rows:
            for column in ("Bubble", "Stage", "Communication(Not Overlapped and Exclude Receive)"):
                assert float(row[column]) == pytest.approx(truth[int(row["Step"])][column], abs=0.5)
    assert set(ends.values()) == {2}  # the two sides of each op end together


def test_pipeline_options_are_checked(tmp_path, capsys):
    with pytest.raises(ValueError, match="pp must"):
        write_ascend_pt_profile(tmp_path / "a", ranks=3, pp=2)
    assert main([str(tmp_path / "b"), "--ranks", "4", "--pp", "3"]) == 2
    assert main([str(tmp_path / "c"), "--ranks", "4", "--pp", "2", "--steps", "1", "--no-trace-view"]) == 0
    assert "4 ranks" in capsys.readouterr().out


# --------------------------------------------------------------------------- file order


def _names_at_end(path: Path) -> bool:
    events = orjson.loads((path / "ASCEND_PROFILER_OUTPUT/trace_view.json").read_bytes())
    first_name = next(i for i, e in enumerate(events) if e["ph"] == "M")
    return all(e["ph"] == "M" for e in events[first_name:])


def test_real_sized_profiles_put_the_names_last_unless_told(tmp_path):
    small = write_ascend_pt_profile(tmp_path / "small", ranks=1, steps=2, tasks_per_step=40)
    assert not _names_at_end(small.ranks[0].path)
    big = write_ascend_pt_profile(tmp_path / "big", ranks=1, steps=2, tasks_per_step=1000,
                                  with_kernel_details=False)
    assert _names_at_end(big.ranks[0].path)
    assert main([str(tmp_path / "middle"), "--ranks", "1", "--steps", "2", "--tasks-per-step", "1000",
                 "--no-kernel-details", "--metadata-middle"]) == 0
    assert not _names_at_end(next((tmp_path / "middle").glob("*_ascend_pt")))
    assert main([str(tmp_path / "last"), "--ranks", "1", "--steps", "1", "--metadata-last"]) == 0
    assert _names_at_end(next((tmp_path / "last").glob("*_ascend_pt")))


# --------------------------------------------------------------------------- cross-rank truth
# Read with json / csv / Decimal only, so the truth the generator returns is checked against the
# bytes it wrote, not against its own arithmetic.

SLOW_NS = 2_000_000
OFFSETS = [0, 1_500_123, -2_000_777]   # node0 (true time), node1 ahead, node2 behind
DIR_NAME = re.compile(r"(node\d+)_(\d+)_(\d{17})_ascend_pt")


def _ns_of(ts: str) -> int:
    return int(Decimal(ts) * 1000)


def _dur_of(dur: float) -> int:
    return int(Decimal(repr(dur)) * 1000)


class Plain:
    """One written rank directory, read independently: its events, lanes and ops per lane."""

    def __init__(self, path: Path) -> None:
        self.path = path
        out = path / "ASCEND_PROFILER_OUTPUT"
        self.events = json.loads((out / "trace_view.json").read_text(encoding="utf-8"))
        self.info = json.loads(next(path.glob("profiler_info_*.json")).read_text(encoding="utf-8"))
        self.meta = json.loads((path / "profiler_metadata.json").read_text(encoding="utf-8"))
        self.rank = self.info["rank_id"]
        with (out / "kernel_details.csv").open(newline="", encoding="utf-8") as f:
            self.kd = list(csv.DictReader(f))
        with (out / "step_trace_time.csv").open(newline="", encoding="utf-8") as f:
            self.steps = list(csv.DictReader(f))
        meta = [e for e in self.events if e["ph"] == "M"]
        self.proc = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
        self.lane = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}

    def ops(self, lane: str) -> dict[str, tuple[int, int]]:
        """HCCL op name -> (start ns, end ns) on one "Group N Communication" lane."""
        out = {}
        for e in self.events:
            if e["ph"] == "X" and self.proc[e["pid"]] == "HCCL" and self.lane[e["pid"], e["tid"]] == lane:
                assert e["name"] not in out, e["name"]
                start = _ns_of(e["ts"])
                out[e["name"]] = (start, start + _dur_of(e["dur"]))
        return out

    def plane_tasks(self) -> list[tuple[int, int, str, str]]:
        return sorted((_ns_of(e["ts"]), _dur_of(e["dur"]), self.lane[e["pid"], e["tid"]], e["name"])
                      for e in self.events if e["ph"] == "X" and self.proc[e["pid"]] == "HCCL"
                      and self.lane[e["pid"], e["tid"]].startswith("Plane"))

    def collection_start(self) -> int:
        end, start = self.info["end_info"], self.info["start_info"]
        return end["collectionTimeEnd"] - (end["MonotonicTimeEnd"] - start["start_monotonic"])


def _plain(prof) -> dict[int, Plain]:
    ranks = {rk.rank: rk for rk in map(Plain, sorted(prof.root.glob("*_ascend_pt")))}
    assert sorted(ranks) == [r.rank for r in prof.ranks]
    return ranks


def _check_truth_in_files(prof, ranks: dict[int, Plain]) -> None:
    """Each rank's op on the group lane lies at the truth + its host's offset, to the ns; every
    op on that lane is one of the truth's instances."""
    seen = defaultdict(set)
    for c in prof.collectives:
        assert sorted(c.starts_ns) == sorted(c.ends_ns) == sorted(c.wait_ns)
        for rank, start in c.starts_ns.items():
            off = prof.host_offsets_ns[prof.host_of_rank[rank]]
            assert ranks[rank].ops(c.group)[c.name] == (start + off, c.ends_ns[rank] + off), (c, rank)
            seen[rank].add(c.name)
        last = max(c.starts_ns.values())
        assert c.last_rank == min(r for r, t in c.starts_ns.items() if t == last)
        assert c.skew_ns == last - min(c.starts_ns.values())
        assert c.wait_ns == {r: last - t for r, t in c.starts_ns.items()}
    for rank, rk in ranks.items():
        assert set(rk.ops(prof.collectives[0].group)) == seen[rank]


@pytest.fixture(scope="module")
def skewed(tmp_path_factory):
    """6 ranks on 3 hosts with clock offsets, rank 4 slow; and the same job on aligned clocks."""
    root = tmp_path_factory.mktemp("skewed")
    kw = dict(ranks=6, steps=2, tasks_per_step=40, seed=5, ranks_per_host=2, slow_rank=4,
              slow_ns=SLOW_NS)
    prof = write_ascend_pt_profile(root / "offset", host_offsets_ns=OFFSETS, **kw)
    aligned = write_ascend_pt_profile(root / "aligned", host_offsets_ns=[0, 0, 0], **kw)
    return prof, _plain(prof), aligned, _plain(aligned)


def test_truth_matches_the_files_to_the_ns(skewed):
    prof, ranks, aligned, aligned_ranks = skewed
    assert len(prof.collectives) == 2 * 2   # steps x allreduces per step
    _check_truth_in_files(prof, ranks)
    _check_truth_in_files(aligned, aligned_ranks)
    assert aligned.collectives == prof.collectives   # the offsets change the clocks, not the job


def test_the_slow_rank_arrives_last_and_everyone_ends_together(skewed):
    prof, ranks, _, _ = skewed
    assert prof.slow_rank == 4
    for c in prof.collectives:
        assert sorted(c.starts_ns) == list(range(6))
        assert len(set(c.ends_ns.values())) == 1, c   # the transfer finishes together
        assert c.last_rank == 4 and c.wait_ns[4] == 0
        assert SLOW_NS // 2 <= c.skew_ns <= SLOW_NS * 3 // 2 + 500_000, c
        assert min(w for r, w in c.wait_ns.items() if r != 4) >= SLOW_NS // 2
        for rank, rk in ranks.items():   # the first Notify_Wait of each plane absorbs the wait
            off = prof.host_offsets_ns[prof.host_of_rank[rank]]
            s, e = c.starts_ns[rank] + off, c.ends_ns[rank] + off
            first = {}
            for t, d, lane, name in rk.plane_tasks():
                if s <= t < e and name == "Notify_Wait":
                    first.setdefault(lane, d)
            assert len(first) == 7 and min(first.values()) >= c.wait_ns[rank], (rank, first)
    slow = ranks[4]   # the slow rank's compute before each op lasts until just before it
    off = prof.host_offsets_ns["node2"]
    compute = [(_ns_of(e["ts"]), _dur_of(e["dur"])) for e in slow.events if e["ph"] == "X"
               and slow.proc[e["pid"]] == "Ascend Hardware" and e["tid"] == 2
               and e["args"]["Task Type"] in ("AI_CORE", "MIX_AIV")]
    for c in prof.collectives:
        start = c.starts_ns[4] + off
        end, dur = max((t + d, d) for t, d in compute if t + d <= start)
        assert start - end < 10_000 and dur > SLOW_NS // 4


def test_host_offsets_shift_every_absolute_time_and_nothing_else(skewed):
    prof, ranks, _, aligned_ranks = skewed
    assert prof.host_of_rank == {0: "node0", 1: "node0", 2: "node1", 3: "node1", 4: "node2", 5: "node2"}
    assert prof.host_offsets_ns == dict(zip(("node0", "node1", "node2"), OFFSETS, strict=True))
    for rank, rk in ranks.items():
        ref = aligned_ranks[rank]
        off = OFFSETS[rank // 2]
        host, pid, stamp = DIR_NAME.fullmatch(rk.path.name).groups()
        assert host == prof.host_of_rank[rank] and DIR_NAME.fullmatch(ref.path.name)[2] == pid
        p0 = rk.collection_start()   # torch_npu's utcnow() at the start, to the ms, host clock
        assert p0 == ref.collection_start() + off
        assert stamp == datetime.fromtimestamp(p0 // 10**9, tz=timezone.utc).strftime(
            "%Y%m%d%H%M%S") + f"{p0 // 10**6 % 1000:03d}"
        assert rk.info["end_info"]["collectionTimeEnd"] == ref.info["end_info"]["collectionTimeEnd"] + off
        assert rk.info["end_info"]["MonotonicTimeEnd"] == ref.info["end_info"]["MonotonicTimeEnd"]
        assert rk.info["start_info"] == ref.info["start_info"] and rk.meta == ref.meta
        if off == 0:
            assert rk.events == ref.events and rk.kd == ref.kd
        assert len(rk.events) == len(ref.events)
        shifted = 0
        for e, r in zip(rk.events, ref.events, strict=True):
            assert e.keys() == r.keys()
            for key, value in e.items():
                if key == "ts" and "." in value:
                    assert _ns_of(value) - _ns_of(r[key]) == off, (e, r)
                    shifted += 1
                elif key == "ts":   # the closing counter sample: whole µs
                    assert abs(int(value) * 1000 - int(r[key]) * 1000 - off) <= 500
                elif key == "id" and e["cat"] == "async_npu":   # the device task's start, ns
                    assert value - r[key] == off
                else:
                    assert value == r[key], (key, e, r)
        assert shifted > 1000
        assert len(rk.kd) == len(ref.kd) > 0
        for row, want in zip(rk.kd, ref.kd, strict=True):
            t, t0 = row.pop("Start Time(us)"), want.pop("Start Time(us)")
            assert t.endswith("\t") and _ns_of(t.strip()) - _ns_of(t0.strip()) == off
            assert row == want
        for row, want in zip(rk.steps, ref.steps, strict=True):
            for col in ("Stage", "Preparing"):   # differences of float epoch µs: 0.25 µs steps
                assert float(row.pop(col)) == pytest.approx(float(want.pop(col)), abs=0.5)
            assert row == want
        steps = [e for e in rk.events if e["name"].startswith("ProfilerStep#")]
        assert all(p0 <= _ns_of(e["ts"]) for e in steps)


def test_skewed_profiles_keep_their_own_overlap_truth(skewed):
    _, ranks, _, _ = skewed
    parsed = [Rank(rk.path) for rk in ranks.values()]
    test_step_trace_time_equals_recomputation((None, parsed))
    test_overlap_lanes_equal_recomputation((None, parsed))


def test_defaults_keep_one_host_and_natural_skews(profile):
    prof, _ = profile
    ranks = _plain(prof)
    assert prof.slow_rank is None
    assert prof.host_of_rank == {0: "ascend-node00", 1: "ascend-node00"}
    assert prof.host_offsets_ns == {"ascend-node00": 0}
    assert all(rk.path.name.startswith("ascend-node00_") for rk in ranks.values())
    _check_truth_in_files(prof, ranks)
    assert len(prof.collectives) == 3 * 3
    skews = [c.skew_ns for c in prof.collectives]
    assert max(skews) > 0 and max(skews) < 400_000   # as before: the ranks' own jitter
    for c in prof.collectives:   # ends within 0.25 µs (exact with hosts or a slow rank)
        assert max(c.ends_ns.values()) - min(c.ends_ns.values()) <= 250


def test_op_names_follow_the_group_and_count_within_it(skewed, profile):
    for prof in (skewed[0], profile[0]):
        group = next(iter(Plain(prof.ranks[0].path).meta["parallel_group_info"]))
        for i, c in enumerate(prof.collectives):
            assert c.group == "Group 0 Communication"
            assert c.name == f"hcom_allReduce__{group[-3:]}_{i}_1"
            assert c.step == 50 + i // (len(prof.collectives) // len(prof.ranks[0].steps))


def test_real_sample_op_names_are_group_tag_and_index(tmp_path):
    real = real_data("ascend-pt-2rank")
    names = []
    for r in (0, 1):
        comm = json.loads((real / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json")
                          .read_text(encoding="utf-8"))
        keys = [k for step in comm.values() for k in step["collective"] if k != "Total Op Info"]
        for i, key in enumerate(keys):
            name, _, group = key.partition("@")
            assert name == f"hcom_allReduce__{group[-3:]}_{i}_1", key
        lane = Plain.__new__(Plain)
        lane.events = json.loads((real / f"rank{r}_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json")
                                 .read_text(encoding="utf-8"))
        meta = [e for e in lane.events if e["ph"] == "M"]
        lane.proc = {e["pid"]: e["args"]["name"] for e in meta if e["name"] == "process_name"}
        lane.lane = {(e["pid"], e["tid"]): e["args"]["name"] for e in meta if e["name"] == "thread_name"}
        assert sorted(lane.ops("Group 0 Communication")) == sorted(k.partition("@")[0] for k in keys)
        names.append(keys)
    assert names[0] == names[1]   # the same instance has the same name on every rank


def test_pipeline_slow_rank(tmp_path):
    prof = write_ascend_pt_profile(tmp_path, ranks=4, pp=2, steps=1, tasks_per_step=40, seed=2,
                                   slow_rank=1, slow_ns=SLOW_NS)
    ranks = _plain(prof)
    _check_truth_in_files(prof, ranks)
    by_group = defaultdict(list)
    for c in prof.collectives:
        by_group[tuple(sorted(c.starts_ns))].append(c)
        assert len(set(c.ends_ns.values())) == 1
    assert sorted(by_group) == [(0, 1), (2, 3)] and len(by_group[0, 1]) == 2
    assert all(c.last_rank == 1 and c.skew_ns >= SLOW_NS // 2 for c in by_group[0, 1])
    assert all(c.skew_ns < SLOW_NS // 2 for c in by_group[2, 3])   # the other stage: its own pace


def test_cli_hosts_and_slow_rank(tmp_path, capsys):
    assert main([str(tmp_path / "out"), "--ranks", "4", "--steps", "1", "--ranks-per-host", "2",
                 "--host-offsets-ns", "0", "-1500000", "--slow-rank", "3", "--slow-ns", "2000000"]) == 0
    out = capsys.readouterr().out
    assert "slow rank: 3" in out and "'node1': -1500000" in out
    names = sorted(p.name for p in (tmp_path / "out").glob("*_ascend_pt"))
    assert [DIR_NAME.fullmatch(n)[1] for n in names] == ["node0", "node0", "node1", "node1"]


@pytest.mark.parametrize(("kw", "match"), [
    (dict(ranks_per_host=1, host_offsets_ns=[0]), "one offset per host"),
    (dict(host_offsets_ns=[0]), "needs ranks_per_host"),
    (dict(ranks_per_host=-1), "ranks_per_host must"),
    (dict(slow_rank=2), "slow_rank must"),
    (dict(slow_rank=0, single_card=True), "slow_rank must"),
    (dict(slow_rank=0, ranks=2, pp=2), "slow_rank must"),
    (dict(slow_rank=0, slow_ns=-1), "slow_ns must"),
])
def test_truth_options_are_checked(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        write_ascend_pt_profile(tmp_path, **{"ranks": 2, **kw})


# --------------------------------------------------------------------------- injected delays
# slow_at, slow_op and stall (issue 27's critical path): each changes only the kernels it names,
# by what it says, and its truth (InjectionTruth) points at them in the files.

INJECTED = dict(ranks=4, steps=2, tasks_per_step=60, seed=1)
PIPELINE = dict(ranks=2, pp=2, steps=2, tasks_per_step=60, seed=1)


@pytest.fixture(scope="module")
def injected(tmp_path_factory):
    root = tmp_path_factory.mktemp("injected")
    kws = {"control": INJECTED, "late": INJECTED | dict(slow_rank=2, slow_ns=SLOW_NS, slow_at=(51, 1)),
           "late_at_50": INJECTED | dict(slow_rank=2, slow_ns=SLOW_NS, slow_at=(50, 0)),
           "slow_op": INJECTED | dict(slow_op=(1, "Conv2D", 3.0)),
           "pipeline": PIPELINE, "stall": PIPELINE | dict(stall=(0, 1, SLOW_NS))}
    return {name: write_ascend_pt_profile(root / name, **kw) for name, kw in kws.items()}


def _kernels(prof, rank: int) -> dict[int, Counter]:
    """Per step, the rank's compute kernels as a multiset of (type, duration ns), from kernel_details."""
    out: dict[int, Counter] = defaultdict(Counter)
    for row in Plain(prof.ranks[rank].path).kd:
        if row["Accelerator Core"] != "HCCL":
            out[int(row["Step Id"])][row["Type"], _dur_of(float(row["Duration(us)"]))] += 1
    return out


def _compute_tasks(rk: Plain) -> list[tuple[int, int]]:
    """(start, end) ns of the rank's compute tasks on the Ascend Hardware lanes."""
    return sorted((_ns_of(e["ts"]), _ns_of(e["ts"]) + _dur_of(e["dur"])) for e in rk.events
                  if e["ph"] == "X" and rk.proc[e["pid"]] == "Ascend Hardware"
                  and e["args"]["Task Type"] in ("AI_CORE", "MIX_AIV", "DSA_SQE"))


def test_no_injection_no_truth(injected):
    assert injected["control"].injections == [] and injected["pipeline"].injections == []


def test_a_slow_op_type_lasts_factor_times_its_draw_and_nothing_else_changes(injected):
    prof, control = injected["slow_op"], injected["control"]
    for rank in range(4):
        mine, theirs = _kernels(prof, rank), _kernels(control, rank)
        for step in (50, 51):
            expected = theirs[step] if rank != 1 else Counter(
                {(t, round(d * 3) if t == "Conv2D" else d): n for (t, d), n in theirs[step].items()})
            assert mine[step] == expected, (rank, step)
    ranks = _plain(prof)
    tasks = set(_compute_tasks(ranks[1]))
    for truth in prof.injections:
        conv = sum(n * d for (t, d), n in _kernels(prof, 1)[truth.step].items() if t == "Conv2D")
        drawn = sum(n * d for (t, d), n in _kernels(control, 1)[truth.step].items() if t == "Conv2D")
        assert (truth.kind, truth.ranks, truth.target) == ("op_type", (1,), "Conv2D")
        assert truth.what_if == "op_type"
        assert truth.injected_ns == conv - drawn
        assert {(s, e) for _, s, e in truth.spans} <= tasks and len(truth.spans) == 10
        assert sum(e - s for _, s, e in truth.spans) == conv
        assert 0 < truth.saved_ns <= conv // 10 + 1_000


def test_a_stall_lengthens_one_kernel_before_the_send_and_the_receiver_waits(injected):
    prof, control = injected["stall"], injected["pipeline"]
    assert _kernels(prof, 1) == _kernels(control, 1)
    for step in (50, 51):
        (longer,) = _kernels(prof, 0)[step] - _kernels(control, 0)[step]
        (drawn,) = _kernels(control, 0)[step] - _kernels(prof, 0)[step]
        assert longer[0] == drawn[0] and longer[1] == drawn[1] + SLOW_NS
    ranks = _plain(prof)
    for truth in prof.injections:
        assert (truth.kind, truth.ranks, truth.injected_ns) == ("stall", (0,), SLOW_NS)
        assert truth.what_if == "late_arrival"
        ((rank, start, end),) = truth.spans
        assert end - start == SLOW_NS and any(s < start and e == end for s, e in _compute_tasks(ranks[0]))
        send = ranks[0].ops("Group 1 Communication")[truth.target]
        receive = ranks[1].ops("Group 1 Communication")[truth.peer_target]
        assert truth.target.startswith("hcom_batchSendRecv") and send[1] == receive[1]
        assert 0 <= send[0] - end < 50_000   # the send leaves right after the stall
        # the receiver came first and, without the stall, would have waited for no one
        assert receive[0] < send[0] and send[0] - SLOW_NS < receive[0]
        assert 0 < truth.saved_ns < SLOW_NS


def test_slow_at_delays_one_collective_of_one_step(injected):
    for name, (step, k) in (("late", (51, 1)), ("late_at_50", (50, 0))):
        prof = injected[name]
        (truth,) = prof.injections
        per_step = len(prof.collectives) // 2
        hit = prof.collectives[(step - 50) * per_step + k]
        assert (truth.kind, truth.step, truth.ranks, truth.target) == ("late_arrival", step, (2,), hit.name)
        assert SLOW_NS // 2 <= truth.injected_ns <= SLOW_NS * 3 // 2
        ((rank, start, end),) = truth.spans
        others = max(t for r, t in hit.starts_ns.items() if r != 2)
        assert (start, end - start) == (others, truth.injected_ns)
        assert 0 <= hit.starts_ns[2] - end < 50_000 and hit.last_rank == 2
        assert truth.saved_ns == pytest.approx(hit.starts_ns[2] - others, rel=0.01)
        assert any(s < start and e == end for s, e in _compute_tasks(_plain(prof)[2]))
        for c in prof.collectives:   # late nowhere else: the ranks' own jitter
            if c is not hit:
                last, second = sorted(c.starts_ns.values())[-2:][::-1]
                assert last - second < 300_000, c


def test_injections_on_one_rank_keep_their_own_truth(tmp_path):
    both = write_ascend_pt_profile(tmp_path, **INJECTED, slow_rank=1, slow_ns=SLOW_NS, slow_at=(51, 1),
                                   slow_op=(1, "Conv2D", 3.0))
    kinds = {(i.kind, i.step): i for i in both.injections}
    assert sorted(kinds) == [("late_arrival", 51), ("op_type", 50), ("op_type", 51)]
    ((_, start, end),) = kinds["late_arrival", 51].spans
    assert end - start == kinds["late_arrival", 51].injected_ns
    for step in (50, 51):   # only the slowed kernels, each 3x its draw: 2/3 of it added
        mine = kinds["op_type", step]
        assert len(mine.spans) == 10 and 3 * mine.injected_ns == 2 * sum(e - s for _, s, e in mine.spans)


@pytest.mark.parametrize(("kw", "match"), [
    (dict(slow_at=(50, 0)), "slow_at needs slow_rank"),
    (dict(slow_rank=0, slow_at=(52, 0)), "slow_at must be"),
    (dict(slow_rank=0, slow_at=(50, 1)), "slow_at must be"),
    (dict(ranks=4, pp=2, slow_rank=0, slow_at=(50, 0)), "slow_at needs"),
    (dict(slow_op=(2, "Conv2D", 2.0)), "slow_op must be"),
    (dict(slow_op=(0, "Conv3D", 2.0)), "slow_op must be"),
    (dict(slow_op=(0, "Conv2D", 0)), "slow_op must be"),
    (dict(stall=(0, 0, 1000)), "stall must be"),
    (dict(pp=2, stall=(1, 0, 1000)), "stall must be"),
    (dict(pp=2, stall=(0, 2, 1000)), "stall must be"),
    (dict(pp=2, stall=(0, 0, -1)), "stall must be"),
])
def test_injection_options_are_checked(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        write_ascend_pt_profile(tmp_path, **{"ranks": 2, "tasks_per_step": 20, **kw})


def test_cli_injections(tmp_path, capsys):
    assert main([str(tmp_path / "a"), "--ranks", "2", "--steps", "1", "--slow-rank", "1", "--slow-ns",
                 "1000000", "--slow-at", "50", "0", "--slow-op", "0", "MatMulV2", "2"]) == 0
    out = capsys.readouterr().out
    assert "step 50: late_arrival on rank(s) 1 at hcom_allReduce__" in out
    assert "step 50: op_type on rank(s) 0 at MatMulV2:" in out and "removing it saves" in out
    assert main([str(tmp_path / "b"), "--ranks", "2", "--pp", "2", "--steps", "1", "--stall", "0", "1",
                 "500000"]) == 0
    assert "step 50: stall on rank(s) 0 at hcom_batchSendRecv__" in capsys.readouterr().out
    assert main([str(tmp_path / "c"), "--stall", "0", "1", "500000"]) == 2
