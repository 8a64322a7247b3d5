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
