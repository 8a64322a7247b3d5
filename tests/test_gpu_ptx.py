"""PTX parsing, loops and trip counts (Algorithm 3), bank conflicts and occupancy, without a GPU."""

import json
from pathlib import Path

import pytest

from tuna import machine
from tuna.gpu import banks, full_tier, loops, ptx
from tuna.gpu.ir_tier import occupancy
from tuna.ir import Access, Index

FIXTURES = Path(__file__).parent / "fixtures" / "ptx"
CASES = sorted(p.stem for p in FIXTURES.glob("*.ptx"))


def _fixture(stem):
    return ptx.parse((FIXTURES / f"{stem}.ptx").read_text()), json.loads((FIXTURES / f"{stem}.json").read_text())


def test_fixtures_are_present():
    assert len(CASES) >= 4, "regenerate with tests/fixtures/make_ptx_fixtures.py"


@pytest.mark.parametrize("stem", CASES)
def test_static_counts_and_trip_counts(stem):
    (kernel,), meta = _fixture(stem)
    assert kernel.name == meta["kernel"]
    assert kernel.counts() == meta["static_counts"]
    found = loops.find_loops(kernel, meta["threads"])
    assert [lp.trips for lp in found.loops] == meta["trip_counts"]
    # Every trip count is the extent of a loop of the CUDA source nvcc compiled.
    assert set(meta["trip_counts"]) <= set(meta["cuda_for_loops"])


@pytest.mark.parametrize("stem", CASES)
def test_multiply_adds_per_thread_match_the_tir(stem):
    """PTX multiply-adds per thread x threads launched = the TIR's multiply-adds."""
    (kernel,), meta = _fixture(stem)
    found = loops.find_loops(kernel, meta["threads"])
    assert full_tier.multiply_adds(kernel, found) == pytest.approx(meta["tir_multiply_adds_per_thread"])


@pytest.mark.parametrize("stem", CASES)
def test_maxntid_is_the_block_size(stem):
    (kernel,), meta = _fixture(stem)
    assert kernel.maxntid[0] == meta["threads"]


_LOOP = """
.visible .entry k(
    .param .u64 k_param_0
)
.maxntid 64, 1, 1
{
    .reg .pred %p<4>;
    .reg .b32 %r<20>;
    .reg .f32 %f<8>;
    ld.param.u64 %rd1, [k_param_0];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, 0;
    mov.f32 %f1, 0f00000000;
$L__BB0_1:
    mov.u32 %r3, 10;
$L__BB0_2:
    ld.shared.v4.f32 {%f2, %f3, %f4, %f5}, [%r1];
    fma.rn.f32 %f1, %f2, %f3, %f1;
    add.s32 %r3, %r3, -2;
    setp.ne.s32 %p1, %r3, 0;
    @%p1 bra $L__BB0_2;
    add.s32 %r2, %r2, 3;
    setp.lt.u32 %p2, %r2, 30;
    @%p2 bra.uni $L__BB0_1;
    st.global.f32 [%rd1], %f1;
    bar.sync 0;
    ret;
}
"""


def test_parser_reads_guards_vectors_and_labels():
    (k,) = ptx.parse(_LOOP)
    assert k.name == "k" and k.params == ("k_param_0",) and k.maxntid == (64, 1, 1)
    assert set(k.labels) == {"$L__BB0_1", "$L__BB0_2"}
    lds = next(i for i in k.instructions if i.klass == "ld_shared")
    assert lds.width == 4 and lds.dests == ("%f2", "%f3", "%f4", "%f5") and lds.srcs == ("%r1",)
    bra = next(i for i in k.instructions if i.klass == "branch")
    assert bra.guard == "%p1" and not bra.negated and ptx.branch_target(bra) == "$L__BB0_2"
    st = next(i for i in k.instructions if i.klass == "st_global")
    assert st.dests == () and set(st.srcs) == {"%rd1", "%f1"}
    assert {"fma", "bar", "ret", "int", "mov", "ld_param"} <= set(k.counts())


def test_trip_counts_from_registers_nested():
    (k,) = ptx.parse(_LOOP)
    found = loops.find_loops(k)
    outer, inner = found.loops
    assert (outer.trips, outer.init, outer.step, outer.bound) == (10, 0, 3, 30)
    assert (inner.trips, inner.step, inner.bound) == (5, -2, 0)
    assert found.dynamic(k, "fma") == 50
    assert found.dynamic(k, "ld_shared", lanes=True) == 200
    assert found.dynamic(k, "st_global") == 1


_TOP_TEST = """
.visible .entry t()
{
    mov.u32 %r1, 0;
$L_head:
    setp.ge.s32 %p1, %r1, 12;
    @%p1 bra $L_exit;
    fma.rn.f32 %f1, %f1, %f1, %f1;
    add.s32 %r1, %r1, 4;
    bra.uni $L_head;
$L_exit:
    ret;
}
"""


def test_loop_with_its_exit_test_at_the_top():
    (k,) = ptx.parse(_TOP_TEST)
    (lp,) = loops.find_loops(k).loops
    # The header's test runs 4 times (0, 4, 8, 12); the body 3 times: the header weighs 4.
    assert lp.trips == 4


_BY_THREAD = """
.visible .entry d()
.maxntid 8, 1, 1
{
    mov.u32 %r1, %tid.x;
$L_loop:
    fma.rn.f32 %f1, %f1, %f1, %f1;
    add.s32 %r1, %r1, 1;
    setp.lt.s32 %p1, %r1, 8;
    @%p1 bra $L_loop;
    ret;
}
"""


def test_a_loop_bounded_by_the_thread_index_takes_its_longest_thread():
    (k,) = ptx.parse(_BY_THREAD)
    (lp,) = loops.find_loops(k).loops
    assert lp.thread_dependent and lp.trips == 8  # thread 0 runs 8 times, thread 7 once


def test_unknown_trip_count_is_reported():
    text = _TOP_TEST.replace("setp.ge.s32 %p1, %r1, 12", "setp.ge.s32 %p1, %r1, %r9")
    (k,) = ptx.parse(text)
    (lp,) = loops.find_loops(k).loops
    assert lp.trips is None


# --- bank conflicts -----------------------------------------------------------------------


def _warp(stride_words, width=1, elem=4):
    return [tuple((t * stride_words + v) * elem for v in range(width)) for t in range(32)]


@pytest.mark.parametrize(
    ("addresses", "degree"),
    [
        (_warp(1), 1),  # consecutive words: one per bank
        (_warp(2), 2),  # stride 2: 16 banks with 2 words each
        (_warp(32), 32),  # stride 32: one bank, 32 words
        (_warp(0), 1),  # all threads the same word: a broadcast
        ([(4 * (t // 4),) for t in range(32)], 1),  # groups of 4 share a word: broadcast within groups
        (_warp(4, width=4), 1),  # 128-bit loads of consecutive float4: 4 passes is the minimum
        (_warp(8, width=4), 2),  # float4 with a stride of 2 float4
        (_warp(33), 1),  # padded rows: stride 33 is conflict-free
    ],
)
def test_conflict_degree_is_exact(addresses, degree):
    assert banks.conflict_degree(addresses) == degree


def test_eight_byte_elements_span_two_banks():
    doubles = [(8 * t,) for t in range(32)]  # 256 bytes: 64 words, 2 per bank, 2 passes minimum
    assert banks.wavefronts(doubles, bytes_per_element=8) == 2
    assert banks.conflict_degree(doubles, bytes_per_element=8) == 1


def test_affine_tir_access_of_the_first_warp():
    # A[ty, tx * 2] of a 16x64 float buffer with 16 x 8 threads: tx 0..15 -> stride 2 words, 2-way.
    acc = Access("A", False, (Index((("ty", 1),)), Index((("tx", 2),))), (16, 64), 4, "shared")
    warp = banks.affine_warp_access(acc, [("tx", 16), ("ty", 8)])
    assert warp.byte_addresses[1] == (8,) and warp.byte_addresses[16] == (256,)
    assert banks.conflict_degree(warp.byte_addresses) == 2
    opaque = Access("A", False, (Index(opaque=("tx",)),), (64,), 4, "shared")
    assert banks.affine_warp_access(opaque, [("tx", 32)]) is None


def test_mean_degree_weights_by_executions():
    ok = banks.WarpAccess("A", False, tuple(_warp(1)), 4, executions=3)
    bad = banks.WarpAccess("B", False, tuple(_warp(32)), 4, executions=1)
    st = banks.WarpAccess("A", True, tuple(_warp(2)), 4)
    assert banks.mean_degree([ok, bad, st]) == ((3 * 1 + 32) / 4, 2)


# --- occupancy ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gpu", "threads", "regs", "smem", "expected"),
    [
        # By hand with the rules of CUDA 13.0's cuda_occupancy.h: registers allocated per warp in
        # units of 256 within 4 sub-partitions of 16 K registers; shared memory plus 1 KiB per block
        # (8.x/9.x) in 128-byte units; 64 warps and 32 blocks per SM.
        ("a100", 128, 110, 33280, 4),  # 3584 regs/warp: 4 warps per sub-partition -> 16 -> 4 blocks; smem 4
        ("a100", 256, 64, 0, 4),  # 2048 regs/warp: 8 per sub-partition -> 32 warps -> 4 blocks of 8
        ("a100", 64, 254, 0, 4),  # 8192 regs/warp: 2 per sub-partition -> 8 warps -> 4 blocks of 2
        ("a100", 96, 40, 0, 16),  # 1280 regs/warp: 12 per sub-partition -> 48 warps -> 16 blocks of 3
        ("v100", 128, 32, 40 * 1024, 2),  # 96 KiB / 40 KiB (no reservation on 7.x)
        ("h100", 512, 32, 100 * 1024, 2),  # (100 KiB + 1 KiB) into 228 KiB; threads allow 4
        ("a100", 1024, 65, 0, 0),  # 2304 regs/warp x 32 warps > 64 K registers per block: cannot launch
    ],
)
def test_occupancy_from_ptxas_resources(gpu, threads, regs, smem, expected):
    assert occupancy(threads, regs, smem, machine.preset(gpu)) == expected
