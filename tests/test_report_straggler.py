"""The verdict's straggler share ("N% of their communication not overlapped with compute is waiting
for rank R") is a true share: the exposed wait for the straggler is a part of the not-overlapped
communication it is divided by (docs/analysis.md section 6), and so is a communication-bound
step's "Y ms of it waiting for slower ranks". Checked against an independent
computation from ``comm``'s waits and ``overlap``'s figures, and on a family of generated jobs
(slow rank, its delay, seeds, hosts on clocks of their own, aligned or not)."""

from __future__ import annotations

import json
import re
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from converters.analyses.report import report_data, verdict
from converters.cli import main
from fixtures.ascend_pt_gen import write_ascend_pt_profile

OF_IT = re.compile(r"Communication bound: ([\d.,]+) ms .*; ([\d.,]+) ms of it waiting")
SHARE = re.compile(r"(\d+)% of their communication not overlapped with compute is waiting for rank (\S+)\.")


def _json(capsys, *argv: str) -> object:
    assert main([*argv, "--format", "json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


def _union(spans: list[tuple[float, float]]) -> float:
    covered, reach = 0.0, None
    for start, end in sorted(spans):
        if reach is None or start > reach:
            covered, reach = covered + end - start, end
        elif end > reach:
            covered, reach = covered + end - reach, end
    return covered


def _independent_share(ops: list[dict], overlap: list[dict], report: dict) -> tuple[float, list[int]]:
    """The documented definition from ``comm``'s ops and ``overlap``'s rows alone: over the
    communication-bound rank-steps, the union of each one's waits for the straggler ranks (each
    from its op's start for min(wait, elapse)), at most its not-overlapped communication, over
    their not-overlapped communication."""
    slow = sorted({s["rank"] for s in report["steps"] if "straggler" in s["diagnoses"]})
    bound = {(s["rank"], s["graph"], s["step"]) for s in report["steps"]
             if "communication" in s["diagnoses"]}
    spans: dict[tuple, list[tuple[float, float]]] = defaultdict(list)
    for op in ops:
        wait = op["Wait For Last Rank(ms)"]
        if op["Last Rank"] in slow and wait:
            start = op["Start Timestamp(us)"]
            spans[op["Rank"], op["Graph"], op["Step"]].append(
                (start, start + min(wait, op["Elapse Time(ms)"]) * 1000))
    exposed = {(r["Rank"], r["Graph"], r["Step"]): r["Communication(Not Overlapped)"] for r in overlap}
    waiting = sum(min(_union(spans[key]), exposed[key]) for key in bound)
    return waiting / sum(exposed[key] for key in bound), slow


@pytest.mark.parametrize("extra, align", [
    ({}, ()),  # the job the bug was seen on
    ({"ranks_per_host": 2, "host_offsets_ns": (0, 2_000_000)}, ()),  # unaligned clocks: the old sum said 143%
    ({"ranks_per_host": 2, "host_offsets_ns": (0, 2_000_000)}, ("--align", "collectives")),
])
def test_the_straggler_share_equals_comm_waits_over_overlaps_not_overlapped(tmp_path, capsys, extra, align):
    root = tmp_path / "job"
    write_ascend_pt_profile(root, ranks=4, steps=4, tasks_per_step=40, slow_rank=2, slow_ns=3_000_000, seed=3,
                            **extra)
    report = _json(capsys, "report", str(root), "-o", "-", *align)
    ops = _json(capsys, "comm", str(root), *align)["ops"]
    overlap = _json(capsys, "overlap", str(root))
    found = SHARE.search(report["verdict"]["summary"])
    assert found is not None, report["verdict"]["summary"]
    share, slow = _independent_share(ops, overlap, report)
    assert slow == [2] and found.group(2) == "2"
    assert share <= 1
    assert int(found.group(1)) == round(share * 100)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1000), slow_ns=st.integers(0, 12_000_000), offset_ns=st.sampled_from([0, 2_000_000,
       -1_500_000]), align=st.sampled_from([None, "collectives"]))
def test_no_straggler_share_passes_100_percent(seed, slow_ns, offset_ns, align):
    with tempfile.TemporaryDirectory() as tmp:
        hosts = {"ranks_per_host": 2, "host_offsets_ns": (0, offset_ns)} if offset_ns else {}
        write_ascend_pt_profile(Path(tmp), ranks=4, steps=4, tasks_per_step=40, slow_rank=2, slow_ns=slow_ns,
                                seed=seed, **hosts)
        report = report_data(tmp, align=align)
        for f in report.steps:
            exposed = f.exposed_wait_for(f.waited_for)
            assert 0 <= exposed <= (f.overlap.not_overlapped_ns or 0)
            assert exposed <= sum(f.waited_for.values())
        for share in SHARE.findall(verdict(report)["summary"]):
            assert 50 <= int(share[0]) <= 100
        for d in report.diagnoses:  # "X ms (..) in communication not overlapped; Y ms of it waiting": Y <= X
            if (found := OF_IT.match(d.summary)) is not None:
                exposed, waiting = (float(v.replace(",", "")) for v in found.groups())
                assert waiting <= exposed
