"""Collectives across ranks on a generated job whose truth is known: a slow rank, two hosts whose
clocks differ by 1.5 ms, and every collective's true arrival per rank."""

from __future__ import annotations

import csv
import io
import re
import subprocess
from collections import defaultdict

import pytest
from test_trace_processor import imported, trace_processor
from trace_check import read_chrome_json, read_perfetto

from converters import convert
from converters.analyses.comm import comm_report
from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile
from fixtures.mindspore1x_gen import write_mindspore1x_profile

OFFSETS = [0, 1_500_123, -2_000_777]  # ns, per host; the reference host is the lowest rank's


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    root = tmp_path_factory.mktemp("slowjob")
    truth = write_ascend_pt_profile(root, ranks=6, steps=3, tasks_per_step=30, ranks_per_host=2,
                                    host_offsets_ns=OFFSETS, slow_rank=3, slow_ns=2_000_000, seed=7)
    assert truth.collectives and {c.last_rank for c in truth.collectives} == {3}
    return root, truth


def _by_instance(ops) -> dict[tuple[int, str], dict[int, object]]:
    found: dict[tuple[int, str], dict[int, object]] = defaultdict(dict)
    for op in ops:
        found[op.step, op.name][op.rank] = op
    return found


def test_the_estimated_clock_offsets_are_the_hosts_true_ones(job):
    root, truth = job
    report = comm_report(root)
    estimated = {c.host: c.offset_ns for c in report.clocks}
    assert set(estimated) == {"node0", "node1", "node2"}
    for host, offset in truth.host_offsets_ns.items():
        assert estimated[host] == pytest.approx(offset - truth.host_offsets_ns["node0"], abs=2000), host
    assert [c.ranks for c in report.clocks] == [(0, 1), (2, 3), (4, 5)]


def test_on_aligned_clocks_every_skew_last_rank_and_wait_is_the_true_one(job):
    root, truth = job
    report = comm_report(root, align="collectives")
    ours = _by_instance(report.ops)
    for c in truth.collectives:
        mine = ours[c.step, c.name]
        assert set(mine) == set(c.starts_ns)
        for rank, op in mine.items():
            assert op.skew_ns == pytest.approx(c.skew_ns, abs=1000), (c.name, rank)
            assert op.last_rank == c.last_rank
            assert op.wait_for_last_ns == pytest.approx(c.wait_ns[rank], abs=1000)


def test_unaligned_the_clock_offset_shows_in_the_skews(job):
    """The check above can fail: on the recorded clocks, skews carry the hosts' offsets."""
    root, truth = job
    ours = _by_instance(comm_report(root).ops)
    worst = max(abs(op.skew_ns - c.skew_ns)
                for c in truth.collectives for op in ours[c.step, c.name].values())
    assert worst > 1_000_000


def test_slow_ranks_puts_the_slow_rank_first(job, capsys):
    root, truth = job
    assert main(["comm", str(root), "--slow-ranks", "--align", "collectives", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert rows[0]["Rank"] == "3" and rows[0]["Host"] == "node1"
    assert int(rows[0]["Last Arrivals"]) == len(truth.collectives)
    caused = sum(sum(c.wait_ns.values()) for c in truth.collectives) / 1e6
    assert float(rows[0]["Wait Caused(ms)"]) == pytest.approx(caused, abs=0.001 * len(truth.collectives))
    assert all(float(r["Wait Caused(ms)"]) == 0 for r in rows[1:])


def _op_ends(decoded) -> dict[str, dict[str, int]]:
    """Each collective's end per rank (process), as written: the k-th op of a name on each rank."""
    by_name: dict[tuple[str, str], list[int]] = defaultdict(list)
    for s in decoded.slices:
        if s.name.startswith("hcom_allReduce") and s.track[-1].startswith("Group"):
            by_name[s.name, s.process].append(s.start_ns + s.dur_ns)
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for (name, process), times in by_name.items():
        for k, end in enumerate(sorted(times)):
            out[f"{name}#{k}"][process] = end
    return out


@pytest.mark.parametrize("name", ["aligned.pftrace", "aligned.json"])
def test_align_collectives_brings_every_collectives_ends_within_2us(job, tmp_path, name):
    root, truth = job
    out = tmp_path / name
    result = convert(root, out, kind="detail", max_bytes=None, align="collectives")
    decoded = (read_perfetto if name.endswith(".pftrace") else read_chrome_json)(out.read_bytes())
    ends = _op_ends(decoded)
    assert len(ends) == len(truth.collectives)
    for instance, per_rank in ends.items():
        assert len(per_rank) == 6 and max(per_rank.values()) - min(per_rank.values()) <= 2000, instance
    assert not result.warnings or all("align" not in w for w in result.warnings)
    unaligned = tmp_path / f"raw{out.suffix}"
    convert(root, unaligned, kind="detail", max_bytes=None)
    raw = _op_ends((read_perfetto if name.endswith(".pftrace") else read_chrome_json)(unaligned.read_bytes()))
    assert max(max(v.values()) - min(v.values()) for v in raw.values()) > 1_000_000


def test_the_trace_says_it_was_aligned_and_by_how_much(job, tmp_path):
    root, _ = job
    out = tmp_path / "a.json"
    convert(root, out, kind="summary", align="collectives")
    said = [float(x) for x in re.findall(r"aligned by collectives: ([-+][0-9.]+) µs", out.read_text())]
    assert said == pytest.approx([0, 0, -1500.123, -1500.123, 2000.777, 2000.777], abs=2)


@pytest.mark.parametrize("name", ["x.pftrace", "x.json"])
def test_both_writers_carry_an_arrow_from_each_waiting_rank_to_the_last(job, tmp_path, name):
    root, truth = job
    out = tmp_path / name
    convert(root, out, kind="detail", max_bytes=None, align="collectives")
    problems, _ = imported(out, tmp_path)
    assert problems == []
    query = tmp_path / "flows.sql"
    query.write_text(
        "select so.name as op, a.display_value as last_rank from flow f "
        "join slice so on so.id = f.slice_out join slice si on si.id = f.slice_in "
        "join args a on a.arg_set_id = si.arg_set_id and a.key in ('debug.last rank', 'args.last rank') "
        "where so.name like 'hcom_allReduce%' and si.name = so.name;\n")
    done = subprocess.run([str(trace_processor()), "-q", str(query), str(out)], capture_output=True,
                          text=True, timeout=120)
    rows = list(csv.DictReader(io.StringIO(done.stdout.strip())))
    waiting = sum(sum(1 for wait in c.wait_ns.values() if wait) for c in truth.collectives)
    assert len(rows) == waiting > 0
    assert {r["last_rank"] for r in rows} == {"3"}


def test_the_summary_has_a_wait_lane_on_every_rank_that_waited(job, tmp_path):
    root, truth = job
    out = tmp_path / "s.pftrace"
    convert(root, out, kind="summary", align="collectives")
    waits = [s for s in read_perfetto(out.read_bytes()).slices if s.track == ("Overlap Analysis", "Wait")]
    assert {s.name for s in waits} == {"Wait for rank 3"}
    expected = sum(w for c in truth.collectives for w in c.wait_ns.values())
    assert sum(s.dur_ns for s in waits) == pytest.approx(expected, abs=1000 * len(waits))


def test_align_gives_mindspore_1x_ranks_without_host_start_one_timebase(tmp_path):
    """Each legacy rank counts from its own device's boot (hours apart): aligned by their
    collectives, the JSON output draws them on one timeline, collective ends within 2 µs."""
    root = tmp_path / "legacy"
    write_mindspore1x_profile(root, ranks=2, steps=3, comm_ops=2, host_start=False, seed=3)
    _, other = comm_report(root).clocks
    assert abs(other.offset_ns) > 10**9 and other.instances == 6
    for aligned in (False, True):
        out = tmp_path / f"{aligned}.json"
        result = convert(root, out, kind="summary", align="collectives" if aligned else None)
        lane = ("Overlap Analysis", "Communication")
        ops = [s for s in read_chrome_json(out.read_bytes()).slices if s.track == lane]
        ends = defaultdict(list)
        for s in ops:
            ends[s.process].append(s.start_ns + s.dur_ns)
        firsts, seconds = (sorted(v) for v in ends.values())
        spread = max(abs(a - b) for a, b in zip(firsts, seconds, strict=True))
        assert (spread <= 2000) == aligned, spread
        said = "rank 1: on a clock of its own, put on the other ranks' by the ends of their collectives"
        assert any(said in w for w in result.warnings) == aligned
        assert any("no wait between it and the other ranks is drawn" in w for w in result.warnings) != aligned


@pytest.fixture(scope="module")
def legacy_pipeline(tmp_path_factory):
    """MindSpore 1.x, 4 ranks in 2 pipeline stages: each stage's Send and Receive on stream 11 (the
    same stream number on every rank) with the same names within a stage, receives posted early."""
    root = tmp_path_factory.mktemp("legacy-pp")
    return root, write_mindspore1x_profile(root, ranks=4, steps=3, comm_ops=1, pp=2, seed=11)


def _legacy_collectives(truth) -> dict[tuple[int, str], dict[int, int]]:
    """Each true collective (step, column) -> its starts per rank in epoch ns; Send and Receive
    are pairs of ranks, no collective, and left out."""
    starts: dict[tuple[int, str], dict[int, int]] = defaultdict(dict)
    for rank in truth.ranks:
        for step, column, start, _ in rank.comm_op_bounds_ns:
            if not re.search(r"_(Send|Receive)-op\d+$", column):
                starts[step, column][rank.rank] = start + rank.epoch_offset_ns
    return starts


def test_send_and_receive_are_never_matched_as_collectives(legacy_pipeline):
    root, truth = legacy_pipeline
    report = comm_report(root)
    p2p = [op for op in report.ops if re.match(r"(Send|Receive)-op", op.name)]
    assert len(p2p) == 4 * 3 * 2 and {op.group for op in p2p} == {"Stream 11"}
    assert all(op.ranks == 1 and op.key is None and op.last_rank is None and op.wait_for_last_ns is None
               for op in p2p)
    collectives = _legacy_collectives(truth)
    assert report.instances == len(collectives) == 2 * 3  # one per stage and step
    for op in report.ops:
        if op not in p2p:
            starts = collectives[op.step, f"stream_24_0_{op.name}"]
            assert op.ranks == 2 and op.wait_for_last_ns == max(starts.values()) - starts[op.rank]


def test_slow_ranks_counts_only_the_collectives_waits(legacy_pipeline, capsys):
    root, truth = legacy_pipeline
    assert main(["comm", str(root), "--slow-ranks", "--format", "csv"]) == 0
    rows = {int(r["Rank"]): r for r in csv.DictReader(io.StringIO(capsys.readouterr().out))}
    suffered, caused = defaultdict(int), defaultdict(int)
    for starts in _legacy_collectives(truth).values():
        latest = max(starts.values())
        last = min(rank for rank, start in starts.items() if start == latest)
        for rank, start in starts.items():
            suffered[rank] += latest - start
            caused[last] += latest - start
    assert sorted(rows) == [0, 1, 2, 3]
    for rank, row in rows.items():
        assert float(row["Wait Suffered(ms)"]) == pytest.approx(suffered[rank] / 1e6, abs=1e-6), rank
        assert float(row["Wait Caused(ms)"]) == pytest.approx(caused[rank] / 1e6, abs=1e-6), rank
