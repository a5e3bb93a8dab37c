"""The rank behind the barrier, on a real 4-rank DDP job made for it (fixtures/made/ddp-straggler-4rank:
rank 2's backward busy-waits 50 ms a step in a gradient hook; its SOURCE.md): DDP's all-reduce makes
every rank's step as long, and ``critical``, ``comm --slow-ranks`` and ``report`` still name rank 2
and the time fixing it would save (docs/analysis.md, sections 6 and 11). The control
(``-control``: the same job without the delay) names no rank so."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from converters import Diagnostics
from converters.analyses.critical import critical_report
from converters.cli import main

MADE = Path(__file__).resolve().parent.parent / "fixtures" / "made"
SLOW_RANK, DELAY_MS = 2, 50.0  # what make_ddp_straggler.py injected (SOURCE.md)
CLOSE = 0.3  # a saving within 30% of the injected delay


def sample(name: str = "ddp-straggler-4rank") -> Path:
    path = MADE / name
    if not any(path.glob("*.json.gz")):
        pytest.skip(f"{path}: the sample is missing")
    return path


def late_by_ms(folder: Path) -> dict[int, float]:
    """Per step, from the raw files: how much later the slowed rank began its last all-reduce's
    execution (the gloo worker's range) than the latest of the other ranks: the most that rank
    arriving with the others can save."""
    starts: dict[int, dict[int, float]] = {}
    for path in folder.glob("*.json.gz"):
        trace = json.loads(gzip.decompress(path.read_bytes()))
        rank = trace["distributedInfo"]["rank"]
        events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        for step in (e for e in events if e["name"].startswith("ProfilerStep#")):
            begin, end = step["ts"], step["ts"] + step["dur"]
            last = max(e["ts"] for e in events if e["name"] == "gloo:all_reduce" and begin <= e["ts"] < end)
            starts.setdefault(int(step["name"].split("#")[1]), {})[rank] = last
    return {step: (by_rank[SLOW_RANK] - max(t for r, t in by_rank.items() if r != SLOW_RANK)) / 1000
            for step, by_rank in starts.items()}


def test_critical_names_the_slowed_rank_first_with_the_delay_it_caused():
    folder = sample()
    paths = list(critical_report(folder, diag=Diagnostics()))
    late = late_by_ms(folder)
    assert [p.step for p in paths] == sorted(late) and len(paths) == 8
    firsts = [p.what_if[0] for p in paths]
    assert all(w.rank == SLOW_RANK and w.kind == "late_arrival" for w in firsts)
    saved = {p.step: p.what_if[0].saved_ns / 1e6 for p in paths}
    close = [s for s, ms in saved.items() if abs(ms - DELAY_MS) <= CLOSE * DELAY_MS]
    assert len(close) > len(paths) / 2, saved  # most steps (6 of 8 on this sample)
    assert abs(statistics.median(saved.values()) - DELAY_MS) <= CLOSE * DELAY_MS
    assert all(saved[s] <= late[s] + 0.01 for s in saved), (saved, late)  # never more than it was late
    assert all(p.host_work and not p.unknown for p in paths)


def test_critical_on_the_control_names_no_rank_so():
    paths = list(critical_report(sample("ddp-straggler-4rank-control"), diag=Diagnostics()))
    assert paths and all(p.what_if[0].saved_ns / 1e6 < (1 - CLOSE) * DELAY_MS for p in paths)


def test_comm_slow_ranks_ranks_the_slowed_rank_first(capsys):
    assert main(["comm", str(sample()), "--slow-ranks", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["slow_ranks"]
    assert [r["Rank"] for r in rows][0] == SLOW_RANK and len(rows) == 4


def _report(folder: Path, out: Path, form: str) -> str:
    target = out / f"report.{form}"
    assert main(["report", str(folder), "--format", form, "-o", str(target), "-q"]) == 0
    return target.read_text()


def test_report_verdict_says_the_rank_s_backward_held_every_rank_back(out_dir):
    document = json.loads(_report(sample(), out_dir, "json"))
    verdict = document["verdict"]
    held = verdict["held_back"]
    assert held["rank"] == SLOW_RANK and held["phase"] == "backward" and held["steps"] == held["of"] == 3
    assert abs(held["saved_ms"] - DELAY_MS) <= CLOSE * DELAY_MS
    sentence = f"rank {SLOW_RANK}'s backward held every rank back by {held['sentence'].split(' by ')[1]}"
    assert held["sentence"] == sentence and sentence.endswith(" ms a step")
    assert verdict["summary"].startswith(f"Straggler: {sentence};")
    assert "kept the others waiting" not in verdict["summary"]  # not the generic line
    assert any("host operators" in w for w in document["warnings"])  # the CPU-only note
    page = _report(sample(), out_dir, "html")
    assert sentence.replace("'", "&#x27;") in page or sentence in page


def test_report_on_the_control_keeps_the_generic_line(out_dir):
    verdict = json.loads(_report(sample("ddp-straggler-4rank-control"), out_dir, "json"))["verdict"]
    assert verdict["held_back"] is None and "held every rank back" not in verdict["summary"]
