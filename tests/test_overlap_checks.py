"""LLVM's run-time overlap checks (:mod:`tuna.cpu.overlap_checks`) on hand-written control flow.

The shape is that of a versioned copy loop: a check block branching to a scalar version,
the vector version, both joining a shared remainder that tests the distance again. The
checked-in object with the real check is in ``test_joint.py``.
"""

import pytest

from tuna.cpu.overlap_checks import never_taken
from tuna.ir import BasicBlock, Instruction, MachineCode


def _ins(at, text, writes=()):
    mnemonic, _, operands = text.partition(" ")
    return Instruction(at, mnemonic, operands.strip(), (), tuple(writes))


def _versioned(isa="x86_64", sub="sub r12, r15", compare="cmp r12, 0x80", branch="jb", scalar_writes=(),
               again="cmp r12, 0x7f", again_branch="ja"):
    reg = compare.split()[1].rstrip(",")
    return MachineCode(isa, "f", (
        BasicBlock(0x00, (_ins(0x00, sub, [reg, "rflags"]), _ins(0x04, compare, ["rflags"]),
                          _ins(0x08, f"{branch} 0x40")), (0x40, 0x10)),
        BasicBlock(0x10, (_ins(0x10, "vmovups ymmword ptr [rsi], ymm2"), _ins(0x14, "jmp 0x20")), (0x20,)),
        BasicBlock(0x20, (_ins(0x20, again, ["rflags"]), _ins(0x24, f"{again_branch} 0x50")), (0x50, 0x30)),
        BasicBlock(0x30, (_ins(0x30, "vmovss dword ptr [rsi], xmm2"), _ins(0x34, "jmp 0x50")), (0x50,)),
        BasicBlock(0x40, (_ins(0x40, "xor r15d, r15d", ["r15", *scalar_writes]), _ins(0x44, "jmp 0x20")), (0x20,)),
        BasicBlock(0x50, (_ins(0x50, "ret"),), ()),
    ))


def test_the_check_and_the_later_test_of_its_distance_send_nothing_to_the_scalar_version():
    assert never_taken(_versioned()) == {(0x00, 0x40), (0x20, 0x30)}


def test_a_check_branching_to_the_vector_version_is_always_taken():
    assert never_taken(_versioned(branch="jae")) == {(0x00, 0x10), (0x20, 0x30)}


def test_a_path_that_rewrites_the_distance_keeps_the_later_test_a_branch():
    assert never_taken(_versioned(scalar_writes=["r12"])) == {(0x00, 0x40)}


@pytest.mark.parametrize("sub, compare", [
    ("sub r12d, r15d", "cmp r12d, 0x80"),  # 32-bit: an index's range test, not a pointer distance
    ("sub r12, 0x10", "cmp r12, 0x80"),  # a constant subtracted: not a distance between pointers
    ("sub r12, r15", "cmp r12, 0x70"),  # not the bytes of a vector iteration (a power of two)
    ("sub r12, r15", "cmp r12, 0x8"),  # less than one vector register
    ("lea r12, [r15 + 0x10]", "cmp r12, 0x80"),  # not a subtraction
])
def test_other_unsigned_tests_are_branches(sub, compare):
    assert never_taken(_versioned(sub=sub, compare=compare, again=compare.replace("0x80", "0x7f"))) == set()


def test_aarch64_spelling():
    code = _versioned("aarch64", "sub x12, x10, x11", "cmp x12, #0x40", "b.lo", again="cmp x12, #0x3f",
                      again_branch="b.hi")
    assert never_taken(code) == {(0x00, 0x40), (0x20, 0x30)}
