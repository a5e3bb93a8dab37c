"""The benchmark's peer: MindInsight 2.3.1's merged msprof timeline, run on one profile.

Runs inside the bench-only MindInsight venv (``bench/peers.py`` makes it; stdlib + mindinsight)::

    python peer_mindinsight.py PROFILE_DIR --kind summary|detail --out FILE [--ranks 0 1 ...]

It makes the call MindInsight's web UI makes for ``GET /v1/mindinsight/profile/msprof_timeline``
(``mindinsight/backend/profiler/profile_api.py``)::

    MsprofTimelineAnalyser(profiler_dir).get_merged_timeline(
        rank_list, None, kind, merge_model=False, scope_name=False)

The UI's default is ``merge_model=True`` (``--merge-model``), which keeps only step-trace threads
named ``Step Trace(Model ID:N)``; MindSpore 2.0-2.2's ``step_trace_*.json`` names them
``Model ID:N``, so that default silently drops the whole step trace. ``merge_model=False`` (a UI
switch too) keeps it, at the cost of a few dozen events per rank.

``--kind`` maps 1:1 to MindInsight's ``kind``: ``summary`` (the smallest it offers) = per rank the
step trace (``step_trace_*.json``) and CANN's Overlap Analysis lanes (from ``msprof_*.json``);
``detail`` = everything it reads: step trace, Ascend Hardware stream lanes, HCCL, CANN API and
Overlap Analysis (plus CPU ops and scope layers when present). ``rank_list`` is ``--ranks`` or
None (all). The returned list of trace events is written to ``--out`` as the UI's
``flask.jsonify`` writes it (compact, sorted keys); the call and the dump are both timed. Prints
one JSON line: events, non-metadata events per process, seconds, own peak RSS (VmHWM).

Layouts: MindInsight 2.3.1 reads only ``PROF_*/mindstudio_profiler_output/{msprof,step_trace}_*
.json`` (CANN 7/8), keeping the files with the newest ``_{timestamp}`` suffix, and the rank from
the first ``info.json.*`` under ``PROF_*``. A MindSpore 2.0-2.2 profile
(``PROF_*/device_N/timeline/{msprof,step_trace}_{dev}_{model}_{iter}.json``) gets nothing from
it, so for that layout this script builds a temporary tree of symlinks that presents it in the
CANN 7/8 shape: every ``msprof_{dev}_{model}_{iter}.json`` as ``msprof_slice_{k}_0.json`` (one
slice per iteration, as CANN slices big exports) and, per model, one ``step_trace_*.json``
(each such file already holds all iterations; linking all would repeat them per iteration).
``task_time_*``/``hccl_*`` are subsets of ``msprof_*`` and MindInsight never reads them. The input
is never copied or changed.
"""

import argparse
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

TIMELINE = re.compile(r"(msprof|step_trace)_(\d+)_(\d+)_(\d+)\.json")


def present(profile: Path, tmp: Path) -> tuple[Path, str]:
    """The directory to give MindInsight, and the layout found ("cann8" or "timeline")."""
    profs = sorted(p for p in profile.glob("PROF_*_*") if p.is_dir())
    if not profs:
        return profile, "no PROF_* directory"
    if any((p / "mindstudio_profiler_output").is_dir() for p in profs):
        return profile, "cann8"
    view = tmp / "profiler"
    view.mkdir()
    for entry in profile.iterdir():           # profiler_info_{rank}.json, cpu_op_*.txt, ...
        if entry.is_file():
            (view / entry.name).symlink_to(entry.resolve())
    for prof in profs:
        out = view / prof.name / "mindstudio_profiler_output"
        out.mkdir(parents=True)
        found = {}
        for dev in sorted(prof.glob("device_*")):
            (view / prof.name / dev.name).mkdir()
            for f in dev.iterdir():           # info.json.N (the rank), start_info.N, ...
                if f.is_file():
                    (view / prof.name / dev.name / f.name).symlink_to(f.resolve())
            for f in (dev / "timeline").glob("*.json"):
                m = TIMELINE.fullmatch(f.name)
                if m:
                    kind, _, model, it = m.groups()
                    found.setdefault(kind, {})[(int(model), int(it))] = f
        for k, (_, f) in enumerate(sorted(found.get("msprof", {}).items())):
            (out / f"msprof_slice_{k}_0.json").symlink_to(f.resolve())
        last = {model: f for (model, _), f in sorted(found.get("step_trace", {}).items())}
        for k, f in enumerate(last.values()):
            (out / f"step_trace_slice_{k}_0.json").symlink_to(f.resolve())
    return view, "timeline (symlinked as cann8)"


def vm_hwm_mib() -> float | None:
    """This process's own peak RSS since exec (Linux), unlike ru_maxrss not inherited from the parent."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile", type=Path, help="directory holding the PROF_* directories")
    parser.add_argument("--kind", choices=("summary", "detail"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--ranks", type=int, nargs="*", help="default: all")
    parser.add_argument("--merge-model", action="store_true", help="the UI default; see above")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="mi_peer_"))  # no '.' in it: MindInsight splits paths on '.'
    try:
        os.environ["MINDINSIGHT_WORKSPACE"] = str(tmp / "workspace")  # its log files, not ~/mindinsight
        started = time.perf_counter()
        from mindinsight.profiler.analyser.msprof_timeline_analyser import MsprofTimelineAnalyser

        to_stderr = logging.StreamHandler(sys.stderr)
        to_stderr.setLevel(logging.WARNING)
        logging.getLogger("profiler.profiler").addHandler(to_stderr)
        imported = time.perf_counter()

        profiler_dir, layout = present(args.profile.resolve(), tmp)
        analyser = MsprofTimelineAnalyser(str(profiler_dir))
        timeline = analyser.get_merged_timeline(args.ranks or None, None, args.kind,
                                                merge_model=args.merge_model, scope_name=False)
        called = time.perf_counter()
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(timeline, f, separators=(",", ":"), sort_keys=True, default=str)
        dumped = time.perf_counter()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)   # removes the links, never their targets

    names = {e.get("pid"): e["args"]["name"] for e in timeline
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    per_process: dict[str, int] = {}
    for e in timeline:
        if e.get("ph") != "M":
            name = names.get(e.get("pid"), str(e.get("pid")))
            per_process[name] = per_process.get(name, 0) + 1
    print(json.dumps({
        "events": len(timeline), "per_process": per_process, "layout": layout,
        "import_seconds": round(imported - started, 3), "call_seconds": round(called - imported, 3),
        "dump_seconds": round(dumped - called, 3), "vm_hwm_mib": vm_hwm_mib(),
    }))
    return 0 if timeline else 1


if __name__ == "__main__":
    sys.exit(main())
