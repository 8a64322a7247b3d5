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


def _vthread_kernel(vthreads):
    """A 128-block, 64-thread kernel whose threads each own a 4-element tile, ``vthreads`` times."""
    tile = Allocation("acc", "local", 4, 4, loop="tx")
    idx = (Index((("i", 1),)),)
    update = Statement(
        "acc", (Access("A", False, (Index((("k", 1),)),), (64,), 4), Access("acc", False, idx, (4,), 4, "local"),
                Access("acc", True, idx, (4,), 4, "local")), (("fma", 1),),
    )
    body = Loop("k", 64, LoopKind.SERIAL, (Loop("i", 4, LoopKind.UNROLLED, (update,)),))
    tx = Loop("tx", 64, LoopKind.THREAD, (body,), thread="threadIdx.x")
    vt = Loop("vt", vthreads, LoopKind.THREAD, (tx,), thread="vthread.x")
    return KernelIR("main", (Loop("bx", 128, LoopKind.THREAD, (vt,), thread="blockIdx.x"),), allocations=(tile,))


def test_virtual_threads_multiply_each_threads_work_and_registers():
    # InjectVirtualThread copies the body (and the thread's arrays) into each thread: 8
    # virtual threads do 8 times the multiply-adds in the same 64 threads.
    from tuna.gpu.ir_tier import estimate

    h100 = machine.preset("h100")
    one, eight = estimate(_vthread_kernel(1), h100).features, estimate(_vthread_kernel(8), h100).features
    assert (one["threads_per_block"], eight["threads_per_block"]) == (64, 64)
    assert eight["thread_fma"] == 8 * one["thread_fma"] == 8 * 64 * 4
    assert eight["registers"] - one["registers"] == 7 * 4
    assert eight["issue_cycles"] > 4 * one["issue_cycles"]
    # The copies are independent: they add no latency to a thread's chain.
    assert eight["warp_latency_cycles"] == one["warp_latency_cycles"]


def test_each_kernel_of_a_candidate_is_timed_with_its_own_grid():
    # A matmul on 8 blocks of 384 threads, then its epilogue on 256 blocks of 1024 threads:
    # two launches, not one kernel of 256 blocks of 1024 threads doing both.
    from tuna.gpu.ir_tier import estimate, launches

    h100 = machine.preset("h100")
    matmul = _gpu_kernel(8, 384)
    idx = (Index((("b", 1024), ("t", 1))),)
    epilogue = Statement("D", (Access("C", False, idx, (8 * 384,), 4), Access("D", True, idx, (8 * 384,), 4)),
                         (("math", 1),))
    epi = Loop("b", 256, LoopKind.THREAD, (Loop("t", 1024, LoopKind.THREAD, (epilogue,), thread="threadIdx.x"),),
               thread="blockIdx.x")
    both = KernelIR("main", (*matmul.body, epi))
    parts = launches(both)
    assert [(p.body, n) for p, n in parts] == [(matmul.body, 1), ((epi,), 1)]
    est = estimate(both, h100).features
    alone = estimate(matmul, h100).features
    assert est["launches"] == 2
    # The matmul, the heavier kernel, describes the candidate; its cycles are counted as if alone.
    assert (est["blocks"], est["threads_per_block"]) == (8, 384)
    assert est["issue_cycles"] > alone["issue_cycles"]
    assert est["issue_cycles"] < 1.5 * alone["issue_cycles"]
    # A kernel inside a serial host loop is launched once per iteration.
    looped = KernelIR("main", (Loop("r", 3, LoopKind.SERIAL, matmul.body),))
    assert [n for _, n in launches(looped)] == [3]
    assert estimate(looped, h100).features["launches"] == 3


def _strided(scope, stride, write=False):
    """One access of a warp whose threads step by ``stride`` elements of 4 bytes."""
    return Access("S", write, (Index((("t", stride),)),), (32 * stride,), 4, scope,
                  warp=tuple(t * stride for t in range(32)))


@pytest.mark.parametrize(("stride", "shared", "global_"), [(1, 1, 1), (2, 2, 2), (32, 32, 8), (0, 1, 1)])
def test_memory_pipe_passes_follow_the_warps_addresses(stride, shared, global_):
    # Shared memory: 32 banks of 4 bytes, a stride of 2 words puts two threads on each bank, 32
    # words all on one; a broadcast is one pass. Global memory: 32-byte sectors, 4 a clock.
    from tuna.gpu.ir_tier import _passes

    g = machine.preset("h100").gpu
    assert _passes(_strided("shared", stride), "shared", 1, g) == shared
    assert _passes(_strided("global", stride), "global", 1, g) == global_
    # Unknown addresses (a CPU kernel, a subscript tuna cannot evaluate) cost one pass.
    assert _passes(Access("S", False, (), (1,), 4, "shared"), "shared", 1, g) == 1


def test_bank_conflicts_cost_issue_cycles():
    from tuna.gpu.ir_tier import estimate

    def kernel(stride):
        load = Statement("C", (_strided("shared", stride), Access("C", True, (Index((("t", 1),)),), (32,), 4, "local")),
                         (("add", 1),))
        tx = Loop("t", 32, LoopKind.THREAD, (Loop("k", 64, LoopKind.SERIAL, (load,)),), thread="threadIdx.x")
        return KernelIR("main", (Loop("b", 132, LoopKind.THREAD, (tx,), thread="blockIdx.x"),))

    h100 = machine.preset("h100")
    free, conflicted = estimate(kernel(1), h100).features, estimate(kernel(32), h100).features
    assert free["shared_passes_per_access"] == 1 and conflicted["shared_passes_per_access"] == 32
    # 64 loads, each 31 passes more, one cycle a pass.
    assert conflicted["issue_cycles"] - free["issue_cycles"] == pytest.approx(64 * 31)


def test_a_register_tiles_accumulators_overlap_but_a_reduction_chains():
    # acc[i] += A[k] over k (16) and i (8): with i unrolled, the 8 accumulators are independent
    # and a thread waits 16 multiply-adds, not 128, whether k is rolled or unrolled; with i
    # rolled, every iteration follows the last. Each load waits in full.
    from tuna.gpu.ir_tier import _latency_chain

    h100 = machine.preset("h100")
    acc = (Index((("i", 1),)),)
    update = Statement("acc", (Access("A", False, (Index((("k", 1),)),), (16,), 4, "shared"),
                               Access("acc", False, acc, (8,), 4, "local"), Access("acc", True, acc, (8,), 4, "local")),
                       (("fma", 1),))
    lat = h100.latency
    reads = {"global": lat["ld_global"], "shared": lat["ld_shared"], "local": 0.0}
    k, i = Loop("k", 16, LoopKind.SERIAL, ()), Loop("i", 8, LoopKind.UNROLLED, ())
    loads = 128 * lat["ld_shared"]
    assert _latency_chain(update, (k, i), {id(i)}, lat, reads) == loads + 16 * lat["fma"]
    k_unrolled = Loop("k", 16, LoopKind.UNROLLED, ())
    assert _latency_chain(update, (i, k_unrolled), {id(i), id(k_unrolled)}, lat, reads) == loads + 16 * lat["fma"]
    rolled_i = Loop("i", 8, LoopKind.SERIAL, ())
    assert _latency_chain(update, (k, rolled_i), set(), lat, reads) == loads + 128 * lat["fma"]


def test_the_loads_of_one_statement_wait_once_for_the_slowest():
    # c[i] = A[i] + B[i] over a rolled i (8): a global and a shared load per iteration issue
    # together, so each iteration waits the global load's latency, not the sum of both.
    from tuna.gpu.ir_tier import _latency_chain

    h100 = machine.preset("h100")
    lat = h100.latency
    reads = {"global": lat["ld_global"], "shared": lat["ld_shared"], "local": 0.0}
    at_i = (Index((("i", 1),)),)
    add = Statement("c", (Access("A", False, at_i, (8,), 4, "global"), Access("B", False, at_i, (8,), 4, "shared"),
                          Access("c", True, at_i, (8,), 4, "local")), (("add", 1),))
    i = Loop("i", 8, LoopKind.SERIAL, ())
    assert lat["ld_global"] > lat["ld_shared"] > 0
    assert _latency_chain(add, (i,), set(), lat, reads) == 8 * lat["ld_global"] + 8 * lat["fma"]


def test_only_other_blocks_hide_the_latency_of_a_block_that_synchronises():
    # Two resident blocks of 100 issue cycles each against a 500-cycle warp: free warps are
    # hidden by both blocks' issue (300 left), warps that meet at barriers only by the other
    # block's (400 left); a lone synchronised block hides nothing.
    from tuna.gpu.ir_tier import unhidden_latency

    assert unhidden_latency(500.0, 100.0, blocks=2, per_sm=2) == 300.0
    assert unhidden_latency(500.0, 100.0, blocks=2, per_sm=2, synchronised=True) == 400.0
    assert unhidden_latency(500.0, 100.0, blocks=1, per_sm=2, synchronised=True) == 500.0
    # Two waves of two: each wave leaves its own share.
    assert unhidden_latency(500.0, 100.0, blocks=4, per_sm=2, synchronised=True) == 800.0


def test_a_kernel_that_stages_in_shared_memory_waits_longer_than_one_that_does_not():
    # The same loads and adds, once with a shared-memory stage in the block: only the shared
    # one synchronises, so its own warps no longer hide its latency.
    from tuna.gpu.ir_tier import estimate

    def kernel(scope):
        load = Statement("B", (Access("A", False, (Index((("t", 1),)),), (128,), 4, "global"),
                               Access("B", True, (Index((("t", 1),)),), (128,), 4, scope)), (("add", 1),))
        tx = Loop("t", 128, LoopKind.THREAD, (Loop("k", 8, LoopKind.SERIAL, (load,)),), thread="threadIdx.x")
        allocs = (Allocation("B", scope, 128, 4),) if scope == "shared" else ()
        return KernelIR("main", (Loop("b", 132, LoopKind.THREAD, (tx,), thread="blockIdx.x"),), allocations=allocs)

    h100 = machine.preset("h100")
    staged, direct = estimate(kernel("shared"), h100).features, estimate(kernel("global"), h100).features
    assert staged["warp_latency_cycles"] == direct["warp_latency_cycles"]
    assert staged["latency_cycles"] > direct["latency_cycles"]
