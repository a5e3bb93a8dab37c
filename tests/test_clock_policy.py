"""One clock policy for ranks without a common clock (issue 40; ``communication.timeline``): ``comm``,
``critical``, ``report`` and ``convert`` put ranks on clocks of their own on the others' by their
collectives and say by how much, or, where no collective ties a rank to the others, say that its
waits cannot be judged and give none. Before, ``comm --slow-ranks`` and ``report`` measured waits
across device clocks hours apart (45 hours of "wait", "Straggler: rank 1 kept the others
waiting") while ``critical`` refused the same clocks.

The generator's truth: MindSpore 1.x ranks of one job reach every collective's end together (only
the clock mapping separates them), so the waits, once the clocks are put on one, are the jitter of
their starts, read here from the step-trace files."""

from __future__ import annotations

import csv
import json

import pytest
from conftest import real_data

from converters.analyses.report import report_data, report_json
from converters.cli import main
from fixtures.mindspore1x_gen import write_mindspore1x_profile


@pytest.fixture(scope="module")
def own_clocks(tmp_path_factory):
    root = tmp_path_factory.mktemp("own")
    return root, write_mindspore1x_profile(root, ranks=2, steps=3, comm_ops=2, host_start=False, seed=3)


def _true_waits_ns(job) -> float:
    """Every rank's wait for the last arrival over all collectives, each rank's starts counted from
    the end the ranks share (the generator's collective ends are common to all ranks)."""
    by_op: dict[tuple[int, str], dict[int, tuple[int, int]]] = {}
    for rank in job.ranks:
        with open(rank.folder / f"step_trace_raw_{rank.file_id}_detail_time.csv", newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["step_num"] not in ("-", "0")]
        for row in rows:
            for column in row:
                if column.endswith("_start_point") and int(row[column]):
                    name = column.removesuffix("_start_point")
                    start, end = int(row[column]) * 10, int(row[f"{name}_end_point"]) * 10
                    by_op.setdefault((int(row["step_num"]), name), {})[rank.rank] = (start, end)
    total = 0
    for ranks in by_op.values():
        lead = {r: end - start for r, (start, end) in ranks.items()}  # how long before the end each began
        total += sum(lead[r] - min(lead.values()) for r in lead)
    return total


def test_comm_and_report_measure_waits_on_one_clock_and_say_by_how_much(own_clocks, capsys):
    root, job = own_clocks
    assert main(["comm", str(root), "--slow-ranks", "--format", "json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)["slow_ranks"]
    caused_ms = sum(r["Wait Caused(ms)"] for r in rows)
    assert caused_ms == pytest.approx(_true_waits_ns(job) / 1e6, abs=0.002)  # was 164,431,668 ms
    said = "rank 1: on a clock of its own, put on the other ranks' by the ends of their collectives"
    assert said in out.err
    document = report_json(report_data(root))
    assert not document["verdict"]["summary"].startswith("Straggler")
    suffered = sum(s["wait_suffered_ms"] for s in document["steps"])
    assert suffered == pytest.approx(caused_ms, abs=0.002)


def test_critical_runs_on_the_clocks_comm_uses(own_clocks, capsys):
    root, _ = own_clocks
    assert main(["critical", str(root), "--format", "json"]) == 0  # was refused
    steps = [d for d in json.loads(capsys.readouterr().out) if d["step"] is not None]
    assert len(steps) == 3 and all(d["step_us"] < 10_000 for d in steps)  # not hours of idle
    assert all({s["rank"] for s in d["path"]} == {0, 1} for d in steps)


def test_ranks_no_collective_ties_get_no_waits_and_a_word(capsys):
    """mindspore-1x: two unrelated profiles (devices 1 and 6), no common collective: no wait between
    them is judged, every command says why, and critical's refusal advises nothing that fails."""
    root = real_data("mindspore-1x")
    assert main(["comm", str(root), "--slow-ranks", "--format", "json"]) == 0
    out = capsys.readouterr()
    rows = json.loads(out.out)["slow_ranks"]
    assert all(r["Wait Caused(ms)"] == 0 and r["Wait Suffered(ms)"] == 0 for r in rows)
    assert "rank 6: a clock of its own that no collective ties to the other ranks'" in out.err
    document = report_json(report_data(root))
    assert any("waits between it and them cannot be judged" in w for w in document["warnings"])
    assert main(["critical", str(root)]) == 2
    err = capsys.readouterr().err
    assert "rank 6:" in err and "--align" not in err


def test_convert_draws_no_wait_across_clocks_it_leaves_as_recorded(own_clocks, tmp_path):
    """Without --align the trace keeps each rank's device ticks: a wait measured across them (six
    'Wait for rank 1' slices of hours) is not drawn, and a note says how to get them."""
    from trace_check import read_perfetto

    from converters import convert

    root, job = own_clocks
    for align in (None, "collectives"):
        out = tmp_path / f"{align}.pftrace"
        result = convert(root, out, kind="summary", align=align)
        waits = [s for s in read_perfetto(out.read_bytes()).slices if s.track == ("Overlap Analysis", "Wait")]
        if align is None:
            assert waits == [] and any("no wait between it and the other ranks is drawn" in w
                                       for w in result.warnings)
        else:
            assert sum(s.dur_ns for s in waits) == pytest.approx(_true_waits_ns(job), abs=2000)


def test_a_straggler_by_step_time_alone_is_not_said_to_keep_others_waiting(own_clocks):
    """The verdict claims a wait only where its steps show one: a rank found a straggler by its
    step time, in a job whose table shows no wait, "took longer", not "kept the others waiting"."""
    from converters.analyses.report.diagnosis import Diagnosis, verdict

    root, _ = own_clocks
    report = report_data(root)
    assert not any(f.wait_caused_ns for f in report.steps)
    report.diagnoses = [Diagnosis("straggler", 1, f.graph, f.step, 0.3, {}, "Straggler: it took longer.", "")
                        for f in report.steps if f.rank == 1]
    summary = verdict(report)["summary"]
    assert summary.startswith("Straggler: rank 1 took longer than the other ranks")
    assert "waiting" not in summary
