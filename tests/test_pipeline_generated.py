"""``trace2perfetto pipeline`` on generated jobs (``fixtures/pipeline_gen``): GPipe and 1F1B, 2 and
4 stages, several micro-batch counts, with and without the framework's micro-batch ranges. The
truth is read back from each generated trace's user ranges (``test_pipeline.truth``); the analysis
reads a copy without them."""

from __future__ import annotations

import re

import pytest
from test_pipeline import USER, _copy_without, truth

from converters.analyses import pipeline
from fixtures.pipeline_gen import Job, write

CASES = [(schedule, stages, m) for schedule in ("gpipe", "1f1b") for stages in (2, 4) for m in (2, 4, 8)]


@pytest.mark.parametrize("ranges", [True, False], ids=["framework ranges", "p2p only"])
@pytest.mark.parametrize(("schedule", "stages", "m"), CASES)
def test_generated_pipeline(tmp_path, schedule, stages, m, ranges):
    """Every micro-batch on every stage; each bound within 2% of the step's time; the bubble within
    5% where every bound is known; the schedule named; every send matched, wait + transfer = its
    duration."""
    job = write(tmp_path / "job", Job(stages=stages, microbatches=m, schedule=schedule, ranges=ranges,
                                      steps=2))
    expected = truth(job)
    report = pipeline.pipeline_report(_copy_without(job, tmp_path / "plain", USER))
    assert {(p.rank, p.step) for p in report.parts} == set(expected)
    name = pipeline.GPIPE if schedule == "gpipe" or m == 1 else pipeline.ONE_F_ONE_B
    for part in report.parts:
        want = expected[part.rank, part.step]
        assert (part.stage, part.stages, part.schedule) == (part.rank, stages, name)
        assert {(p.kind, p.microbatch) for p in part.phases} == set(want["ranges"])
        for p in part.phases:
            start, end = want["ranges"][p.kind, p.microbatch]
            for got, exact in ((p.start_ns, start), (p.end_ns, end)):
                assert got is None or abs(got - exact) <= 0.02 * want["span"], (part.rank, p)
            if ranges:
                assert p.compute_ns is not None
        if part.compute_ns is not None and all(p.compute_ns is not None for p in part.phases):
            assert abs(part.step_ns - part.compute_ns - want["bubble"]) <= 0.05 * want["bubble"]
        if ranges:
            assert part.compute_ns is not None
        for t in part.transfers:
            assert t.wait_ns is not None and t.wait_ns + t.transfer_ns == t.end_ns - t.start_ns
        assert [(t.kind, t.peer, t.start_ns, t.end_ns) for t in part.transfers] == \
            [tuple(w) for w in want["transfers"]]


def test_the_generator_writes_what_torch_names(tmp_path):
    """The generated traces carry the sample's names: the user ranges are the truth read back."""
    job = write(tmp_path / "job", Job(stages=2, microbatches=2))
    text = "".join(p.read_text() for p in job.glob("*.json"))
    for name in ("c10d::send", "c10d::recv_", "gloo:send", "gloo:recv", "Forward 1", "Backward 0",
                 "ProfilerStep#2", "fwd mb=1"):
        assert name in text
    assert len(re.findall(r'"bwd mb=\d"', text)) == 2 * 2 * 3
