"""The model of LLVM's code generation (tuna.cpu.codegen) against what TVM's LLVM emits."""

import collections

import pytest
import tvm

from tuna import integration, machine
from tuna.cpu.codegen import codegen_loops, tvm_unrolled
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
