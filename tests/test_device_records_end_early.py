"""A MindSpore 1.x op timeline that ends before the step trace does (``output_timeline_data`` stops
inside step 5 of 12, the step trace, AI CPU ops and HCCL traces go on): the steps it does not
cover are unknown (``-`` in the table, null in JSON), never zero, and the report judges only the
steps it can, saying how many it could not. The truth comes from the generator's files, read here."""

from __future__ import annotations

import bisect
import csv
import json
from decimal import Decimal

import pytest

from converters.analyses.report import report_data, report_json
from converters.cli import main
from converters.intervals import total_ns, union
from fixtures.mindspore1x_gen import GeneratedLegacyRank, write_mindspore1x_profile

STEPS, CUT_IN = 12, 5


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return write_mindspore1x_profile(tmp_path_factory.mktemp("cut"), ranks=2, steps=STEPS,
                                     timeline_ends_in_step=CUT_IN, seed=3)


def _ns(text: str, unit_ns: int) -> int:
    return int(Decimal(text.strip()) * unit_ns)


def _computing_truth(rank: GeneratedLegacyRank) -> dict[int | None, int]:
    """Per step, the time covered by the device ops of the files (op timeline and AI CPU), each
    filed under the last step started at or before it (None: before the first)."""
    bounds = rank.step_bounds_ns
    starts = [start for _, start, _ in bounds]
    ops = []
    with open(rank.folder / f"output_timeline_data_{rank.file_id}.txt") as f:
        next(f)
        for line in f:
            _, _, start, dur = line.rsplit(",", 3)
            ops.append((_ns(start, 10**6), _ns(start, 10**6) + _ns(dur, 10**6)))
    with open(rank.folder / f"aicpu_intermediate_{rank.file_id}.csv", newline="") as f:
        ops += [(_ns(row["run_start"], 1000), _ns(row["run_end"], 1000)) for row in csv.DictReader(f)]
    assert max(start for start, _ in ops if start < rank.timeline_cut_ns) < rank.timeline_cut_ns
    by_step: dict[int | None, list] = {None: [], **{step: [] for step, _, _ in bounds}}
    for start, end in ops:
        index = bisect.bisect_right(starts, start) - 1
        by_step[bounds[index][0] if index >= 0 else None].append((start, end))
    return {step: total_ns(union(found)) for step, found in by_step.items()}


def test_the_generator_cuts_the_timeline_inside_the_step_and_nothing_else(job):
    for rank in job.ranks:
        step, start, end = rank.step_bounds_ns[CUT_IN - 1]
        assert step == CUT_IN and start < rank.timeline_cut_ns < end and len(rank.step_bounds_ns) == STEPS
        with open(rank.folder / f"output_timeline_data_{rank.file_id}.txt") as f:
            next(f)
            last = max(_ns(line.rsplit(",", 3)[2], 10**6) for line in f)
        assert last < rank.timeline_cut_ns
        with open(rank.folder / f"aicpu_intermediate_{rank.file_id}.csv", newline="") as f:
            assert max(_ns(row["run_start"], 1000) for row in csv.DictReader(f)) > rank.step_bounds_ns[-1][1]


def test_overlap_says_unknown_for_the_steps_the_timeline_does_not_cover(job, capsys):
    assert main(["overlap", str(job.root), "--format", "json"]) == 0
    rows = {(r["Rank"], r["Step"]): r for r in json.loads(capsys.readouterr().out)}
    for rank in job.ranks:
        truth = _computing_truth(rank)
        for step in range(1, STEPS + 1):
            row = rows[rank.rank, step]
            assert row["Communication"] > 0  # the step trace's ops are known throughout
            if step < CUT_IN:
                assert row["Computing"] * 1000 == pytest.approx(truth[step], abs=10)
                assert row["Free"] is not None
            else:  # the step the timeline stops in, and every one after it
                assert (row["Computing"], row["Free"], row["Communication(Not Overlapped)"]) == (None,) * 3
    assert main(["overlap", str(job.root)]) == 0
    table = capsys.readouterr()
    last = next(line.split() for line in table.out.splitlines() if line.split()[:3] == ["0", "-", str(STEPS)])
    assert last[3] == "-"
    assert f"covers steps 1-{CUT_IN - 1} of the step trace's {STEPS}" in table.err


def test_the_report_judges_only_what_is_known_and_says_how_many_it_could_not(job):
    document = report_json(report_data(job.root))
    unknown = {(s["rank"], s["step"]) for s in document["steps"] if s["computing_ms"] is None}
    assert unknown == {(r.rank, s) for r in job.ranks for s in range(CUT_IN, STEPS + 1)}
    judged = {(s["rank"], s["step"]): s["dominant"] for s in document["steps"]}
    assert all(judged[key] in ("unknown", "data_loading", "straggler") for key in unknown)
    assert not any(d["kind"] in ("host", "device", "communication") and (d["rank"], d["step"]) in unknown
                   for d in document["diagnoses"])
    verdict = document["verdict"]
    not_judged = sum(kind == "unknown" for kind in judged.values())
    assert not_judged and verdict["counts"]["unknown"] == not_judged
    assert f"{not_judged} of {len(judged)} rank-steps could not be judged" in verdict["summary"]
    assert sum(verdict["counts"].values()) == len(judged)


def test_slow_ranks_mean_compute_over_the_known_steps_only(job, capsys):
    assert main(["comm", str(job.root), "--slow-ranks", "--format", "json"]) == 0
    rows = {r["Rank"]: r for r in json.loads(capsys.readouterr().out)["slow_ranks"]}
    for rank in job.ranks:
        truth = _computing_truth(rank)
        known = [truth[step] for step in (None, *range(1, CUT_IN))]  # the ops before step 1 too
        mean_ms = sum(known) / len(known) / 1e6
        assert rows[rank.rank]["Mean Computing(ms)"] == pytest.approx(mean_ms, abs=1e-5)


def test_a_timeline_that_ends_in_the_last_step_is_not_taken_for_a_cut_one(tmp_path, capsys):
    """Without the unfinished iteration's rows, the last op ends before the last step does: nothing
    says the records were cut, so every step is known (and no warning says otherwise)."""
    job = write_mindspore1x_profile(tmp_path, ranks=1, steps=4, zero_row=False, seed=5)
    [rank] = job.ranks
    with open(rank.folder / f"output_timeline_data_{rank.file_id}.txt") as f:
        next(f)
        last_end = max(_ns(line.rsplit(",", 3)[2], 10**6) + _ns(line.rsplit(",", 3)[3], 10**6) for line in f)
    assert last_end < rank.step_bounds_ns[-1][2]
    assert main(["overlap", str(tmp_path), "--format", "json"]) == 0
    out = capsys.readouterr()
    assert all(row["Computing"] is not None for row in json.loads(out.out)) and "covers steps" not in out.err
