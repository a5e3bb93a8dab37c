"""``trace2perfetto pipeline`` on the real 2-stage GPipe job (``pp-gpipe-2stage-dev``, PyTorch 2.13
``torch.distributed.pipelining`` on gloo) and on generated pipeline jobs (``fixtures/pipeline_gen``).

The truth is read here from the raw traces, independently of the reader: the user ranges
``fwd mb=<i>`` / ``bwd mb=<i>`` mark each micro-batch's compute exactly (SOURCE.md). The analysis
must not need them: each check runs on the sample as it is, on a copy without the user ranges,
and (the p2p pattern alone) on a copy without the framework's ``Forward <i>`` / ``Backward <i>`` too.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import jsonschema
import pytest
from conftest import real_data

from converters.analyses import pipeline
from converters.cli import main
from converters.errors import Diagnostics

SCHEMA = json.loads((Path(__file__).parent.parent / "schemas" / "pipeline.schema.json").read_text())
SAMPLE = "pp-gpipe-2stage-dev"
USER = re.compile(r"^(fwd|bwd) mb=(\d+)$")
FRAMEWORK = re.compile(r"^(Forward|Backward) \d+$")


def _events(path: Path) -> tuple[int, int, list[dict]]:
    """(rank, base ns, complete events with ns ts/end) of one raw trace, times exact."""
    doc = json.loads(path.read_text(), parse_float=Decimal)
    base = int(doc["baseTimeNanoseconds"])
    out = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "X":
            start = base + int(Decimal(e["ts"]) * 1000)
            out.append({**e, "start": start, "end": start + int(Decimal(e["dur"]) * 1000)})
    return doc["distributedInfo"]["rank"], base, out


def truth(folder: Path) -> dict:
    """Per (rank, step): the step's span, each user range (kind, micro-batch) -> (start, end), the
    p2p transfers in order: (kind, peer, start, end), and the bubble (span minus the user ranges)."""
    found = {}
    for path in sorted(folder.glob("*.pt.trace.json")):
        rank, _, events = _events(path)
        steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
        for step in steps:
            inside = sorted((e for e in events if step["start"] <= e["start"] < step["end"]),
                            key=lambda e: e["start"])
            ranges = {}
            for e in inside:
                if (m := USER.match(e["name"])):
                    ranges[m.group(1)[0].upper(), int(m.group(2))] = (e["start"], e["end"])
            transfers = []
            for e in inside:  # each c10d op with the gloo range that follows it: one transfer
                if e["name"] in ("c10d::send", "c10d::recv_"):
                    peer = int(e["args"]["Concrete Inputs"][2])
                    transfers.append([e["name"][6:10], peer, e["start"], e["end"]])
                elif e["name"] in ("gloo:send", "gloo:recv"):
                    transfers[-1][3] = max(transfers[-1][3], e["end"])
            span = step["end"] - step["start"]
            compute = sum(b - a for a, b in ranges.values())
            found[rank, int(step["name"][13:])] = {"span": span, "ranges": ranges, "transfers": transfers,
                                                   "bubble": span - compute}
    return found


def _copy_without(folder: Path, dest: Path, pattern: re.Pattern) -> Path:
    """The sample's traces without the events whose names match ``pattern`` (the test's own copy)."""
    dest.mkdir()
    for path in folder.glob("*.pt.trace.json"):
        doc = json.loads(path.read_text())
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not pattern.match(str(e.get("name", "")))]
        (dest / path.name).write_text(json.dumps(doc))
    return dest


@pytest.fixture(scope="module")
def sample() -> Path:
    return real_data(SAMPLE)


@pytest.fixture(scope="module")
def variants(sample, tmp_path_factory) -> dict[str, Path]:
    """The sample as recorded, without the user ranges, and without any micro-batch range."""
    root = tmp_path_factory.mktemp("pp")
    return {"as recorded": sample,
            "no user ranges": _copy_without(sample, root / "plain", USER),
            "p2p only": _copy_without(sample, root / "bare",
                                      re.compile(f"{USER.pattern}|{FRAMEWORK.pattern}"))}


@pytest.mark.parametrize("variant", ["as recorded", "no user ranges"])
def test_every_micro_batch_within_2_percent_and_the_bubble_within_5(sample, variants, variant):
    """Every micro-batch's forward and backward on every stage, its start, end and compute within
    2% of the step's time of the user range's; each stage's bubble within 5% of the user ranges'."""
    expected = truth(sample)
    report = pipeline.pipeline_report(variants[variant])
    assert {(p.rank, p.step) for p in report.parts} == set(expected)
    for part in report.parts:
        want = expected[part.rank, part.step]
        assert part.found_by == pipeline.RANGES
        assert {(p.kind, p.microbatch) for p in part.phases} == set(want["ranges"])
        tolerance = 0.02 * want["span"]
        for p in part.phases:
            start, end = want["ranges"][p.kind, p.microbatch]
            assert abs(p.start_ns - start) <= tolerance, (part.rank, part.step, p)
            assert abs(p.end_ns - end) <= tolerance, (part.rank, part.step, p)
            assert abs(p.compute_ns - (end - start)) <= tolerance, (part.rank, part.step, p)
        bubble = part.step_ns - part.compute_ns
        assert abs(bubble - want["bubble"]) <= 0.05 * want["bubble"], (part.rank, part.step, bubble)


def test_stages_and_schedule(variants):
    """Rank 0 feeds rank 1: two stages, GPipe on each, two micro-batches; the ideal bubble 1/3."""
    for variant, folder in variants.items():
        rows = list(pipeline.records(pipeline.pipeline_report(folder), "stage"))
        assert [(r["Rank"], r["Stage"], r["Stages"]) for r in rows] == [(0, 0, 2), (1, 1, 2)] * 3, variant
        assert {r["Schedule"] for r in rows} == {pipeline.GPIPE}, variant
        assert {r["Order"] for r in rows} == {"F0 F1 B0 B1"}
        assert {r["Micro-batches"] for r in rows} == {2}
        assert {r["Ideal Bubble(%)"] for r in rows} == {round(100 / 3, 3)}


def test_from_the_p2p_pattern_alone(sample, variants):
    """Without any micro-batch range: every phase is found from the sends and receives, its bounds
    within 2% of the step's time: a side no transfer bounds (the first stage's first forward
    start, its last backward's end) from the step's edge narrowed to the work in it (the backward
    to its last autograd record: not the optimizer after it); where the last stage's forward
    meets its backward with no transfer between, parted where the loss begins; each bubble
    within 5% of the user ranges'."""
    expected = truth(sample)
    for part in pipeline.pipeline_report(variants["p2p only"]).parts:
        want = expected[part.rank, part.step]
        assert part.found_by == pipeline.P2P
        assert {(p.kind, p.microbatch) for p in part.phases} == set(want["ranges"])
        for p in part.phases:
            start, end = want["ranges"][p.kind, p.microbatch]
            assert abs(p.start_ns - start) <= 0.02 * want["span"], (part.rank, part.step, p)
            assert abs(p.end_ns - end) <= 0.02 * want["span"], (part.rank, part.step, p)
        bubble = part.step_ns - part.compute_ns
        assert abs(bubble - want["bubble"]) <= 0.05 * want["bubble"], (part.rank, part.step, bubble)


def test_wait_and_transfer_add_up_to_each_op(sample):
    """Each send and receive as the raw trace gives it (the c10d op and its gloo range), matched
    with its peer's (k-th with k-th); its wait lasts until the peer's op began, its transfer the
    rest: wait + transfer = its duration."""
    expected = truth(sample)
    report = pipeline.pipeline_report(sample)
    by_step = {}
    for part, t in report.transfers:
        by_step.setdefault((part.rank, part.step), []).append(t)
    for (rank, step), want in expected.items():
        got = by_step[rank, step]
        assert [(t.kind, t.peer, t.start_ns, t.end_ns) for t in got] == [tuple(w) for w in want["transfers"]]
        for t in got:
            peer_ops = [w for w in expected[t.peer, step]["transfers"] if w[1] == rank and w[0] != t.kind]
            theirs = peer_ops[t.index]
            assert t.wait_ns == min(max(theirs[2] - t.start_ns, 0), t.end_ns - t.start_ns)
            assert t.wait_ns + t.transfer_ns == t.end_ns - t.start_ns


def test_cli_json_follows_the_schema(sample, capsys):
    """Every --by as JSON follows schemas/pipeline.schema.json; a CPU job gives no warning."""
    for by in pipeline.BY:
        assert main(["pipeline", str(sample), "--by", by, "--format", "json"]) == 0
        out, err = capsys.readouterr()
        rows = json.loads(out)
        jsonschema.validate(rows, SCHEMA)
        assert rows and err == ""
    assert main(["pipeline", str(sample)]) == 0
    assert "GPipe" in capsys.readouterr().out


def test_no_pipeline_is_said(tmp_path, capsys):
    """A job with no sends, receives nor micro-batch ranges: a warning, an empty table."""
    source = real_data("kineto-gloo-2rank")
    diag = Diagnostics()
    report = pipeline.pipeline_report(source, diag=diag)
    assert report.parts == []
    assert any("no pipeline" in m for m in diag.messages())


def test_schedule_names():
    """GPipe on every stage; 1F1B (at most p - stage in flight on each; a first stage with as many
    micro-batches as stages runs like GPipe); else unknown."""
    gpipe, first, last = "F0 F1 F2 B0 B1 B2".split(), "F0 F1 B0 F2 B1 B2".split(), "F0 B0 F1 B1 F2 B2".split()
    assert pipeline.schedule_of([gpipe, gpipe]) == pipeline.GPIPE
    assert pipeline.schedule_of([first, last]) == pipeline.ONE_F_ONE_B
    assert pipeline.schedule_of([["F0", "F1", "B0", "B1"], ["F0", "B0", "F1", "B1"]]) == pipeline.ONE_F_ONE_B
    assert pipeline.schedule_of([first, first]) == pipeline.UNKNOWN  # 2 in flight on the last stage
    assert pipeline.schedule_of([["F1", "F0", "B0", "B1"]]) == pipeline.UNKNOWN


def test_the_pipeline_lane_in_detail(sample, variants, tmp_path):
    """``--kind detail`` draws each rank's micro-batches on a *Pipeline* lane (``F0``, ``B1``),
    exactly the analysis's compute windows, and the bubble between them (adding up to each step's
    bubble); the trace processor imports them with no error or data loss; a summary draws none."""
    from test_trace_processor import imported, slice_times

    from converters import convert

    for variant in ("as recorded", "no user ranges"):
        out = tmp_path / f"{variant}.pftrace"
        convert(variants[variant], out, kind="detail", max_bytes=None)
        problems, _ = imported(out, tmp_path)
        assert problems == [], (variant, problems)
        drawn = sorted((ts, dur, name) for rows in slice_times(out, tmp_path).values()
                       for ts, dur, name in rows if re.fullmatch(r"[FB]\d", name))
        report = pipeline.pipeline_report(variants[variant])
        # slice_times counts from the trace's first slice: durations, names and the gaps between them
        want = sorted((p.start_ns, p.compute_ns, p.label) for part in report.parts for p in part.phases)
        assert [(dur, name) for _, dur, name in drawn] == [(dur, name) for _, dur, name in want]
        gaps = [b[0] - a[0] for a, b in zip(drawn, drawn[1:], strict=False)]
        assert gaps == [b[0] - a[0] for a, b in zip(want, want[1:], strict=False)]
        bubbles = sum(dur for rows in slice_times(out, tmp_path).values() for _, dur, name in rows
                      if name == pipeline.BUBBLE)
        assert bubbles == sum(part.step_ns - part.compute_ns for part in report.parts)
    summary = tmp_path / "summary.pftrace"
    convert(sample, summary, kind="summary", max_bytes=None)
    assert not any(re.fullmatch(r"[FB]\d", name) for rows in slice_times(summary, tmp_path).values()
                   for _, _, name in rows)
