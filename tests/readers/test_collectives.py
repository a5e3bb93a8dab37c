"""What a communication op does, from its name as each vendor spells it (``readers/collectives.py``):
the names as the real profilers write them (the real samples, and the kernels' own source:
PyTorch's SymmetricMemory ops, vLLM's custom all-reduce, DeepEP's kernels)."""

from __future__ import annotations

import pytest
from conftest import real_data

from converters import Diagnostics, Layer, Options, discover, read_profile
from converters.model import (
    ALLGATHER,
    ALLREDUCE,
    ALLTOALL,
    BARRIER,
    BROADCAST,
    COLLECTIVE,
    RECV,
    REDUCESCATTER,
    SEND,
    SENDRECV,
    comm_group,
    comm_kind,
)
from converters.readers import collectives


@pytest.mark.parametrize(("name", "kind", "group"), [
    ("hcom_allReduce__586_0_1", ALLREDUCE, "hccl group 586"),
    ("hcom_receive__9_0_1", RECV, "hccl group 9"),
    ("hcom_send__9_1_1", SEND, "hccl group 9"),
    ("hcom_batchSendRecv__9_2_1", SENDRECV, "hccl group 9"),
    ("hcom_alltoallv_", ALLTOALL, None),
    ("hcom_reduceScatter__1_0_1", REDUCESCATTER, "hccl group 1"),
    ("Default/AllReduce-op534_0", ALLREDUCE, None),
    ("Receive-op12", RECV, None),
    ("Default/network/Send-op12", SEND, None),
    ("MuxSend", SEND, None),
    ("an op the profiler calls communication", COLLECTIVE, None),
])
def test_hccl_and_mindspore_names(name, kind, group):
    assert collectives.hccl(name) == kind and collectives.hccl_group(name) == group


@pytest.mark.parametrize(("name", "kind"), [
    ("ncclKernel_AllReduce_RING_LL_Sum_float", ALLREDUCE),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", ALLGATHER),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", SENDRECV),
    ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", COLLECTIVE),  # RCCL: every collective
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>(int)", None),
])
def test_nccl_kernels(name, kind):
    assert collectives.nccl(name) == kind


@pytest.mark.parametrize(("name", "kind"), [
    ("void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, unsigned)",
     ALLREDUCE),
    ("void c10d::symmetric_memory::multimem_one_shot_all_reduce_kernel<float, 8, 4>(float*)", ALLREDUCE),
    ("void c10d::symmetric_memory::multimem_all_gather_kernel<16>(char*)", ALLGATHER),
    ("void c10d::symmetric_memory::two_shot_all_reduce_kernel<float, 8>(float**)", ALLREDUCE),
    ("void c10d::symmetric_memory::one_shot_all_reduce_kernel<c10::BFloat16, 8>(c10::BFloat16**)", ALLREDUCE),
    ("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals)",
     ALLREDUCE),
    ("void vllm::cross_device_reduce_2stage<float, 4>(vllm::RankData*)", ALLREDUCE),
    ("void deep_ep::intranode::dispatch<8, 768, 6144>(int4*, float*)", ALLTOALL),
    ("void deep_ep::legacy::internode_ll::combine<true, 7168>(void*)", ALLTOALL),
    ("void deep_ep::intranode::notify_dispatch<8>(int const*)", ALLTOALL),
    ("void deep_ep::legacy::layout::get_dispatch_layout(long const*, int*)", None),  # computes
    ("void deep_ep::elastic::pp_send_impl(ncclDevComm)", SEND),
    ("void at::native::vectorized_gather_kernel<16, long>(char*, char*)", None),
    ("void dispatch<8>(int*)", None),  # no library's: a name alone
])
def test_gpu_kernels_that_communicate_without_nccl(name, kind):
    assert collectives.gpu(name) == kind


@pytest.mark.parametrize(("name", "kind"), [
    ("c10d::allreduce_", ALLREDUCE), ("c10d::barrier", BARRIER), ("c10d::send", SEND), ("c10d::recv_", RECV),
    ("c10d::_allgather_base_", ALLGATHER), ("c10d::_reduce_scatter_base_", REDUCESCATTER),
    ("c10d::alltoall_base_", ALLTOALL), ("gloo:all_reduce", ALLREDUCE), ("gloo:recv", RECV),
    ("aten::mm", None),
])
def test_host_collectives(name, kind):
    assert collectives.host(name) == kind


@pytest.mark.parametrize(("sample", "expected"), [
    ("ascend-pt-2rank", {(ALLREDUCE, "hccl group 586")}),
    ("ascend-pt-db", {(ALLREDUCE, "hccl group 210")}),
    ("msprof-2rank", {(ALLREDUCE, None)}),
    # SendRecv kernels typed by the c10d op that launched them (alltoall_base_, allreduce_, ...)
    ("kineto-2rank", {(ALLTOALL, None), (ALLREDUCE, None), (ALLGATHER, None)}),
    # RCCL's generic kernels by their record_param_comms; those queued before the capture unknown
    ("kineto-rocm-mi300", {(ALLREDUCE, None), (BROADCAST, None), (COLLECTIVE, None)}),
    ("kineto-b200-vllm", {(ALLREDUCE, None), (ALLGATHER, None)}),
    ("kineto-gloo-2rank", {(ALLREDUCE, None), (BARRIER, None)}),
    ("pp-gpipe-2stage-dev", {(SEND, None), (RECV, None)}),
])
def test_each_reader_says_what_its_real_ops_do(sample, expected):
    """Every communication op of the real samples carries its kind (and HCCL's group)."""
    found = {(comm_kind(s), comm_group(s)) for b in read_profile(discover(real_data(sample)), Options(),
                                                                  Diagnostics())
             for s in b.slices if s.layer is Layer.COMM_OP}
    assert found == expected
