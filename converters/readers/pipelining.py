"""What the readers know of pipeline-parallel records, for ``analyses.pipeline``: the one home of
those names, so the analysis reads meanings and never a framework's or vendor's spelling.

- the micro-batch ranges of ``torch.distributed.pipelining``'s schedules: ``Forward <i>`` and
  ``Backward <i>`` (``record_function`` around each micro-batch's receive, compute and send
  posting; ScheduleGPipe writes them, the 1F1B schedules do not);
- the peer of a point-to-point op: c10d's ``c10d::send`` / ``c10d::recv_`` record it as their
  third concrete input (``Concrete Inputs: ['', '', '<peer>', '<tag>']``, ``record_shapes=True``),
  the peer's rank in the op's process group (the global rank on the default group).
"""

from __future__ import annotations

import re

from ..model import Slice, decoded_args

FORWARD, BACKWARD = "F", "B"
_PHASE = re.compile(r"^(Forward|Backward) (\d+)$")
_P2P_OPS = ("c10d::send", "c10d::recv_")


def phase(s: Slice) -> tuple[str, int] | None:
    """A host range that is one micro-batch's forward or backward: (``FORWARD`` or ``BACKWARD``,
    the micro-batch's index); None for any other record."""
    found = _PHASE.match(s.name)
    if found is None:
        return None
    return (FORWARD if found.group(1) == "Forward" else BACKWARD), int(found.group(2))


def peer(s: Slice) -> int | None:
    """The rank a point-to-point op sends to or receives from, where its record says it; else None."""
    if s.name not in _P2P_OPS or s.args is None:
        return None
    try:
        args = s.args if type(s.args) is dict else decoded_args(bytes(s.args))
        return int(args["Concrete Inputs"][2])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


_BACKWARD_WORK = "autograd::engine::evaluate_function"


def is_backward_work(s: Slice) -> bool:
    """A host record of a backward pass: PyTorch's autograd engine runs each backward function in
    a ``autograd::engine::evaluate_function: <Fn>Backward0`` record (and its gradient
    accumulation in ``...: torch::autograd::AccumulateGrad``), never in a forward."""
    return s.name.startswith(_BACKWARD_WORK)
