"""A step too large to contract (its communication ops times its tasks past ``CONTRACT_BUDGET``, or
its ops squared past ``PAIRS_BUDGET``) gets an unknown path that says why, not an exhausted memory:
rocprof-908's one step of 43,915 kernels and 1,310 collectives made ``critical`` and ``report`` fill
memory once, and is now within the budget."""

from __future__ import annotations

import json

import pytest

from converters.analyses import critical
from converters.analyses.critical import critical_report
from converters.cli import main
from tests.conftest import real_data


@pytest.mark.parametrize("budget", ["CONTRACT_BUDGET", "PAIRS_BUDGET"])
def test_a_step_past_the_budget_is_unknown_and_says_why(monkeypatch, budget):
    source = real_data("kineto-2rank")
    known = list(critical_report(source))
    assert known and all(p.unknown is None for p in known)
    monkeypatch.setattr(critical, budget, 1)
    found = list(critical_report(source))
    assert [(p.graph, p.step) for p in found] == [(p.graph, p.step) for p in known]
    for path, before in zip(found, known, strict=True):
        assert "too many to contract in memory" in path.unknown
        assert path.path == [] and path.what_if == []
        assert path.step_ns == before.step_ns  # the span is the input's, path or none


def test_real_rocprof_s_one_long_step_has_its_path(capsys):
    """rocprof-908's one unmarked 15 s step of 1,310 RCCL kernels among 45,225 tasks is within the
    budget since ``contract`` walks in C and holds a source's chains as one tree (before, it was
    said unknown, and before that it filled memory): its path tiles the step, and the wait the
    device spends in RCCL's kernels is what hiding them would save most."""
    assert main(["critical", str(real_data("rocprof-908")), "--format", "json", "-q"]) == 0
    (step,) = json.loads(capsys.readouterr().out)
    assert step.get("unknown") is None and step["path"]
    assert sum(s["dur_us"] for s in step["path"]) == pytest.approx(step["step_us"], abs=0.01)
    ends = [s["start_us"] + s["dur_us"] for s in step["path"]]
    assert all(b["start_us"] == pytest.approx(end, abs=0.01)
               for b, end in zip(step["path"][1:], ends, strict=False))
    top = step["what_if"][0]
    assert top["kind"] == "overlap_comm" and top["target"].startswith("ncclDevKernel_Generic")


def test_a_step_past_the_budget_builds_no_graph_and_has_the_bounds_its_graph_has(monkeypatch):
    """Whether a step is past the budget is known before its graph is built (its nodes are its
    launches and tasks and two per op): such a step builds none (rocprof-908's cost its report a
    third of its CPU), and its span is the one its graph gives."""
    source = real_data("kineto-2rank")
    found = []
    rank_step = critical.rank_step
    monkeypatch.setattr(critical, "rank_step", lambda *args: found.append(rank_step(*args)) or found[-1])
    list(critical_report(source))
    contracted, found[:] = [s for s in found if s is not None], []
    monkeypatch.setattr(critical, "CONTRACT_BUDGET", 1)
    monkeypatch.setattr(critical, "_rank_graph", lambda *args: pytest.fail("a graph built past the budget"))
    list(critical_report(source))
    large = [s for s in found if s is not None]
    assert len(large) == len(contracted) > 0
    for big, built in zip(large, contracted, strict=True):
        assert built.too_large is None and big.too_large is not None
        assert (big.rank, big.step, big.first_ns, big.last_ns) == (built.rank, built.step, built.first_ns,
                                                                 built.last_ns)
        assert f"holds {len(built.syncs):,} communication ops" in big.too_large
