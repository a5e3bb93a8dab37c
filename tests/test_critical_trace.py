"""``convert --critical-path`` (issue 27): each step's critical path drawn above the ranks, in both
writers; the trace processor imports it with nothing repaired, holding exactly the segments
``critical`` finds (names, ts and dur to the ns) and an arrow wherever the path changes rank."""

from __future__ import annotations

import csv
import io
import json
import subprocess
from pathlib import Path

import orjson
import pytest
from conftest import real_data
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb
from test_trace_processor import imported, trace_processor
from trace_check import read_chrome_json, read_perfetto

from converters import convert
from converters.analyses.critical import StepPath, critical_report
from converters.budget import MARKER_RESERVE
from converters.cli import main
from converters.errors import UsageError
from converters.model import step_label
from converters.path_drawing import GROUP, LANE, TITLE
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.mindspore1x_gen import write_mindspore1x_profile

WRITERS = ("out.pftrace", "out.json")

_PATH = """\
create perfetto table path as
  select s.id, s.ts, s.dur, s.depth, hex(s.name) as name,
         coalesce(extract_arg(s.arg_set_id, 'debug.kind'), extract_arg(s.arg_set_id, 'args.kind')) as kind,
         coalesce(extract_arg(s.arg_set_id, 'debug.rank'), extract_arg(s.arg_set_id, 'args.rank')) as rank
  from slice s left join thread_track tt on s.track_id = tt.id left join thread t using (utid)
  left join process_track pt on s.track_id = pt.id join process p on p.upid = coalesce(t.upid, pt.upid)
  where p.name = '{title}';
select ts, dur, depth, name, kind, rank from path order by ts, depth;
select a.ts as out_ts, b.ts as in_ts,
  (f.slice_out in (select id from path)) + (f.slice_in in (select id from path)) as ends_on_path
  from flow f join slice a on f.slice_out = a.id join slice b on f.slice_in = b.id
  where f.slice_out in (select id from path) or f.slice_in in (select id from path) order by a.ts;
"""


def _drawn(trace: Path, tmp_path: Path) -> tuple[list[tuple], list[tuple[int, int]]]:
    """The path's slices as the trace processor imported them, (ts, dur, depth, name, kind, rank) in
    time order (parents first), and its arrows (ts of their start slice, of their end slice)."""
    query = tmp_path / "path.sql"
    query.write_text(_PATH.format(title=TITLE))
    done = subprocess.run([str(trace_processor()), "-q", str(query), str(trace)], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    slices_text, flows_text = done.stdout.strip().split("\n\n")
    slices = [(int(ts), int(dur), int(depth), bytes.fromhex(name).decode(), _or_none(kind),
               None if _or_none(rank) is None else int(rank))
              for ts, dur, depth, name, kind, rank in list(csv.reader(io.StringIO(slices_text)))[1:]]
    flows = []
    for out_ts, in_ts, ends in list(csv.reader(io.StringIO(flows_text)))[1:]:
        assert ends == "2", "an arrow with one end on the path"
        flows.append((int(out_ts), int(in_ts)))
    return slices, flows


def _or_none(cell: str) -> str | None:
    """A cell of the shell's CSV, None where it printed SQL's NULL."""
    return None if cell in ("", "[NULL]") else cell


def _pairs(found: StepPath) -> list[tuple]:
    """Each segment of the path with the next."""
    return list(zip(found.path, found.path[1:], strict=False))


def _expected(paths: list[StepPath], offset: int) -> tuple[list[tuple], list[tuple[int, int]]]:
    """What ``_drawn`` must give for ``paths``, its times moved by ``offset`` ns (a JSON trace counts
    from an origin of its own)."""
    slices, flows = [], []
    for found in paths:
        name = TITLE if found.step is None else step_label(found.graph, found.step)
        slices.append((found.start_ns + offset, found.step_ns, 0, name, None, None))
        slices += [(s.start_ns + offset, s.dur_ns, 1, s.name, s.kind, s.rank) for s in found.path]
        flows += [(a.start_ns + offset, b.start_ns + offset) for a, b in _pairs(found) if a.rank != b.rank]
    return slices, sorted(flows)


def assert_draws(source: Path, tmp_path: Path, paths: list[StepPath], **options) -> dict[str, tuple]:
    """Both writers' ``--critical-path`` traces of ``source`` load with nothing repaired and hold
    exactly ``paths`` (the JSON to the ns from its origin); the project's checker reads both whole.
    Returns the slices and arrows drawn, per writer."""
    assert paths and all(found.path for found in paths)
    drawn = {}
    for name in WRITERS:
        out = tmp_path / name
        result = convert(source, out, kind="detail", critical_path=True, max_bytes=None, **options)
        problems, (slices, _, flows) = imported(out, tmp_path)
        assert problems == [], f"{name}: the trace processor had to repair {problems}"
        decoded = (read_perfetto if name.endswith(".pftrace") else read_chrome_json)(out.read_bytes())
        assert decoded.processes[0] == TITLE and (slices, flows) == (len(decoded.slices), decoded.flows)
        assert result.slices == len(decoded.slices)
        mine, arrows = _drawn(out, tmp_path)
        offset = mine[0][0] - min(found.start_ns for found in paths) if name.endswith(".json") else 0
        slices, flows = _expected(paths, offset)
        assert (sorted(mine), sorted(arrows)) == (sorted(slices), flows), name
        drawn[name] = (mine, arrows)
    return drawn


# -- a generated job with a slow rank -------------------------------------------------------------

@pytest.fixture(scope="module")
def slow_job(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("critical_trace") / "job"
    write_ascend_pt_profile(root, ranks=4, steps=2, tasks_per_step=30, slow_rank=2, slow_ns=2_000_000, seed=3)
    return root


def test_the_path_of_a_slow_rank_is_drawn_whole_in_both_writers(slow_job, tmp_path):
    paths = list(critical_report(slow_job))
    assert len(paths) == 2
    _, arrows = assert_draws(slow_job, tmp_path, paths)["out.pftrace"]
    assert any(s.rank == 2 for found in paths for s in found.path) and arrows  # through the slow rank


def test_after_aligning_the_hosts_the_path_drawn_is_the_aligned_one_and_aligned_once(tmp_path):
    root = tmp_path / "job"
    write_ascend_pt_profile(root, ranks=4, steps=2, tasks_per_step=20, ranks_per_host=2,
                            host_offsets_ns=[0, 700_000], slow_rank=3, slow_ns=1_000_000, seed=4)
    paths = list(critical_report(root, align="collectives"))
    assert paths != list(critical_report(root))
    assert_draws(root, tmp_path, paths, align="collectives")
    header = pb.Trace.FromString((tmp_path / "out.pftrace").read_bytes())
    described = [p.track_descriptor.description for p in header.packet
                 if p.track_descriptor.HasField("process")]
    assert [text.count("aligned by collectives") for text in described if "profile" in text] == [1] * 4


def test_ranks_on_clocks_of_their_own_have_no_path_unless_aligned(tmp_path):
    root = tmp_path / "job"
    write_mindspore1x_profile(root, ranks=2, steps=2, ops_per_step=40, seed=3)
    (root / "profiler/host_start.log.1").unlink()  # rank 1: device SysCnt, not wall time
    result = convert(root, tmp_path / "out.json", kind="detail", critical_path=True)
    assert any("--critical-path: nothing drawn, rank 1 shares no clock" in w for w in result.warnings)
    assert TITLE not in read_chrome_json((tmp_path / "out.json").read_bytes()).processes
    assert_draws(root, tmp_path, list(critical_report(root, align="collectives")), align="collectives")


def test_the_protobuf_declares_the_path_s_process_above_the_ranks_with_its_arrows(slow_job, tmp_path):
    out = tmp_path / "out.pftrace"
    convert(slow_job, out, kind="detail", critical_path=True, max_bytes=None)
    trace = pb.Trace.FromString(out.read_bytes())
    tracks = {p.track_descriptor.uuid: p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor")}
    process = next(d for d in tracks.values() if d.process.process_name == TITLE)
    assert process.sibling_order_rank == -1 and process.process.pid == 5  # past ranks 0-3 (pids 1-4)
    group = next(d for d in tracks.values() if d.name == GROUP and d.parent_uuid == process.uuid)
    lane = next(d for d in tracks.values() if d.name == LANE and d.parent_uuid == group.uuid)
    events = [p.track_event for p in trace.packet
              if p.HasField("track_event") and p.track_event.track_uuid == lane.uuid]
    begins = [e for e in events if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN]
    paths = list(critical_report(slow_job))
    assert len(begins) == sum(1 + len(found.path) for found in paths)
    assert len(events) == 2 * len(begins)
    changes = sum(a.rank != b.rank for found in paths for a, b in _pairs(found))
    started = [f for e in begins for f in e.flow_ids]
    assert len(started) == changes == len({f for e in begins for f in e.terminating_flow_ids} & set(started))


def test_the_json_holds_the_same_path_as_orjson_reads_it(slow_job, tmp_path):
    out = tmp_path / "out.json"
    convert(slow_job, out, kind="detail", critical_path=True, max_bytes=None)
    events = orjson.loads(out.read_bytes())
    pid = next(e["pid"] for e in events if e["ph"] == "M" and e["name"] == "process_name"
               and e["args"]["name"] == TITLE)
    assert {"ph": "M", "name": "process_sort_index", "pid": pid, "args": {"sort_index": -1}} in events
    mine = [e for e in events if e.get("pid") == pid and e["ph"] == "X"]
    paths = list(critical_report(slow_job))
    steps = [e for e in mine if e["name"].startswith("Step ")]
    segments = [e for e in mine if not e["name"].startswith("Step ")]
    assert [e["name"] for e in steps] == [step_label(p.graph, p.step) for p in paths]
    assert [(e["name"], e["args"]["kind"], e["args"]["rank"], round(e["dur"] * 1000)) for e in segments] == [
        (s.name, s.kind, s.rank, s.dur_ns) for p in paths for s in p.path]
    origin = paths[0].start_ns - round(steps[0]["ts"] * 1000)
    assert [round(e["ts"] * 1000) + origin for e in segments] == [s.start_ns for p in paths for s in p.path]
    assert "what-if 1" in steps[0]["args"] and steps[0]["args"]["what-if 1"].startswith("rank 2 arrives")
    flows = [e for e in events if e.get("pid") == pid and e["ph"] in "sf"]
    starts = {e["id"] for e in flows if e["ph"] == "s"}
    assert starts == {e["id"] for e in flows if e["ph"] == "f"} and len(starts) == len(flows) // 2 > 0


def test_the_size_cap_keeps_or_leaves_out_a_step_s_path_with_its_detail(slow_job, tmp_path):
    paths = list(critical_report(slow_job))
    whole = tmp_path / "whole.pftrace"
    convert(slow_job, whole, kind="detail", critical_path=True, max_bytes=None)
    out = tmp_path / "out.pftrace"
    result = convert(slow_job, out, kind="detail", critical_path=True, max_bytes=whole.stat().st_size - 1)
    assert result.cut is not None and result.cut.startswith(f"detail for step {paths[0].step} of 2")
    problems, _ = imported(out, tmp_path)
    assert problems == []
    mine, arrows = _drawn(out, tmp_path)
    assert (mine, sorted(arrows)) == _expected(paths[:1], 0)
    summary = tmp_path / "summary.pftrace"
    convert(slow_job, summary, max_bytes=None)
    result = convert(slow_job, out, kind="detail", critical_path=True,
                     max_bytes=summary.stat().st_size + MARKER_RESERVE + 2000)
    assert result.cut is not None and result.cut.startswith("detail for no steps of 2")
    assert imported(out, tmp_path)[0] == []
    assert _drawn(out, tmp_path) == ([], [])


def test_the_path_needs_detail(slow_job, tmp_path):
    with pytest.raises(UsageError, match="--kind detail"):
        convert(slow_job, tmp_path / "out.pftrace", critical_path=True)
    assert main([str(slow_job), "--critical-path", "-o", str(tmp_path / "out.pftrace"), "-q"]) == 2
    assert not (tmp_path / "out.pftrace").exists()


def test_help_teaches_the_option(capsys):
    assert main(["convert", "--help"]) == 0
    assert "--critical-path" in capsys.readouterr().out


# -- the real 2-rank torch_npu sample -------------------------------------------------------------

def test_real_the_path_is_drawn_whole_in_both_writers(tmp_path):
    source = real_data("ascend-pt-2rank")
    paths = list(critical_report(source))
    drawn = assert_draws(source, tmp_path, paths)
    assert drawn["out.pftrace"] != drawn["out.json"]  # absolute in one, from an origin in the other
    assert drawn["out.pftrace"][1]  # the path changes rank
    # a compute segment is a device task of its rank, drawn there at the same time
    segment = next(s for s in paths[0].path if s.kind == "compute")
    ranks = read_perfetto((tmp_path / "out.pftrace").read_bytes())
    assert any(r.name == segment.name and r.start_ns == segment.start_ns and r.process.startswith(
        f"Rank {segment.rank} ") for r in ranks.slices)


def test_steps_that_overlap_go_on_lanes_of_their_own():
    """kineto-gloo-2rank's step 2 on rank 0 ends after step 3 begins on rank 1: the lanes, checked on
    such spans."""
    from converters.path_drawing import _Lanes

    lanes = _Lanes()
    assert [lanes.place(*span) for span in ((0, 10), (8, 20), (20, 30), (9, 12))] == [0, 1, 0, 2]


@pytest.mark.parametrize("sample", ["kineto-gloo-2rank", "paddle-cpu-chrome"])
def test_real_a_cpu_only_job_s_path_is_drawn_whole(sample, tmp_path):
    """No device work: the path runs through the host operators (before, nothing was drawn);
    kineto-gloo-2rank's steps overlap across ranks, so they go on lanes of their own."""
    source = real_data(sample)
    paths = list(critical_report(source))
    assert paths and all(found.host_work for found in paths)
    assert_draws(source, tmp_path, paths)


def test_real_cli_end_to_end_draws_what_critical_prints(tmp_path, capsys):
    source = real_data("ascend-pt-2rank")
    out = tmp_path / "job.json"
    assert main([str(source), "--kind", "detail", "--critical-path", "-o", str(out), "-q"]) == 0
    assert main(["critical", str(source), "--format", "json", "-q"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert imported(out, tmp_path)[0] == []
    mine, arrows = _drawn(out, tmp_path)
    segments = [row for row in mine if row[2] == 1]
    path = [s for step in printed for s in step["path"]]
    assert len(segments) == len(path) and len(mine) == len(path) + len(printed)
    assert [(name, kind, rank) for _, _, _, name, kind, rank in segments] == [
        (s["name"], s["kind"], s["rank"]) for s in path]
    assert all(abs(dur - s["dur_us"] * 1000) < 1 for (_, dur, *_), s in zip(segments, path, strict=True))
    # JSON's µs past the epoch are doubles (a quarter µs apart there): the starts, from the first
    first = segments[0][0]
    assert all(abs(ts - first - (s["start_us"] - path[0]["start_us"]) * 1000) <= 250
               for (ts, *_), s in zip(segments, path, strict=True))
    assert len(arrows) == sum(a["rank"] != b["rank"] for a, b in zip(path, path[1:], strict=False)) > 0
