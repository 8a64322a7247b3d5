import pytest

from tuna import machine
from tuna.gpu.ir_tier import occupancy
from tuna.ir import Access, Allocation, Index, KernelIR, Loop, LoopKind, Statement


@pytest.mark.parametrize(
    ("gpu", "threads", "regs", "smem", "expected"),
    [
        # Checked by hand against the CUDA occupancy formulas (Programming Guide, Occupancy Calculator).
        ("v100", 256, 32, 0, 8),  # 2048 threads / 256
        ("v100", 256, 64, 0, 4),  # 64 regs * 32 lanes = 2048 per warp -> 32 warps -> 4 blocks of 8 warps
        ("v100", 1024, 32, 0, 2),
        ("v100", 32, 16, 0, 32),  # the 32 blocks per SM limit
        ("a100", 128, 32, 48 * 1024, 3),  # (48 KiB + 1 KiB reserved) into 164 KiB
        ("h100", 128, 255, 0, 2),  # 255 regs -> 8192 per warp -> 8 warps -> 2 blocks of 4
        ("v100", 2048, 32, 0, 0),  # more threads than a block may have
    ],
)
def test_occupancy_agrees_with_cuda_formulas(gpu, threads, regs, smem, expected):
    assert occupancy(threads, regs, smem, machine.preset(gpu)) == expected


def _gpu_kernel(blocks, threads, k=64):
    idx = (Index((("bx", 1),)), Index((("tx", 1),)))
    stmt = Statement(
        "C",
        (
            Access("A", False, (Index((("bx", 1),)), Index((("k", 1),))), (blocks, k), 4),
            Access("C", False, idx, (blocks, threads), 4),
            Access("C", True, idx, (blocks, threads), 4),
        ),
        (("fma", 1),),
    )
    inner = Loop("k", k, LoopKind.SERIAL, (stmt,))
    tx = Loop("tx", threads, LoopKind.THREAD, (inner,), thread="threadIdx.x")
    return KernelIR("main", (Loop("bx", blocks, LoopKind.THREAD, (tx,), thread="blockIdx.x"),))


def test_more_blocks_than_sms_is_faster_per_flop():
    from tuna.gpu.ir_tier import estimate

    v100 = machine.preset("v100")
    few = estimate(_gpu_kernel(8, 128), v100)
    many = estimate(_gpu_kernel(80, 128), v100)
    assert few.features["sm_utilization"] == pytest.approx(0.1)
    assert many.features["sm_utilization"] == 1.0
    # Ten times the work over ten times the SMs costs about the same time.
    assert many.seconds < 2 * few.seconds


def test_shared_memory_that_does_not_fit_is_infeasible():
    from tuna.gpu.ir_tier import estimate

    k = _gpu_kernel(80, 128)
    big = KernelIR(k.name, k.body, allocations=(Allocation("S", "shared", 200 * 1024 // 4, 4),))
    assert estimate(big, machine.preset("v100")).features["infeasible"] == 1


def _copy_kernel(blocks, threads, fused: bool):
    """Each thread copies one element of a (blocks * threads)-element 3-D tensor; ``fused``
    writes the subscripts as TVM does for fused loops (opaque to the box footprint)."""
    n = blocks * threads
    shape = (n // 64, 8, 8)
    if fused:
        idx = (Index(opaque=("bx", "tx")), Index(opaque=("bx", "tx")), Index(opaque=("bx", "tx")))
    else:
        idx = (Index((("bx", threads // 64),)), Index((("tx", 1),)), Index())
    stmt = Statement("B", (Access("A", False, idx, shape, 4), Access("B", True, idx, shape, 4)), ())
    tx = Loop("tx", threads, LoopKind.THREAD, (stmt,), thread="threadIdx.x")
    return KernelIR("main", (Loop("bx", blocks, LoopKind.THREAD, (tx,), thread="blockIdx.x"),))


def test_block_traffic_is_capped_by_what_its_threads_access():
    from tuna.gpu.ir_tier import global_traffic

    a100 = machine.preset("a100")
    l2, dram = global_traffic(_copy_kernel(1024, 128, fused=True), a100)
    # A box over fused subscripts spans the whole tensor; each block touches only 128 x 4 B per tensor.
    assert l2 == 2 * 1024 * 128 * 4
    # The tensors (1 MiB) fit in the L2: memory sees each once.
    assert dram == 2 * 1024 * 128 * 4


def test_launch_bounds_cap_registers_and_spill_instead_of_refusing_the_block():
    from tuna.gpu.ir_tier import estimate, registers

    a100 = machine.preset("a100")
    assert registers(1024, 4 * 100, a100) == (64, 32 + 100 - 64)  # 64 K registers over 1024 threads
    assert registers(128, 4 * 100, a100) == (132, 0)
    k = _gpu_kernel(108, 1024)
    local = Statement("L", (Access("acc", True, (Index((("i", 1),)),), (100,), 4, "local"),), (("fma", 1),))
    tx = Loop("tx", 1024, LoopKind.THREAD, (Loop("i", 100, LoopKind.SERIAL, (local,)), *k.body[0].body[0].body),
              thread="threadIdx.x")
    big = KernelIR("main", (Loop("bx", 108, LoopKind.THREAD, (tx,), thread="blockIdx.x"),),
                   allocations=(Allocation("acc", "local", 100, 4),))
    est = estimate(big, a100)
    assert "infeasible" not in est.features
    assert est.features["registers"] == 64 and est.features["thread_spill"] > 0


def test_unrolled_loops_cost_no_loop_control():
    from tuna.gpu.ir_tier import estimate

    a100 = machine.preset("a100")
    rolled = _gpu_kernel(108, 128, k=64)
    bx = rolled.body[0]
    tx = bx.body[0]
    inner = tx.body[0]
    # MetaSchedule puts pragma_auto_unroll_max_step on the kernel's outermost (thread-bound) loop.
    unrolled = KernelIR("main", (Loop("bx", 108, LoopKind.THREAD, (Loop(
        "tx", 128, LoopKind.THREAD, (Loop("k", 64, LoopKind.SERIAL, inner.body),),
        thread="threadIdx.x"),), thread="blockIdx.x", unroll_max_step=64),))
    a, b = estimate(rolled, a100).features, estimate(unrolled, a100).features
    assert a["thread_loop"] == 3 * 64 and b.get("thread_loop", 0) == 0
    assert b["issue_cycles"] < a["issue_cycles"]
