"""The critical path across ranks (``trace2perfetto critical``) on generated jobs whose delays are
known: a slow rank before one allreduce, a slow op type on one rank, a pipeline stage that stalls
(issue 27, "Done means", first bullet; the contract is ``schemas/critical.schema.json``).

Each injection's truth comes from the generator (``InjectionTruth``): where the time it added lies
and what undoing it saves of the step, re-simulated by the generator itself (so it holds the slack
where another rank or stage becomes the last). Here: the step's path runs through that time, and the
what-if that undoes it saves the truth within 5%.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from converters.cli import main
from fixtures.ascend_pt_gen import GeneratedAscendProfile, InjectionTruth, write_ascend_pt_profile

SCHEMA_PATH = Path(__file__).parent.parent / "schemas" / "critical.schema.json"
KINDS = {"compute", "communication", "wait", "communication_or_wait", "idle", "host"}
WHAT_IFS = {"late_arrival", "op_type", "overlap_comm"}
SLOW_NS = 2_000_000
JITTER_US = 300   # the generator's natural arrival jitter ("up to ~0.3 ms")

# 4 data-parallel ranks, 2 steps of 60 kernels and 3 allreduces each; small: ~3 MB, under a second
DP = dict(ranks=4, steps=2, tasks_per_step=60, seed=1)
LATE = dict(slow_rank=2, slow_ns=SLOW_NS, slow_at=(51, 1))   # late only at step 51's 2nd allreduce (of 3)
LATE_LAST = dict(slow_rank=2, slow_ns=SLOW_NS, slow_at=(51, 2))   # ... at its last
SLOW_OP = dict(slow_op=(1, "Conv2D", 3.0))   # rank 1's Conv2D kernels last 3x: it is last everywhere
HOSTS = dict(ranks_per_host=2, host_offsets_ns=[0, 1_500_123])   # rank 2 on node1, 1.5 ms ahead
# 2 stages of one rank: stage 0's forward of microbatch 1 stalls 2 ms before its hcom_batchSendRecv,
# where stage 1 would otherwise have come later (it ends its backward of microbatch 0 first)
PP = dict(ranks=2, pp=2, steps=2, tasks_per_step=60, seed=1, stall=(0, 1, SLOW_NS))


def _critical(root: Path, capsys, *options: str) -> dict[int, dict]:
    """``critical ROOT --format json``, schema-checked, by step."""
    assert main(["critical", str(root), "--format", "json", *options]) == 0
    document = json.loads(capsys.readouterr().out)
    jsonschema.validate(document, json.loads(SCHEMA_PATH.read_text(encoding="utf-8")))
    return {step["step"]: step for step in document}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory) -> dict[str, tuple[Path, GeneratedAscendProfile]]:
    """Each injected job and the same job without injection (the control)."""
    root = tmp_path_factory.mktemp("critical-generated")
    made = {}
    for name, kw in (("late", DP | LATE), ("late_last", DP | LATE_LAST), ("slow_op", DP | SLOW_OP),
                     ("stall", PP), ("control", DP), ("hosts", DP | LATE_LAST | HOSTS)):
        made[name] = (root / name, write_ascend_pt_profile(root / name, **kw))
    return made


def _covered(path: list[dict], rank: int, start_us: float, end_us: float) -> float:
    """How much of [start_us, end_us) the path's compute segments on ``rank`` cover, µs."""
    return sum(max(0.0, min(end_us, s["start_us"] + s["dur_us"]) - max(start_us, s["start_us"]))
               for s in path if s["rank"] == rank and s["kind"] == "compute")


def _check_path(step: dict, ranks: set[int]) -> None:
    """The contract's invariants of one step: segments in time order, none overlapping, adding up
    to the step's span (within 0.1%) from its start to its end; what-ifs largest first, all > 0."""
    path, span = step["path"], step["step_us"]
    assert path and span > 0
    assert {s["kind"] for s in path} <= KINDS and {s["rank"] for s in path} <= ranks
    assert all(s["dur_us"] >= 0 for s in path)
    for before, after in zip(path, path[1:], strict=False):
        assert after["start_us"] >= before["start_us"] + before["dur_us"] - 0.5, (before, after)
    assert sum(s["dur_us"] for s in path) == pytest.approx(span, rel=1e-3)
    assert path[0]["start_us"] == pytest.approx(step["start_us"], abs=span * 1e-3)
    end = path[-1]["start_us"] + path[-1]["dur_us"]
    assert end == pytest.approx(step["start_us"] + span, abs=span * 1e-3)
    saved = [w["saved_us"] for w in step["what_if"]]
    assert saved == sorted(saved, reverse=True) and all(s > 0 for s in saved)
    assert {w["kind"] for w in step["what_if"]} <= WHAT_IFS


def _what_if(step: dict, truth: InjectionTruth) -> dict:
    """The step's what-if that undoes the injection: its kind, its rank and its target (a stall's
    what-if may name either side of the send/receive pair)."""
    targets = {truth.target, truth.peer_target} - {None}
    found = [w for w in step["what_if"]
             if w["kind"] == truth.what_if and w["rank"] in truth.ranks and w["target"] in targets]
    assert found, (truth, step["what_if"])
    return found[0]


def _injections(prof: GeneratedAscendProfile, kind: str) -> list[InjectionTruth]:
    """The job's injections of one kind (there is one at least)."""
    found = [i for i in prof.injections if i.kind == kind]
    assert found
    return found


def _json(capsys, *argv: str):
    """A command's JSON output."""
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


# -- the truth, as the existing commands see it (independent of `critical`) ----------------------


def test_the_late_arrival_truth_is_the_gap_comm_sees(jobs, capsys):
    """At the injected allreduce, ``comm`` sees rank 2 last, the others waiting for it by at least
    the injected delay, and the gap to the one before it (what the what-if removes) equal to the
    saving the generator re-simulated; at every other allreduce, of this job and of the control,
    that gap is the ranks' natural jitter."""
    (truth,) = _injections(jobs["late"][1], "late_arrival")
    for name in ("late", "control"):
        waits: dict[tuple[int, str], dict[int, float]] = {}
        last: dict[tuple[int, str], int] = {}
        for op in _json(capsys, "comm", str(jobs[name][0]), "--format", "json")["ops"]:
            waits.setdefault((op["Step"], op["Op"]), {})[op["Rank"]] = op["Wait For Last Rank(ms)"] * 1e3
            last[op["Step"], op["Op"]] = op["Last Rank"]
        assert len(waits) == 6 and all(len(w) == 4 for w in waits.values())
        for key, per_rank in waits.items():
            gap = min(w for rank, w in per_rank.items() if rank != last[key])
            if name == "late" and key == (truth.step, truth.target):
                assert last[key] == 2 and gap >= truth.injected_ns / 1e3
                assert gap == pytest.approx(truth.saved_ns / 1e3, rel=0.01)
            else:
                assert gap < JITTER_US, (name, key)


def test_the_op_type_truth_is_a_tenth_of_what_ops_sees(jobs, capsys):
    """``ops --by step``: rank 1's Conv2D time per step is the truth's spans, three times the
    control's; rank 1 sets every step with its device busy, so 10% shorter saves 10% of it."""
    totals = {}
    for name in ("slow_op", "control"):
        rows = _json(capsys, "ops", str(jobs[name][0]), "--by", "step", "--ranks", "1", "--format", "json")
        totals[name] = {r["Step"]: r["Total Time(us)"] for r in rows if r["OP Type"] == "Conv2D"}
    for truth in _injections(jobs["slow_op"][1], "op_type"):
        conv = totals["slow_op"][truth.step]
        assert conv == pytest.approx(sum(e - s for _, s, e in truth.spans) / 1e3, abs=0.1)
        assert conv == pytest.approx(3 * totals["control"][truth.step], abs=0.1)
        assert truth.injected_ns / 1e3 == pytest.approx(conv * 2 / 3, abs=0.1)
        assert truth.saved_ns / 1e3 == pytest.approx(conv / 10, rel=0.01)


def test_the_stall_truth_is_less_than_the_wait_comm_sees(jobs, capsys):
    """``comm``: stage 1's side of the stalled pair starts first and waits for stage 0, which
    without the stall would have come first; what removing the stall saves of the step is less
    than that wait (stage 0's own work after the pair absorbs some)."""
    root, prof = jobs["stall"]
    starts = {(op["Rank"], op["Step"], op["Op"]): op["Start Timestamp(us)"]
              for op in _json(capsys, "comm", str(root), "--format", "json")["ops"]}
    for truth in _injections(prof, "stall"):
        send, receive = starts[0, truth.step, truth.target], starts[1, truth.step, truth.peer_target]
        assert receive < send < receive + truth.injected_ns / 1e3
        assert 0 < truth.saved_ns / 1e3 < send - receive


# -- the critical path -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["late", "slow_op", "stall", "control"])
def test_every_step_has_a_whole_path_and_sorted_what_ifs(jobs, capsys, name):
    root, prof = jobs[name]
    steps = _critical(root, capsys)
    assert sorted(steps) == prof.ranks[0].steps
    for step in steps.values():
        assert step["graph"] is None
        _check_path(step, {r.rank for r in prof.ranks})


@pytest.mark.parametrize("name", ["late", "late_last"])
def test_the_path_waits_for_the_late_rank_before_its_collective(jobs, capsys, name):
    """Rank 2 arrives ~2 ms late at one allreduce of step 51 only (the second of three, or the
    last): the path runs through its compute before that launch, and the what-if of it arriving
    with the one before it saves what the generator's second run saves: all of it, since
    everything after that allreduce waits for it, rank 2's own later compute too (without its
    delay, that compute comes 2 ms earlier: rank 2 is not late at the next allreduce either)."""
    root, prof = jobs[name]
    steps = _critical(root, capsys)
    (truth,) = _injections(prof, "late_arrival")
    assert truth.step == 51 and truth.ranks == (2,) and truth.injected_ns > SLOW_NS // 2
    step = steps[51]
    for rank, start, end in truth.spans:
        assert _covered(step["path"], rank, start / 1e3, end / 1e3) >= 0.95 * (end - start) / 1e3, truth
    late = _what_if(step, truth)
    assert late["saved_us"] == pytest.approx(truth.saved_ns / 1e3, rel=0.05), (late, truth)
    assert step["what_if"][0] is late   # the largest: nothing else in the step comes near 2 ms


def test_on_hosts_whose_clocks_differ_align_collectives_finds_the_same(jobs, capsys):
    """The late job on two hosts, rank 2's clock 1.5 ms ahead: with ``--align collectives`` the
    times are node0's (true time), and the path and the what-if are those of one clock."""
    root, prof = jobs["hosts"]
    steps = _critical(root, capsys, "--align", "collectives")
    (truth,) = _injections(prof, "late_arrival")
    step = steps[truth.step]
    _check_path(step, {0, 1, 2, 3})
    for rank, start, end in truth.spans:
        assert _covered(step["path"], rank, start / 1e3, end / 1e3) >= 0.95 * (end - start) / 1e3, truth
    late = _what_if(step, truth)
    assert late["saved_us"] == pytest.approx(truth.saved_ns / 1e3, rel=0.05), (late, truth)


def test_the_path_runs_through_the_slow_op_type_and_its_what_if_saves_a_tenth(jobs, capsys):
    """Rank 1's Conv2D kernels last 3x: rank 1 arrives last at every allreduce and its device is
    busy throughout, so the path runs through those kernels and making them 10% shorter saves what
    the generator's second run saves (10% of them here: nothing else absorbs it)."""
    root, prof = jobs["slow_op"]
    steps = _critical(root, capsys)
    for truth in _injections(prof, "op_type"):
        step = steps[truth.step]
        assert truth.ranks == (1,) and truth.target == "Conv2D"
        slowed = sum(end - start for _, start, end in truth.spans) / 1e3
        on_path = sum(_covered(step["path"], rank, start / 1e3, end / 1e3)
                      for rank, start, end in truth.spans)
        assert on_path >= 0.9 * slowed, (on_path, slowed)
        # named as ``ops --by type`` names it: kernel_details.csv's Type, beside trace_view.json
        (shorter,) = [w for w in step["what_if"] if w["kind"] == "op_type" and w["rank"] == 1
                      and w["target"] == truth.target]
        assert shorter["saved_us"] == pytest.approx(truth.saved_ns / 1e3, rel=0.05), (shorter, truth)


def test_the_path_runs_through_the_stalled_stage_and_its_what_if_saves_up_to_the_slack(jobs, capsys):
    """Stage 0 stalls 2 ms before its send of microbatch 1; stage 1 waits for it less than that
    (it had its own backward to do first): the path runs through the stall, and the what-if of
    stage 0 arriving with stage 1 saves the 2 ms minus that slack, as the generator's second run."""
    root, prof = jobs["stall"]
    steps = _critical(root, capsys)
    for truth in _injections(prof, "stall"):
        step = steps[truth.step]
        assert truth.ranks == (0,) and truth.injected_ns == SLOW_NS
        assert 0 < truth.saved_ns < truth.injected_ns   # a slack: the truth is not the injection
        for rank, start, end in truth.spans:
            assert _covered(step["path"], rank, start / 1e3, end / 1e3) >= 0.95 * (end - start) / 1e3, truth
        arrive = _what_if(step, truth)
        assert arrive["saved_us"] == pytest.approx(truth.saved_ns / 1e3, rel=0.05), (arrive, truth)


def test_without_injection_no_late_arrival_saves_more_than_the_natural_jitter(jobs, capsys):
    """The control (the same job, no delay injected) and the late job's step 50 (no delay there):
    every late_arrival what-if saves at most the gap between that collective's last two arrivals
    (its definition), which is the ranks' natural jitter."""
    for name, steps_without in (("control", (50, 51)), ("late", (50,))):
        root, prof = jobs[name]
        steps = _critical(root, capsys)
        gaps = {}
        for c in prof.collectives:
            last, second = sorted(c.starts_ns.values())[-2:][::-1]
            gaps[c.step, c.name] = (last - second) / 1e3
        for number in steps_without:
            for w in steps[number]["what_if"]:
                if w["kind"] == "late_arrival":
                    assert w["saved_us"] <= JITTER_US, (name, w)
                    assert w["saved_us"] <= gaps[number, w["target"]] * 1.05 + 1, (name, w)
