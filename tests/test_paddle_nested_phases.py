"""Paddle's phases wherever they lie below the step: inside user ranges (``RecordEvent``, as
``make_sample.py record`` writes them) and inside other phases (a forward run again in the
backward by ``fleet.utils.recompute``). The totals per step are Paddle's Model Summary's: the
first phase on each path down from the step, whole (the generator's truth, checked against
Paddle's tree in ``test_paddle_generator``), in both export forms and both kinds."""

from __future__ import annotations

from collections import defaultdict

import pytest

from converters import Diagnostics, Layer, Options, discover, read_profile
from converters.analyses.report import report_data, report_json
from converters.intervals import total_ns, union
from fixtures.paddle_gen import PHASES, generate_profile


def _totals(root, kind: str) -> dict[tuple[int, int, str], int]:
    lanes: dict[tuple[int, int, str], list] = defaultdict(list)
    for batch in read_profile(discover(root), Options(kind=kind), Diagnostics()):
        for s in batch.slices:
            if s.layer is Layer.STEP and s.lane in PHASES:
                lanes[batch.rank, batch.step_id, s.lane].append((s.start_ns, s.end_ns))
    return {key: total_ns(union(spans)) for key, spans in lanes.items()}


@pytest.mark.parametrize("form", ["chrome", "protobuf"])
@pytest.mark.parametrize("nesting", ["user_ranges", "recompute"])
@pytest.mark.parametrize("gpu", [False, True])
def test_phase_totals_are_paddles_wherever_the_phases_lie(tmp_path, form, nesting, gpu):
    options = {"user_ranges": True, "recompute": nesting == "recompute"}
    truth = generate_profile(tmp_path, form=form, steps=3, gpu=gpu, ranks=2 if gpu else 1, seed=6, **options)
    expected = {(f.rank, s.number, phase): ns for f in truth.files for s in f.steps
                for phase, ns in s.phases.items()}
    assert all(expected.values())
    for kind in ("summary", "detail"):
        assert _totals(tmp_path, kind) == expected, kind


def test_the_report_breaks_a_recomputing_step_down_as_paddle_does(tmp_path):
    truth = generate_profile(tmp_path, form="chrome", steps=3, gpu=True, ranks=2, seed=8, user_ranges=True,
                             recompute=True)
    document = report_json(report_data(tmp_path))
    got = {(s["rank"], s["step"]): s["phases_ms"] for s in document["steps"]}
    for f in truth.files:
        for step in f.steps:
            for phase, ns in step.phases.items():
                assert got[f.rank, step.number][phase] * 1e6 == pytest.approx(ns, abs=2), (step, phase)
