import dataclasses
import itertools
import math
from collections import Counter, OrderedDict

import pytest

from tuna import machine
from tuna.cpu import cache, ir_tier
from tuna.cpu.cache import data_movement
from tuna.cpu.codegen import codegen_loops, unrolled_loops
from tuna.cpu.ir_tier import INSTRUCTION_KINDS, estimate, features, statement_counts
from tuna.ir import Access, Allocation, Index, KernelIR, Loop, LoopKind, Statement, walk


def _matmul(n, m, k, vec=16, kind=LoopKind.VECTORIZED, unroll=0, streams=0):
    """C[i, j] += A[i, kk] * B[kk, j] with j split into (jo, ji) and ji vectorized (and, with
    ``streams``, that many more buffers read like B whose values nothing uses)."""
    jo = m // vec
    c_idx = (Index((("i", 1),)), Index((("jo", vec), ("ji", 1))))
    b_idx = (Index((("kk", 1),)), Index((("jo", vec), ("ji", 1))))
    stmt = Statement(
        "C",
        (
            Access("C", False, c_idx, (n, m), 4),
            Access("A", False, (Index((("i", 1),)), Index((("kk", 1),))), (n, k), 4),
            Access("B", False, b_idx, (k, m), 4),
            *(Access(f"D{s}", False, b_idx, (k, m), 4) for s in range(streams)),
            Access("C", True, c_idx, (n, m), 4),
        ),
        (("fma", 1),),
    )
    ji = Loop("ji", vec, kind, (stmt,))
    kk = Loop("kk", k, LoopKind.SERIAL, (ji,))
    jl = Loop("jo", jo, LoopKind.SERIAL, (kk,))
    return KernelIR("mm", (Loop("i", n, LoopKind.SERIAL, (jl,), unroll_max_step=unroll),))


def test_fma_lanes_equal_the_multiply_adds_of_the_matmul():
    zen4 = machine.preset("zen4")
    kernel = _matmul(64, 64, 64)
    est = estimate(kernel, zen4)
    assert est.features["lanes_fma"] == 64 * 64 * 64
    assert est.features["fma"] == 64 * 64 * 64 // 16  # one 512-bit FMA per 16 lanes


def _reduce_innermost(n, k, inner_kind=LoopKind.SERIAL):
    """C[i, j] += A[i, kk] * B[kk, j] with the reduction loop kk innermost."""
    stmt = Statement(
        "C",
        (
            Access("C", False, (Index((("i", 1),)), Index((("j", 1),))), (n, n), 4),
            Access("A", False, (Index((("i", 1),)), Index((("kk", 1),))), (n, k), 4),
            Access("B", False, (Index((("kk", 1),)), Index((("j", 1),))), (k, n), 4),
            Access("C", True, (Index((("i", 1),)), Index((("j", 1),))), (n, n), 4),
        ),
        (("fma", 1),),
    )
    kk = Loop("kk", k, inner_kind, (stmt,))
    return KernelIR("mm", (Loop("i", n, LoopKind.SERIAL, (Loop("j", n, LoopKind.SERIAL, (kk,)),)),))


def test_vectorizing_helps_and_narrow_vectors_cost_more_instructions():
    zen4, a53 = machine.preset("zen4"), machine.preset("cortex-a53")
    vec = estimate(_matmul(64, 64, 64), zen4)
    scalar = estimate(_reduce_innermost(64, 64), zen4)
    assert vec.features["fma"] == 64 * 64 * 64 // 16
    assert scalar.features["fma"] == 64 * 64 * 64  # a float reduction: LLVM keeps it scalar
    assert vec.seconds < scalar.seconds
    assert estimate(_matmul(64, 64, 64), a53).features["fma"] == 64 * 64 * 64 // 4


def test_llvm_vectorizes_contiguous_serial_loops_itself():
    zen4, a53 = machine.preset("zen4"), machine.preset("cortex-a53")
    # TVM left ji serial, but C and B are contiguous in it and A does not change: LLVM's loop
    # vectorizer produces the same vector FMAs as a vectorized ji.
    serial = estimate(_matmul(64, 64, 64, kind=LoopKind.SERIAL), zen4)
    assert serial.features["fma"] == estimate(_matmul(64, 64, 64), zen4).features["fma"]
    assert estimate(_matmul(64, 64, 64, kind=LoopKind.SERIAL), a53).features["fma"] == 64**3  # in-order: as written
    # A small innermost reduction loop is unrolled completely; the spatial loop j around it
    # is then the innermost rolled loop, and contiguous: vectorized.
    (stmt, loops), = list(walk(_reduce_innermost(64, 4).body))
    kinds = [lp.kind for lp in codegen_loops(stmt, loops, zen4)]
    assert kinds == [LoopKind.SERIAL, LoopKind.VECTORIZED, LoopKind.UNROLLED]
    # A reduction loop too long to unroll stays rolled and scalar, and nothing is vectorized.
    (stmt, loops), = list(walk(_reduce_innermost(8, 512).body))
    assert [lp.kind for lp in codegen_loops(stmt, loops, zen4)] == [LoopKind.SERIAL] * 3


def test_unrolled_copies_with_a_reduction_inside_are_not_slp_vectorized():
    zen4 = machine.preset("zen4")
    # With 8 columns, LLVM unrolls j as well as the reduction kk inside it: what is left for
    # the SLP vectorizer, whose copies of j are interleaved with kk's loads and stores of C.
    (stmt, loops), = list(walk(_reduce_innermost(8, 4).body))
    assert [lp.kind for lp in codegen_loops(stmt, loops, zen4)] == [LoopKind.SERIAL, LoopKind.UNROLLED,
                                                                     LoopKind.UNROLLED]
    assert statement_counts(stmt, loops, zen4)["fma"] == 8 * 8 * 4
    # TVM's unrolling of the same nest: j's copies stay scalar too.
    (stmt, loops), = list(walk(_reduce_innermost(64, 4).body))
    tvm = frozenset({"j", "kk"})
    assert [lp.kind for lp in codegen_loops(stmt, loops, zen4, tvm)] == [LoopKind.SERIAL] * 3
    # Copies with no reduction inside them (kk runs around ji) are vectorized.
    (stmt, loops), = list(walk(_matmul(8, 16, 4, kind=LoopKind.UNROLLED).body))
    assert codegen_loops(stmt, loops, zen4)[-1].kind == LoopKind.VECTORIZED


def _updates_around(k, r):
    """C[r, j] += A[r, k] * B[k, j]: a rolled loop over j around k x r explicitly unrolled copies,
    in a parallel loop."""
    c = (Index((("r", 1),)), Index((("j", 1),)))
    stmt = Statement("C", (Access("C", False, c, (r, 64), 4),
                           Access("A", False, (Index((("r", 1),)), Index((("k", 1),))), (r, k), 4),
                           Access("B", False, (Index((("k", 1),)), Index((("j", 1),))), (k, 64), 4),
                           Access("C", True, c, (r, 64), 4)), (("fma", 1),))
    inner = Loop("k", k, LoopKind.UNROLLED, (Loop("r", r, LoopKind.UNROLLED, (stmt,)),))
    return KernelIR("updates", (Loop("p", 4, LoopKind.PARALLEL, (Loop("j", 64, LoopKind.SERIAL, (inner,)),)),))


def test_the_loop_vectorizer_leaves_a_loop_with_a_large_unrolled_body_scalar():
    zen4 = machine.preset("zen4")
    # Compiled by TVM 0.27's LLVM, 36 x 8 copies (348 accesses: 288 of A, 36 of B, 8 + 2 x 8
    # of C) were vectorized and 40 x 8 (384) were not.
    kinds = {}
    for k in (36, 40):
        (stmt, loops), = list(walk(_updates_around(k, 8).body))
        kinds[k] = codegen_loops(stmt, loops, zen4)[1].kind
        assert statement_counts(stmt, loops, zen4)["fma"] == 4 * 64 * k * 8 // (16 if k == 36 else 1)
    assert kinds == {36: LoopKind.VECTORIZED, 40: LoopKind.SERIAL}


def _exp_rows(unroll, sibling=False):
    """B[i, j] = exp(A[i, j]) over 8 x 128, i annotated with an auto-unroll step (and a sibling
    statement under j that TVM's unroller counts too)."""
    idx = (Index((("i", 1),)), Index((("j", 1),)))
    exp = Statement("B", (Access("A", False, idx, (8, 128), 4), Access("B", True, idx, (8, 128), 4)), (("math", 1),))
    body = (exp,)
    if sibling:
        t = Access("T", True, (Index((("i", 1),)), Index((("j", 1),))), (8, 128), 4)
        body = (Statement("T", (Access("A", False, idx, (8, 128), 4), t), (("add", 1),)), exp)
    return KernelIR("exp", (Loop("i", 8, LoopKind.PARALLEL, (Loop("j", 128, LoopKind.SERIAL, body),),
                                 unroll_max_step=unroll),))


def test_library_calls_stay_scalar_in_unrolled_copies_and_vectorize_in_rolled_loops():
    zen4 = machine.preset("zen4")
    kinds = {}
    for unroll in (0, 128):
        (stmt, loops), = list(walk(_exp_rows(unroll).body))
        kinds[unroll] = [lp.kind for lp in codegen_loops(stmt, loops, zen4)][1]
        counts = statement_counts(stmt, loops, zen4)
        assert counts["math"] == 8 * 128
        around = counts["call_block_ops"] / counts["math"]
        # A rolled loop: LLVM vectorizes around the calls, each lane moved out and back in.
        assert around == (2 / 16 + 5 if unroll == 0 else 2)
    # TVM's unrolled copies: the SLP vectorizer has no vector expf to merge them into.
    assert kinds == {0: LoopKind.VECTORIZED, 128: LoopKind.SERIAL}


def test_tvm_unrolling_counts_sibling_statements():
    # Alone, j's 128 exp statements fit the step limit of 128; with a sibling under j, TVM's
    # UnrollLoop counts 256 and leaves j rolled, which the kernel's set tells the IR tier.
    from tuna.cpu.codegen import tvm_unrolled

    for sibling, unrolled in ((False, {"j"}), (True, set())):
        kernel = _exp_rows(128, sibling)
        tvm = frozenset(tvm_unrolled(kernel))
        exp, loops = list(walk(kernel.body))[-1]
        assert unrolled_loops(loops, tvm) == unrolled
        assert unrolled_loops(loops) == {"j"}  # the statement's own loops alone cannot tell
        kind = codegen_loops(exp, loops, machine.preset("zen4"), tvm)[1].kind
        assert kind == (LoopKind.VECTORIZED if sibling else LoopKind.SERIAL)


def _fused_row(elements_of_b: int | None) -> KernelIR:
    """Per row i (parallel): B[i, j] = exp(A[i, j]) over 16 unrolled j, then C[i, k] = B[i, k] * D[k]
    over 16 unrolled k, in one straight-line body; B allocated in the row (``elements_of_b``
    elements) or at the root (None)."""
    row = (Index((("i", 1),)), Index((("j", 1),)))
    exp = Statement("B", (Access("A", False, row, (8, 16), 4), Access("B", True, row, (8, 16), 4)), (("math", 1),))
    row2 = (Index((("i", 1),)), Index((("k", 1),)))
    scale = Statement("C", (
        Access("B", False, row2, (8, 16), 4), Access("D", False, (Index((("k", 1),)),), (16,), 4),
        Access("C", True, row2, (8, 16), 4),
    ), (("mul", 1),))
    body = (Loop("j", 16, LoopKind.UNROLLED, (exp,)), Loop("k", 16, LoopKind.UNROLLED, (scale,)))
    allocs = (Allocation("B", "global", elements_of_b, 4, "i"),) if elements_of_b else ()
    return KernelIR("fused", (Loop("i", 8, LoopKind.PARALLEL, body),), allocations=allocs, params=("A", "D", "C"))


@pytest.mark.parametrize(
    ("preset", "elements_of_b", "reloads"),
    [
        # A, B, C, D, the row counter and offset, the parallel loop's bound: 7 live, 6 preserved.
        ("zen4", None, 1),
        ("zen4", 255, 0),  # B on the stack (under 1 KiB), addressed from the stack pointer
        # B from the runtime's workspace: its address, and the function table and device id
        # for freeing it, 9 live; the excess is reloaded after each call.
        ("zen4", 256, 3),
        ("graviton2", 256, 0),  # AArch64 preserves 10
    ],
)
def test_values_live_across_library_calls_beyond_the_preserved_registers_are_reloaded(
    preset, elements_of_b, reloads
):
    mach = machine.preset(preset)
    kernel = _fused_row(elements_of_b)
    feats = features(kernel, mach)
    (exp, exp_loops), (scale, scale_loops) = walk(kernel.body)
    calls = statement_counts(exp, exp_loops, mach)
    sibling = statement_counts(scale, scale_loops, mach)
    assert calls["math"] == 8 * 16 and calls["call_block_ops"] == 2 * 8 * 16  # load, store
    # Per thread (a core's share of the 8 rows): the statement making the calls, the one
    # unrolled into the same straight-line run, and the reloads after every call.
    run = calls["call_block_ops"] + sum(sibling[k] for k in INSTRUCTION_KINDS) + reloads * calls["math"]
    share = 1 / min(8, mach.threads)
    assert feats["calls"] == calls["math"] * share
    assert feats["call_block_ops"] == pytest.approx(run * share)


def test_loads_of_a_buffer_rewritten_in_a_loop_are_not_hoisted_out_of_it():
    """T[j] = A[i, j] then B[i, k] = 2 T[k], T allocated in i (TVM's compaction leaves its subscript
    free of i): the second statement reloads T every row, as it holds a new row each time (128
    rows: a loop LLVM keeps rolled)."""
    row = (Index((("i", 1),)), Index((("j", 1),)))
    copy = Statement(
        "T", (Access("A", False, row, (128, 16), 4), Access("T", True, (Index((("j", 1),)),), (16,), 4)), ()
    )
    out = (Index((("i", 1),)), Index((("k", 1),)))
    scale = Statement(
        "B", (Access("T", False, (Index((("k", 1),)),), (16,), 4), Access("B", True, out, (128, 16), 4)), (("mul", 1),)
    )
    body = (Loop("j", 16, LoopKind.VECTORIZED, (copy,)), Loop("k", 16, LoopKind.VECTORIZED, (scale,)))
    rows = Loop("i", 128, LoopKind.SERIAL, body)
    kernel = KernelIR("rows", (rows,), allocations=(Allocation("T", "global", 16, 4, "i"),))
    zen4 = machine.preset("zen4")
    (_, _), (stmt, loops) = walk(kernel.body)
    assert statement_counts(stmt, loops, zen4)["load"] == 1  # an invariant vector, loaded once
    assert statement_counts(stmt, loops, zen4, homes={"T": "i"})["load"] == 128
    assert features(kernel, zen4)["load"] == 128 + 128  # A's rows and T's, each one vector a row


def test_reduction_chains_overlap_when_independent_work_sits_inside():
    zen4 = machine.preset("zen4")
    # kk innermost (long, rolled): every FMA waits for the previous one, 4 cycles each.
    (stmt, loops), = list(walk(_reduce_innermost(8, 512).body))
    chained = statement_counts(stmt, loops, zen4)
    assert chained["chain"] == 8 * 8 * 512 * zen4.latency["fma"]
    # kk outside a vectorized spatial loop of 4 vectors: four independent accumulators.
    (stmt, loops), = list(walk(_matmul(8, 64, 512, vec=64).body))
    assert statement_counts(stmt, loops, zen4)["chain"] == 8 * 512 * zen4.latency["fma"]



def _window_sum(loops):
    """acc[c] += X[c, r0, r1] over a 7 x 7 window, in the order of ``loops`` ((var, extent))."""
    x = Access("X", False, (Index((("c", 1),)), Index((("r0", 1),)), Index((("r1", 1),))), (2048, 7, 7), 4)
    acc = (Index((("c", 1),)),)
    stmt = Statement("sum", (Access("acc", False, acc, (2048,), 4), x, Access("acc", True, acc, (2048,), 4)),
                     (("add", 1),))
    return stmt, tuple(Loop(v, n, LoopKind.SERIAL, ()) for v, n in loops)


def test_a_reduction_loop_around_the_innermost_one_extends_its_chain():
    """Consecutive iterations of r0 update the same accumulator as r1's do: a 7 x 7 window is one
    chain of 49 updates, and instances of it overlap only as far as the reorder buffer holds whole
    windows (1.6 on Zen 4); with the channel loop between r0 and r1, r1's instances of seven
    updates belong to different channels and overlap as far as the buffer holds them."""
    zen4 = machine.preset("zen4")
    lat, rob = zen4.latency["fma"], ir_tier._reorder_window("zen4")
    size = 1 + 3  # operations and accesses of one update
    nested = statement_counts(*_window_sum((("c", 2048), ("r0", 7), ("r1", 7))), zen4)["chain"]
    assert nested == pytest.approx(2048 * 49 * lat / (rob / (49 * size)))
    between = statement_counts(*_window_sum((("r0", 7), ("c", 2048), ("r1", 7))), zen4)["chain"]
    assert between == pytest.approx(2048 * 49 * lat / (rob / (7 * size)))
    assert nested > 5 * between


def test_an_accumulator_allocated_in_a_loop_is_fresh_in_each_of_its_iterations():
    """Compaction leaves a per-channel sum one element whose subscript is free of the channel loop;
    the channel loop is no reduction loop, so channels' 7-update chains still overlap."""
    zen4 = machine.preset("zen4")
    part = Access("P", False, (Index((("c", 1),)), Index((("r", 1),))), (2048, 7), 4)
    stmt = Statement("sum", (Access("S", False, (Index(),), (1,), 4), part, Access("S", True, (Index(),), (1,), 4)),
                     (("add", 1),))
    loops = (Loop("c", 2048, LoopKind.PARALLEL, ()), Loop("r", 7, LoopKind.SERIAL, ()))
    fresh = statement_counts(stmt, loops, zen4, homes={"S": "c"})["chain"]
    assert fresh == pytest.approx(2048 * 7 * zen4.latency["fma"] / (ir_tier._reorder_window("zen4") / (7 * 4)))
    assert statement_counts(stmt, loops, zen4)["chain"] == 2048 * 7 * zen4.latency["fma"]  # one long chain

def test_math_functions_are_library_calls_per_lane():
    zen4 = machine.preset("zen4")
    stmt = Statement(
        "E",
        (
            Access("A", False, (Index((("i", 64), ("j", 1))),), (4096,), 4),
            Access("E", True, (Index((("i", 64), ("j", 1))),), (4096,), 4),
        ),
        (("math", 2),),  # tanh: two expf calls a lane
    )
    nest = Loop("i", 64, LoopKind.PARALLEL, (Loop("j", 64, LoopKind.VECTORIZED, (stmt,)),))
    est = estimate(KernelIR("tanh", (nest,)), zen4)
    # Per lane, whatever the vector width; per thread of TVM's pool (one on the preset's guest).
    assert est.features["calls"] == 2 * 64 * 64 / zen4.threads


def test_auto_unroll_marks_inner_loops_within_the_step_limit():
    kernel = _matmul(8, 64, 4, unroll=64)
    (stmt, loops), = list(walk(kernel.body))
    assert unrolled_loops(loops) == {"kk", "jo"}  # 4 * 4 = 16 <= 64, then i (8) makes 128
    counts = statement_counts(stmt, loops, machine.preset("zen4"))
    # In the unrolled tile A[i, kk] is loaded once per kk and C once per jo, for each i; the
    # 16 vectors of B do not change with i and stay in registers (24 live vectors <= 32).
    assert counts["load"] == 8 * (4 + 4) + 16


def _lru_misses(kernel: KernelIR, capacity: int, line: int, sets: int = 1) -> int:
    """Cache lines brought in by an LRU cache of ``sets`` sets running the loop nest (1: fully
    associative; every buffer starts at the first line of a set)."""
    caches = [OrderedDict() for _ in range(sets)]
    misses = 0
    for stmt, loops in walk(kernel.body):
        for point in itertools.product(*(range(lp.extent) for lp in loops)):
            env = {lp.var: v for lp, v in zip(loops, point)}
            for acc in stmt.accesses:
                flat = 0
                for ix, size in zip(acc.indices, acc.shape):
                    flat = flat * size + ix.const + sum(c * env.get(v, 0) for v, c in ix.coeffs)
                key = (acc.buffer, flat * acc.dtype_bytes // line)
                lru = caches[key[1] % sets]
                if key in lru:
                    lru.move_to_end(key)
                else:
                    misses += 1
                    lru[key] = True
                    if len(lru) > capacity // line // sets:
                        lru.popitem(last=False)
    return misses


@pytest.mark.parametrize(("n", "capacity"), [(16, 32 * 1024), (32, 32 * 1024), (32, 2 * 1024)])
def test_data_movement_against_an_lru_simulation(n, capacity):
    kernel = _matmul(n, n, n, vec=16, kind=LoopKind.SERIAL)
    lines = _lru_misses(kernel, capacity, 64)
    _, moved = data_movement(kernel.body[0], capacity, 64)
    model = sum(moved.values()) / 64
    if 3 * n * n * 4 <= capacity:
        assert model == lines  # everything fits: compulsory misses exactly
    else:
        assert lines / 2 <= model <= lines * 2


def _two_passes(rows: int, cols: int) -> KernelIR:
    """A row statistic and a pass that uses it, as two nests: s[i] += X[i, k], then
    Y[i, j] = X[i, j] - s[i] (a layer norm written as separate passes over its rows)."""
    def acc(buf, write, *dims):
        shape = (rows, cols)[:len(dims)] if buf != "s" else (rows,)
        return Access(buf, write, tuple(Index(((d, 1),)) for d in dims), shape, 4)

    total = Statement("sum", (acc("X", False, "i", "k"), acc("s", False, "i"), acc("s", True, "i")), (("add", 1),))
    centre = Statement("centre", (acc("X", False, "i2", "j"), acc("s", False, "i2"), acc("Y", True, "i2", "j")),
                       (("add", 1),))
    return KernelIR("passes", (Loop("i", rows, LoopKind.SERIAL, (Loop("k", cols, LoopKind.SERIAL, (total,)),)),
                               Loop("i2", rows, LoopKind.SERIAL, (Loop("j", cols, LoopKind.SERIAL, (centre,)),))))


def test_a_later_nest_finds_what_an_earlier_one_left_in_the_caches():
    # 64 KiB of X read by both passes: Zen 4's L2 and L3 hold it, so the second pass fills
    # them with Y alone, as an LRU cache does; the 32 KiB L1 does not, and both passes fill it.
    kernel = _two_passes(64, 256)
    zen4 = machine.preset("zen4")
    feats = features(kernel, zen4)
    for level in zen4.caches:
        lru = _lru_misses(kernel, level.size_bytes, level.line_bytes) * level.line_bytes
        if level.level == 1:
            assert feats["L1_fill_bytes"] == pytest.approx(lru, rel=0.02)
            assert feats["L1_fill_bytes"] > 3 * 64 * 256 * 4  # X twice and Y
        else:
            assert feats[f"L{level.level}_fill_bytes"] == lru == (2 * 64 * 256 + 64) * 4
    assert feats["dram_bytes"] == feats["L3_fill_bytes"]
    assert ir_tier.memory_terms(kernel, zen4)["L2_fill_bytes"] == feats["L2_fill_bytes"]


@pytest.mark.parametrize("row", [1024, 1040, 512, 2048 + 16])
def test_set_conflicts_against_a_set_associative_lru_simulation(row):
    # s[j] += X[k, j]: for each of 16 columns, a sweep down 64 rows of ``row`` floats. The
    # columns share lines, so a fully associative 32 KiB cache misses each line once; rows
    # 4 KiB apart put all 64 lines in one set of Zen 4's 8-way, 64-set L1, and every sweep
    # misses them all again. Rows a line further apart spread over the sets.
    x = Access("X", False, (Index((("k", 1),)), Index((("j", 1),))), (64, row), 4)
    acc = (Index((("j", 1),)),)
    stmt = Statement("colsum", (x, Access("s", False, acc, (16,), 4), Access("s", True, acc, (16,), 4)),
                     (("add", 1),))
    kernel = KernelIR("colsum", (Loop("j", 16, LoopKind.SERIAL, (Loop("k", 64, LoopKind.SERIAL, (stmt,)),)),))
    l1 = machine.preset("zen4").caches[0]
    sets = cache.known_sets(l1)
    assert sets == 64
    _, moved = data_movement(kernel.body[0], l1.size_bytes, l1.line_bytes, sets)
    assert sum(moved.values()) // 64 == _lru_misses(kernel, l1.size_bytes, 64, sets)
    _, assoc = data_movement(kernel.body[0], l1.size_bytes, l1.line_bytes)
    assert sum(assoc.values()) // 64 == _lru_misses(kernel, l1.size_bytes, 64) == 65


def test_parallel_loops_divide_over_the_runtimes_threads_with_imbalance():
    kernel = _matmul(64, 64, 64)
    outer = kernel.body[0]
    par = KernelIR("mm", (Loop(outer.var, outer.extent, LoopKind.PARALLEL, outer.body),))
    # The preset's 2-vCPU guest: TVM's pool has one thread, so a parallel loop runs serially
    # (and still starts a parallel region).
    guest = machine.preset("zen4")
    assert guest.threads == 1
    alone = estimate(par, guest)
    assert alone.features["compute_cycles"] == estimate(kernel, guest).features["compute_cycles"]
    assert alone.features["launches"] == 1 and alone.features["threads_used"] == 1
    zen4 = dataclasses.replace(guest, threads=2)  # as with TVM_NUM_THREADS=2
    serial, parallel = estimate(kernel, zen4), estimate(par, zen4)
    assert parallel.features["threads_used"] == 2
    assert parallel.features["compute_cycles"] == pytest.approx(serial.features["compute_cycles"] / 2)
    odd = KernelIR("mm", (Loop("i", 3, LoopKind.PARALLEL, outer.body),))
    assert math.isclose(estimate(odd, zen4).features["compute_cycles"] * 3 / 4, estimate(
        KernelIR("mm", (Loop("i", 3, LoopKind.SERIAL, outer.body),)), zen4).features["compute_cycles"] / 2)


def test_a_nests_core_cycles_are_its_two_busiest_resources_added():
    # Out of order: the busiest bound plus the second busiest (ir_tier._core_cycles); candidates
    # tied on the FP pipes are then ordered by their loads. In order: every bound adds up.
    zen4, a53 = machine.preset("zen4"), machine.preset("cortex-a53")
    for kernel in (_matmul(64, 64, 64), _matmul(64, 64, 64, vec=4), _reduce_innermost(32, 64)):
        f = features(kernel, zen4)
        bounds = sorted(f[k] for k in ("fp_cycles", "load_cycles", "store_cycles", "frontend_cycles", "chain"))
        assert bounds[-2] > 0
        assert f["compute_cycles"] == pytest.approx(bounds[-1] + bounds[-2])
        g = features(kernel, a53)
        assert g["compute_cycles"] == pytest.approx(g["fp_cycles"] + g["load_cycles"] + g["store_cycles"]
                                                     + g["chain"] / 2)
    # The same arithmetic and chains, more loads: predicted slower; the busiest bound alone (the
    # chain here) tied them.
    lean, heavy = _matmul(64, 64, 64), _matmul(64, 64, 64, streams=2)
    fl, fh = features(lean, zen4), features(heavy, zen4)
    assert fl["fp_cycles"] == fh["fp_cycles"] and fl["chain"] == fh["chain"] > fh["load_cycles"]
    assert fl["load_cycles"] < fh["load_cycles"]
    assert fl["compute_cycles"] < fh["compute_cycles"]


def test_integer_divisions_are_front_end_instructions_not_fp_divisions():
    # Index arithmetic (ir_tier.INTEGER_DIVISION_INSTRUCTIONS): a multiply-high and a shift each,
    # nothing on the FP pipes, where a floating-point division occupies the divider.
    zen4 = machine.preset("zen4")

    def pad(ops):
        stmt = Statement("pad", (Access("A", False, (Index((("i", 1),)),), (1024,), 4),
                                 Access("B", True, (Index((("i", 1),)),), (1024,), 4)), ops)
        return KernelIR("pad", (Loop("i", 1024, LoopKind.SERIAL, (stmt,)),))

    plain, indexed, divided = (features(pad(ops), zen4) for ops in ((("cmp", 1),), (("cmp", 1), ("idiv", 2)),
                                                                   (("cmp", 1), ("div", 2))))
    assert indexed["fp_cycles"] == plain["fp_cycles"] == 0 < divided["fp_cycles"]
    extra = (indexed["frontend_cycles"] - plain["frontend_cycles"]) * zen4.issue_width
    assert extra == pytest.approx(ir_tier.INTEGER_DIVISION_INSTRUCTIONS * 2 * 1024)


def _register_tile(rows: int) -> tuple[Statement, tuple[Loop, ...]]:
    """GMM-1's candidate 115 in small: C[i, j] += A[i, k] * B[k, j] with ``rows`` rows of
    2-lane vectors accumulated inside a rolled k loop."""
    c_idx = (Index((("io", rows), ("ii", 1))), Index((("jv", 1),)))
    stmt = Statement(
        "C",
        (
            Access("B", False, (Index((("k", 1),)), Index((("jv", 1),))), (256, 2), 4),
            Access("A", False, (Index((("io", rows), ("ii", 1))), Index((("k", 1),))), (64, 256), 4),
            Access("C", False, c_idx, (64, 2), 4),
            Access("C", True, c_idx, (64, 2), 4),
        ),
        (("fma", 1),),
    )
    loops = (
        Loop("io", 64 // rows, LoopKind.SERIAL, ()),
        Loop("k", 256, LoopKind.SERIAL, ()),
        Loop("ii", rows, LoopKind.SERIAL, ()),
        Loop("jv", 2, LoopKind.VECTORIZED, ()),
    )
    return stmt, loops


def test_loops_around_a_vectorized_loop_are_the_innermost_llvm_unrolls():
    zen4 = machine.preset("zen4")
    stmt, loops = _register_tile(4)
    kinds = [lp.kind for lp in codegen_loops(stmt, loops, zen4)]
    # TVM's vector loop is vector instructions: LLVM unrolls the 4 rows around it, not k.
    assert kinds == [LoopKind.SERIAL, LoopKind.SERIAL, LoopKind.UNROLLED, LoopKind.VECTORIZED]
    counts = statement_counts(stmt, loops, zen4)
    # The 4 accumulator vectors stay in registers over k: stored once per row block.
    assert counts["store"] == 64
    # A loop too large to unroll stays a loop, its accumulators stored every k iteration.
    stmt, loops = _register_tile(64)
    assert [lp.kind for lp in codegen_loops(stmt, loops, zen4)][2] == LoopKind.SERIAL
    assert statement_counts(stmt, loops, zen4)["store"] == 64 * 256


def _row_statistic(varying_input: bool) -> KernelIR:
    """A layer norm's variance placed where each output element is: per row r, in the loop
    over its elements e, var = sum of sq[r, x] over x, then out[r, e] = v[r, e] * var."""
    sq_idx = (Index((("r", 1),)), Index((("x", 1),)))
    init = Statement("var_init", (Access("var", True, (Index(),), (1,), 4),), ())
    update = Statement(
        "var_update",
        (
            Access("sq", False, sq_idx, (8, 32), 4),
            Access("var", False, (Index(),), (1,), 4),
            Access("var", True, (Index(),), (1,), 4),
        ),
        (("add", 1),),
    )
    out = Statement(
        "out",
        (
            Access("v", False, (Index((("r", 1),)), Index((("e", 1),))), (8, 768), 4),
            Access("var", False, (Index(),), (1,), 4),
            Access("out", True, (Index((("r", 1),)), Index((("e", 1),))), (8, 768), 4),
        ),
        (("mul", 1),),
    )
    body = [init, Loop("x", 32, LoopKind.SERIAL, (update,)), out]
    if varying_input:  # sq rewritten per element: the sum changes with e and stays in the loop
        square = Statement("sq", (
            Access("v", False, (Index((("r", 1),)), Index((("e", 1),))), (8, 768), 4),
            Access("sq", True, (Index((("r", 1),)), Index((("y", 1),))), (8, 32), 4),
        ), (("mul", 1),))
        body.insert(0, Loop("y", 32, LoopKind.SERIAL, (square,)))
    e = Loop("e", 768, LoopKind.SERIAL, tuple(body))
    allocations = [Allocation("var", "local", 1, 4, "e")]
    if varying_input:  # (an intermediate rewritten per element: compaction allocates it in e)
        allocations.append(Allocation("sq", "local", 32, 4, "e"))
    return KernelIR("ln", (Loop("r", 8, LoopKind.PARALLEL, (e,)),), tuple(allocations))


def test_statements_invariant_in_a_rolled_loop_are_counted_once_for_it():
    from tuna.cpu.codegen import hoisted_loops, tvm_unrolled

    zen4 = machine.preset("zen4")

    def hoisted(kernel):
        walked = list(walk(kernel.body))
        return dict(zip((s.name for s, _ in walked), hoisted_loops(walked, zen4, frozenset(tvm_unrolled(kernel)))))

    kernel = _row_statistic(varying_input=False)
    # The sum over x (unrolled by LLVM) and its initialisation leave the loop over e; the
    # output, which changes with e, does not; nothing leaves the parallel loop.
    assert hoisted(kernel) == {"var_init": {"e"}, "var_update": {"e"}, "out": frozenset()}
    assert features(kernel, zen4)["add"] == 8 * 32
    # When a statement that changes with e writes what the sum reads, the sum stays.
    kernel = _row_statistic(varying_input=True)
    assert hoisted(kernel)["var_update"] == frozenset()
    assert features(kernel, zen4)["add"] == 8 * 768 * 32


def _carried(width: int, tiles: int, home: str = "i") -> tuple[Statement, tuple[Loop, ...], dict]:
    """C[i, j * width + v] += A[i, k] * B[k, j * width + v]: ``tiles`` accumulators of ``width``
    lanes in a register tile (j unrolled, v vectorized by TVM) inside a rolled k loop, the
    accumulator buffer allocated in loop ``home``."""
    c_idx = (Index((("j", width), ("v", 1))),)
    n = tiles * width
    stmt = Statement(
        "acc",
        (
            Access("acc", False, c_idx, (n,), 4),
            Access("A", False, (Index((("i", 1),)), Index((("k", 1),))), (64, 64), 4),
            Access("B", False, (Index((("k", 1),)), Index((("j", width), ("v", 1)))), (64, n), 4),
            Access("acc", True, c_idx, (n,), 4),
        ),
        (("fma", 1),),
    )
    loops = (
        Loop("i", 64, LoopKind.SERIAL, ()),
        Loop("k", 64, LoopKind.SERIAL, ()),
        Loop("j", tiles, LoopKind.UNROLLED, ()),
        Loop("v", width, LoopKind.VECTORIZED, ()),
    )
    return stmt, loops, {"acc": home}


def test_accumulators_of_odd_vector_widths_are_carried_lane_by_lane():
    zen4 = machine.preset("zen4")
    # 4 accumulators of 28 lanes over k: 112 lanes moved twice per back edge (the loop body,
    # 8 vector loads of B, 1 of A and 8 FMAs, is unrolled 4 times: 17 x 4 <= 72), 80 of them
    # spilled.
    stmt, loops, homes = _carried(28, 4)
    counts = statement_counts(stmt, loops, zen4, homes=homes)
    assert counts["lane_moves"] == 2 * 112 * 64 * 64 // 4
    assert counts["spill"] == (112 - 32) * 64 * 64 // 4
    # Widths that are powers of two, accumulators allocated anew in every k iteration, and
    # vectors narrower than the machine's are carried as vectors.
    for stmt, loops, homes in (_carried(32, 4), _carried(28, 4, home="k"), _carried(12, 4)):
        assert statement_counts(stmt, loops, zen4, homes=homes)["lane_moves"] == 0


_CARRIED = """
@T.prim_func
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, {n}), "float32"), C: T.Buffer((64, {n}), "float32")):
    T.func_attr({{"tirx.noalias": True}})
    for i in T.serial(64):
        acc = T.alloc_buffer(({n},), "float32", scope="local")
        for j in T.unroll({tiles}):
            for v in T.vectorized({width}):
                acc[j * {width} + v] = T.float32(0)
        for k in T.serial(64):
            for j in T.unroll({tiles}):
                for v in T.vectorized({width}):
                    acc[j * {width} + v] = acc[j * {width} + v] + A[i, k] * B[k, j * {width} + v]
        for j in T.serial({tiles}):
            for v in T.vectorized({width}):
                C[i, j * {width} + v] = acc[j * {width} + v]
"""


@pytest.mark.parametrize(("width", "power_of_two", "tiles"), [(40, 32, 2), (20, 16, 3), (44, 32, 1), (24, 16, 6)])
def test_lane_moves_of_carried_accumulators_match_the_machine_code(width, power_of_two, tiles):
    """Differential: the instructions the IR tier adds for odd-width accumulators (against the
    same kernel at a power-of-two width) are within a factor 1.5 of what LLVM's code adds
    (the full tier's dynamic count of the compiled kernels; shapes other than those the
    constants were read from)."""
    from tuna.integration import parse_tvmscript
    from tuna.integration.analysis import estimate_module

    zen4 = machine.preset("zen4")

    def instructions(width):
        mod = parse_tvmscript(_CARRIED.format(n=width * tiles, tiles=tiles, width=width), "accumulators")
        ir = estimate_module(mod, zen4, "ir").features
        return ir["frontend_cycles"] * zen4.issue_width, estimate_module(mod, zen4, "full").features["dyn_instructions"]

    (odd_ir, odd_code), (even_ir, even_code) = instructions(width), instructions(power_of_two)
    assert 1 / 1.5 < (odd_ir - even_ir) / (odd_code - even_code) < 1.5


def _conv_rows(width: int, row: int, tvm_vectorized: bool = False):
    """``acc[f, x] += I[c, x] * W[f, c]`` over c (rolled, 32), x (``width``) and f (8 rows,
    unrolled): a 1x1 conv2d's register tile, its rows ``row`` floats apart."""
    acc = (Index((("f", 1),)), Index((("x", 1),)))
    stmt = Statement("conv", (
        Access("I", False, (Index((("c", 1),)), Index((("x", 1),))), (32, width), 4),
        Access("W", False, (Index((("f", 1),)), Index((("c", 1),))), (8, 32), 4),
        Access("acc", False, acc, (8, row), 4), Access("acc", True, acc, (8, row), 4),
    ), (("fma", 1),))
    x = Loop("x", width, LoopKind.VECTORIZED if tvm_vectorized else LoopKind.SERIAL, ())
    return stmt, (Loop("c", 32, LoopKind.SERIAL, ()), x, Loop("f", 8, LoopKind.UNROLLED, ()))


@pytest.mark.parametrize(("preset", "fail", "forward"), [("zen4", 26, 7), ("emeraldrapids", 25, 5),
                                                        ("graniterapids", 23, 5)])
def test_masked_accumulator_rows_chain_through_memory(preset, fail, forward):
    # LLVM vectorizes the 14-wide x loop itself with a mask; the masked rows stay in memory
    # across c, and rows 56 bytes apart overlap each other's 64-byte stores: every update
    # waits for the store queue to drain (the machine's failed forwarding, measured by
    # scripts/microbench/zen4_memory.c, plus the FMA's 4 cycles).
    m = machine.preset(preset)
    masked = statement_counts(*_conv_rows(14, 14), m)["chain"]
    assert masked == 32 * 8 * (fail + 4)
    # Rows a whole vector apart forward: one round trip (forwarding and FMA) a reduction step.
    assert statement_counts(*_conv_rows(14, 16), m)["chain"] == 32 * (forward + 4)
    # TVM's own 14-lane vectors, and trip counts a vector width divides, need no mask: the
    # accumulators stay in registers and only the FMA chain counts.
    for stmt, loops in (_conv_rows(14, 14, tvm_vectorized=True), _conv_rows(12, 12), _conv_rows(16, 16)):
        assert statement_counts(stmt, loops, m)["chain"] < masked / 10


def test_avx2_masked_rows_are_stored_at_every_update_and_hold_dispatch(monkeypatch):
    # On Zen 3 (AVX2) LLVM ends each 14-float row in a masked VMASKMOVPS store, kept in memory
    # across c: one a row and reduction step (8 rows x 32 steps), each 71 dispatch slots more
    # than a store (scripts/microbench/avx2_masked_stores.zen3.txt).
    zen3 = machine.preset("zen3")
    assert statement_counts(*_conv_rows(14, 14), zen3)["masked_stores"] == 32 * 8
    for stmt, loops in (_conv_rows(14, 14, tvm_vectorized=True), _conv_rows(12, 12), _conv_rows(16, 16)):
        assert statement_counts(stmt, loops, zen3)["masked_stores"] == 0
    assert statement_counts(*_conv_rows(14, 14), machine.preset("zen4"))["masked_stores"] == 0  # mask registers

    stmt, loops = _conv_rows(14, 14)
    nest = stmt
    for lp in reversed(loops):
        nest = dataclasses.replace(lp, body=(nest,))

    def frontend() -> float:
        feats = Counter()
        ir_tier._nest_terms(nest, zen3, feats, frozenset(), {})
        return feats["frontend_cycles"]

    priced = frontend()
    monkeypatch.setattr(ir_tier, "_masked_store_slots", lambda preset, bits: 0)
    assert priced - frontend() == pytest.approx(32 * 8 * 71 / zen3.issue_width)


def _head_updates(heads: int, head_floats: int):
    """``C[h, i] += A[h, k] * B[k]`` over k (rolled, 64), then h (``heads``, rolled) and i (8,
    unrolled): per reduction step, accumulators in memory ``head_floats`` floats apart."""
    acc = (Index((("h", 1),)), Index((("i", 1),)))
    stmt = Statement("update", (
        Access("A", False, (Index((("h", 1),)), Index((("k", 1),))), (heads, 64), 4),
        Access("B", False, (Index((("k", 1),)),), (64,), 4),
        Access("C", False, acc, (heads, head_floats), 4), Access("C", True, acc, (heads, head_floats), 4),
    ), (("fma", 1),))
    return stmt, (Loop("k", 64, LoopKind.SERIAL, ()), Loop("h", heads, LoopKind.SERIAL, ()),
                  Loop("i", 8, LoopKind.UNROLLED, ()))


def test_accumulators_a_multiple_of_4_kib_apart_serialise():
    # Zen 4 (scripts/microbench/zen4_alias.c): beyond 7 in-flight stores that agree with a load
    # in their low 12 bits, each costs 50 cycles a reduction step. LLVM vectorizes i, and each
    # step updates 12 vectors 64 KiB apart: one group of 12 aliasing updates.
    zen4 = machine.preset("zen4")
    counts = statement_counts(*_head_updates(12, 16384), zen4)
    assert counts["alias"] == pytest.approx(64 * (12 - 7) * 50)
    assert counts["chain"] >= counts["alias"]
    # 64 bytes further apart, or few enough heads: no aliasing, the chain is the FMA's.
    for heads, floats in ((12, 16384 + 16), (6, 16384)):
        assert statement_counts(*_head_updates(heads, floats), zen4)["alias"] == 0
    # Zen 5 (zen4_alias.zen5.txt): beyond 9, 40 cycles each.
    assert statement_counts(*_head_updates(12, 16384), machine.preset("zen5"))["alias"] == pytest.approx(64 * 3 * 40)
    assert statement_counts(*_head_updates(9, 16384), machine.preset("zen5"))["alias"] == 0
    # A machine without the measurements has no such term.
    assert statement_counts(*_head_updates(12, 16384), machine.preset("graviton2"))["alias"] == 0


def _transposed_taps(kind: LoopKind):
    """``out[h, co] += select((h + rh) % 2 == 0, x[(h + rh) // 2, ci], 0) * w[rh, ci, co]``: a
    stride-2 transposed convolution's taps, h and rh of the given kind inside ci (rolled)."""
    guard = (Index((("h", 1), ("rh", 1))), 2)
    out = (Index((("h", 1),)), Index((("co", 1),)))
    stmt = Statement("taps", (
        Access("x", False, (Index((), 0, ("h", "rh")), Index((("ci", 1),))), (8, 64), 4),
        Access("w", False, (Index((("rh", 1),)), Index((("ci", 1),)), Index((("co", 1),))), (4, 64, 16), 4),
        Access("out", False, out, (8, 16), 4), Access("out", True, out, (8, 16), 4),
    ), (("cmp", 2), ("fma", 1)), guards=(guard,))
    return stmt, (Loop("ci", 64, LoopKind.SERIAL, ()), Loop("co", 16, LoopKind.SERIAL, ()),
                  Loop("rh", 4, kind, ()), Loop("h", 8, kind, ()))


def test_guards_that_unrolled_copies_decide_fold_away():
    zen4 = machine.preset("zen4")
    folded = statement_counts(*_transposed_taps(LoopKind.UNROLLED), zen4)
    kept = statement_counts(*_transposed_taps(LoopKind.SERIAL), zen4)
    # Unrolled by TVM, half the copies are ruled out and the rest lose their condition, which
    # leaves LLVM free to vectorize co: 16 lanes, one vector FMA a copy.
    assert folded["lanes_fma"] == 64 * 16 * 4 * 8 / 2
    assert folded["fma"] == 64 * 4 * 8 / 2
    # Decided in rolled loops, every iteration tests and selects, one scalar FMA each.
    assert kept["lanes_fma"] == kept["fma"] == 64 * 16 * 4 * 8
    assert kept["cmp"] == 2 * kept["fma"] and folded["cmp"] == 0
