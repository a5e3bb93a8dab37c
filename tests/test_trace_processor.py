"""Perfetto's own importer as the judge: every real sample, both kinds, both writers.

The trace processor (``shared/tools/trace_processor_shell``, the engine of ui.perfetto.dev) loads
each trace we write from a real profile; it must repair or drop nothing (no ``error`` or
``data_loss`` rows in its ``stats``), and import exactly the slices, counter values and flows
that our independent decoder (``trace_check``) reads in the file and that the writer reports.
The JSON and the protobuf of one input hold the same slices at the same times, to the ns.
Vendors' own files load with 2-394 errors each; ours must load with none.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import real_data
from tp_tables import differences, plain, tables
from trace_check import read_chrome_json, read_perfetto

from converters import convert, discover
from fixtures.ascend_db_gen import write_ascend_db
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.mindspore1x_gen import write_mindspore1x_profile

_QUERY = """\
select name || ' [' || severity || ']: ' || value as problem from stats
  where severity in ('error', 'data_loss') and value > 0;
select (select count(*) from slice) as slices, (select count(*) from counter) as counters,
       (select count(*) from flow) as flows;
"""

# Every supported layout of shared/data/real, as folders and as the single files people pass.
SAMPLES = [
    "msprof-2rank",
    "ascend-pt-2rank",
    "ascend-pt-db",
    "msprof-db",
    "mindspore-1x/single-device",
    "mindspore-1x/hccl-rank6",
    "mindspore-cpu/pynative-profile",
    "mindspore-cpu/graph-legacy-Profiler",
    "ascend-pt-2rank/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json",
    "ascend-pt-2rank/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "ascend-pt-db/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db",
    "msprof-db/msprof_0.db",
    "kineto-2rank",
    "kineto-gloo-2rank",
    "kineto-1.8-resnet50",
    "kineto-1.8-resnet50/worker0.1623143089861.pt.trace.json.gz",
    "kineto-2rank/sampled_rank-1.json.gz",
    "kineto-gloo-2rank/vm_10378.1795348179170436309.pt.trace.json",
    "paddle-cpu-chrome",
    "paddle-cpu-protobuf",
    "paddle-cpu-protobuf/host_vmpid_10240_time_2026_11_22_11_49_09_501116.paddle_trace.pb",
]
# Files copied alone into an empty folder, as they travel (attached to an issue): nothing beside
# them says when the collection started, so no clock origin is known before they are read.
ALONE = [
    "ascend-pt-2rank/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json",
    "ascend-pt-2rank/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv",
    "ascend-pt-db/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_1.db",
    "mindspore-cpu/pynative-profile/vm_10688_20261122115020837_ascend_ms/ASCEND_PROFILER_OUTPUT/trace_view.json",
]


def _sample(name: str, tmp_path: Path | None = None) -> Path:
    """The sample ``name``; ``alone:<name>``: the file copied alone into a folder of ``tmp_path``."""
    alone = name.startswith("alone:")
    top, _, rest = name.removeprefix("alone:").partition("/")
    path = real_data(top) / rest
    if not path.exists():
        pytest.skip(f"{path} does not exist")
    if alone:
        (tmp_path / "alone").mkdir()
        path = Path(shutil.copy(path, tmp_path / "alone"))
    return path


def trace_processor() -> Path:
    """The trace processor binary: $TRACE2PERFETTO_TRACE_PROCESSOR, else shared/tools beside this
    checkout; skip the test with the reason when neither is there."""
    given = os.environ.get("TRACE2PERFETTO_TRACE_PROCESSOR")
    default = Path(__file__).resolve().parents[2] / "shared/tools/trace_processor_shell"
    path = Path(given) if given else default
    if not path.is_file():
        pytest.skip(f"no trace processor at {path} (set TRACE2PERFETTO_TRACE_PROCESSOR)")
    return path


def imported(trace: Path, tmp_path: Path) -> tuple[list[str], tuple[int, int, int]]:
    """What the trace processor made of ``trace``: its problems, and (slices, counters, flows)."""
    query = tmp_path / "query.sql"
    query.write_text(_QUERY)
    done = subprocess.run([str(trace_processor()), "-q", str(query), str(trace)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    first, second = done.stdout.strip().split("\n\n")
    problems = [row[0] for row in list(csv.reader(io.StringIO(first)))[1:]]
    counts = next(csv.DictReader(io.StringIO(second)))
    return problems, (int(counts["slices"]), int(counts["counters"]), int(counts["flows"]))


_SLICES = """\
select hex(p.name) as process, s.ts, s.dur, hex(s.name) as name from slice s
  left join thread_track tt on s.track_id = tt.id left join thread t using (utid)
  left join process_track pt on s.track_id = pt.id
  join process p on p.upid = coalesce(t.upid, pt.upid);
"""


Times = dict[str, list[tuple[int, int, str]]]  # process -> (ts, dur, name) of its slices


def slice_times(trace: Path, tmp_path: Path, shared_clock: bool = True) -> Times:
    """Every slice the trace processor imported from ``trace``, per process: (ts, dur, name), sorted,
    ts counted from the first slice of the trace (a JSON trace counts from an origin of its own),
    or with ``shared_clock`` False from the first of its process (ranks on clocks of their own)."""
    query = tmp_path / "slices.sql"
    query.write_text(_SLICES)
    done = subprocess.run([str(trace_processor()), "-q", str(query), str(trace)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    times: Times = {}
    for row in done.stdout.split()[1:]:  # names in hex: the shell's CSV does not quote what they hold
        process, ts, dur, name = (field.strip('"') for field in row.split(","))
        times.setdefault(bytes.fromhex(process).decode(), []).append((int(ts), int(dur),
                                                                      bytes.fromhex(name).decode()))
    first = min((ts for rows in times.values() for ts, _, _ in rows), default=0)
    for process, rows in times.items():
        base = first if shared_clock else min(ts for ts, _, _ in rows)
        times[process] = sorted((ts - base, dur, name) for ts, dur, name in rows)
    return times


def assert_same_slices(from_json: Times, protobuf: Times, notes: list[str], what: str) -> None:
    """The JSON holds the protobuf's slices at the same times to the ns; where they span more than
    JSON holds exactly (10**15 ns from an origin an hour before the first), it says so and holds
    them to the µs."""
    assert sum(map(len, from_json.values())) == sum(map(len, protobuf.values())), what
    span = max((ts + dur for rows in protobuf.values() for ts, dur, _ in rows), default=0)
    said = any("Chrome JSON holds to the µs" in note for note in notes)
    if span < 10**15 - 3600 * 10**9:
        assert not said, what
        assert from_json == protobuf, f"{what}: the JSON moves slices"
        return
    assert said, f"{what}: times too far apart for JSON without a word"
    for process, rows in protobuf.items():  # rounded down alike, starts and ends keep their order
        theirs = from_json[process]
        assert sorted(name for _, _, name in rows) == sorted(name for _, _, name in theirs), what
        for times in (lambda row: row[0], lambda row: row[0] + row[1]):  # starts, ends
            for ours, json_time in zip(sorted(map(times, rows)), sorted(map(times, theirs)), strict=True):
                assert abs(ours - json_time) < 1000, f"{what}: {ours} ns in the protobuf, {json_time} in JSON"


def assert_json_loads_as_protobuf(source: Path, kind: str, tmp_path: Path, shared_clock: bool = True) -> None:
    """Both writers' traces of ``source`` load with nothing repaired or dropped, holding the same
    slices at the same times to the ns (relative to the first slice, see ``slice_times``)."""
    times = {}
    for name in ("out.pftrace", "out.json"):
        out = tmp_path / name
        result = convert(source, out, kind=kind, max_bytes=None)
        problems, _ = imported(out, tmp_path)
        assert problems == [], f"{source} {kind} {name}: the trace processor had to repair {problems}"
        times[name] = slice_times(out, tmp_path, shared_clock)
        assert times[name], f"{source} {kind} {name}: no slice"
    assert_same_slices(times["out.json"], times["out.pftrace"], result.warnings, f"{source} {kind}")


@pytest.mark.parametrize("kind", ["summary", "detail"])
@pytest.mark.parametrize("sample", SAMPLES + [f"alone:{name}" for name in ALONE])
def test_trace_processor_imports_exactly_what_we_wrote(sample, kind, tmp_path):
    source = _sample(sample, tmp_path)
    times = {}
    for name in ("out.pftrace", "out.json"):
        out = tmp_path / name
        result = convert(source, out, kind=kind, max_bytes=None)
        decoded = (read_perfetto if name.endswith(".pftrace") else read_chrome_json)(out.read_bytes())
        problems, counts = imported(out, tmp_path)
        assert problems == [], f"{sample} {kind} {name}: the trace processor had to repair {problems}"
        assert counts == (len(decoded.slices) + len(decoded.instants), len(decoded.counters),
                          decoded.flows), f"{sample} {kind} {name}"
        assert result.slices == len(decoded.slices), f"{sample} {kind} {name}"
        assert result.slices > 0 or result.warnings, f"{sample} {kind} {name}: empty without a word"
        times[name] = slice_times(out, tmp_path)
    assert_same_slices(times["out.json"], times["out.pftrace"], result.warnings, f"{sample} {kind}")


def assert_imports_as_plain(trace: Path, tmp_path: Path, what: str) -> None:
    """The trace processor imports from ``trace`` what it imports from its plain form (``plain``:
    every string where it is used, no sequence state): the same slices, args, flows, counters and
    names, and no error."""
    trace_processor()  # or skip
    ours = tables(trace, tmp_path)
    assert ours["stats"] == [], f"{what}: {ours['stats']}"
    flat = tmp_path / "plain.pftrace"
    flat.write_bytes(plain(trace.read_bytes()))
    assert differences(tables(flat, tmp_path), ours) == [], what


@pytest.mark.parametrize("kind", ["summary", "detail"])
@pytest.mark.parametrize("sample", SAMPLES)
def test_what_the_sequences_state_carries_imports_as_if_written_in_full(sample, kind, tmp_path):
    out = tmp_path / "out.pftrace"
    convert(_sample(sample), out, kind=kind, max_bytes=None)
    assert_imports_as_plain(out, tmp_path, f"{sample} {kind}")


def test_a_generated_job_of_many_steps_imports_as_if_written_in_full(tmp_path):
    """Sequences of many steps each, with every kind of argument the generator writes."""
    write_ascend_pt_profile(tmp_path / "job", ranks=2, steps=6, tasks_per_step=400, seed=7)
    out = tmp_path / "out.pftrace"
    convert(tmp_path / "job", out, kind="detail", max_bytes=None)
    assert_imports_as_plain(out, tmp_path, "generated")


def test_a_generated_database_whose_arrows_cross_steps_imports_every_arrow(tmp_path):
    """The database form's arrows into the next step (launches just before a step's start whose
    tasks run in it) load with no error, every arrow written imported: all but the skewed first."""
    made = write_ascend_db(tmp_path / "rank0_ascend_pt" / "ASCEND_PROFILER_OUTPUT", steps=3,
                           tasks_per_step=20, planes=2, seed=3)
    out = tmp_path / "out.pftrace"
    convert(tmp_path / "rank0_ascend_pt", out, kind="detail", max_bytes=None)
    problems, (_, _, flows) = imported(out, tmp_path)
    assert problems == [] and flows == made["device_tasks"] + made["comm_tasks"] - 1


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_a_rank_on_its_own_clock_beside_one_on_wall_time_loads_whole_from_json(kind, tmp_path):
    write_mindspore1x_profile(tmp_path / "job", ranks=2, steps=2, ops_per_step=40, seed=3)
    (tmp_path / "job/profiler/host_start.log.1").unlink()  # rank 1: device SysCnt, not wall time
    out = tmp_path / "out.json"
    result = convert(tmp_path / "job", out, kind=kind)
    decoded = read_chrome_json(out.read_bytes())  # checks that no time is negative
    problems, counts = imported(out, tmp_path)
    assert problems == []
    assert counts[0] == result.slices == len(decoded.slices)
    assert {s.process.split(" (")[0] for s in decoded.slices} == {"Rank 0", "Rank 1"}


def _collection_starts(job: Path, unknown: set[int], later_ns: int = 0) -> None:
    """Edit the ranks' profiler_info: ranks in ``unknown`` say nothing of their collection start
    (no end_info), the others start ``later_ns`` later than they did."""
    for path in sorted(job.glob("*/profiler_info_*.json")):
        info = json.loads(path.read_bytes())
        if info["rank_id"] in unknown:
            del info["end_info"]
        else:
            info["end_info"]["collectionTimeEnd"] += later_ns
        path.write_text(json.dumps(info))


@pytest.mark.parametrize("unknown, later_ns", [
    ({1}, 0),  # rank 1's collection start unknown, rank 0's known
    ({0, 1}, 0),  # no start known: the ranks' origins are settled after their first encoding
    (set(), 3 * 3600 * 10**9),  # every event hours before the collection start
    ({1}, 3 * 3600 * 10**9),  # and beside a rank without a known start
])
@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_json_of_ranks_without_a_known_start_or_with_events_before_it_loads_as_its_protobuf(
        unknown, later_ns, kind, tmp_path):
    write_ascend_pt_profile(tmp_path / "job", ranks=2, steps=3, tasks_per_step=300, seed=5)
    _collection_starts(tmp_path / "job", unknown, later_ns)
    assert [info.start_ns is None for info in discover(tmp_path / "job")] == [0 in unknown, 1 in unknown]
    assert_json_loads_as_protobuf(tmp_path / "job", kind, tmp_path)


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_json_of_a_rank_on_its_own_clock_beside_ranks_on_wall_time_loads_as_its_protobuf(kind, tmp_path):
    write_mindspore1x_profile(tmp_path / "job", ranks=3, steps=2, ops_per_step=40, seed=3)
    (tmp_path / "job/profiler/host_start.log.1").unlink()  # rank 1: device SysCnt, not wall time
    assert [info.wall_clock for info in discover(tmp_path / "job")] == [True, False, True]
    assert_json_loads_as_protobuf(tmp_path / "job", kind, tmp_path)  # one timeline in both


@pytest.mark.parametrize("kind", ["summary", "detail"])
def test_json_of_times_years_apart_loads_whole_to_the_us(kind, tmp_path):
    """A real trace_view.json alone whose first event says 1970 (one damaged time, or two captures
    in one file): the JSON cannot hold its times to the ns, so it holds them to the µs, with a
    note, and still Perfetto repairs nothing."""
    text = _sample(f"alone:{ALONE[0]}", tmp_path).read_text()
    first = re.search(r'"ts": ?"(\d+)\.', text)
    path = tmp_path / "far" / "trace_view.json"
    path.parent.mkdir()
    path.write_text(text[:first.start(1)] + "1" + text[first.end(1):])
    assert_json_loads_as_protobuf(path, kind, tmp_path)


def _listing(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def test_converting_every_sample_leaves_the_inputs_as_they_were(tmp_path):
    root = real_data(".")
    before = _listing(root)
    for sample in SAMPLES:
        for kind in ("summary", "detail"):
            convert(_sample(sample), tmp_path / "out.json", kind=kind, max_bytes=None)
    assert _listing(root) == before


_MEMORY_COUNTERS = """\
select t.name as name, max(c.value) as peak from counter c join counter_track t on c.track_id = t.id
  where t.name like 'Memory %' group by t.id;
"""


@pytest.mark.parametrize("sample", ["ascend-pt-2rank", "ascend-pt-db", "msprof-db", "kineto-1.8-resnet50"])
@pytest.mark.parametrize("name", ["out.pftrace", "out.json"])
def test_detail_traces_carry_the_memory_counters_of_every_component_with_the_peaks_of_memory(
        sample, name, tmp_path):
    """A detail trace holds one counter track per rank, component and kind (``Memory PTA
    [Allocated]``), in bytes, whose largest value is the peak ``trace2perfetto memory`` gives; it
    loads with nothing repaired or dropped."""
    from converters.analyses.memory import memory_report

    source = real_data(sample)
    out = tmp_path / name
    convert(source, out, kind="detail", max_bytes=None)
    problems, _ = imported(out, tmp_path)
    assert problems == []
    query = tmp_path / "memory.sql"
    query.write_text(_MEMORY_COUNTERS)
    done = subprocess.run([str(trace_processor()), "-q", str(query), str(out)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found: dict[str, list[float]] = {}
    for row in csv.DictReader(io.StringIO(done.stdout.strip())):
        found.setdefault(row["name"], []).append(float(row["peak"]))  # JSON and protobuf: the same name
    expected: dict[str, list[float]] = {}
    for row in memory_report(source):
        for kind, value in row.peaks.items():
            expected.setdefault(f"Memory {row.component} [{kind}]", []).append(value)
    assert set(found) == set(expected)
    for lane, peaks in expected.items():
        assert sorted(found[lane]) == pytest.approx(sorted(peaks), abs=1.0), lane  # bytes


_COUNTER_SERIES = """\
select t.name as name, count(*) as n, sum(c.value) as total from counter c
  join counter_track t on c.track_id = t.id group by t.name;
"""


@pytest.mark.parametrize("sample", ["ascend-pt-2rank", "kineto-1.8-resnet50"])
def test_json_counters_load_as_the_protobufs_series_a_time_of_a_name_one_event(sample, tmp_path):
    """Our JSON's counter series load as the .pftrace's: each lane by its own name, with its values;
    and the values of a rank's lanes of one name at one time are one C event, as torch_npu writes a
    bandwidth's value and accelerator (the trace processor's cost is per event, not per value)."""
    source = real_data(sample)
    series = {}
    for name in ("out.pftrace", "out.json"):
        out = tmp_path / name
        convert(source, out, kind="detail", max_bytes=None)
        query = tmp_path / "series.sql"
        query.write_text(_COUNTER_SERIES)
        done = subprocess.run([str(trace_processor()), "-q", str(query), str(out)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-2000:]
        series[name] = {row["name"]: (int(row["n"]), float(row["total"]))
                        for row in csv.DictReader(io.StringIO(done.stdout.strip()))}
    assert series["out.json"].keys() == series["out.pftrace"].keys() and series["out.json"]
    for lane, (count, total) in series["out.pftrace"].items():
        assert series["out.json"][lane] == (count, pytest.approx(total)), lane
    events = [e for e in json.loads((tmp_path / "out.json").read_bytes()) if e["ph"] == "C"]
    assert sum(len(e["args"]) for e in events) == sum(n for n, _ in series["out.json"].values())
    if sample == "ascend-pt-2rank":  # trace_view.json's own counters (the memory files' are ours apart)
        theirs = [e for f in source.rglob("trace_view.json") for e in json.loads(f.read_bytes())
                  if e.get("ph") == "C"]
        ours = [e for e in events if not e["name"].startswith(("Memory ", "Module memory/"))]
        assert len(ours) == len(theirs) < sum(len(e["args"]) for e in ours)
