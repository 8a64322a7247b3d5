"""The model of LLVM's code generation (tuna.cpu.codegen) against what TVM's LLVM emits."""

import collections

import pytest
import tvm
from tvm import s_tir, te

from tuna import integration, machine
from tuna.cpu import ir_tier
from tuna.cpu.codegen import codegen_loops, register_buffers, tvm_unrolled
from tuna.integration.workloads import parse_tvmscript, tvm_target
from tuna.ir import LoopKind, walk


def _updates(k: int, r: int, parallel: bool = True) -> tvm.IRModule:
    """C[r, j] += A[r, k] * B[k, j]: a rolled loop over j around k x r unrolled updates, in a
    parallel loop as MetaSchedule's CPU schedules have (or a serial one)."""
    return parse_tvmscript(f'''
# from tvm.script import tirx as T
@T.prim_func(s_tir=True)
def main(A: T.Buffer((64, 64), "float32"), B: T.Buffer((64, 64), "float32"), C: T.Buffer((64, 64), "float32")):
    T.func_attr({{"tirx.noalias": True}})
    for p in T.{'parallel' if parallel else 'serial'}(4):
        for j in range(64):
            for k in T.unroll({k}):
                for r in T.unroll({r}):
                    with T.sblock("u"):
                        C[r, j] = C[r, j] + A[r, k] * B[k, j]
''', "updates")


@pytest.mark.parametrize(("k", "parallel"), [(36, True), (40, True), (40, False)])
def test_the_loop_vectorizer_bound_on_body_accesses_matches_llvm(k, parallel):
    zen4 = machine.preset("zen4")
    mod = _updates(k, 8, parallel)
    vectorized = k == 36 or not parallel
    kernel = integration.kernel_from_module(mod)
    (stmt, loops), = [(s, lp) for s, lp in walk(kernel.body) if s.op_count("fma")]
    predicted = codegen_loops(stmt, loops, zen4, frozenset(tvm_unrolled(kernel)))[1].kind
    asm = tvm.compile(mod, target=tvm_target(zen4)).mod.inspect_source("s")
    fmas = collections.Counter(line.split()[0] for line in asm.splitlines() if "vfmadd" in line)
    packed = sum(n for op, n in fmas.items() if op.endswith("ps"))
    scalar = sum(n for op, n in fmas.items() if op.endswith("ss"))
    # 36 x 8 copies access 348 addresses, 40 x 8 access 384 (MAX_LOOP_VECTORIZER_ACCESSES),
    # which only a parallel loop's body is limited to.
    assert (packed > 0, scalar > 0) == (vectorized, not vectorized)
    assert predicted == (LoopKind.VECTORIZED if vectorized else LoopKind.SERIAL)


def _depthwise(width: int, pad_inside: bool) -> tvm.IRModule:
    """A 3 x 3 depthwise convolution as MetaSchedule's CPU schedules have it: a rolled loop over
    ``width`` output columns around the unrolled window of three channels, whose accumulators
    (a cache-write stage) are allocated in that loop; the padded input is computed in the
    parallel loop, or with ``pad_inside`` in the columns' loop as well."""
    a = te.placeholder((12, 4, width), name="A")
    k = te.placeholder((12, 3, 3), name="K")
    p = te.compute((12, 6, width + 2), lambda c, y, x: tvm.tirx.if_then_else(
        tvm.tirx.all(y >= 1, y <= 4, x >= 1, x <= width), a[c, y - 1, x - 1], 0.0), name="P")
    ry, rx = te.reduce_axis((0, 3), name="ry"), te.reduce_axis((0, 3), name="rx")
    o = te.compute((12, 4, width), lambda c, y, x: te.sum(p[c, y + ry, x + rx] * k[c, ry, rx], axis=[ry, rx]), name="O")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, k, o]).with_attr("tirx.noalias", True)}))
    block = sch.get_sblock("O")
    acc = sch.cache_write(block, 0, "global")
    c, y, x, r1, r2 = sch.get_loops(block)
    c0, c1 = sch.split(c, [4, 3])
    sch.reorder(c0, y, x, r1, r2, c1)
    outer = sch.fuse(c0, y)
    sch.parallel(outer)
    sch.annotate(outer, "pragma_auto_unroll_max_step", 64)  # as MetaSchedule unrolls: TVM, explicitly
    sch.annotate(outer, "pragma_unroll_explicit", 1)
    sch.reverse_compute_at(acc, x)
    sch.decompose_reduction(block, r1)
    sch.compute_at(sch.get_sblock("P"), x if pad_inside else outer)
    return sch.mod


@pytest.mark.parametrize(("width", "pad_inside"), [(14, False), (7, False), (14, True)])
def test_accumulators_allocated_in_the_loop_leave_it_to_the_loop_vectorizer_as_llvm_does(width, pad_inside):
    zen4 = machine.preset("zen4")
    mod = _depthwise(width, pad_inside)
    kernel = integration.kernel_from_module(mod)
    homes = {alloc.name: alloc.loop for alloc in kernel.allocations}
    assert homes["O_global"] == "x"  # (compaction placed the accumulators in the columns' loop)
    (stmt, loops), = [(s, lp) for s, lp in walk(kernel.body) if s.op_count("fma")]
    tvm_loops = frozenset(tvm_unrolled(kernel))
    columns = [lp.kind for lp in codegen_loops(stmt, loops, zen4, tvm_loops, homes) if lp.var == "x"]
    asm = tvm.compile(mod, target=tvm_target(zen4)).mod.inspect_source("s")
    fmas = collections.Counter(line.split()[0][-2:] for line in asm.splitlines() if "vfmadd" in line)
    # Private accumulators vectorize the columns (LLVM: 27 packed FMAs, 7 or 14 lanes in 16);
    # a padded input recomputed in every column keeps them scalar.
    assert (fmas["ps"] > 0, fmas["ss"] > 0) == (not pad_inside, pad_inside)
    assert columns == [LoopKind.SERIAL if pad_inside else LoopKind.VECTORIZED]
    if not pad_inside:  # (without the allocations the model took them for scalar code)
        assert [lp.kind for lp in codegen_loops(stmt, loops, zen4, tvm_loops) if lp.var == "x"] == [LoopKind.SERIAL]
    feats = ir_tier.features(kernel, zen4)  # one vector FMA of `width` lanes per tap and channel
    assert feats["lanes_fma"] / feats["fma"] == (1 if pad_inside else width)


def _padded_rows(pad_in_reduction: bool) -> tvm.IRModule:
    """Four output rows of a matrix product over a padded input, computed where it is used:
    in the reduction loop (four elements, at subscripts only an unrolled loop varies) or,
    with ``pad_in_reduction`` false, once for the parallel loop's iteration (the reduction
    loop's 32 steps among its subscripts)."""
    a, w = te.placeholder((64, 32), name="A"), te.placeholder((32, 16), name="W")
    p = te.compute((66, 32), lambda r, c: tvm.tirx.if_then_else(tvm.tirx.all(r >= 1, r <= 64), a[r - 1, c], 0.0),
                   name="P")
    rc = te.reduce_axis((0, 32), name="rc")
    o = te.compute((64, 16), lambda r, co: te.sum(p[r + 1, rc] * w[rc, co], axis=[rc]), name="O")
    sch = s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, w, o]).with_attr("tirx.noalias", True)}))
    block = sch.get_sblock("O")
    rows, cols, red = sch.get_loops(block)
    outer, inner = sch.split(rows, [16, 4])
    sch.reorder(outer, red, inner, cols)
    sch.parallel(outer)
    sch.unroll(inner)
    sch.vectorize(cols)
    sch.decompose_reduction(block, red)
    sch.compute_at(sch.get_sblock("P"), red if pad_in_reduction else outer)
    return sch.mod


@pytest.mark.parametrize("pad_in_reduction", [True, False])
def test_buffers_at_constant_subscripts_stay_in_registers_as_in_llvm(pad_in_reduction):
    zen4 = machine.preset("zen4")
    mod = _padded_rows(pad_in_reduction)
    kernel = integration.kernel_from_module(mod)
    in_registers = register_buffers(kernel, zen4, frozenset(tvm_unrolled(kernel)))
    asm = tvm.compile(mod, target=tvm_target(zen4)).mod.inspect_source("s")
    stack_vectors = [ln for ln in asm.splitlines() if ln.split()[:1] == ["vmovups"] and "%zmm" in ln and "(%rsp)" in ln]
    # LLVM stores the padded rows to the stack only where a rolled loop indexes them.
    assert (not stack_vectors) == pad_in_reduction
    assert in_registers == ({"P"} if pad_in_reduction else set())
    stores = ir_tier.features(kernel, zen4)["store"]
    assert stores == 128 if pad_in_reduction else stores > 128  # only the output: 16 x 4 rows, zeroed and summed
