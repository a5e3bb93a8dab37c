"""``trace2perfetto pipeline`` on the real pipeline-parallel jobs made for it (``fixtures/made/pp-*``,
PyTorch 2.13 ``torch.distributed.pipelining`` on gloo: GPipe and 1F1B, 2 and 4 stages, 3 to 8
micro-batches, with and without the user ranges; ``fixtures/made/SOURCE.md`` says how each was made).

The truth is read here from the raw traces, independently of the reader: the user ranges
``fwd mb=<i>`` / ``bwd mb=<i>`` mark each micro-batch's compute exactly (where the sample was made
with them); the schedule is the one the sample was made with. The analysis must not need the user
ranges: each check also runs on a copy without them.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from converters.analyses import pipeline

MADE = Path(__file__).parent.parent / "fixtures" / "made"
USER = re.compile(r"^(fwd|bwd) mb=(\d+)$")
NAME = re.compile(r"^pp-(gpipe|1f1b)-(\d)stage-mb(\d+)(-plain)?$")
SAMPLES = sorted(p.name for p in MADE.glob("pp-*") if p.is_dir())
WITH_RANGES = [name for name in SAMPLES if not name.endswith("-plain")]


def made(name: str) -> tuple[str, int, int]:
    """(schedule, stages, micro-batches) the sample was made with, from its name."""
    schedule, stages, microbatches, _ = NAME.match(name).groups()
    return {"gpipe": pipeline.GPIPE, "1f1b": pipeline.ONE_F_ONE_B}[schedule], int(stages), int(microbatches)


def _doc(path: Path) -> dict:
    with gzip.open(path, "rt") as f:
        return json.load(f, parse_float=Decimal)


def truth(folder: Path) -> dict:
    """Per (rank, step): the step's span, each user range (kind, micro-batch) -> (start, end), the
    transfers in order (kind, peer, start, end: each c10d op with the gloo range that begins in it
    or is the next one after it) and the bubble (span minus the union of the user ranges)."""
    found = {}
    for path in sorted(folder.glob("*.pt.trace.json.gz")):
        doc = _doc(path)
        base, rank = int(doc["baseTimeNanoseconds"]), doc["distributedInfo"]["rank"]
        events = []
        for e in doc["traceEvents"]:
            if e.get("ph") == "X":
                start = base + int(Decimal(e["ts"]) * 1000)
                events.append({**e, "start": start, "end": start + int(Decimal(e["dur"]) * 1000)})
        for step in (e for e in events if e["name"].startswith("ProfilerStep#")):
            inside = sorted((e for e in events if step["start"] <= e["start"] < step["end"]),
                            key=lambda e: (e["start"], -e["end"]))
            ranges = {}
            transfers = []
            for e in inside:
                if (m := USER.match(e["name"])):
                    ranges[m.group(1)[0].upper(), int(m.group(2))] = (e["start"], e["end"])
                elif e["name"] in ("c10d::send", "c10d::recv_"):
                    transfers.append([e["name"][6:10], int(e["args"]["Concrete Inputs"][2]), e["start"], e["end"]])
                elif e["name"] in ("gloo:send", "gloo:recv"):
                    transfers[-1][3] = max(transfers[-1][3], e["end"])
            spans = sorted(ranges.values())
            covered, reach = 0, None
            for a, b in spans:
                if reach is None or a > reach:
                    covered, reach = covered + b - a, b
                elif b > reach:
                    covered, reach = covered + b - reach, b
            span = step["end"] - step["start"]
            found[rank, int(step["name"][13:])] = {"span": span, "ranges": ranges, "transfers": transfers,
                                                   "bubble": span - covered}
    return found


def _without_user_ranges(folder: Path, dest: Path) -> Path:
    dest.mkdir()
    for path in folder.glob("*.pt.trace.json.gz"):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        doc["traceEvents"] = [e for e in doc["traceEvents"] if not USER.match(str(e.get("name", "")))]
        (dest / path.name).write_bytes(gzip.compress(json.dumps(doc).encode(), 1))
    return dest


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[tuple[str, str], pipeline.PipelineReport]:
    """Each sample's pipeline, as recorded and (where it has them) without the user ranges."""
    root = tmp_path_factory.mktemp("made")
    out = {}
    for name in SAMPLES:
        out[name, "as recorded"] = pipeline.pipeline_report(MADE / name)
        if name in WITH_RANGES:
            out[name, "no user ranges"] = pipeline.pipeline_report(_without_user_ranges(MADE / name, root / name))
    return out


def test_there_are_the_samples_the_issue_asks_for():
    kinds = {made(name) for name in SAMPLES}
    assert {schedule for schedule, _, _ in kinds} == {pipeline.GPIPE, pipeline.ONE_F_ONE_B}
    assert {stages for _, stages, _ in kinds} == {2, 4}
    assert len({m for _, _, m in kinds}) >= 3
    assert set(SAMPLES) - set(WITH_RANGES) and WITH_RANGES


@pytest.mark.parametrize("name", SAMPLES)
def test_every_stage_every_micro_batch_and_the_schedule(name, reports):
    """On every stage of every step: each micro-batch's forward and backward, once, with known
    bounds; the stages in rank order; the schedule the job ran and its ideal bubble."""
    schedule, p, m = made(name)
    variants = [v for (n, v) in reports if n == name]
    for variant in variants:
        report = reports[name, variant]
        steps = {part.step for part in report.parts}
        assert steps == {2, 3, 4}, (name, variant)
        assert [(part.rank, part.stage, part.stages) for part in report.parts] == \
            [(r, r, p) for _ in steps for r in range(p)], (name, variant)
        for part in report.parts:
            want = {(kind, mb) for kind in "FB" for mb in range(m)}
            assert sorted((ph.kind, ph.microbatch) for ph in part.phases) == sorted(want), (name, variant, part.rank)
            assert all(ph.compute_ns is not None and ph.compute_ns > 0 for ph in part.phases), (name, variant)
            assert part.schedule == schedule, (name, variant, part.step, [ph.label for ph in part.phases])
            row = pipeline.record(part)
            assert row["Ideal Bubble(%)"] == round((p - 1) / (m + p - 1) * 100, 3)


@pytest.mark.parametrize("name", WITH_RANGES)
def test_times_within_2_percent_and_the_bubble_within_5(name, reports):
    """Each micro-batch's start, end and compute within 2% of the step's time of its user range's;
    each stage's bubble within 5% of the user ranges' (the step's time minus their union)."""
    expected = truth(MADE / name)
    for variant in ("as recorded", "no user ranges"):
        for part in reports[name, variant].parts:
            want = expected[part.rank, part.step]
            tolerance = 0.02 * want["span"]
            for ph in part.phases:
                start, end = want["ranges"][ph.kind, ph.microbatch]
                where = (name, variant, part.rank, part.step, ph.label)
                assert abs(ph.start_ns - start) <= tolerance, (*where, (ph.start_ns - start) / want["span"])
                assert abs(ph.end_ns - end) <= tolerance, (*where, (ph.end_ns - end) / want["span"])
            bubble = part.step_ns - part.compute_ns
            assert abs(bubble - want["bubble"]) <= 0.05 * want["bubble"], \
                (name, variant, part.rank, part.step, bubble / want["bubble"] - 1)


@pytest.mark.parametrize("name", SAMPLES)
def test_each_transfer_matched_and_its_wait_and_transfer_add_up(name, reports):
    """Every send and receive as the raw trace gives it, matched with its peer's (k-th with k-th):
    its wait lasts until the peer's op began, its transfer the rest, adding up to its duration."""
    expected = truth(MADE / name)
    got: dict[tuple[int, int], list] = {}
    for part, t in reports[name, "as recorded"].transfers:
        got.setdefault((part.rank, part.step), []).append(t)
    assert set(got) == set(expected)
    for (rank, step), want in expected.items():
        mine = got[rank, step]
        assert [(t.kind, t.peer, t.start_ns, t.end_ns) for t in mine] == [tuple(w) for w in want["transfers"]]
        for t in mine:
            theirs = [w for w in expected[t.peer, step]["transfers"] if w[1] == rank and w[0] != t.kind][t.index]
            assert t.wait_ns == min(max(theirs[2] - t.start_ns, 0), t.end_ns - t.start_ns)
            assert t.wait_ns + t.transfer_ns == t.end_ns - t.start_ns
