"""The size cap: never exceeded, never silent, whole steps of detail, summary first."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from trace_check import read_chrome_json, read_perfetto

from converters import (
    Diagnostics,
    Layer,
    Options,
    UsageError,
    communication,
    convert,
    discover,
    pipeline,
    read_profile,
)
from converters.budget import parse_size
from converters.cli import main
from converters.pipeline import records_to_write
from converters.spool import UNWRITTEN
from converters.writers.chrome_json import Origins
from fixtures.msprof_gen import write_msprof_profile


@pytest.fixture(scope="module")
def profile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("capped")
    write_msprof_profile(root, ranks=3, graphs=(2,), steps=5, tasks_per_step=30, seed=11)
    return root


@pytest.fixture(scope="module")
def steps_in_order(profile):
    """Per step, in time order: (summary slices, detail slices) as (rank, name, start, dur)."""
    per_step: dict = {}
    options = Options(kind="detail")
    ops: dict[int, list] = {}
    for batch in read_profile(discover(profile), options, Diagnostics()):
        summary, detail = per_step.setdefault(batch.step_id, (set(), set()))
        for s in records_to_write(batch, options):
            (summary if s.layer.is_summary else detail).add((s.rank, s.name, s.start_ns, s.dur_ns))
        ops.setdefault(batch.rank, []).extend(communication.light_ops(
            batch.rank, batch.graph, batch.step_id, batch.key,
            (s for s in batch.slices if s.layer is Layer.COMM_OP)))
    communication.match(ops)  # the Wait lane, in the summary of each op's step
    for op in (op for mine in ops.values() for op in mine):
        for s in communication.wait_slices([op]):
            per_step[op.step][0].add((s.rank, s.name, s.start_ns, s.dur_ns))
    return [per_step[k] for k in sorted(per_step)]


def _read(path: Path, origin_ns: int):
    data = path.read_bytes()
    if ".json" in path.suffixes:
        decoded = read_chrome_json(data)
        shift = origin_ns
    else:
        decoded = read_perfetto(data)
        shift = 0
    groups_summary = {"Step Trace", "Overlap Analysis"}
    rows = {(s.track[0], (int(s.process.split()[1]), s.name, s.start_ns + shift, s.dur_ns))
            for s in decoded.slices}
    summary = {row for group, row in rows if group in groups_summary}
    detail = {row for group, row in rows if group not in groups_summary and group != "Trace cut"}
    return summary, detail, decoded


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@example(fraction=1.0, name="t.pftrace.gz")  # the last step fits, with gzip's trailer: once 1 byte over
@example(fraction=1.0, name="t.json")
@given(fraction=st.floats(0.02, 1.2), name=st.sampled_from(["t.pftrace", "t.json", "t.pftrace.gz",
                                                             "t.json.gz"]))
def test_cap_is_never_exceeded_and_keeps_whole_steps_summary_first(
    profile, steps_in_order, tmp_path_factory, fraction, name
):
    out = tmp_path_factory.mktemp("cap") / name
    full = convert(profile, out, kind="detail", max_bytes=None)
    cap = max(int(full.bytes_written * fraction), 6000)
    result = convert(profile, out, kind="detail", max_bytes=cap)
    assert out.stat().st_size == result.bytes_written <= cap
    origin = Origins.from_starts(discover(profile)).origin
    summary, detail, decoded = _read(out, origin)
    # whole ranks are left out first (in order of interest), then whole steps of what is left
    kept = set(result.ranks)
    assert len(decoded.processes) == len(kept) >= 1
    if len(kept) < 3:
        assert not detail and "ranks kept by interest" in result.cut and "left out: " in result.cut
    steps_kept = [tuple({row for row in part if row[0] in kept} for part in step) for step in steps_in_order]
    all_summary = set().union(*(s for s, _ in steps_kept))
    prefixes = [set().union(*(part[i] for part in steps_kept[:k])) for i in (0, 1)
                for k in range(len(steps_kept) + 1)]
    n = len(steps_kept) + 1
    summary_prefixes, detail_prefixes = prefixes[:n], prefixes[n:]
    if detail:
        assert summary == all_summary, "detail was written before the whole summary"
    assert summary in summary_prefixes, "summary is not whole leading steps"
    assert detail in detail_prefixes, "detail is not whole leading steps"
    complete = len(kept) == 3 and summary == all_summary and detail == detail_prefixes[-1]
    markers = [i for i in decoded.instants if "Trace cut" in i.track]
    assert (result.cut is None) == complete
    assert len(markers) == (0 if complete else 1)
    if not complete:
        assert "--max-size" in markers[0].name and "--ranks" in result.cut
        assert ("of 5" in result.cut and "--steps" in result.cut) or len(kept) < 3


def test_summary_only_cap_keeps_leading_summary_steps_of_the_ranks_asked_for(profile, tmp_path):
    out = tmp_path / "s.pftrace"
    full = convert(profile, out, kind="summary", max_bytes=None)
    result = convert(profile, out, kind="summary", max_bytes=full.bytes_written // 2, ranks=[0, 1, 2])
    pattern = r"summary for steps? 1(-\d)? of 5, all 3 ranks; to see the rest use --steps \d"
    assert re.match(pattern, result.cut)
    assert "--kind summary" not in result.cut


def test_a_summary_too_big_keeps_whole_ranks_by_interest(profile, tmp_path):
    """Without --ranks the cap leaves out whole ranks, never a rank's later steps: the rank that
    made the others wait longest first (computed here from the ops, independently)."""
    out = tmp_path / "s.pftrace"
    full = convert(profile, out, kind="summary", max_bytes=None)
    result = convert(profile, out, kind="summary", max_bytes=full.bytes_written // 2)
    ops: dict[int, list] = {}
    for batch in read_profile(discover(profile), Options(), Diagnostics()):
        ops.setdefault(batch.rank, []).extend(communication.light_ops(
            batch.rank, batch.graph, batch.step_id, batch.key,
            (s for s in batch.slices if s.layer is Layer.COMM_OP)))
    caused: dict[int, int] = {}
    for inst in communication.match(ops):
        caused[inst.last_rank] = caused.get(inst.last_rank, 0) + sum(map(inst.wait_ns, inst.starts))
    assert max(caused, key=caused.get) in result.ranks and len(result.ranks) < 3
    assert result.steps == 5  # every step of the ranks kept
    assert re.match(r"summary for all 5 steps, [12] of 3 ranks \(ranks kept by interest: most wait caused "
                    r"\d, slowest \d, fastest \d, median \d.*; left out: [12] ranks: [\d,-]+\)", result.cut)
    processes = read_perfetto(out.read_bytes()).processes
    assert [int(p.split()[1]) for p in processes] == sorted(result.ranks)


def test_warning_on_stderr_says_what_was_kept_and_how_to_see_the_rest(profile, tmp_path, capsys):
    out = tmp_path / "c.pftrace"
    assert main([str(profile), "--kind", "detail", "--max-size", "0", "-o", str(out)]) == 0
    full = out.stat().st_size
    assert "cut" not in capsys.readouterr().err
    assert main([str(profile), "--kind", "detail", "--max-size", f"{full * 2 // 3 // 1024}K",
                 "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "warning: the trace was cut to fit --max-size: kept detail for steps 1-" in err
    assert "of 5, all 3 ranks; summary for all steps" in err  # detail's cut: whole steps, never ranks
    assert "--steps" in err and "--kind summary" in err and "--max-size 0" in err


def test_cap_applies_to_stdout(profile, capfdbinary):
    assert main([str(profile), "--kind", "detail", "--max-size", "40K", "-o", "-"]) == 0
    written = capfdbinary.readouterr().out
    assert 0 < len(written) <= 40 * 1024
    read_perfetto(written)


def test_a_cap_below_the_header_is_a_usage_error(profile, tmp_path):
    with pytest.raises(UsageError, match="too small"):
        convert(profile, tmp_path / "x.pftrace", max_bytes=100)
    assert not (tmp_path / "x.pftrace").exists()


def test_default_cap_is_20_mib(profile, tmp_path):
    assert convert(profile, tmp_path / "d.pftrace").cut is None  # small profiles are whole
    from converters.budget import DEFAULT_MAX_BYTES

    assert DEFAULT_MAX_BYTES == parse_size("20M") == 20 * 2**20


@pytest.mark.parametrize("text,size", [("0", None), ("20M", 20 << 20), ("512K", 512 << 10),
                                       ("1G", 1 << 30), ("1.5M", 3 << 19), ("100", 100),
                                       ("64MiB", 64 << 20)])
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "M", "-1", "20X", "1e6"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError, match="--max-size"):
        parse_size(text)


def test_layer_split_is_summary_or_detail():
    assert {layer.is_summary for layer in Layer} == {True, False}


def _relabel(csv_path: Path, change) -> None:
    import csv
    import io

    text = csv_path.read_bytes().decode("utf-8")
    rows = list(csv.reader(io.StringIO(text, newline="")))
    column = rows[0].index("Step Id")
    for number, row in enumerate(rows[1:], start=1):
        if len(row) > column:
            row[column] = change(number, row[column], len(rows) - 1)
    out = io.StringIO(newline="")
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    csv_path.write_bytes(out.getvalue().encode("utf-8"))


@pytest.mark.parametrize("case", ["pseudo step in the middle", "ranks disagree on step order"])
def test_any_step_order_across_ranks_still_gives_a_valid_trace(tmp_path, case, capsys):
    import gzip

    from fixtures.ascend_pt_gen import write_ascend_pt_profile

    generated = write_ascend_pt_profile(tmp_path / "p", ranks=2, steps=2, seed=3, with_trace_view=False)
    assert main([str(tmp_path / "p"), "--kind", "detail", "-o", str(tmp_path / "before.pftrace")]) == 0
    tasks = _tasks(read_perfetto((tmp_path / "before.pftrace").read_bytes()))
    victim = generated.ranks[1].path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    if case == "pseudo step in the middle":
        _relabel(victim, lambda n, step, total: "" if n == total // 2 else step)
    else:
        _relabel(victim, lambda n, step, total: {"50": "51", "51": "50"}.get(step, step))
    capsys.readouterr()
    for name in ("t.pftrace", "t.json", "t.pftrace.gz"):
        out = tmp_path / name
        assert main([str(tmp_path / "p"), "--kind", "detail", "-o", str(out)]) == 0
        reader = read_chrome_json if ".json" in name else read_perfetto
        data = out.read_bytes()
        written = reader(gzip.decompress(data) if name.endswith(".gz") else data)
        assert _tasks(written) == tasks  # none left out
    assert "warning" not in capsys.readouterr().err


def _tasks(trace) -> Counter:
    """Device tasks and communication ops per rank: what a step's number cannot change."""
    return Counter((s.process.split()[1], s.track[0], s.name, s.dur_ns) for s in trace.slices
                   if s.track[0] in ("Ascend Hardware", "Communication"))


@pytest.mark.parametrize("name", ["t.pftrace", "t.json"])
@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.7])
def test_detail_past_the_cap_is_not_encoded_yet_the_trace_is_the_same(profile, tmp_path, monkeypatch, name,
                                                                       fraction):
    whole = tmp_path / f"whole{Path(name).suffix}"
    convert(profile, whole, kind="detail", max_bytes=None)
    cap = int(whole.stat().st_size * fraction)
    unwritten = []
    real_assemble = pipeline.assemble

    def assemble(sink, spool, *args):  # the chunks the cap was offered
        unwritten.append(sum(c.length == UNWRITTEN for c in spool.chunks))
        return real_assemble(sink, spool, *args)

    monkeypatch.setattr(pipeline, "assemble", assemble)
    skipping = tmp_path / f"skipping-{name}"
    convert(profile, skipping, kind="detail", max_bytes=cap)
    real_encode = pipeline.encode_ranks
    monkeypatch.setattr(pipeline, "encode_ranks", lambda *args: real_encode(*args[:-1], None))
    encoding_all = tmp_path / f"all-{name}"
    convert(profile, encoding_all, kind="detail", max_bytes=cap)
    assert unwritten[1] == 0
    assert unwritten[0] > 0 or fraction > 0.1  # at 5% one rank's detail alone passes the cap
    assert skipping.read_bytes() == encoding_all.read_bytes()


def _kinds_in_file_order(path: Path) -> list[tuple[str, float]]:
    """Each slice of a JSON trace in file order: (summary or detail, its start)."""
    import gzip

    import orjson

    data = path.read_bytes()
    events = orjson.loads(gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data)
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    summary = {key for key, name in names.items() if name.startswith(("Step Trace", "Overlap Analysis"))}
    return [("summary" if (e["pid"], e["tid"]) in summary else "detail", e["ts"]) for e in events
            if e["ph"] == "X"]


@pytest.mark.parametrize("name", ["t.json", "t.json.gz"])
def test_a_trace_that_fits_whole_is_written_step_by_step_each_steps_summary_then_its_detail(
        profile, tmp_path, name):
    """No cut to choose, so no priority order: the trace processor loads time order faster."""
    whole = tmp_path / f"whole-{name}"
    convert(profile, whole, kind="detail", max_bytes=None)
    kinds = _kinds_in_file_order(whole)
    runs = [kind for i, kind in enumerate(kinds) if i == 0 or kind[0] != kinds[i - 1][0]]
    assert [kind for kind, _ in runs] == ["summary", "detail"] * 5  # 5 steps, each summary then detail
    starts = [ts for kind, ts in runs if kind == "summary"]
    assert starts == sorted(starts)
    if name == "t.json":  # a cap it fits under, to the byte, writes the same bytes
        exact = tmp_path / f"exact-{name}"
        assert convert(profile, exact, kind="detail", max_bytes=whole.stat().st_size).cut is None
        assert exact.read_bytes() == whole.read_bytes()
