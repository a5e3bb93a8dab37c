"""Which pass of a training step a host op belongs to, from its name as each framework spells it:
the one home of those names, so the analyses read a meaning (the report's "rank 2's backward held
every rank back").

- PyTorch's autograd: each node the engine runs is a ``cpu_op`` named
  ``autograd::engine::evaluate_function: <Node>`` (``AddmmBackward0``,
  ``torch::autograd::AccumulateGrad``, where DDP's gradient hooks run), and the node itself
  (``AddmmBackward0``) inside it.

Other frameworks' backward ops (Paddle's ``*_grad``, MindSpore's ``Gradients/`` scope) are not
known here yet: no sample of theirs was checked, so their ops say no pass.
"""

from __future__ import annotations

import re

_BACKWARD = re.compile(r"^autograd::engine::evaluate_function: |Backward\d*$")


def is_backward(name: str) -> bool:
    """Whether a host op named ``name`` runs in the backward pass, as far as its name says."""
    return _BACKWARD.search(name) is not None
