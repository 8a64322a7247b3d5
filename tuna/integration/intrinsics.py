"""TVM's tensor intrinsics imported fast, and the TuneContext that needs them.

MetaSchedule imports ``tvm.s_tir.tensor_intrin`` in every ``TuneContext`` and in every
build worker; :func:`load_tensor_intrinsics` does that import in about 2 s instead of 14.
"""

from __future__ import annotations

import importlib
import inspect
import linecache
import sys
import threading
import types
from typing import Any

from tvm.s_tir import meta_schedule as ms

_INTRIN_LOCK = threading.Lock()
_INTRIN_MODULE = "tvm.s_tir.tensor_intrin"


def _frames(context: int = 1) -> list[inspect.FrameInfo]:
    """``inspect.stack()`` without its module lookups: each frame and its current line."""
    frame = sys._getframe(1)
    out = []
    while frame is not None:
        filename, lineno = frame.f_code.co_filename, frame.f_lineno
        line = linecache.getline(filename, lineno) if context > 0 else ""
        out.append(inspect.FrameInfo(frame, filename, lineno, frame.f_code.co_name,
                                     [line] if line else None, 0 if line else None))
        frame = frame.f_back
    return out


def new_tune_context(intrinsics: bool = True, **kwargs: Any) -> ms.TuneContext:
    """``ms.TuneContext(**kwargs)``, with TVM's tensor intrinsics loaded the fast way first.

    With ``intrinsics=False`` they are not loaded at all (2-3 s of a worker's start-up):
    for a process that applies only traces that do not tensorize
    (:meth:`~tuna.integration.search_strategy.design_space.DesignSpaces.tensorizes`).
    The context then behaves the same for everything else; its constructor only imports
    the intrinsics to register them.
    """
    if intrinsics or _INTRIN_MODULE in sys.modules:
        load_tensor_intrinsics()
        return ms.TuneContext(**kwargs)
    with _INTRIN_LOCK:
        sys.modules[_INTRIN_MODULE] = types.ModuleType(_INTRIN_MODULE, "stands in while a TuneContext is made")
        try:
            return ms.TuneContext(**kwargs)
        finally:
            del sys.modules[_INTRIN_MODULE]


def load_tensor_intrinsics() -> None:
    """Import TVM's tensor intrinsics (``tvm.s_tir.tensor_intrin``) in about 2 s rather than 14.

    MetaSchedule imports them in every ``TuneContext`` and in every build worker process.
    TVMScript's ``prim_func`` calls ``inspect.stack()`` for each function they define, and
    inside an import that call looks up the module of every ``<frozen importlib>`` frame
    by scanning ``sys.modules``: the import took 13-14 s per process on a 2-core machine.
    The parser reads only the frames and their current lines, so the import is done here
    with :func:`_frames` standing in for ``inspect.stack``: 1.8 s, and the same 112
    intrinsics register (the structural hashes of their descriptions and implementations
    compared equal). Called by :func:`new_tune_context`, by :class:`~tuna.integration.TunaCostModel` (before
    ``tune_tir`` makes its own TuneContext) and at the start of each builder worker; a no-op
    once the module is loaded.
    """
    if _INTRIN_MODULE in sys.modules:
        return
    with _INTRIN_LOCK:
        saved, inspect.stack = inspect.stack, _frames
        try:
            importlib.import_module(_INTRIN_MODULE)
        finally:
            inspect.stack = saved
