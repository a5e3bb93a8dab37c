"""The host_info reader against generated MindSpore host_info files (no real sample exists)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import orjson
import pytest
from trace_check import read_chrome_json, read_perfetto

from converters import Diagnostics, Kind, Options, discover, read_profile
from converters.cli import main
from fixtures.host_info_gen import write_host_info
from fixtures.msprof_gen import write_msprof_profile


def _convert(profile: Path, out: Path, *args: str, expect: int = 0):
    assert main([str(profile), "--kind", "detail", "-o", str(out), *args]) == expect
    data = out.read_bytes()
    return read_perfetto(data) if out.suffix == ".pftrace" else read_chrome_json(data)


def _expected(truth, level: int = 0) -> Counter:
    """(lane, name, start, dur) of every stage, unfinished ones ending at the last time stamp."""
    return Counter(
        (f"Thread {s.tid}", "::".join(p for p in (s.module, s.event, s.stage) if p), s.start_ns,
         (s.end_ns if s.end_ns is not None else truth.last_ns) - s.start_ns)
        for s in truth.slices if s.level >= level
    )


def _host_slices(trace) -> Counter:
    return Counter((s.track[-1], s.name, s.start_ns, s.dur_ns) for s in trace.slices + trace.instants
                   if s.track[0] == "Host")


@pytest.mark.parametrize("suffix", [".pftrace", ".json"])
def test_stages_pair_into_nested_slices_per_thread(out_dir, tmp_path, suffix, capsys):
    truth = write_host_info(tmp_path, rank=0, steps=4, threads=4, unfinished=2)
    trace = _convert(tmp_path, out_dir / f"out{suffix}")
    mine = _host_slices(trace)
    if suffix == ".json":  # relative to the origin: shift by the first stage
        shift = min(s.start_ns for s in truth.slices) - min(start for _, _, start, _ in mine)
        mine = Counter({(lane, name, start + shift, dur): n for (lane, name, start, dur), n in mine.items()})
    assert mine == _expected(truth)
    assert {lane for lane, *_ in mine} == {f"Thread {tid}" for tid in truth.threads if tid in
                                          {s.tid for s in truth.slices}}
    err = capsys.readouterr().err
    assert re.search(r"host_info_0\.csv: 2 host stages start and never end", err)


def test_unfinished_marked_and_custom_info_and_level_in_args(out_dir, tmp_path):
    truth = write_host_info(tmp_path, steps=2, threads=3, unfinished=1)
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    open_stage = truth.unfinished[0]
    found = [s for s in trace.slices if s.start_ns == open_stage.start_ns
             and s.track[-1] == f"Thread {open_stage.tid}" and s.args.get("unfinished")]
    assert len(found) == 1 and found[0].start_ns + found[0].dur_ns == truth.last_ns
    with_info = next(s for s in truth.slices if "," in s.custom_info and s.end_ns is not None)
    name = "::".join(p for p in (with_info.module, with_info.event, with_info.stage) if p)
    mine = next(s for s in trace.slices if s.start_ns == with_info.start_ns and s.name == name)
    for key, value in re.findall(r"\{([^{}:]*):([^{}]*)\}", with_info.custom_info):
        assert mine.args[key] == value
    assert mine.args["level"] == with_info.level


def test_memory_becomes_a_bytes_counter_in_the_host_group(out_dir, tmp_path):
    truth = write_host_info(tmp_path, steps=3, mode="all")
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    counters = [(ts, value) for _, track, ts, value in trace.counters if track == ("Host", "Host memory")]
    assert sorted(counters) == sorted(truth.memory) and counters


def test_host_level_1_keeps_the_users_stages_only(out_dir, tmp_path):
    truth = write_host_info(tmp_path, steps=3)
    trace = _convert(tmp_path, out_dir / "out.pftrace", "--host-level", "1")
    assert _host_slices(trace) == _expected(truth, level=1)
    assert 0 < len(_expected(truth, level=1)) < len(_expected(truth))


def test_host_memory_naming_reads_the_same(out_dir, tmp_path):
    truth = write_host_info(tmp_path, steps=2, naming="host_memory", timeline=False)
    assert _host_slices(_convert(tmp_path, out_dir / "out.pftrace")) == _expected(truth)


def test_timeline_alone_gives_the_finished_stages(out_dir, tmp_path):
    truth = write_host_info(tmp_path, steps=2, unfinished=0)
    truth.csv_path.unlink()
    mine = Counter((lane, start, dur) for lane, _, start, dur in _host_slices(
        _convert(tmp_path, out_dir / "out.pftrace")))
    assert mine == Counter((lane, start, dur) for lane, _, start, dur in _expected(truth))


def test_memory_only_files_say_their_samples_cannot_be_drawn(out_dir, tmp_path, capsys):
    truth = write_host_info(tmp_path, steps=2, mode="memory")
    assert truth.memory_only_rows > 0
    _convert(tmp_path, out_dir / "out.pftrace")
    err = capsys.readouterr().err
    assert f"{truth.memory_only_rows} memory samples have no time stamp" in err
    assert "nothing to draw in detail from rank 0" in err  # an empty trace is never silent ...
    strict = out_dir / "strict.pftrace"  # ... nor passes --strict
    assert main([str(tmp_path), "--kind", "detail", "-o", str(strict), "--strict"]) == 1
    assert not strict.exists()


def test_host_info_joins_the_device_rank_of_the_same_id(out_dir, tmp_path):
    profile = write_msprof_profile(tmp_path, ranks=2, steps=3, tasks_per_step=10)
    ranks = discover(tmp_path)
    steps = [b.step for b in read_profile(ranks, Options(), Diagnostics()) if b.rank == 1]
    first = steps[0].start_ns
    truth = write_host_info(tmp_path, rank=1, start_ns=first - 200_000_000, steps=6, step_ns=100_000_000)
    ranks = discover(tmp_path)
    assert [r.format for r in ranks] == ["msprof", "msprof"] and ranks[1].host_paths == (truth.csv_path,)
    assert not ranks[0].host_paths
    batches = list(read_profile(ranks, Options(kind=Kind.DETAIL), Diagnostics()))
    host = [(b, s) for b in batches for s in b.slices if s.rank == 1 and s.layer.value == "Host"
            and s.lane.startswith("Thread")]
    assert Counter((s.lane, s.name, s.start_ns, s.dur_ns) for _, s in host) == _expected(truth)
    for batch, s in host:  # each stage is filed with the step it starts in, or the last/first one
        if batch.step is not None and batch.step is not steps[0] and batch.step_id != steps[-1].step:
            assert batch.step.start_ns <= s.start_ns < batch.step.end_ns or s.start_ns < batch.step.end_ns
    assert any(b.step is None for b in batches if b.rank == 1)  # what follows the last step
    summary = list(read_profile(ranks, Options(kind=Kind.SUMMARY), Diagnostics()))
    assert not any(s.layer.value == "Host" and s.lane.startswith("Thread") for b in summary for s in b.slices)
    trace = _convert(tmp_path, out_dir / "out.pftrace", "--max-size", "0")
    process = next(p for p in trace.processes if p.startswith("Rank 1"))
    assert any(s.process == process and s.track[0] == "Host" for s in trace.slices)
    assert profile.ranks


def test_a_timeline_begin_without_end_is_drawn_unfinished(out_dir, tmp_path, capsys):
    folder = tmp_path / "host_info"
    folder.mkdir()
    events = [{"ph": "B", "pid": 1, "tid": 7, "ts": 1_692_340_000_000_000.5, "name": "RunGraph"},
              {"ph": "X", "pid": 1, "tid": 7, "ts": 1_692_340_000_000_010, "dur": 5.25, "name": "Launch"},
              {"ph": "B", "pid": 1, "tid": 7, "ts": 1_692_340_000_000_020, "name": "Wait"},
              {"ph": "E", "pid": 1, "tid": 7, "ts": 1_692_340_000_000_030}]
    (folder / "timeline_3.json").write_bytes(orjson.dumps(events))
    trace = _convert(tmp_path, out_dir / "out.pftrace")
    base = 1_692_340_000_000_000_000
    mine = sorted((s.name, s.start_ns - base, s.dur_ns, bool(s.args.get("unfinished")))
                  for s in trace.slices if s.track[0] == "Host")
    assert mine == [("Launch", 10_000, 5_250, False), ("RunGraph", 500, 29_500, True),
                    ("Wait", 20_000, 10_000, False)]
    assert trace.processes == ["Rank 3"]
    assert "1 host stages begin and never end" in capsys.readouterr().err


def test_memory_track_says_bytes_to_perfetto_and_summary_leaves_host_out(out_dir, tmp_path):
    from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

    write_host_info(tmp_path, steps=2)
    out = out_dir / "out.pftrace"
    _convert(tmp_path, out)
    trace = pb.Trace()
    trace.ParseFromString(out.read_bytes())
    memory = [p.track_descriptor for p in trace.packet
              if p.HasField("track_descriptor") and p.track_descriptor.name == "Host memory"]
    assert memory and all(d.counter.unit == pb.CounterDescriptor.UNIT_SIZE_BYTES for d in memory)
    summary = out_dir / "summary.pftrace"
    assert main([str(tmp_path), "-o", str(summary)]) == 0
    decoded = read_perfetto(summary.read_bytes())
    assert not decoded.slices and not decoded.counters and decoded.processes == ["Rank 0"]
