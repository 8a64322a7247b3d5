"""Fuzzing of tuna's readers: every bad input ends in a TunaError that names it, never in
another exception, a hang or a crash.

Each target feeds one reader inputs built from real ones (the checked-in PTX, object code,
TVMScript and database fixtures, the shipped pools), mutated, and random bytes and text.
The default suite runs each target on ``TUNA_FUZZ_EXAMPLES`` inputs (small, derandomized,
so CI sees the same inputs every run); ``scripts/fuzz.sh N`` runs N random inputs per target
and writes the figures (inputs, failures, seconds per target) to ``TUNA_FUZZ_REPORT``. Inputs
that once failed are kept as explicit examples (:data:`REGRESSIONS`) and as small files in
``tests/fixtures/fuzz/``.
"""

from __future__ import annotations

import base64
import copy
import gzip
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tuna.errors import TunaError

pytestmark = pytest.mark.fuzz

FIXTURES = Path(__file__).parent / "fixtures"
FUZZ_FIXTURES = FIXTURES / "fuzz"
POOLS = Path(__file__).parent.parent / "tuna" / "data" / "pools"
#: Inputs per target (small in CI; scripts/fuzz.sh sets it large).
EXAMPLES = int(os.environ.get("TUNA_FUZZ_EXAMPLES", "40"))
#: Seconds one input may take before it counts as a hang.
TIME_LIMIT = float(os.environ.get("TUNA_FUZZ_TIMEOUT", "30"))
#: Where a long run writes its figures; set, a failure is counted and the run goes on.
REPORT = os.environ.get("TUNA_FUZZ_REPORT")
#: Set in the child process a TVM-touching target runs in: the file each input is written to first.
CHILD_LAST = os.environ.get("TUNA_FUZZ_CHILD_LAST")

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    # The same inputs in every CI run; the long run draws fresh ones.
    derandomize=not REPORT,
    database=None,
    suppress_health_check=list(HealthCheck),
    print_blob=True,
)


#: Inputs of the current target that a reader accepted (the rest ended in a TunaError or failed).
_ACCEPTED = [0]


class Hang(BaseException):
    """An input that ran past :data:`TIME_LIMIT` (a BaseException: tuna's ``except Exception`` must not hide it)."""


class UnnamedError(AssertionError):
    """A TunaError whose message does not name the input."""


def _alarm(signum, frame):
    raise Hang(f"no answer within {TIME_LIMIT} s")


def _named(err: TunaError, *names: str) -> None:
    """UnnamedError unless the message of ``err`` holds one of ``names`` (or, with none given, anything)."""
    message = str(err)
    if not message.strip() or (names and not any(n in message for n in names)):
        raise UnnamedError(f"the message does not name the input ({', '.join(names) or 'empty'}): {message!r}") from err


def _problem(call: Callable[[Any], Any], value: Any) -> str | None:
    """What went wrong in ``call(value)``: None when it returns (counted as accepted) or raises a
    TunaError naming its input."""
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        call(value)
        _ACCEPTED[0] += 1
    except TunaError:
        return None
    except Hang as err:
        return f"hang: {err}"
    except Exception as err:
        where = traceback.extract_tb(err.__traceback__)[-1]
        return f"{type(err).__name__}: {str(err)[:300]} (at {Path(where.filename).name}:{where.lineno})"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return None


def _short(value: Any, limit: int = 400) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _in_child(test: str) -> None:
    """Run ``test`` of this file in a child process, so that a crash of TVM (a segfault, an abort)
    fails the test with the input that crashed it instead of ending the test run."""
    with tempfile.TemporaryDirectory(prefix="tuna-fuzz-") as tmp:
        last = Path(tmp) / "last.pickle"
        env = {**os.environ, "TUNA_FUZZ_CHILD_LAST": str(last)}
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                               f"{__file__}::{test}"], env=env, capture_output=True, text=True)
        if proc.returncode < 0 or proc.returncode > 128:
            crashed = pickle.loads(last.read_bytes()) if last.exists() else "(unknown)"
            raise AssertionError(f"{test} crashed the process (status {proc.returncode}); the input: {_short(crashed)}")
        assert proc.returncode == 0, f"{test} failed in its child process:\n{proc.stdout[-4000:]}{proc.stderr[-2000:]}"


def _fuzz(target: str, strategy: st.SearchStrategy, call: Callable[[Any], Any]) -> None:
    """Run ``call`` on inputs from ``strategy`` and on the target's :data:`REGRESSIONS`; fail on any problem."""
    failures: list[tuple[str, str]] = []
    count = 0
    _ACCEPTED[0] = 0

    def one(value):
        nonlocal count
        count += 1
        if CHILD_LAST:  # written before the call: a crash leaves it behind for the parent
            Path(CHILD_LAST).write_bytes(pickle.dumps(value))
        problem = _problem(call, value)
        if problem is None:
            return
        if REPORT:
            failures.append((problem, _short(value)))
            return
        raise AssertionError(f"fuzz target {target}: {problem}\ninput: {_short(value)}")

    run = given(strategy)(one)
    regressions = REGRESSIONS.get(target, ())
    for value in regressions() if callable(regressions) else regressions:
        run = example(value)(run)
    start = time.perf_counter()
    try:
        FUZZ(run)()
    finally:
        if REPORT:
            _record(target, count, failures, time.perf_counter() - start)
    assert not failures, f"fuzz target {target}: {len(failures)} failures, the first: {failures[0]}"


def _record(target: str, count: int, failures: list[tuple[str, str]], seconds: float) -> None:
    path = Path(REPORT)
    data = json.loads(path.read_text()) if path.exists() else {}
    kinds: dict[str, int] = {}
    for problem, _ in failures:
        kinds[problem.split(" (at ")[0][:120]] = kinds.get(problem.split(" (at ")[0][:120], 0) + 1
    data[target] = {"inputs": count, "accepted": _ACCEPTED[0], "failures": len(failures), "seconds": round(seconds, 1),
                    "kinds": kinds, "first": failures[:5]}
    path.write_text(json.dumps(data, indent=1))


# ---------------------------------------------------------------- mutation of real inputs

#: Text pieces a text mutation inserts: the syntax the readers split on, numbers at the edges.
_TEXT_TOKENS = (
    "{", "}", "(", ")", "[", "]", ";", ":", ",", ".", "\n", "\t", " ", "//", "/*", "*/", '"', "'", "\\", "\x00",
    ".entry k(", ".param .u64 p", ".maxntid 0", ".maxntid 99999999999999999999, 1, 1", ".shared .f32 s[0]",
    ".shared .align 4 .b8 s[4294967296]", "@%p1 bra $L__BB0_1", "@!%p2 ", "bra $L__BB0_2", "$L__BB0_1:", "ret",
    "ld.global.v4.f32", "mov.u32 %r1, %tid.x", "add.s32 %r1, %r1, -1", "setp.lt.s32 %p1, %r1, 0x7fffffff",
    "0x", "0f7F800000", "-2147483648", "18446744073709551616", "1e309", "nan", "T.", "@T.prim_func", "def main(",
    "T.grid(0, 10)", "for i in range(", "T.Buffer((", "T.sblock(", "T.axis.spatial(", "T.int32(", "lambda", "\u00e9",
    "\ud7ff", "if ", "else:", "return", "    ", "import os", "x" * 300, "[" * 5000, "(" * 5000, "9" * 5000,
)


def _mutations(seed: Any, piece: st.SearchStrategy) -> st.SearchStrategy:
    """``seed`` (str or bytes) after 1..8 edits: delete, insert ``piece``, overwrite, duplicate, truncate."""

    @st.composite
    def edit(draw):
        data = seed
        for _ in range(draw(st.integers(1, 8))):
            n = len(data)
            i = draw(st.integers(0, n))
            j = draw(st.integers(i, min(n, i + draw(st.sampled_from((1, 4, 64, 4096))))))
            op = draw(st.sampled_from(("delete", "insert", "overwrite", "duplicate", "truncate")))
            if op == "delete":
                data = data[:i] + data[j:]
            elif op == "insert":
                data = data[:i] + draw(piece) + data[i:]
            elif op == "overwrite":
                new = draw(piece)
                data = data[:i] + new + data[i + len(new):]
            elif op == "duplicate":
                data = data[:j] + data[i:j] + data[j:]
            else:
                data = data[:i]
        return data

    return edit()


def _text_piece() -> st.SearchStrategy:
    return st.one_of(st.sampled_from(_TEXT_TOKENS), st.text(max_size=16))


def _mutated_text(seeds: list[str]) -> st.SearchStrategy:
    return st.sampled_from(seeds).flatmap(lambda s: _mutations(s, _text_piece()))


#: Byte values that break binary formats: sizes, offsets and counts at their limits.
_EDGE_INTS = (0, 1, 2, 7, 8, 0x40, 0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**63 - 1, 2**64 - 1)


def _byte_piece() -> st.SearchStrategy:
    ints = st.tuples(st.sampled_from(_EDGE_INTS), st.sampled_from(("<B", "<H", "<I", "<Q"))).map(
        lambda v: struct.pack(v[1], v[0] & ((1 << (8 * struct.calcsize(v[1]))) - 1)))
    return st.one_of(ints, st.binary(min_size=1, max_size=16))


@cache
def _elf_regions(blob: bytes) -> tuple[int, ...]:
    """Offsets of an ELF object's headers: the file header, the section headers, the symbol table."""
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(blob))
    offsets = list(range(0, 64))
    shoff, count, size = elf["e_shoff"], elf["e_shnum"], elf["e_shentsize"]
    offsets += range(shoff, shoff + count * size)
    for sec in elf.iter_sections():
        if sec["sh_type"] in ("SHT_SYMTAB", "SHT_RELA"):
            offsets += range(sec["sh_offset"], sec["sh_offset"] + min(sec["sh_size"], 2048))
    return tuple(offsets)


def _mutated_object(seed: bytes) -> st.SearchStrategy:
    """An ELF object with headers, section headers or symbols overwritten, or edited anywhere."""

    @st.composite
    def edit(draw):
        data = bytearray(seed)
        for _ in range(draw(st.integers(1, 6))):
            at = draw(st.sampled_from(_elf_regions(seed))) if draw(st.booleans()) else draw(
                st.integers(0, len(data) - 1))
            new = draw(_byte_piece())
            data[at:at + len(new)] = new
        return bytes(data)

    return st.one_of(edit(), _mutations(seed, _byte_piece()))


def _json_piece() -> st.SearchStrategy:
    """Bytes that break a JSON reader: deep nesting, integers past Python's digit limit, bad UTF-8."""
    edges = (b"[" * 100_000, b'{"a":' * 50_000, b"9" * 5000, b"-" + b"1" * 4400, b"NaN", b"-Infinity", b"1e999",
             b'"\\ud800"', b"\xff\xfe", b"\x00")
    return st.one_of(st.sampled_from(edges), _byte_piece())


def _json_value() -> st.SearchStrategy:
    scalars = st.one_of(
        st.none(), st.booleans(), st.integers(), st.sampled_from((0, -1, 2**31, 2**64, 10**30)),
        st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
        st.sampled_from(("", "llvm", "cuda", "GetSBlock", "Split", "SamplePerfectTile", "b0", "l1", "v2", "main")),
    )
    return st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                        max_leaves=8)


def _mutated_json(seed: Any) -> st.SearchStrategy:
    """``seed`` with 1..4 values replaced, removed, duplicated or emptied at random depths."""

    @st.composite
    def edit(draw):
        data = copy.deepcopy(seed)
        for _ in range(draw(st.integers(1, 4))):
            parent, key, node = None, None, data
            # A random walk down: deep values (inside traces) are reached as often as shallow ones.
            while isinstance(node, (list, dict)) and node and (parent is None or draw(st.integers(0, 9)) < 8):
                keys = list(node) if isinstance(node, dict) else range(len(node))
                parent, key = node, draw(st.sampled_from(keys))
                node = parent[key]
            if parent is None:
                return draw(_json_value())
            op = draw(st.sampled_from(("replace", "remove", "duplicate", "empty", "number")))
            if op == "replace":
                parent[key] = draw(_json_value())
            elif op == "remove":
                del parent[key]
            elif op == "duplicate" and isinstance(parent, list):
                parent.insert(key, copy.deepcopy(node))
            elif op == "empty":
                parent[key] = type(node)() if isinstance(node, (list, dict, str)) else None
            elif isinstance(node, int) and not isinstance(node, bool):
                parent[key] = node + draw(st.sampled_from((-1, 1, -(2**31), 2**31, 2**63, -node - 1)))
            else:
                parent[key] = draw(st.sampled_from((0, -1, 10**9, 1.5, "0", [], {})))
        return data

    return edit()


# ---------------------------------------------------------------- real inputs

@cache
def _ptx_texts() -> list[str]:
    return [p.read_text() for p in sorted((FIXTURES / "ptx").glob("*.ptx"))]


@cache
def _objects() -> dict[str, bytes]:
    return {p.stem: p.read_bytes() for p in sorted((FIXTURES / "objects").glob("*.o"))}


@cache
def _code_seeds() -> list[tuple[str, bytes]]:
    seeds = []
    for path in sorted((FIXTURES / "asm").glob("*.json")):
        data = json.loads(path.read_text())
        seeds.append((data["isa"], bytes.fromhex(data["hex"])))
    return seeds


@cache
def _tvmscripts() -> list[str]:
    paths = sorted((FIXTURES / "tir").glob("*.tvmscript")) + sorted((FIXTURES / "objects").glob("*.tvmscript"))[:4]
    return [p.read_text() for p in paths]


@cache
def _small_pools() -> list[dict]:
    """The shipped pools, each cut to its first three candidates (mutations stay cheap)."""
    out = []
    for path in sorted(POOLS.glob("*.json*")):
        raw = path.read_bytes()
        data = json.loads(gzip.decompress(raw) if path.name.endswith(".gz") else raw)
        data["candidates"] = data["candidates"][:3]
        out.append(data)
    return out


@cache
def _database_lines() -> tuple[list[str], list[str]]:
    """One workload line of the checked-in database slice and its first records."""
    folder = FIXTURES / "databases" / "resnet34-slice"
    workloads = (folder / "database_workload.json").read_text().splitlines()
    records = gzip.decompress((folder / "database_tuning_record.json.gz").read_bytes()).decode().splitlines()
    first = [r for r in records if json.loads(r)[0] == 0][:3]
    return workloads[:1], first


# ---------------------------------------------------------------- targets

def _trace_regressions() -> list[tuple[int, list]]:
    """Traces that crashed TVM (segfault, abort, SIGFPE) before tuna checked them."""
    insts, decisions = _pool_traces()[0][1]
    tile = next(i for i, ins in enumerate(insts) if ins[0] == "SamplePerfectTile")
    split = next(i for i, ins in enumerate(insts) if ins[0] == "Split")
    cat = next(i for i, ins in enumerate(insts) if ins[0] == "SampleCategorical")
    others = [d for d in decisions if d[0] not in (tile, cat)]
    nulled = copy.deepcopy(insts)
    nulled[split][2] = [True, None]
    return [
        (0, [insts, [*others, [cat, None]]]),  # a null decision
        (0, [insts, [*others, [tile, [1, 1, None, 1]]]]),  # a null inside one
        (0, [insts, [*others, [tile, [1, 1, 0, 1]]]]),  # a tile of 0: SIGFPE
        (0, [insts, [*decisions, [None, 1, 1]]]),  # a decision that is not [index, value]
        (0, [insts, [*decisions, [1]]]),
        (0, [[*insts, 111564], decisions]),  # an instruction that is not a list
        (0, [nulled, decisions]),  # a null attribute of Split
        (0, [insts, [*decisions, [len(insts) + 5, 1]]]),  # an index past the instructions
    ]


def _database_regressions() -> list[tuple[bool, bytes, bytes]]:
    workloads, records = _database_lines()
    shash = json.loads(workloads[0])[0]
    graph = copy.deepcopy(_seed_graph())
    graph["nodes"][1]["type_key"] = ["IRModule"]  # an unhashable type key
    cyclic = copy.deepcopy(_seed_graph())
    root = cyclic["nodes"][cyclic["root"]]
    root["attrs"] = dict.fromkeys(root["attrs"], str(cyclic["root"]))  # the module refers to itself
    # Records whose trace holds an instruction that is not [kind, inputs, attributes, outputs]
    # (found by the 100,000-input run): a list for a kind, no fields, an object.
    bad_insts = []
    for inst in (["GetSBlock"], [], {}):
        record = json.loads(records[0])
        record[1][0][0][0] = inst if inst != ["GetSBlock"] else [inst, [], [], []]  # [index, [trace, ...]]
        record[1][1] = [1e-5]  # measured: a failed record is dropped before its trace is read
        bad_insts.append((True, workloads[0].encode(), json.dumps(record).encode()))
    return [
        *bad_insts,
        (False, json.dumps([shash, _encode_graph(graph, True)]).encode(), "\n".join(records).encode()),
        (False, json.dumps([shash, _encode_graph(cyclic, True)]).encode(), b""),
        (False, b"[" * 3000, b""),  # nesting past the recursion limit
        (True, workloads[0].encode(), b"[0, " + b"9" * 5000 + b"]"),  # an integer past Python's digit limit
    ]


#: Inputs that once failed, by target (or a function making them); they run first in every run.
REGRESSIONS: dict[str, Any] = {
    "ptx": [".entry k(", ".visible .entry main_kernel(\n.param .u64 p\n)\n.maxntid 128, 1, 1\n"],
    "object code": [("random-zen4", b""), ("random-graviton2", b"\x7fELF"), ("random-zen4", b"\x00ELF\x02")],
    "machine code": [("x86-64", b""), ("aarch64", b"\xff\xff\xff")],
    "pool": [("bytes", b"[" * 3000), ("bytes", b"9" * 5000), ("bytes-gz", b"\x1f\x8b\x08\x00" + b"\xff" * 16)],
    "trace": _trace_regressions,
    "database": _database_regressions,
    "workload": [("spec", "GMM:x"), ("spec", "gmm:99"), ("spec", "GMM:-1"), ("spec", "resnet50/nothing"),
                 (".tvmscript", b"\xff\xfe\x00")],
    "target": [{"kind": "llvm", "num-cores": "znver4"}, {"kind": "llvm", "num-cores": None},
               '{"arch": {}, "model": "sm_999", "mattr": 2163054037274412.0, "kind": "llvm"}',
               {"kind": "llvm", "mcpu": 3}, {"kind": "cuda", "arch": ["sm_80"]}],
}


def _ptx_call(text: str) -> None:
    from tuna.gpu import loops, ptx

    for kernel in ptx.parse(text):
        kernel.counts()
        for ins in kernel.instructions:
            ptx.branch_target(ins)
        loops.find_loops(kernel)


def test_fuzz_ptx():
    texts = st.one_of(_mutated_text(_ptx_texts()), st.text(max_size=200),
                      st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
    _fuzz("ptx", texts, _ptx_call)


@cache
def _machine(isa: str):
    from tuna.machine import resolve

    return resolve("zen4" if isa == "x86-64" else "graviton2")


def _isa_of(name: str) -> str:
    return "x86-64" if name.endswith(("zen4", "skylake-avx512")) or "-zen4" in name else "aarch64"


def _object_call(value: tuple[str, bytes]) -> None:
    from tuna.cpu import objcode

    name, blob = value
    objcode.estimate_objects([blob], _machine(_isa_of(name)))
    if name in _objects():
        _mapped(name, blob)


def _mapped(name: str, blob: bytes) -> None:
    """The fixture's TIR mapped onto the mutated object code (the full tier's loop recovery)."""
    import dataclasses

    from tuna.cpu import disassembly, loop_mapping

    kernel = dataclasses.replace(_fixture_kernel(name), code=disassembly.kernel_code([blob]))
    loop_mapping.map_kernel(kernel, _machine(_isa_of(name)))


@cache
def _fixture_kernel(name: str):
    from tuna.integration.lower import kernel_from_module
    from tuna.integration.workloads import parse_tvmscript

    path = FIXTURES / "objects" / f"{name}.tvmscript"
    return kernel_from_module(parse_tvmscript(path.read_text(), str(path)))


def test_fuzz_object_code():
    objects = _objects()
    mutated = st.sampled_from(sorted(objects)).flatmap(
        lambda n: st.tuples(st.just(n), _mutated_object(objects[n])))
    random = st.tuples(st.sampled_from(("random-zen4", "random-graviton2")),
                       st.one_of(st.binary(max_size=256), st.binary(max_size=60).map(lambda b: b"\x7fELF" + b)))
    _fuzz("object code", st.one_of(mutated, random), _object_call)


def _code_call(value: tuple[str, bytes]) -> None:
    from collections import Counter

    from tuna.cpu import cfg, disassembly, objcode

    isa, code = value
    fn = disassembly.disassemble(isa, "fuzz", 0x40, code)
    cfg.loops(fn)
    objcode.code_cycles(fn, _machine(isa), Counter())


def test_fuzz_machine_code():
    seeds = _code_seeds()
    mutated = st.sampled_from(range(len(seeds))).flatmap(
        lambda i: st.tuples(st.just(seeds[i][0]), _mutations(seeds[i][1], _byte_piece())))
    random = st.tuples(st.sampled_from(("x86-64", "aarch64")), st.binary(max_size=512))
    _fuzz("machine code", st.one_of(mutated, random), _code_call)


_TMP = Path(tempfile.mkdtemp(prefix="tuna-fuzz-"))


@cache
def _parsed(text: str, what: str):
    from tuna.integration.workloads import parse_tvmscript

    return parse_tvmscript(text, what)


def _pool_call(value: tuple[str, Any]) -> None:
    from tuna.bench.pools import load_pool
    from tuna.integration.analysis import apply_trace

    form, data = value
    path = _TMP / ("pool.json.gz" if form.endswith("gz") else "pool.json")
    if form.startswith("bytes"):
        path.write_bytes(data)
    else:
        text = json.dumps(data).encode()
        path.write_bytes(gzip.compress(text) if form == "gz" else text)
    try:
        pool = load_pool(path)
    except TunaError as err:
        _named(err, str(path))
        raise
    mod = _parsed(pool.mod, f"pool {path}: mod")
    for trace in pool.traces[:2]:
        try:
            apply_trace(mod, trace)
        except TunaError as err:
            _named(err, "trace")
            raise


def test_fuzz_pool():
    if not CHILD_LAST:  # TVM parses or applies these: a crash must not end the test run
        _in_child("test_fuzz_pool")
        return
    pools = _small_pools()
    mutated = st.sampled_from(range(len(pools))).flatmap(lambda i: _mutated_json(pools[i]))
    as_json = st.tuples(st.sampled_from(("json", "gz")), st.one_of(mutated, _json_value()))
    blobs = st.sampled_from(range(len(pools))).flatmap(
        lambda i: _mutations(json.dumps(pools[i]).encode(), _json_piece()))
    as_bytes = st.tuples(st.just("bytes"), st.one_of(blobs, st.binary(max_size=64)))
    gzipped = st.sampled_from(range(len(pools))).flatmap(
        lambda i: _mutations(gzip.compress(json.dumps(pools[i]).encode(), mtime=0), _byte_piece()))
    as_gz = st.tuples(st.just("bytes-gz"), st.one_of(gzipped, st.binary(max_size=64)))
    _fuzz("pool", st.one_of(as_json, as_json, as_bytes, as_gz), _pool_call)


@cache
def _pool_traces() -> list[tuple[str, list]]:
    """(TVMScript, trace) of the first candidates of each shipped pool."""
    return [(pool["mod"], cand["trace"]) for pool in _small_pools() for cand in pool["candidates"][:2]]


def _trace_call(value: tuple[int, Any]) -> None:
    from tuna.integration.analysis import apply_trace

    index, trace = value
    script = _pool_traces()[index][0]
    try:
        apply_trace(_parsed(script, f"pool trace {index}"), trace)
    except TunaError as err:
        _named(err, "trace")
        raise


def test_fuzz_trace():
    if not CHILD_LAST:  # TVM parses or applies these: a crash must not end the test run
        _in_child("test_fuzz_trace")
        return
    traces = _pool_traces()
    mutated = st.sampled_from(range(len(traces))).flatmap(
        lambda i: st.tuples(st.just(i), _mutated_json(traces[i][1])))
    _fuzz("trace", mutated, _trace_call)


def _encode_graph(graph: Any, prefix: bool) -> str:
    raw = json.dumps(graph).encode()
    return base64.b64encode((struct.pack("<Q", len(raw)) if prefix else b"") + raw).decode()


@cache
def _seed_graph() -> dict:
    from tuna.databases.node_graph import decode_workload

    workloads, _ = _database_lines()
    return decode_workload(json.loads(workloads[0])[1], "seed")


def _database_call(value: tuple[bool, bytes, bytes]) -> None:
    from tuna.databases import metaschedule as msdb
    from tuna.integration.database_import import import_database

    gz, wtext, rtext = value
    folder = _TMP / "db"
    folder.mkdir(exist_ok=True)
    for stale in folder.iterdir():
        stale.unlink()
    suffix = ".gz" if gz else ""
    (folder / f"{msdb.WORKLOAD_FILE}{suffix}").write_bytes(gzip.compress(wtext) if gz else wtext)
    (folder / f"{msdb.RECORD_FILE}{suffix}").write_bytes(gzip.compress(rtext) if gz else rtext)
    try:
        import_database([folder], "fuzz")
    except TunaError as err:
        _named(err, str(folder))
        raise


def test_fuzz_database():
    if not CHILD_LAST:  # TVM parses or applies these: a crash must not end the test run
        _in_child("test_fuzz_database")
        return
    workloads, records = _database_lines()
    shash = json.loads(workloads[0])[0]
    graphs = st.tuples(_mutated_json(_seed_graph()), st.booleans()).map(
        lambda g: json.dumps([shash, _encode_graph(*g)]))
    workload_lines = st.lists(st.one_of(st.just(workloads[0]), graphs, st.just(workloads[0]).flatmap(
        lambda w: _mutated_json(json.loads(w)).map(json.dumps)), _mutated_text(workloads)), min_size=0, max_size=2)
    record_lines = st.lists(st.one_of(st.sampled_from(records).flatmap(
        lambda r: _mutated_json(json.loads(r)).map(json.dumps)), _mutated_text(records), st.sampled_from(records)),
        max_size=3)
    files = st.tuples(st.booleans(), workload_lines.map(lambda ls: "\n".join(ls).encode()),
                      record_lines.map(lambda ls: "\n".join(ls).encode()))
    raw = st.tuples(st.booleans(), st.binary(max_size=64), st.binary(max_size=64))
    _fuzz("database", st.one_of(files, files, raw), _database_call)


def _workload_call(value: tuple[str, Any]) -> None:
    from tuna.integration.workloads import load_workload

    kind, data = value
    if kind == "spec":
        try:
            load_workload(data)
        except TunaError as err:
            _named(err, data, repr(data), data.partition("/")[2] or data)  # a network task: the task's name
            raise
        return
    path = _TMP / f"workload{kind}"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8", "surrogatepass"))
    try:
        load_workload(str(path))
    except TunaError as err:
        _named(err, str(path))
        raise


def test_fuzz_workload():
    if not CHILD_LAST:  # TVM parses or applies these: a crash must not end the test run
        _in_child("test_fuzz_workload")
        return
    scripts = _tvmscripts()
    suffix = st.sampled_from((".tvmscript", ".py", ".tir"))
    texts = st.tuples(suffix, st.one_of(_mutated_text(scripts), st.text(max_size=100)))
    blobs = st.tuples(suffix, st.one_of(st.binary(max_size=100),
                                        st.sampled_from(scripts).flatmap(
                                            lambda s: _mutations(s.encode(), _byte_piece()))))
    names = st.one_of(st.sampled_from(("GMM:1", "C2D-1", "gmm:99", "GMM:-1", "GMM:x", "resnet50/nothing",
                                       "nonet/task", "", ":", "/")),
                      st.text(alphabet="GMC2D1:-/abcx09 ", max_size=12))
    specs = st.tuples(st.just("spec"), names.filter(lambda s: not Path(s).exists()))
    _fuzz("workload", st.one_of(texts, texts, blobs, specs), _workload_call)


_TARGET_KEYS = ("kind", "mcpu", "mtriple", "mattr", "num-cores", "arch", "tag", "keys", "max_num_threads",
                "thread_warp_size", "model", "device", "host", "libs")
_TARGET_VALUES = ("llvm", "cuda", "c", "rocm", "znver4", "skylake-avx512", "neoverse-n1", "cortex-a53", "sm_80",
                  "sm_999", "x86_64-linux-gnu", "aarch64-linux-gnu", "riscv64-linux-gnu", "+avx512f", "",
                  "nvidia/nvidia-a100", "raspberry-pi/4b-aarch64")


def _target_call(target: Any) -> None:
    from tuna.machine import resolve

    try:
        resolve(target)
    except TunaError as err:
        if isinstance(target, str) and not target.strip().startswith("{"):
            _named(err, target.strip(), repr(target.strip()), repr(target))
        else:
            _named(err)
        raise


def test_fuzz_target():
    from tuna.machine import presets

    values = st.one_of(st.sampled_from(_TARGET_VALUES), _json_value(),
                       st.lists(st.sampled_from(_TARGET_VALUES), max_size=3))
    dicts = st.dictionaries(st.sampled_from(_TARGET_KEYS), values, max_size=5)
    real = st.sampled_from(sorted(presets())).flatmap(
        lambda name: _mutated_json({k: list(v) if isinstance(v, tuple) else v
                                    for k, v in presets()[name].target.items()}))
    names = st.one_of(st.sampled_from(sorted(presets())).flatmap(lambda n: _mutations(n, _text_piece())),
                      st.text(max_size=20))
    as_json = st.one_of(dicts, real).map(json.dumps)
    _fuzz("target", st.one_of(dicts, real, names, as_json, _json_value().map(json.dumps)), _target_call)


def test_fuzz_fixture_files():
    """The checked-in inputs that once failed: each ends in a TunaError naming it."""
    from tuna.bench.pools import load_pool
    from tuna.integration.workloads import load_workload

    readers = {"pool": load_pool, "workload": lambda p: load_workload(str(p))}
    files = sorted(FUZZ_FIXTURES.glob("*"))
    assert files, f"no regression inputs in {FUZZ_FIXTURES}"
    for path in files:
        kind = path.name.split("-", 1)[0]
        if kind not in readers:
            continue
        with pytest.raises(TunaError) as err:
            readers[kind](path)
        assert str(path) in str(err.value), path


@pytest.mark.parametrize("cores", [None, "", "znver4", [2], {"": None}, 0, -3, 2.5, True])
def test_target_num_cores_not_an_integer(cores):
    """Found by fuzzing: resolve once called int() on num-cores unchecked."""
    from tuna.errors import TargetError
    from tuna.machine import resolve

    with pytest.raises(TargetError, match="num-cores"):
        resolve({"kind": "llvm", "mcpu": "znver4", "num-cores": cores})


def test_function_without_instructions_is_not_a_kernel_function():
    """An object whose function decodes to nothing once made loop mapping index an empty block list."""
    from tuna.cpu import loop_mapping
    from tuna.ir import MachineCode

    empty = MachineCode(isa="x86-64", function="anon@.text+0x40", blocks=())
    assert loop_mapping.kernel_functions((empty,)) == ()
