"""The host_info fixture generator writes what docs/formats.md §4 (MindSpore profiling.cc) describes."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from itertools import pairwise
from pathlib import Path

import orjson
import pytest

from fixtures.host_info_gen import (
    HEADER,
    HEADER_NO_UNITS,
    GeneratedHostInfo,
    HostSlice,
    main,
    write_host_info,
)

ARGS = dict(steps=4, threads=4, unfinished=3, seed=5)
TID, PID, PPID, MODULE, EVENT, STAGE, LEVEL, START_END, CUSTOM, MEM, TS = range(11)


@pytest.fixture(scope="module")
def gens(tmp_path_factory) -> dict[str, GeneratedHostInfo]:
    return {mode: write_host_info(tmp_path_factory.mktemp(mode), mode=mode, **ARGS)
            for mode in ("all", "time", "memory")}


@pytest.fixture(scope="module")
def gen(gens) -> GeneratedHostInfo:
    return gens["all"]


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    return rows[1:]


def _pair(rows: list[list[str]]) -> tuple[list[tuple], int]:
    """Independent pairing: per thread and per (module, event, stage), a stack of open starts.

    Returns the slices in the order of their start rows (unfinished ones with end None) and
    the number of instants. Rows without a time are ignored.
    """
    out: list[tuple | None] = []
    open_: dict[tuple, list[int]] = defaultdict(list)
    instants = 0
    for r in rows:
        ts = int(r[TS]) * 1000
        if not ts:
            continue
        key = (r[TID], r[MODULE], r[EVENT], r[STAGE])
        base = (r[TID], r[MODULE], r[EVENT], r[STAGE], int(r[LEVEL]))
        if r[START_END] == "0":
            open_[key].append(len(out))
            out.append(base + (ts, None, r[CUSTOM]))
        elif r[START_END] == "1":
            i = open_[key].pop()
            assert out[i][4] == int(r[LEVEL])
            out[i] = out[i][:6] + (ts,) + out[i][7:]
        else:
            instants += 1
            out.append(base + (ts, ts, r[CUSTOM]))
    return out, instants


def test_header_verbatim_for_both_namings(tmp_path):
    a = write_host_info(tmp_path / "a", steps=1)
    b = write_host_info(tmp_path / "b", steps=1, naming="host_memory", rank=3)
    assert a.csv_path == tmp_path / "a" / "host_info" / "host_info_0.csv"
    assert b.csv_path == tmp_path / "b" / "host_info" / "host_memory_3.csv"
    assert a.csv_path.read_bytes().split(b"\n", 1)[0] == (
        b"tid,pid,parent_pid,module_name,event,stage,level,start_end,custom_info,"
        b"memory_usage(kB),time_stamp(us)")
    assert b.csv_path.read_bytes().split(b"\n", 1)[0] == (
        b"tid,pid,parent_pid,module_name,event,stage,level,start_end,custom_info,"
        b"memory_usage,time_stamp")
    assert (HEADER, HEADER_NO_UNITS) == (a.csv_path.read_text().split("\n")[0],
                                         b.csv_path.read_text().split("\n")[0])
    assert b"\r" not in a.csv_path.read_bytes()


@pytest.mark.parametrize("mode", ["all", "time", "memory"])
def test_rows_have_11_fields_and_never_both_zero(gens, mode):
    g = gens[mode]
    rows = _rows(g.csv_path)
    assert len(rows) == g.rows > 0
    assert all(len(r) == 11 for r in rows)
    assert not any(r[MEM] == "0" and r[TS] == "0" for r in rows)
    for r in rows:
        assert int(r[TID]) > 2**40 and r[PID] == str(g.pid) and r[PPID] == str(g.parent_pid)
        assert r[LEVEL] in ("0", "1") and r[START_END] in ("0", "1", "2")


def test_pairing_reproduces_the_slices(gen):
    slices, instants = _pair(_rows(gen.csv_path))
    assert slices == gen.slices
    assert all(isinstance(s, HostSlice) for s in gen.slices)
    assert instants == gen.instants > 0
    assert gen.slice_count == len(gen.slices)
    assert sum(s.end_ns == s.start_ns for s in gen.slices) >= gen.instants


def test_unfinished_stages_one_per_thread_main_outer_with_children(gen):
    assert [s for s in gen.slices if s.end_ns is None] == gen.unfinished
    assert len(gen.unfinished) == ARGS["unfinished"]
    assert len({s.tid for s in gen.unfinished}) == len(gen.unfinished)
    main_tid = gen.threads[0]
    assert gen.role_of[main_tid] == "main"
    (outer,) = [s for s in gen.unfinished if s.tid == main_tid]
    children = [s for s in gen.slices if s.tid == main_tid and s.start_ns >= outer.start_ns
                and s is not outer]
    assert len(children) >= 3 and all(s.end_ns is not None for s in children)
    assert all(s.start_ns <= gen.last_ns for s in gen.unfinished)


def test_stacks_nest_per_thread_and_same_stage_recurses(gen):
    by_tid = defaultdict(list)
    for s in gen.slices:
        if s.end_ns is not None and s.end_ns != s.start_ns:
            by_tid[s.tid].append(s)
    recursive, depth = 0, {}
    for tid, spans in by_tid.items():
        stack: list[HostSlice] = []
        for s in sorted(spans, key=lambda s: (s.start_ns, -s.end_ns)):
            while stack and stack[-1].end_ns <= s.start_ns and stack[-1].end_ns < s.end_ns:
                stack.pop()
            if stack:
                assert s.end_ns <= stack[-1].end_ns, (stack[-1], s)  # proper nesting
                recursive += stack[-1][1:4] == s[1:4]
            stack.append(s)
            depth[tid] = max(depth.get(tid, 0), len(stack))
    assert recursive >= 1
    assert depth[gen.threads[0]] >= 4
    # the same triple open on two threads at once
    launch = [s for s in gen.slices if s.stage == "LaunchKernel"]
    assert len({s.tid for s in launch}) >= 2


def test_rows_are_time_ordered_per_thread_but_interleaved(gen):
    rows = _rows(gen.csv_path)
    per_tid = defaultdict(list)
    for r in rows:
        per_tid[r[TID]].append(int(r[TS]))
    assert all(a <= b for ts in per_tid.values() for a, b in pairwise(ts))
    assert list(per_tid) == gen.threads
    tids = [r[TID] for r in rows]
    assert sum(a != b for a, b in pairwise(tids)) > len(gen.threads) * ARGS["steps"]
    times = [int(r[TS]) for r in rows]
    assert any(a > b for a, b in pairwise(times))            # lock order != timestamp order
    assert len(set(times)) < len(times)                      # shared timestamps
    assert gen.first_ns == min(times) * 1000 and gen.last_ns == max(times) * 1000


def test_memory_truth_matches(gen):
    rows = _rows(gen.csv_path)
    memory = [(int(r[TS]) * 1000, int(r[MEM]) * 1024) for r in rows if r[MEM] != "0"]
    assert memory == gen.memory and len(memory) == gen.memory_rows > 0
    assert gen.memory_only_rows == 0 and gen.skipped_rows == 0
    assert any(r[MEM] == "0" for r in rows)   # time-only call sites in mode "all"


def test_modes_fill_the_right_columns(gens):
    time_rows, mem_rows = _rows(gens["time"].csv_path), _rows(gens["memory"].csv_path)
    assert all(r[MEM] == "0" and int(r[TS]) > 0 for r in time_rows)
    assert all(r[TS] == "0" and int(r[MEM]) > 0 for r in mem_rows)
    t, m, a = gens["time"], gens["memory"], gens["all"]
    assert t.slices == a.slices and t.rows == a.rows and t.memory == [] and t.memory_only_rows == 0
    assert m.slices == m.unfinished == m.memory == [] and m.instants == 0
    assert m.memory_only_rows == m.rows == len(mem_rows) > 0
    assert m.skipped_rows == a.rows - m.rows > 0        # time-only call sites are dropped
    assert m.first_ns is None and m.last_ns is None and m.timeline_path is None
    assert not (m.csv_path.parent / "timeline_0.json").exists()
    launch = [tid for tid, role in a.role_of.items() if role == "launch"]
    assert launch and set(launch) <= set(a.threads) and not set(launch) & set(m.threads)


def test_custom_info_quoted_when_it_has_a_comma(gen):
    raw = gen.csv_path.read_text().splitlines()[1:]
    rows = _rows(gen.csv_path)
    infos = {r[CUSTOM] for r in rows}
    assert "" in infos
    with_comma = {i for i in infos if "," in i}
    assert with_comma and {i for i in infos if i and "," not in i}
    for info in with_comma:
        assert info.startswith("{{") and info.endswith("}}")
        assert any(f',"{info}",' in line for line in raw)
    assert all(len(line.split(",")) == 11 for line in raw if '"' not in line)
    assert {s.custom_info for s in gen.slices} <= infos
    assert {r[LEVEL] for r in rows} == {"0", "1"}


def test_timeline_matches_finished_slices(gen):
    events = orjson.loads(gen.timeline_path.read_bytes())
    assert gen.timeline_path.name == "timeline_0.json"
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {str(t) for t in names} == set(gen.threads)
    # float µs hold integer µs exactly, but float(µs) * 1000 does not: convert through int
    assert all(e["ts"].is_integer() and e.get("dur", 0.0).is_integer() for e in events if e["ph"] != "M")
    xs = sorted((str(e["tid"]), *e["name"].split("::"), e["args"]["level"], int(e["ts"]) * 1000,
                 (int(e["ts"]) + int(e["dur"])) * 1000, e["args"]["custom_info"])
                for e in events if e["ph"] == "X")
    instants = Counter((r[TID], r[MODULE], r[EVENT], r[STAGE], int(r[LEVEL]), int(r[TS]) * 1000,
                        int(r[TS]) * 1000, r[CUSTOM])
                       for r in _rows(gen.csv_path) if r[START_END] == "2")
    assert sum(instants.values()) == gen.instants
    finished = Counter(tuple(s) for s in gen.slices if s.end_ns is not None) - instants
    assert xs == sorted(finished.elements())
    assert sum(e["ph"] == "i" for e in events) == gen.instants
    assert all(isinstance(e["ts"], float) for e in events if e["ph"] in "Xi")
    assert len(xs) == len(gen.slices) - gen.instants - len(gen.unfinished)


def test_deterministic_and_seed_dependent(tmp_path, gen):
    again = write_host_info(tmp_path / "again", mode="all", **ARGS)
    assert again.csv_path.read_bytes() == gen.csv_path.read_bytes()
    assert again.timeline_path.read_bytes() == gen.timeline_path.read_bytes()
    other = write_host_info(tmp_path / "other", mode="all", **{**ARGS, "seed": 6})
    assert other.csv_path.read_bytes() != gen.csv_path.read_bytes()


def test_truth_off_keeps_counts(tmp_path, gen):
    lean = write_host_info(tmp_path / "lean", mode="all", truth=False, **ARGS)
    assert lean.csv_path.read_bytes() == gen.csv_path.read_bytes()
    assert lean.slices == lean.memory == lean.unfinished == []
    assert (lean.slice_count, lean.memory_rows, lean.rows) == (len(gen.slices), len(gen.memory),
                                                               gen.rows)


def test_small_configurations(tmp_path):
    g = write_host_info(tmp_path / "one", threads=1, unfinished=0, steps=1, step_ns=1_000_000,
                        start_ns=1_700_000_000_000_000_123)
    slices, _ = _pair(_rows(g.csv_path))
    assert slices == g.slices and g.unfinished == [] and len(g.threads) == 1
    assert g.first_ns >= 1_700_000_000_000_000_123
    assert g.last_ns < 1_700_000_000_000_000_123 + 6 * 1_000_000


def test_argument_errors(tmp_path):
    with pytest.raises(ValueError) as e:
        write_host_info(tmp_path, steps=0, threads=9, mode="both", naming="x", unfinished=10,
                        step_ns=10, rank=-1, start_ns=0)
    for word in ("rank", "start_ns", "steps", "step_ns", "threads", "mode", "naming", "unfinished"):
        assert word in str(e.value)
    with pytest.raises(ValueError, match="unfinished"):
        write_host_info(tmp_path, threads=2, unfinished=3)
    assert not (tmp_path / "host_info").exists()


def test_cli(tmp_path, capsys):
    assert main([str(tmp_path), "--ranks", "2", "--steps", "2", "--mode", "time"]) == 0
    assert {p.name for p in (tmp_path / "host_info").iterdir()} == {
        "host_info_0.csv", "host_info_1.csv", "timeline_0.json", "timeline_1.json"}
    assert "rows" in capsys.readouterr().out
    assert main([str(tmp_path), "--threads", "0"]) == 2
    assert "threads" in capsys.readouterr().err
