"""The values an integer TIR expression takes in the first warp of a thread block.

Both GPU tiers look at one warp's memory addresses: the shared-memory banks its threads hit
and the global-memory sectors they touch. :func:`warp_value` evaluates an index expression
with the thread variables bound to arrays over the warp's threads (NumPy broadcasting does
the rest) and every other variable to what the caller binds (usually 0).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


class UnknownValueError(Exception):
    """An expression the first-warp evaluator cannot give a value."""


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "FloorDiv": np.floor_divide,
    "FloorMod": np.mod,
    "Div": lambda a, b: np.trunc(np.divide(a, b)).astype(np.int64),
    "Mod": np.fmod,
    "Min": np.minimum,
    "Max": np.maximum,
    "RShift": np.right_shift,
    "LShift": np.left_shift,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
    "EQ": np.equal,
    "NE": np.not_equal,
    "LT": np.less,
    "LE": np.less_equal,
    "GT": np.greater,
    "GE": np.greater_equal,
    "And": np.logical_and,
    "Or": np.logical_or,
}
_CALLS = {
    "shift_right": np.right_shift,
    "shift_left": np.left_shift,
    "bitwise_and": np.bitwise_and,
    "bitwise_or": np.bitwise_or,
    "bitwise_xor": np.bitwise_xor,
}


def warp_value(expr, env: dict) -> Any:
    """An integer expression for the first warp: an int or an int array over its threads.

    ``env`` maps TIR variables to ints or arrays. Raises :class:`UnknownValueError` for a
    variable it does not bind or an expression it cannot evaluate.
    """
    kind = type(expr).__name__
    if kind == "IntImm":
        return int(expr.value)
    if kind == "Var":
        if expr not in env:
            raise UnknownValueError(str(expr))
        return env[expr]
    if kind in _BINARY:
        return _BINARY[kind](np.asarray(warp_value(expr.a, env)), np.asarray(warp_value(expr.b, env)))
    if kind == "Cast":
        return warp_value(expr.value, env)
    if kind == "Select":
        cond, a, b = (warp_value(x, env) for x in (expr.condition, expr.true_value, expr.false_value))
        return np.where(cond, a, b)
    if kind == "Call":
        name = str(getattr(expr.op, "name", expr.op)).rsplit(".", 1)[-1]
        if name in _CALLS:
            return _CALLS[name](np.asarray(warp_value(expr.args[0], env)), np.asarray(warp_value(expr.args[1], env)))
        if name == "if_then_else":
            cond, a, b = (warp_value(x, env) for x in expr.args)
            return np.where(cond, a, b)
    if kind == "Let":
        inner = dict(env)
        inner[expr.var] = warp_value(expr.value, env)
        return warp_value(expr.body, inner)
    raise UnknownValueError(kind)
