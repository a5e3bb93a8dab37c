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



# What a host record does in a pipeline stage's step, where its name says it (``role``)
BACKWARD_PASS, RELEASE, LOSS, SEND_PREPARATION = "backward pass", "release", "loss", "send preparation"
INPUT_SPLIT = "input split"


_RELEASES = ("aten::detach_", "detach_")  # the aten op and the autograd-level op inside it
_SEND_PREPARATIONS = ("aten::detach", "detach")


def role(s: Slice) -> str | None:
    """What a host record does for a micro-batch, where PyTorch's names say it; None for any other.

    - ``BACKWARD_PASS``: the autograd engine runs each backward function in an
      ``autograd::engine::evaluate_function: <Fn>Backward0`` record (and its gradient
      accumulation in ``...: torch::autograd::AccumulateGrad``), never in a forward;
    - ``RELEASE``: ``aten::detach_``, a stage freeing its outputs' graph once their backward ran
      (``PipelineStage.backward_one_chunk``), the end of a backward;
    - ``LOSS``: an ``aten::*loss*`` op (``aten::cross_entropy_loss``, ``aten::mse_loss``, ...),
      the last stage's loss between a micro-batch's forward and its backward, which the
      schedules compute outside both (``_maybe_compute_loss``);
    - ``SEND_PREPARATION``: ``aten::detach``, the send buffer c10d is given (``get_fwd_send_ops``
      detaches the output), after the forward;
    - ``INPUT_SPLIT``: ``aten::tensor_split``, the schedule cutting the step's batch into its
      micro-batches (``split_args_kwargs_into_chunks``) at the step's start, before the first forward.
    """
    name = s.name
    if name.startswith("autograd::engine::evaluate_function"):
        return BACKWARD_PASS
    if name in _RELEASES:
        return RELEASE
    if name in _SEND_PREPARATIONS:
        return SEND_PREPARATION
    if name == "aten::tensor_split":
        return INPUT_SPLIT
    if name.startswith("aten::") and "loss" in name:
        return LOSS
    return None
