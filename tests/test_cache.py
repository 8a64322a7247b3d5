"""The integer-set cache model (tuna.cpu.cache) against brute force and an LRU simulation."""

import functools
import itertools
import math
import pathlib
import random
from collections import OrderedDict

import pytest

from tuna import machine
from tuna.cpu import cache
from tuna.gpu import footprint
from tuna.ir import Access, Index, KernelIR, Loop, LoopKind, Statement

LINE = 64
SERIAL = LoopKind.SERIAL


def _ix(*terms, const=0, opaque=()):
    return Index(tuple(terms), const, tuple(opaque))


def _loop(var, extent, *body):
    return Loop(var, extent, SERIAL, tuple(body))


def _nest(stmt, loops):
    """Wrap ``stmt`` in ``loops`` ((var, extent), outermost first)."""
    node = stmt
    for var, extent in reversed(loops):
        node = _loop(var, extent, node)
    return node


def _trace(nodes, env):
    """(buffer, byte offset) of every access, in execution order."""
    for node in nodes:
        if isinstance(node, Statement):
            for acc in node.accesses:
                flat = 0
                for ix, size in zip(acc.indices, acc.shape):
                    flat = flat * size + ix.const + sum(c * env.get(v, 0) for v, c in ix.coeffs)
                yield acc.buffer, flat * acc.dtype_bytes
        else:
            for it in range(node.extent):
                env[node.var] = it
                yield from _trace(node.body, env)
            del env[node.var]


@functools.lru_cache(maxsize=32)
def _lines_touched(node, line: int = LINE) -> tuple:
    """(buffer, line) of every access, in execution order."""
    return tuple((buf, byte // line) for buf, byte in _trace((node,), {}))


def _lru_misses(node, capacity: int, line: int = LINE, sets: int = 1) -> int:
    """Lines brought in by an LRU cache of ``sets`` sets (1: fully associative) running the
    nest in program order, a line's set its number modulo ``sets`` (physical pages taken as
    the virtual ones).

    Unlike tests/test_cpu_model.py's helper, which runs each statement's loops apart, this
    interprets the tree, so sibling sub-nests interleave as they do in the program.
    """
    held = [OrderedDict() for _ in range(sets)]
    ways = capacity // line // sets
    misses = 0
    for key in _lines_touched(node, line):
        lru = held[key[1] % sets]
        if key in lru:
            lru.move_to_end(key)
        else:
            misses += 1
            lru[key] = True
            if len(lru) > ways:
                lru.popitem(last=False)
    return misses


def _distinct_lines(node, line: int = LINE) -> dict:
    seen: dict = {}
    for buf, n in set(_lines_touched(node, line)):
        seen.setdefault(buf, set()).add(n)
    return {buf: len(lines) for buf, lines in seen.items()}


# ----------------------------------------------------------------------------- kernels


def _matmul(n, order="ijk", tile=None):
    """C[i, j] += A[i, k] * B[k, j] with loops in ``order``; ``tile`` splits a loop into (v_o, v_i)."""
    tile = tile or {}

    def idx(v):
        return _ix((v + "o", tile[v]), (v + "i", 1)) if v in tile else _ix((v, 1))

    c_idx = (idx("i"), idx("j"))
    stmt = Statement(
        "C",
        (
            Access("C", False, c_idx, (n, n), 4),
            Access("A", False, (idx("i"), idx("k")), (n, n), 4),
            Access("B", False, (idx("k"), idx("j")), (n, n), 4),
            Access("C", True, c_idx, (n, n), 4),
        ),
        (("fma", 1),),
    )
    outer = [(v + "o", n // tile[v]) for v in order if v in tile]
    inner = [(v + "i", tile[v]) if v in tile else (v, n) for v in order]
    return _nest(stmt, outer + inner)


def _conv1d(n, k, stride, channels, order):
    """y[o, i] += x[stride * i + kk] * w[o, kk]."""
    y = (_ix(("o", 1)), _ix(("i", 1)))
    stmt = Statement(
        "conv",
        (
            Access("y", False, y, (channels, n), 4),
            Access("x", False, (_ix(("i", stride), ("k", 1)),), (stride * n + k,), 4),
            Access("w", False, (_ix(("o", 1)), _ix(("k", 1))), (channels, k), 4),
            Access("y", True, y, (channels, n), 4),
        ),
        (("fma", 1),),
    )
    extent = {"i": n, "k": k, "o": channels}
    return _nest(stmt, [(v, extent[v]) for v in order])


def _transpose(n, order="ij", tile=None):
    """B[j, i] = A[i, j], optionally tiled by ``tile`` in both dimensions."""
    if tile:
        i, j = _ix(("io", tile), ("ii", 1)), _ix(("jo", tile), ("ji", 1))
        loops = [("io", n // tile), ("jo", n // tile), ("ii", tile), ("ji", tile)]
    else:
        i, j = _ix(("i", 1)), _ix(("j", 1))
        loops = [(v, n) for v in order]
    stmt = Statement("t", (Access("A", False, (i, j), (n, n), 4), Access("B", True, (j, i), (n, n), 4)), ())
    return _nest(stmt, loops)


def _two_children(n, m):
    """for i: {for j: T[i, j] = A[i, j] * W[j]};  {for j2: C[i, j2] = T[i, j2] + B[j2, i] * W[j2]}."""
    first = Statement(
        "a",
        (
            Access("A", False, (_ix(("i", 1)), _ix(("j", 1))), (n, m), 4),
            Access("W", False, (_ix(("j", 1)),), (m,), 4),
            Access("T", True, (_ix(("i", 1)), _ix(("j", 1))), (n, m), 4),
        ),
        (("mul", 1),),
    )
    second = Statement(
        "b",
        (
            Access("T", False, (_ix(("i", 1)), _ix(("j2", 1))), (n, m), 4),
            Access("B", False, (_ix(("j2", 1)), _ix(("i", 1))), (m, n), 4),
            Access("W", False, (_ix(("j2", 1)),), (m,), 4),
            Access("C", True, (_ix(("i", 1)), _ix(("j2", 1))), (n, m), 4),
        ),
        (("fma", 1),),
    )
    return _loop("i", n, _loop("j", m, first), _loop("j2", m, second))


def _init_update(n):
    """for i: {for j0: C[i, j0] = 0};  {for k: for j: C[i, j] += A[i, k] * B[k, j]}."""
    init = Statement("init", (Access("C", True, (_ix(("i", 1)), _ix(("j0", 1))), (n, n), 4),), ())
    c_idx = (_ix(("i", 1)), _ix(("j", 1)))
    update = Statement(
        "update",
        (
            Access("C", False, c_idx, (n, n), 4),
            Access("A", False, (_ix(("i", 1)), _ix(("k", 1))), (n, n), 4),
            Access("B", False, (_ix(("k", 1)), _ix(("j", 1))), (n, n), 4),
            Access("C", True, c_idx, (n, n), 4),
        ),
        (("fma", 1),),
    )
    return _loop("i", n, _loop("j0", n, init), _loop("k", n, _loop("j", n, update)))


NESTS = {
    **{f"matmul16-{o}": _matmul(16, o) for o in ("ijk", "ikj", "jki", "kij")},
    **{f"matmul32-tiled-{o}": _matmul(32, o, {"i": 8, "j": 16, "k": 8}) for o in ("ijk", "ikj")},
    **{f"conv1d-s2-{o}": _conv1d(64, 8, 2, 4, o) for o in ("oik", "iko", "koi")},
    "conv1d-s3-ki": _conv1d(128, 16, 3, 1, "ki"),
    **{f"transpose32-{o}": _transpose(32, o) for o in ("ij", "ji")},
    "transpose32-tiled8": _transpose(32, tile=8),
    "two-children": _two_children(16, 32),
    "init-update": _init_update(16),
}


# ----------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", sorted(NESTS))
def test_footprint_is_the_set_of_distinct_lines(name):
    node = NESTS[name]
    assert cache.footprint_lines(node, LINE) == _distinct_lines(node)


@pytest.mark.parametrize("name", sorted(NESTS))
def test_movement_against_an_lru_simulation(name):
    node = NESTS[name]
    whole = sum(cache.footprint_lines(node, LINE).values()) * LINE
    for capacity in (512, 1024, 4096, whole):
        _, moved = cache.data_movement(node, capacity, LINE)
        model = sum(moved.values()) // LINE
        sim = _lru_misses(node, capacity)
        if capacity >= whole:
            assert model == sim, capacity  # compulsory misses only
        else:
            assert sim / 2 <= model <= 2 * sim, (capacity, model, sim)


def _matvec(n, m, batches=4):
    """for i: for k: for j: y[i] += B[k, j] * x[j]."""
    stmt = Statement(
        "mv",
        (
            Access("y", False, (_ix(("i", 1)),), (batches,), 4),
            Access("B", False, (_ix(("k", 1)), _ix(("j", 1))), (n, m), 4),
            Access("x", False, (_ix(("j", 1)),), (m,), 4),
            Access("y", True, (_ix(("i", 1)),), (batches,), 4),
        ),
        (("fma", 1),),
    )
    return _nest(stmt, [("i", batches), ("k", n), ("j", m)])


def test_per_tensor_reuse_rules():
    # ijk, 64 lines: one iteration of j (a row of A, a column of B, 35 lines) fits, one of i
    # (68 lines) does not. A's row is reused across j; B, invariant in i, is not reused
    # across i since the j loop (all of B) lies between two uses; C's row moves once per i.
    _, moved = cache.data_movement(_matmul(32, "ijk"), 4096, LINE)
    assert {b: n // LINE for b, n in moved.items()} == {"A": 32 * 2, "B": 32 * 64, "C": 32 * 2}
    # Matrix-vector: one k iteration (9 lines) exceeds 8 lines. y[i] does not vary with k and
    # its reuse distance is a statement (reused: one line); x's is the whole j loop (moved
    # per k) until the cache holds 16 lines.
    node = _matvec(64, 64)
    for capacity, x_lines in ((512, 4 * 64 * 4), (1024, 4)):
        _, moved = cache.data_movement(node, capacity, LINE)
        assert {b: n // LINE for b, n in moved.items()} == {"y": 1, "B": 4 * 256, "x": x_lines}
        assert sum(moved.values()) // LINE == _lru_misses(node, capacity)


def _every_other(iterations, lines):
    """for i: for j: s += X[2i + 4j] with a line per element step: iteration i touches the
    lines 2i + 4j, none of those of i - 1, most of those of i - 2."""
    stmt = Statement(
        "s",
        (Access("X", False, (_ix(("i", 32), ("j", 64)),), (64 * (iterations + 2 * lines),), 4),),
        (("add", 1),),
    )
    return _nest(stmt, [("i", iterations), ("j", lines)])


def test_a_loop_whose_consecutive_iterations_do_not_fit_moves_each_iterations_new_lines():
    # One iteration (16 lines) fits in 24; two (32) do not, so the lines iteration i shares
    # with i - 2 were touched 32 lines ago and LRU has dropped them: every iteration moves its
    # 16 lines. Where two iterations fit (40 lines), only the node's footprint (the 50 even
    # lines below 100) moves.
    node = _every_other(20, 16)
    assert sum(cache.footprint_lines(node, LINE).values()) == 50
    for capacity_lines, moved_lines in ((24, 20 * 16), (40, 50)):
        _, moved = cache.data_movement(node, capacity_lines * LINE, LINE)
        assert moved == {"X": moved_lines * LINE}
        assert _lru_misses(node, capacity_lines * LINE) == moved_lines


@pytest.mark.parametrize("rows", [48, 96])
def test_rows_that_crowd_the_sets_a_page_offset_picks_do_not_fit_a_larger_cache(rows):
    # Twice over: 256 bytes of each 1 KiB row. A 64 KiB, 4-way cache has 256 sets, more than
    # a page's 64 lines: a line's page offset picks one of 64 classes of 4 sets (16 lines),
    # and these rows use 16 classes. 48 rows (192 lines, 12 a class) fit; 96 (24 a class) do
    # not, though they are 384 of the cache's 1,024 lines.
    stmt = Statement("s", (Access("W", False, (_ix(("r", 1)), _ix(("c", 1))), (rows, 256), 4),), (("add", 1),))
    node = _nest(stmt, [("t", 2), ("r", rows), ("c", 64)])
    level = machine.CacheLevel(level=2, size_bytes=64 << 10, line_bytes=LINE, ways=4, bytes_per_cycle=32.0)
    assert cache.known_sets(level) == 64
    _, moved = cache.data_movement(node, level.size_bytes, LINE, cache.known_sets(level))
    lines = moved["W"] // LINE
    assert lines == (rows * 4 if rows == 48 else 2 * rows * 4)
    assert lines == _lru_misses(node, level.size_bytes, LINE, sets=256)


def _brute_lines(access, extents, line=LINE):
    strides = [1] * len(access.shape)
    for d in range(len(access.shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * access.shape[d + 1]
    names = list(extents)
    lines = set()
    for point in itertools.product(*(range(extents[v]) for v in names)):
        env = dict(zip(names, point))
        flat = sum(
            (ix.const + sum(c * env.get(v, 0) for v, c in ix.coeffs)) * s for ix, s in zip(access.indices, strides)
        )
        lines.add(flat * access.dtype_bytes // line)
    return len(lines)


def _acc(buf, shape, *indices, dtype=4):
    return Access(buf, False, tuple(indices), shape, dtype)


# (name, access, extents, rows start on line boundaries)
COUPLED = [
    ("x[i + k]", _acc("x", (4096,), _ix(("i", 1), ("k", 1))), {"i": 40, "k": 5}, True),
    ("x[2i + k]", _acc("x", (4096,), _ix(("i", 2), ("k", 1))), {"i": 40, "k": 3}, True),
    ("x[2i]", _acc("x", (4096,), _ix(("i", 2))), {"i": 100}, True),
    ("x[17i + 3k]", _acc("x", (4096,), _ix(("i", 17), ("k", 3))), {"i": 30, "k": 7}, True),
    ("x[5 - i + 16k] double", _acc("x", (4096,), _ix(("i", -1), ("k", 16), const=5), dtype=8), {"i": 6, "k": 9}, False),
    ("A[i, j + k]", _acc("A", (32, 64), _ix(("i", 1)), _ix(("j", 1), ("k", 1))), {"i": 6, "j": 12, "k": 3}, True),
    (
        "A[i, j + k] 48-wide",
        _acc("A", (32, 48), _ix(("i", 1)), _ix(("j", 1), ("k", 1))),
        {"i": 6, "j": 12, "k": 3},
        False,
    ),
    ("A[i, i + j]", _acc("A", (64, 64), _ix(("i", 1)), _ix(("i", 1), ("j", 1))), {"i": 9, "j": 20}, True),
    (
        "X[c, 2h + r, 2w + s]",
        _acc("X", (4, 30, 32), _ix(("c", 1)), _ix(("h", 2), ("r", 1)), _ix(("w", 2), ("s", 1))),
        {"c": 3, "h": 5, "r": 3, "w": 7, "s": 3},
        True,
    ),
    (
        "X[c, 2h + r, 2w + s] 30-wide",
        _acc("X", (4, 30, 30), _ix(("c", 1)), _ix(("h", 2), ("r", 1)), _ix(("w", 2), ("s", 1))),
        {"c": 3, "h": 5, "r": 3, "w": 7, "s": 3},
        False,
    ),
    (
        "X[c, 2h, 2w] 1x1 stride 2",
        _acc("X", (4, 57, 57), _ix(("c", 1)), _ix(("h", 2)), _ix(("w", 2))),
        {"c": 3, "h": 9, "w": 20},
        False,
    ),
    ("B[k, j] column", _acc("B", (64, 64), _ix(("k", 1)), _ix(("j", 1))), {"k": 20}, True),
]


@pytest.mark.parametrize(("name", "access", "extents", "aligned"), COUPLED, ids=[c[0] for c in COUPLED])
def test_islpy_and_fast_counts_equal_brute_force(name, access, extents, aligned):
    piece = cache._piece(access, tuple(extents.items()))
    want = _brute_lines(access, extents)
    assert cache.count_lines_islpy([piece], LINE) == want
    assert cache._count(frozenset([piece]), LINE) == want
    node = _nest(Statement("s", (access,), ()), list(extents.items()))
    assert cache.footprint_lines(node, LINE) == {access.buffer: want}
    box = footprint.access_bytes(access, extents, LINE) // LINE
    if aligned:
        assert want <= box
    else:
        # The box counts ceil(bytes / line) per row, as if every row started a line; rows
        # that straddle lines make the exact count larger, by at most a line per row.
        rows = math.prod(footprint.dim_range(ix, extents, n) for ix, n in zip(access.indices[:-1], access.shape))
        assert want <= box + rows


def _piece_lines(pieces, line=LINE):
    lines = set()
    for const, groups, e in pieces:
        values = {const}
        for c, n in groups:
            values = {v + c * k for v in values for k in range(n)}
        lines |= {v * e // line for v in values}
    return len(lines)


def test_every_counting_path_equals_brute_force_on_random_pieces():
    rng = random.Random(7)
    coefficients = (1, 2, 3, 7, 16, 17, 30, 32, 100, 114, 128, 224)
    for _ in range(300):
        pieces = []
        for _ in range(rng.choice((1, 1, 1, 2))):
            terms = [
                (rng.choice(coefficients) * rng.choice((1, -1)), rng.randint(1, 8)) for _ in range(rng.randint(0, 3))
            ]
            const, groups = cache._canonical(rng.randint(-10, 90), terms)
            pieces.append((const, groups, rng.choice((1, 2, 4, 8))))
        want = _piece_lines(pieces)
        assert cache._count(frozenset(pieces), LINE) == want, pieces
        assert cache.count_lines_islpy(pieces, LINE) == want, pieces


def test_unions_of_accesses_to_one_buffer():
    # A 3-point stencil and two shifted 2-D windows, counted through islpy unions.
    stencil = Statement("s", tuple(Access("x", False, (_ix(("i", 1), const=c),), (256,), 4) for c in (0, 1, 33)), ())
    node = _loop("i", 40, stencil)
    assert cache.footprint_lines(node, LINE) == _distinct_lines(node)
    windows = Statement(
        "w",
        (
            Access("A", False, (_ix(("i", 1)), _ix(("j", 1))), (40, 40), 4),
            Access("A", False, (_ix(("i", 2), const=1), _ix(("j", 1), const=7)), (40, 40), 4),
        ),
        (),
    )
    node = _loop("i", 12, _loop("j", 20, windows))
    assert cache.footprint_lines(node, LINE) == _distinct_lines(node)


def test_opaque_subscripts_are_over_approximated_by_an_interval():
    # A[f // 16, f % 16] over f < 48: three rows, bounded by min(dim, extent) rows x 16 columns.
    access = Access("A", False, (_ix(opaque=("f",)), _ix(opaque=("f",))), (8, 16), 4)
    node = _loop("f", 48, Statement("s", (access,), ()))
    assert cache.footprint_lines(node, LINE)["A"] == 8  # the whole 8 x 16 buffer: 8 lines >= 3 true
    small = _loop("f", 2, Statement("s", (access,), ()))
    assert cache.footprint_lines(small, LINE)["A"] == 2  # rows 0..1 x columns 0..1
    # Told that the row holds for 16 values of f (its run), two iterations touch one row.
    row = Index((), 0, ("f",), (16,))
    held = _loop("f", 2, Statement("s", (Access("A", False, (row, _ix(opaque=("f",))), (8, 16), 4),), ()))
    assert cache.footprint_lines(held, LINE)["A"] == 1


def test_cache_fills_per_level_and_for_sequential_top_level_nests():
    zen4 = machine.preset("zen4")
    mm = _matmul(32, "ijk")
    fills = cache.cache_fills(KernelIR("mm", (mm,)), zen4)
    assert set(fills) == {c.level for c in zen4.caches}
    assert fills[1] == sum(cache.data_movement(mm, zen4.caches[0].size_bytes, LINE)[1].values())
    assert fills[1] >= fills[2] >= fills[3] == 3 * 32 * 32 * 4  # compulsory in L3
    conv = _conv1d(64, 8, 2, 4, "oik")
    two = KernelIR("two", (mm, conv))
    assert cache.cache_fills(two, zen4.caches)[3] == fills[3] + sum(cache.footprint_lines(conv, LINE).values()) * LINE


def test_memoised_results_do_not_depend_on_object_identity():
    a, b = _matmul(32, "ikj", {"i": 8, "j": 16, "k": 8}), _matmul(32, "ikj", {"i": 8, "j": 16, "k": 8})
    assert a is not b
    assert cache.data_movement(a, 2048, LINE) == cache.data_movement(b, 2048, LINE)
    cache.clear_caches()
    assert cache.data_movement(a, 2048, LINE) == cache.data_movement(b, 2048, LINE)


def test_only_the_cache_model_imports_islpy():
    root = pathlib.Path(cache.__file__).resolve().parents[1]
    users = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py") if "islpy" in p.read_text())
    assert users == ["cpu/cache.py"]


def test_ir_nodes_remember_their_hash_but_do_not_pickle_it():
    """The cache keys are IR nodes; their remembered hash equals the field tuple's and a
    pickle leaves it out (string hashes differ between processes)."""
    import pickle

    stmt = Statement("s", (Access("A", False, (_ix(("i", 1)),), (8,), 4),), (("add", 1),))
    nest = _loop("i", 8, stmt)
    assert hash(nest) == hash((nest.var, nest.extent, nest.kind, nest.body, nest.thread, nest.unroll_max_step))
    copy = pickle.loads(pickle.dumps(nest))
    assert "_hash" not in copy.__dict__ and "_hash" in nest.__dict__
    assert copy == nest and hash(copy) == hash(nest)
    assert hash(_loop("i", 9, stmt)) != hash(nest)
