"""TVM's old JSON node graph of an IRModule, read in pure Python and written as TVMScript.

MetaSchedule databases written by TVM releases before the FFI rewrite (0.16, for instance)
keep each workload as ``base64(<8-byte length><JSON node graph>)``: ``{"root": i, "nodes":
[{"type_key", "attrs" | "data" | "keys" | "repr_str"}], "attrs": {"tvm_version"}}``,
where every attribute that is an object is the index of another node as a string (``"0"``
is null). TVM 0.27's ``tvm.ir.load_json`` refuses that format, so this module walks the
graph itself and writes the TIR PrimFuncs as TVMScript in 0.27's dialect (``T.sblock``,
``T.sblock_alloc_buffer``, ``tirx.noalias``), which :mod:`tuna.integration` then parses.

Only the node types of TIR workloads are read (:data:`TYPE_KEYS`); any other type key is a
:class:`~tuna.errors.DatabaseError` naming the workload and the key.
"""

from __future__ import annotations

import base64
import binascii
import json
import keyword
import math
import re
import struct
from collections.abc import Mapping
from typing import Any

from ..errors import DatabaseError

# Binary operators written infix; the rest by their TVMScript function.
_INFIX = {"tir.Add": "+", "tir.Sub": "-", "tir.Mul": "*", "tir.EQ": "==", "tir.NE": "!=",
          "tir.LT": "<", "tir.LE": "<=", "tir.GT": ">", "tir.GE": ">="}
_CALLS = {"tir.Div": "T.Div", "tir.FloorDiv": "T.floordiv", "tir.FloorMod": "T.floormod",
          "tir.Mod": "T.truncmod", "tir.Min": "T.min", "tir.Max": "T.max", "tir.And": "T.And",
          "tir.Or": "T.Or"}
#: Type keys written as TVMScript (the rest of :data:`TYPE_KEYS` is read or skipped).
EXPRESSIONS = frozenset({"IntImm", "FloatImm", "tir.Var", "tir.BufferLoad", "tir.Select", "tir.Call",
                         "tir.Not", "tir.Cast", *_INFIX, *_CALLS})
STATEMENTS = frozenset({"tir.SeqStmt", "tir.For", "tir.BlockRealize", "tir.BufferStore"})
#: Every type key this reader accepts; types, spans and source maps are read past.
TYPE_KEYS = frozenset({
    "", "IRModule", "GlobalVar", "tir.PrimFunc", "DictAttrs", "Map", "Array", "runtime.String", "Range",
    "tir.Block", "tir.IterVar", "tir.Buffer", "tir.BufferRegion", "Op", "PrimType", "PointerType",
    "TupleType", "FuncType", "SourceMap", *EXPRESSIONS, *STATEMENTS,
})
_FOR_KINDS = {"0": "serial", "1": "parallel", "2": "vectorized", "3": "unroll"}
_ITER_TYPES = {"0": "spatial", "2": "reduce"}
# Function attributes 0.27 renamed.
_FUNC_ATTRS = {"tir.noalias": "tirx.noalias"}


def decode_workload(text: Any, where: str) -> dict[str, Any]:
    """The node graph in a database's base64 workload field.

    Parameters
    ----------
    text : str
        ``base64(<uint64 length><JSON>)`` as MetaSchedule's JSON database writes it (the
        length prefix may be absent).
    where : str
        The file and line, for errors.

    Raises
    ------
    DatabaseError
        When the text is not base64 of a JSON node graph.
    """
    if not isinstance(text, str):
        raise DatabaseError(f"{where}: the workload is {type(text).__name__}, not base64 text")
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as err:
        raise DatabaseError(f"{where}: the workload is not base64: {err}") from None
    if len(raw) >= 8 and struct.unpack("<Q", raw[:8])[0] == len(raw) - 8:
        raw = raw[8:]  # dmlc's string serialisation: a little-endian length first
    try:
        graph = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DatabaseError(f"{where}: the workload is not a JSON node graph: {err}") from None
    if not (isinstance(graph, dict) and isinstance(graph.get("nodes"), list) and isinstance(graph.get("root"), int)):
        raise DatabaseError(f"{where}: the workload is not a TVM node graph (no 'root' and 'nodes')")
    return graph


def graph_version(graph: Mapping[str, Any]) -> str | None:
    """The TVM version that wrote ``graph`` (None if it does not say)."""
    attrs = graph.get("attrs")
    return attrs.get("tvm_version") if isinstance(attrs, Mapping) else None


def block_names(graph: Mapping[str, Any]) -> list[tuple[str, bool]]:
    """(name, has an init: a reduction) of every TIR block in the graph, in node order."""
    nodes = graph["nodes"]
    out = []
    for node in nodes:
        if isinstance(node, Mapping) and node.get("type_key") == "tir.Block":
            try:
                a = node["attrs"]
                out.append((str(nodes[int(a["name_hint"])].get("repr_str", "")), int(a.get("init", "0")) != 0))
            except (KeyError, IndexError, TypeError, ValueError, AttributeError):
                continue  # a block the module does not reach may be malformed; the names only label the pool
    return out


def module_script(graph: Mapping[str, Any], where: str) -> str:
    """TVMScript (TVM 0.27) of the IRModule in an old JSON node graph.

    Parameters
    ----------
    graph : Mapping
        What :func:`decode_workload` returns.
    where : str
        The workload (file, line), for errors.

    Raises
    ------
    DatabaseError
        Naming ``where`` and the type key, for a node of a type not in :data:`TYPE_KEYS`, or
        for a graph that is not an IRModule of TIR PrimFuncs.
    """
    nodes = graph["nodes"]
    for i, node in enumerate(nodes):
        key = node.get("type_key") if isinstance(node, Mapping) else None
        if not isinstance(key, str) or key not in TYPE_KEYS:
            raise DatabaseError(f"{where}: node {i} has type key {key!r}, which tuna cannot read "
                                f"(it reads TIR workloads: {', '.join(sorted(k for k in TYPE_KEYS if k))})")
    try:
        return _Writer(nodes, where).module(graph["root"])
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, RecursionError) as err:
        # A node's attributes of the wrong shape, a reference past the nodes, a cycle of references.
        raise DatabaseError(f"{where}: malformed node graph ({type(err).__name__}: {err})") from None


class _Writer:
    """One graph's TVMScript; names are given per node index, unique in the module."""

    def __init__(self, nodes: list[dict[str, Any]], where: str) -> None:
        self.nodes = nodes
        self.where = where
        self.names: dict[int, str] = {}
        self.taken: set[str] = {"T", "I", "Module"}

    # -- reading nodes ---------------------------------------------------------------------
    def node(self, ref: Any) -> dict[str, Any] | None:
        index = int(ref)
        return None if index == 0 or self.nodes[index]["type_key"] == "" else self.nodes[index]

    def attr(self, node: dict[str, Any], key: str) -> dict[str, Any] | None:
        return self.node(node["attrs"][key])

    def refs(self, ref: Any) -> list[int]:
        """The element indices of an Array node."""
        node = self.node(ref)
        return [] if node is None else [int(i) for i in node.get("data", [])]

    def string(self, ref: Any) -> str:
        node = self.node(ref)
        return "" if node is None else node["repr_str"]

    def mapping(self, ref: Any) -> list[tuple[Any, int]]:
        """(key, value index) pairs of a Map: string keys are stored in 'keys', others inline."""
        node = self.node(ref)
        if node is None:
            return []
        data = [int(i) for i in node.get("data", [])]
        if "keys" in node:
            return list(zip(node["keys"], data))
        return list(zip(data[0::2], data[1::2]))

    def fail(self, node: dict[str, Any], what: str) -> DatabaseError:
        return DatabaseError(f"{self.where}: {node['type_key']} {what}, which tuna cannot write as TVMScript")

    def name(self, index: int, hint: str) -> str:
        """A Python identifier for the variable or buffer node ``index``, unique in the module."""
        if index not in self.names:
            base = re.sub(r"\W", "_", hint) or "v"
            if base[0].isdigit() or keyword.iskeyword(base):
                base = "v_" + base
            name, n = base, 0
            while name in self.taken:
                n += 1
                name = f"{base}_{n}"
            self.taken.add(name)
            self.names[index] = name
        return self.names[index]

    def var(self, ref: Any) -> str:
        index = int(ref)
        return self.name(index, self.string(self.nodes[index]["attrs"]["name"]))

    def buffer(self, ref: Any) -> str:
        index = int(ref)
        return self.name(index, self.string(self.nodes[index]["attrs"]["name"]))

    # -- expressions -----------------------------------------------------------------------
    def expr(self, ref: Any) -> str:
        index = int(ref)
        node = self.nodes[index]
        key, a = node["type_key"], node.get("attrs", {})
        if key == "IntImm":
            value, dtype = int(a["value"]), a["dtype"]
            if dtype == "bool":
                return "True" if value else "False"
            return str(value) if dtype == "int32" else f"T.{dtype}({value})"
        if key == "FloatImm":
            value = float(a["value"])
            text = repr(value) if math.isfinite(value) else f'"{value}"'
            return f"T.{a['dtype']}({text})"
        if key == "tir.Var":
            return self.var(index)
        if key == "tir.BufferLoad":
            return f"{self.buffer(a['buffer'])}[{self.indices(a['indices'])}]"
        if key in _INFIX:
            return f"({self.expr(a['a'])} {_INFIX[key]} {self.expr(a['b'])})"
        if key in _CALLS:
            return f"{_CALLS[key]}({self.expr(a['a'])}, {self.expr(a['b'])})"
        if key == "tir.Not":
            return f"T.Not({self.expr(a['a'])})"
        if key == "tir.Cast":
            return f'T.Cast("{a["dtype"]}", {self.expr(a["value"])})'
        if key == "tir.Select":
            return (f"T.Select({self.expr(a['condition'])}, {self.expr(a['true_value'])}, "
                    f"{self.expr(a['false_value'])})")
        if key == "tir.Call":
            op = self.node(a["op"])
            if op is None or op["type_key"] != "Op" or not op.get("repr_str", "").startswith("tir."):
                raise self.fail(node, "calls something other than a tir operator")
            args = ", ".join(self.expr(i) for i in self.refs(a["args"]))
            return f"T.{op['repr_str'][4:]}({args})"
        raise self.fail(node, "as an expression")

    def indices(self, ref: Any) -> str:
        return ", ".join(self.expr(i) for i in self.refs(ref))

    def region(self, ref: Any) -> str:
        """A BufferRegion as ``A[i, j:j + 3]``."""
        node = self.nodes[int(ref)]["attrs"]
        parts = []
        for r in self.refs(node["region"]):
            rng = self.nodes[r]["attrs"]
            lo, ext = self.expr(rng["min"]), self.nodes[int(rng["extent"])]
            if ext["type_key"] == "IntImm" and int(ext["attrs"]["value"]) == 1:
                parts.append(lo)
            else:
                parts.append(f"{lo}:{lo} + {self.expr(rng['extent'])}")
        return f"{self.buffer(node['buffer'])}[{', '.join(parts)}]"

    def value(self, ref: Any) -> str:
        """An annotation value: a string, a number or an array of them."""
        node = self.node(ref)
        if node is None:
            return "None"
        if node["type_key"] == "runtime.String":
            return json.dumps(node["repr_str"])
        if node["type_key"] == "Array":
            return "[" + ", ".join(self.value(i) for i in node.get("data", [])) + "]"
        return self.expr(ref)

    def attrs(self, ref: Any, rename: Mapping[str, str] | None = None) -> str:
        items = [(str(k), self.value(v)) for k, v in self.mapping(ref)]
        return "{" + ", ".join(f"{json.dumps((rename or {}).get(k, k))}: {v}" for k, v in items) + "}"

    # -- statements ------------------------------------------------------------------------
    def alloc(self, ref: Any) -> str:
        node = self.nodes[int(ref)]
        a = node["attrs"]
        if self.refs(a["strides"]) or self.refs(a["axis_separators"]):
            raise self.fail(node, "has strides or axis separators")
        shape = ", ".join(self.expr(i) for i in self.refs(a["shape"]))
        scope = self.storage_scope(a)
        extra = f', scope="{scope}"' if scope not in ("", "global") else ""
        return f'{self.buffer(ref)} = T.sblock_alloc_buffer(({shape},), "{a["dtype"]}"{extra})'

    def storage_scope(self, buffer_attrs: Mapping[str, Any]) -> str:
        data = self.nodes[int(buffer_attrs["data"])]["attrs"]
        pointer = self.node(data["type_annotation"])
        if pointer is None or pointer["type_key"] != "PointerType":
            return ""
        return self.string(pointer["attrs"]["storage_scope"])

    def stmt(self, ref: Any, indent: str) -> list[str]:
        node = self.nodes[int(ref)]
        key, a = node["type_key"], node.get("attrs", {})
        if key == "tir.SeqStmt":
            return [line for i in self.refs(a["seq"]) for line in self.stmt(i, indent)]
        if key == "tir.BufferStore":
            return [f"{indent}{self.buffer(a['buffer'])}[{self.indices(a['indices'])}] = {self.expr(a['value'])}"]
        if key == "tir.For":
            kind = _FOR_KINDS.get(a["kind"])
            if kind is None or self.node(a["thread_binding"]) is not None or self.mapping(a["annotations"]):
                raise self.fail(node, "is a bound or annotated loop")
            lo, ext = self.expr(a["min"]), self.expr(a["extent"])
            start = self.nodes[int(a["min"])]
            stop = ext if start["type_key"] == "IntImm" and int(start["attrs"]["value"]) == 0 else f"{lo} + {ext}"
            head = f"{indent}for {self.var(a['loop_var'])} in T.{kind}({lo}, {stop}):"
            return [head, *self.stmt(a["body"], indent + "    ")]
        if key == "tir.BlockRealize":
            return self.block(a, indent)
        raise self.fail(node, "as a statement")

    def block(self, realize: Mapping[str, Any], indent: str) -> list[str]:
        block = self.nodes[int(realize["block"])]
        a = block["attrs"]
        if self.refs(a["match_buffers"]):
            raise self.fail(block, "has match_buffers")
        inner = indent + "    "
        lines = [f'{indent}with T.sblock({json.dumps(self.string(a["name_hint"]))}):']
        for iv, value in zip(self.refs(a["iter_vars"]), self.refs(realize["iter_values"]), strict=True):
            ia = self.nodes[iv]["attrs"]
            kind = _ITER_TYPES.get(ia["iter_type"])
            if kind is None:
                raise self.fail(self.nodes[iv], f"of iter type {ia['iter_type']}")
            dom = self.nodes[int(ia["dom"])]["attrs"]
            lo = self.nodes[int(dom["min"])]
            ext = self.expr(dom["extent"])
            if not (lo["type_key"] == "IntImm" and int(lo["attrs"]["value"]) == 0):
                ext = f"({self.expr(dom['min'])}, {self.expr(dom['min'])} + {ext})"
            lines.append(f"{inner}{self.var(ia['var'])} = T.axis.{kind}({ext}, {self.expr(value)})")
        pred = self.nodes[int(realize["predicate"])]
        if not (pred["type_key"] == "IntImm" and int(pred["attrs"]["value"]) == 1):
            lines.append(f"{inner}T.where({self.expr(realize['predicate'])})")
        lines.append(f"{inner}T.reads({', '.join(self.region(r) for r in self.refs(a['reads']))})")
        lines.append(f"{inner}T.writes({', '.join(self.region(r) for r in self.refs(a['writes']))})")
        if self.mapping(a["annotations"]):
            lines.append(f"{inner}T.sblock_attr({self.attrs(a['annotations'])})")
        lines += [inner + self.alloc(b) for b in self.refs(a["alloc_buffers"])]
        if self.node(a["init"]) is not None:
            lines.append(f"{inner}with T.init():")
            lines += self.stmt(a["init"], inner + "    ")
        return lines + self.stmt(a["body"], inner)

    # -- functions and the module ----------------------------------------------------------
    def function(self, name: str, ref: int) -> list[str]:
        func = self.nodes[ref]
        if func["type_key"] != "tir.PrimFunc":
            raise DatabaseError(f"{self.where}: function {name} is a {func['type_key']}, not a TIR PrimFunc")
        a = func["attrs"]
        buffers = dict(self.mapping(a["buffer_map"]))
        params, matches = [], []
        for p in self.refs(a["params"]):
            if p in buffers:
                b = self.nodes[buffers[p]]["attrs"]
                if self.refs(b["strides"]) or self.refs(b["axis_separators"]):
                    raise self.fail(self.nodes[buffers[p]], "has strides or axis separators")
                shape = ", ".join(self.expr(i) for i in self.refs(b["shape"]))
                params.append(f"{self.var(p)}: T.handle")
                matches.append(f'{self.buffer(buffers[p])} = T.match_buffer({self.var(p)}, ({shape},), "{b["dtype"]}")')
            else:
                dtype = self.nodes[p]["attrs"]["dtype"]
                params.append(f"{self.var(p)}: T.{dtype}")
        dict_attrs = self.node(a["attrs"])
        body = "        "
        lines = ["    @T.prim_func(s_tir=True)", f"    def {name}({', '.join(params)}):"]
        if dict_attrs is not None:
            lines.append(f"{body}T.func_attr({self.attrs(dict_attrs['attrs']['__dict__'], _FUNC_ATTRS)})")
        lines += [body + m for m in matches]
        return lines + self.stmt(a["body"], body)

    def module(self, root: int) -> str:
        mod = self.nodes[root]
        if mod["type_key"] != "IRModule":
            raise DatabaseError(f"{self.where}: the workload's root is a {mod['type_key']}, not an IRModule")
        lines = ["# from tvm.script import ir as I", "# from tvm.script import tirx as T", "",
                 "@I.ir_module", "class Module:"]
        for gvar, func in self.mapping(mod["attrs"]["functions"]):
            name = self.string(self.nodes[int(gvar)]["attrs"]["name_hint"])
            if not name.isidentifier() or keyword.iskeyword(name):
                raise DatabaseError(f"{self.where}: function name {name!r} is not a Python identifier")
            self.taken.add(name)
            lines += self.function(name, func)
        return "\n".join(lines) + "\n"
