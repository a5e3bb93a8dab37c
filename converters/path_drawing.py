"""``convert --critical-path``: each step's critical path across ranks drawn in the trace, in a
process of its own above the ranks (docs/analysis.md, section 11).

A step's path needs every rank's step, so it is computed in a pass of its own over the profile the
conversion opened, with its selection and its clock shifts (``analyses.critical.keyed_paths``),
once the ranks are encoded and before anything is written. Each step's path is one chunk of that
step's detail, filed under the lowest rank: the size cap keeps or leaves it out with the step's
detail (``budget.assemble``), and counts no rank more.

Drawn per step: a slice spanning it (its what-ifs in args), and inside it one slice per segment,
named as the segment (its kind, rank and duration in args), with an arrow from a segment to the
next where the rank changes; on one lane, ``Path``, but where steps overlap (``Path #2``).
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
from collections.abc import Iterator

from .analyses.critical import StepPath, keyed_paths, own_clocks, warn_unjoined
from .analyses.host_work import note_host_work
from .errors import Diagnostics
from .layout import Begin, End, JobProcess, Track
from .model import Layer, RankInfo, Slice, StepKey, step_label
from .profile import Kind, Profile
from .select import format_ids
from .spool import DETAIL, Spool, SpoolFile

GROUP = "Critical path"
LANE = "Path"
TITLE = "Critical path"
_SEQUENCES = 2000  # its chunks' packet sequences, apart from the ranks' own and their ops' (1000 on)
_WHAT_IFS = 3  # the what-ifs named in a step's args, largest saving first


def _job_process(infos: list[RankInfo]) -> JobProcess:
    """The process the paths are drawn in: numbered past every rank drawn, so no pid collides."""
    ranks = format_ids(info.rank for info in infos)
    return JobProcess(max(info.rank for info in infos) + 1, TITLE,
                      f"per step, the chain of work across ranks {ranks} that set its time (trace2perfetto "
                      "critical; docs/analysis.md section 11)")


def draw_paths(profile: Profile, shifts: dict[int, int], encoder, spool: Spool, diag: Diagnostics
               ) -> tuple[JobProcess, ...]:
    """Compute every step's critical path over ``profile``'s kept ranks (read in detail, on the
    clocks ``shifts`` moves) and spool each as a detail chunk of its step, encoded by ``encoder``
    (one of its own: its sequences and tracks apart from the ranks', its times from the lowest
    rank's origin); returns the process to declare, none where nothing was drawn (said in
    ``diag``). What the read finds to say, the conversion's own read of the same files says: not
    twice."""
    apart = own_clocks(profile.ranks)
    if apart:  # a path across clocks that share no time would run through years
        diag.note("no_critical_path", f"--critical-path: nothing drawn, rank {format_ids(apart)} shares no "
                  "clock with the others (no path runs across ranks without a common time); --align "
                  "collectives puts the ranks that share collectives on one")
        return ()
    process = _job_process(profile.ranks)
    if not _spool_paths(profile, shifts, encoder, process, spool):
        diag.note("no_critical_path", "--critical-path: no step has device work or communication to run a "
                  "path through; nothing drawn")
        return ()
    return (process,)


def _spool_paths(profile: Profile, shifts: dict[int, int], encoder, process: JobProcess, spool: Spool) -> int:
    """The paths spooled (``draw_paths``); how many."""
    quiet = dataclasses.replace(profile, options=dataclasses.replace(profile.options, kind=Kind.DETAIL),
                                diag=Diagnostics())
    owner = profile.ranks[0].rank
    lanes = _Lanes()
    sequences: dict[tuple[int | None, bool], int] = {}
    with SpoolFile(spool.new_file()) as file:
        for key, found in keyed_paths(quiet, shifts):
            warn_unjoined(profile.diag, found)
            note_host_work(profile.diag, found.host_work)
            if found.unknown is not None:  # no path to draw: a rank's device side is not recorded
                continue
            # a sequence per graph, and the pseudo step apart, as the ranks' own chunks
            sequence = _SEQUENCES + sequences.setdefault((None if key is None else key.graph, key is None),
                                                         len(sequences))
            lane = lanes.place(found.start_ns, found.start_ns + found.step_ns)
            track = Track(process.rank, GROUP, 0, LANE if lane == 0 else f"{LANE} #{lane + 1}", lane)
            slices = path_slices(process.rank, key, found)
            data = encoder.chunk(sequence, list(_events(track, slices)))
            file.add(key, found.start_ns, owner, DETAIL, data, len(slices), sequence, found.graph)
    spool.chunks.extend(file.chunks)
    return len(file.chunks)


class _Lanes:
    """The steps' spans drawn on each lane. The job's steps can overlap (a rank's step running past
    another's next one begins: hosts' clocks apart, device work past the step's end, the pseudo
    step around them all), and the slices of one lane must nest: a step goes on the first lane
    where it overlaps none."""

    def __init__(self) -> None:
        self.spans: list[list[tuple[int, int]]] = []  # per lane, (start, end) in order

    def place(self, start: int, end: int) -> int:
        for index, spans in enumerate(self.spans):
            at = bisect.bisect_left(spans, (start, end))
            if (at == 0 or spans[at - 1][1] <= start) and (at == len(spans) or spans[at][0] >= end):
                spans.insert(at, (start, end))
                return index
        self.spans.append([(start, end)])
        return len(self.spans) - 1


def path_slices(rank: int, key: StepKey | None, found: StepPath) -> list[Slice]:
    """The step's slice, then its segments' in time order (drawn inside it), on ``rank``'s lane;
    arrows from each segment to the next where the rank changes."""
    name = TITLE if found.step is None else step_label(found.graph, found.step)
    args = {"step (us)": found.step_ns / 1000,
            "ranks on path": format_ids({s.rank for s in found.path if s.rank >= 0})}
    for i, w in enumerate(found.what_if[:_WHAT_IFS]):
        args[f"what-if {i + 1}"] = f"{w.what}: saves {w.saved_ns / 1000:.3f} us"
    out = [Slice(rank, Layer.STEP, LANE, name, found.start_ns, found.step_ns, args)]
    arrows = [_flow_id(key, i) if a.rank != b.rank and a.rank >= 0 and b.rank >= 0 else None
              for i, (a, b) in enumerate(zip(found.path, found.path[1:], strict=False))]
    for i, s in enumerate(found.path):
        mine = {"kind": s.kind, "rank": s.rank, "dur (us)": s.dur_ns / 1000}
        if s.rank < 0:  # a step without a node: no rank
            del mine["rank"]
        flows_in = () if i == 0 or arrows[i - 1] is None else (arrows[i - 1],)
        flows_out = () if i == len(arrows) or arrows[i] is None else (arrows[i],)
        out.append(Slice(rank, Layer.STEP, LANE, s.name, s.start_ns, s.dur_ns, mine, "", flows_out, flows_in))
    return out


def _events(track: Track, slices: list[Slice]) -> Iterator[Begin | End]:
    """The step's slice and, nested in it, its segments (which tile it end to end)."""
    step, *segments = slices
    yield Begin(track, step)
    for s in segments:
        yield Begin(track, s)
        yield End(track, s.end_ns)
    yield End(track, step.end_ns)


def _flow_id(key: StepKey | None, index: int) -> int:
    """The arrow from the step's ``index``-th segment to the next (unique in the trace: BLAKE2b, as
    the collectives' arrows, ``communication.flow_id``)."""
    step = "pseudo" if key is None else f"{key.graph}.{key.step}"
    text = f"critical|{step}|{index}"
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
