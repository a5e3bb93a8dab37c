"""``trace2perfetto report``: where the time goes, per rank and step, and what the bottleneck is.

The timeline answers "what happened at 12:03:04.512 on rank 5"; this report answers what comes
before: which steps and ranks are slow, whether the job is bound by data loading, by the host,
by the device or by communication, and which rank and step to open on the timeline. It follows
Paddle's performance method (the IO, CPU or GPU bottleneck first, then the module, then the op)
and MindInsight's overview pages.

One read of every rank, in worker processes (``profile.Profile.map``: this machine's cores or a
Dask cluster), as a summary conversion reads it. Each worker hands back small per-rank results
only: per step the overlap row (``analyses.overlap.overlap_row``), the step's bounds, the profiler's
phases (the Step Trace lanes: Iteration Interval, FP/BP, Tail; Paddle's Dataloader, Forward,
Backward, Optimization), its device compute ops summed by name and by op type (``analyses.ops``'
sums, from the same read: in detail where ``ops`` reads the rank's files so; a second read only
where ``ops`` reads other files), and its communication ops in the light form matching needs
(``communication.light_ops``). A detail read after it gives what no summary holds: the links (HCCL's plane
tasks) and the critical paths of the slowest steps (``critical.detail_read``). Matching across
ranks (``communication.match``), the wait
each rank suffered and caused, the slow-rank table (``analyses.comm``'s helpers) and the diagnosis are
computed here.

The diagnosis (``diagnose``), per rank and step, with the thresholds of :class:`Thresholds`:

* **data loading**: the share of the step spent before the device gets work: the profiler's
  Dataloader phase (Paddle), its Iteration Interval (MindSpore, msprof step trace) or Preparing
  (from the host's step start to the first device work), whichever is largest;
* **host**: the device idle (Free: no compute and no communication between its first and last
  task, plus the time after its last task until the step ends) while the host runs the step;
  summary data has no host threads, so the host is judged busy by the step lasting;
* **device**: compute covering most of the step;
* **communication**: communication not overlapped with compute, with how much of it was spent
  waiting for a slower rank (and which);
* **straggler**: a rank the others waited for in the step's collectives (the wait it caused,
  per other rank, as a share of the step), or whose step took much longer than the median rank's.

Each finding carries its evidence in numbers and the ``trace2perfetto`` command that writes the
detail trace of exactly that rank and step.
"""

from .data import report_data, report_json
from .diagnosis import KIND_TITLES, diagnose, verdict
from .html import render_html, write_html, write_report
from .types import Diagnosis, OpTotal, Report, StepFacts, Thresholds

__all__ = [
    "KIND_TITLES", "Diagnosis", "OpTotal", "Report", "StepFacts", "Thresholds", "diagnose", "report_data",
    "report_json", "render_html", "verdict", "write_html", "write_report",
]
