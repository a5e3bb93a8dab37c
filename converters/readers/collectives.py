"""What a communication op does, from its name as each vendor spells it: the one home of those
names, for the readers that know no better source (a launching ``record_param_comms`` op, a
database's op type). Each function gives one of the model's kinds (``model.COMM_KINDS``), or None
for a name that is not that vendor's communication.

- HCCL (torch_npu, msprof, the databases): ``hcom_allReduce__586_0_1``, ``hcom_send_``,
  ``hcom_receive_``, ``hcom_batchSendRecv_``, ``hcom_alltoallv_``; the group tag after the type
  (``586``) names the communicator alike on every rank. MindSpore's ops: ``AllReduce-op534``,
  ``Default/network/Send-op12``, ``Receive-op12``, ``MuxSend``;
- NCCL and RCCL kernels: ``ncclKernel_AllReduce_RING_LL_Sum_float``,
  ``ncclDevKernel_AllGather_RING_LL``, ``ncclKernel_SendRecv``; ``ncclDevKernel_Generic`` (every
  collective of RCCL, of newer NCCL) says no type: ``COLLECTIVE``;
- GPU communication that is no NCCL kernel (``gpu``): torch's SymmetricMemory / NVLS kernels
  (``multimem_all_reduce_kernel``, ``multimem_*``, ``one_shot_all_reduce_kernel``,
  ``two_shot_all_reduce_kernel``), vLLM's (and SGLang's) custom all-reduce
  (``cross_device_reduce_1stage``, ``_2stage``), DeepEP's MoE dispatch and combine (an
  all-to-all: ``deep_ep::intranode::dispatch``, ``deep_ep::internode_ll::combine``, ...);
- collectives a framework records on the host (``framework``: Paddle's Communication events,
  ``c_allreduce_sum``, ``ProcessGroupNCCL::AllReduce``: unverified, no sample has one);
- collectives the CPU runs (``host``): c10d's ops (``c10d::allreduce_``, ``c10d::send``,
  ``c10d::recv_``, ``c10d::_allgather_base_``) and gloo's ranges (``gloo:all_reduce``, ``gloo:recv``).
"""

from __future__ import annotations

import functools
import re

from ..model import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    COLLECTIVE,
    GATHER,
    HASHED_GROUP,
    RECV,
    REDUCE,
    REDUCESCATTER,
    SCATTER,
    SEND,
    SENDRECV,
)

# An op type's word, lower-cased and without underscores, by what it starts with: the longest
# first where one starts another (reducescatter before reduce, sendrecv before send).
_WORDS = (
    ("allreduce", ALLREDUCE), ("allgather", ALLGATHER), ("reducescatter", REDUCESCATTER),
    ("reduce", REDUCE), ("broadcast", BROADCAST), ("alltoall", ALLTOALL), ("barrier", BARRIER),
    ("monitoredbarrier", BARRIER), ("gather", GATHER), ("scatter", SCATTER),
    ("batchsendrecv", SENDRECV), ("sendrecv", SENDRECV), ("neighborexchange", SENDRECV),
    ("send", SEND), ("receive", RECV), ("recv", RECV), ("generic", COLLECTIVE),
)


def of_word(word: str) -> str | None:
    """The kind of an op type's word (``allReduce``, ``all_reduce``, ``_allgather_base_``,
    ``batchSendRecv``); None for a word that names no communication."""
    plain = word.lower().replace("_", "")
    return next((kind for start, kind in _WORDS if plain.startswith(start)), None)


_HCCL = re.compile(r"^hcom_([A-Za-z]+)")
_HCCL_GROUP = re.compile(r"^hcom_[A-Za-z]+_+(\d+)_\d+_\d+$")  # hcom_<op>__<group tag>_<index>_1
_MINDSPORE = re.compile(r"^(?:Mux)?([A-Za-z]+)(?:-op\d+(?:_\d+)?)?$")  # AllReduce-op534_0, MuxSend


# Neither this nor of_word is cached (one call an Ascend op): a cache would hold the op's name (a
# word may be all of it), and the spill packs a name held elsewhere by reference: one file's
# records would pack to other bytes on a second read (tests/readers/test_chrome_trace.py).
def hccl(name: str) -> str:
    """The kind of an Ascend communication op (HCCL's name, or MindSpore's without its scope);
    ``COLLECTIVE`` where the name says none (an op the profiler calls communication all the same)."""
    found = _HCCL.match(name) or _MINDSPORE.match(name.rsplit("/", 1)[-1])
    return (of_word(found.group(1)) if found else None) or COLLECTIVE


def hccl_group(name: str) -> str | None:
    """The communicator an HCCL op's name says (``hcom_allReduce__586_3_1``: ``hccl group 586``);
    each rank numbers its group lanes itself, so this is how ranks agree."""
    found = _HCCL_GROUP.match(name)
    return f"{HASHED_GROUP}{found.group(1)}" if found else None


_NCCL = re.compile(r"^nccl(?:Dev)?Kernel_([A-Za-z]+)")


@functools.lru_cache(maxsize=4096)
def nccl(name: str) -> str | None:
    """The kind of an NCCL (or RCCL) kernel; None for any other kernel."""
    found = _NCCL.match(name)
    if found is None:
        return None
    return of_word(found.group(1)) or COLLECTIVE


# GPU kernels that communicate without NCCL, by their function's name (its namespace and template
# arguments aside; ``deep_ep::`` ones by the namespace too, as ``dispatch`` alone names no library)
_GPU_KERNELS = (
    (re.compile(r"^multimem_(?:one_shot_)?all_reduce"), ALLREDUCE),  # torch SymmetricMemory (NVLS)
    (re.compile(r"^multimem_(?:one_shot_)?reduce"), REDUCE),
    (re.compile(r"^multimem_all_gather"), ALLGATHER),
    (re.compile(r"^multimem_"), COLLECTIVE),
    (re.compile(r"^(?:one|two)_shot_all_reduce"), ALLREDUCE),
    (re.compile(r"^cross_device_reduce_[12]stage"), ALLREDUCE),  # vLLM's custom all-reduce
)
_DEEP_EP = re.compile(r"\bdeep_ep::")
_DEEP_EP_KERNELS = ((re.compile(r"^pp_send"), SEND), (re.compile(r"^pp_recv"), RECV),
                    (re.compile(r"^(?!get_).*(?:dispatch|combine)"), ALLTOALL))


@functools.lru_cache(maxsize=4096)
def gpu(name: str) -> str | None:
    """The kind of a GPU kernel that communicates through no NCCL kernel (demangled names, as
    Kineto writes them: ``void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16,
    16>(...)``); None for any other kernel."""
    head = name.replace("(anonymous namespace)", "anonymous").split("(", 1)[0].split("<", 1)[0]
    function = head.rsplit("::", 1)[-1].rsplit(" ", 1)[-1]
    table = _DEEP_EP_KERNELS if _DEEP_EP.search(head) else _GPU_KERNELS
    return next((kind for pattern, kind in table if pattern.match(function)), None)


_HOST = re.compile(r"^(?:c10d::|gloo:)([a-z_]+)")


@functools.lru_cache(maxsize=4096)
def host(name: str) -> str | None:
    """The kind of a collective the CPU runs (a c10d op, a gloo range); None for any other name."""
    found = _HOST.match(name)
    return of_word(found.group(1)) if found else None


@functools.lru_cache(maxsize=4096)
def framework(name: str) -> str | None:
    """The kind of a collective a framework records on the host, by the word its name ends with
    (Paddle's ``c_allreduce_sum``, ``ProcessGroupNCCL::AllReduce``); None where it names none."""
    return of_word(name.rsplit("::", 1)[-1].removeprefix("c_"))
