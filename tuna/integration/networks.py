"""Whole networks for ``tuna bench network``: ResNet-18 and one BERT-base encoder layer, batch 1.

Each network is written once, against a small set of tensor operations (:class:`RelaxOps`
builds a TVM Relax module; :class:`TorchOps` runs PyTorch eagerly with the same weights),
so both frameworks compute the same graph. Weights are random (seeded), nothing is
downloaded. Batch normalisation is folded into each convolution's bias, as inference
compilers do, so ResNet-18 is conv + bias (+ ReLU) throughout.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm
from tvm import relax

from ..errors import TunaError


class _Weights:
    """Seeded random weights, drawn in the order the network asks for them."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, *shape: int, fan_in: int | None = None) -> np.ndarray:
        # He-style scale keeps activations finite through 18 layers.
        scale = math.sqrt(2.0 / fan_in) if fan_in else 0.02
        return (self.rng.standard_normal(shape) * scale).astype("float32")


class RelaxOps:
    """Emits each operation into a Relax dataflow block; weights become constants."""

    def __init__(self, bb: relax.BlockBuilder) -> None:
        self.bb = bb

    def _emit(self, expr: relax.Expr) -> relax.Var:
        return self.bb.emit(expr)

    def conv(self, x, w: np.ndarray, b: np.ndarray, stride: int, padding: int):
        y = self._emit(relax.op.nn.conv2d(x, relax.const(w), strides=stride, padding=padding))
        return self._emit(relax.op.add(y, relax.const(b.reshape(1, -1, 1, 1))))

    def relu(self, x):
        return self._emit(relax.op.nn.relu(x))

    def add(self, x, y):
        return self._emit(relax.op.add(x, y))

    def max_pool(self, x, size: int, stride: int, padding: int):
        return self._emit(relax.op.nn.max_pool2d(x, size, stride, padding))

    def global_avg_pool(self, x):
        return self._emit(relax.op.nn.adaptive_avg_pool2d(x, 1))

    def flatten(self, x, features: int):
        return self._emit(relax.op.reshape(x, (1, features)))

    def dense(self, x, w: np.ndarray, b: np.ndarray):
        """``x @ w + b`` with ``w`` stored (in, out)."""
        return self._emit(relax.op.add(relax.op.matmul(x, relax.const(w)), relax.const(b)))

    def reshape(self, x, shape: tuple[int, ...]):
        return self._emit(relax.op.reshape(x, shape))

    def transpose(self, x, axes: tuple[int, ...]):
        return self._emit(relax.op.permute_dims(x, list(axes)))

    def matmul(self, x, y):
        return self._emit(relax.op.matmul(x, y))

    def scale(self, x, factor: float):
        return self._emit(relax.op.multiply(x, relax.const(factor, "float32")))

    def softmax(self, x):
        return self._emit(relax.op.nn.softmax(x, axis=-1))

    def gelu(self, x):
        return self._emit(relax.op.nn.gelu(x))

    def layer_norm(self, x, gamma: np.ndarray, beta: np.ndarray):
        return self._emit(relax.op.nn.layer_norm(x, relax.const(gamma), relax.const(beta), axes=[-1]))


class TorchOps:
    """The same operations in PyTorch, run eagerly (imported only when asked for)."""

    def __init__(self) -> None:
        import torch  # optional: tuna does not depend on it

        self.torch = torch
        self.f = torch.nn.functional

    def _t(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a))

    def conv(self, x, w, b, stride, padding):
        return self.f.conv2d(x, self._t(w), self._t(b), stride=stride, padding=padding)

    def relu(self, x):
        return self.f.relu(x)

    def add(self, x, y):
        return x + y

    def max_pool(self, x, size, stride, padding):
        return self.f.max_pool2d(x, size, stride, padding)

    def global_avg_pool(self, x):
        return self.f.adaptive_avg_pool2d(x, 1)

    def flatten(self, x, features):
        return x.reshape(1, features)

    def dense(self, x, w, b):
        return x @ self._t(w) + self._t(b)

    def reshape(self, x, shape):
        return x.reshape(shape)

    def transpose(self, x, axes):
        return x.permute(*axes)

    def matmul(self, x, y):
        return x @ y

    def scale(self, x, factor):
        return x * factor

    def softmax(self, x):
        return self.f.softmax(x, dim=-1)

    def gelu(self, x):
        return self.f.gelu(x)

    def layer_norm(self, x, gamma, beta):
        return self.f.layer_norm(x, (gamma.shape[0],), self._t(gamma), self._t(beta), eps=1e-5)


# ---------------------------------------------------------------------------------------
# The networks, written once against the operations above
# ---------------------------------------------------------------------------------------


def _resnet18(ops: Any, x: Any, weights: _Weights, classes: int = 1000) -> Any:
    """ResNet-18 (He et al., 2016) for 224x224 images, batch norm folded into the convolutions."""

    def conv(x, cin, cout, k, stride, padding):
        return ops.conv(x, weights(cout, cin, k, k, fan_in=cin * k * k), weights(cout), stride, padding)

    y = ops.relu(conv(x, 3, 64, 7, 2, 3))
    y = ops.max_pool(y, 3, 2, 1)
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = conv(y, cin, cout, 1, stride, 0) if stride != 1 or cin != cout else y
            z = ops.relu(conv(y, cin, cout, 3, stride, 1))
            z = conv(z, cout, cout, 3, 1, 1)
            y = ops.relu(ops.add(z, shortcut))
            cin = cout
    y = ops.flatten(ops.global_avg_pool(y), 512)
    return ops.dense(y, weights(512, classes, fan_in=512), weights(classes))


def _bert_layer(ops: Any, x: Any, weights: _Weights, seq: int = 128, hidden: int = 768, heads: int = 12,
                ffn: int = 3072) -> Any:
    """One BERT-base encoder layer (Devlin et al., 2019): self-attention and feed-forward, post-norm."""
    d = hidden // heads

    def dense(x, cin, cout):
        return ops.dense(x, weights(cin, cout, fan_in=cin), weights(cout))

    def split_heads(t):  # (1, seq, hidden) -> (1, heads, seq, d)
        return ops.transpose(ops.reshape(t, (1, seq, heads, d)), (0, 2, 1, 3))

    q = split_heads(dense(x, hidden, hidden))
    k = split_heads(dense(x, hidden, hidden))
    v = split_heads(dense(x, hidden, hidden))
    scores = ops.scale(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))), 1.0 / math.sqrt(d))
    ctx = ops.matmul(ops.softmax(scores), v)
    ctx = ops.reshape(ops.transpose(ctx, (0, 2, 1, 3)), (1, seq, hidden))
    ones, zeros = np.ones(hidden, "float32"), np.zeros(hidden, "float32")
    y = ops.layer_norm(ops.add(dense(ctx, hidden, hidden), x), ones, zeros)
    z = dense(ops.gelu(dense(y, hidden, ffn)), ffn, hidden)
    return ops.layer_norm(ops.add(z, y), ones, zeros)


@dataclass(frozen=True)
class Network:
    """A network tuna can build: its input and how to write it against the operations.

    Attributes
    ----------
    name : str
        Name on the command line.
    title : str
        What it is, for reports.
    input_shape : tuple of int
        Its one input (float32).
    body : callable
        ``body(ops, x, weights) -> output``.
    """

    name: str
    title: str
    input_shape: tuple[int, ...]
    body: Callable[[Any, Any, _Weights], Any]


NETWORKS: dict[str, Network] = {
    n.name: n
    for n in (
        Network("resnet18", "ResNet-18, batch 1, 3x224x224, random weights", (1, 3, 224, 224), _resnet18),
        Network("bert", "BERT-base encoder layer, batch 1, 128 tokens, random weights", (1, 128, 768), _bert_layer),
    )
}


def network(name: str) -> Network:
    """The network called ``name``; TunaError naming the known ones otherwise."""
    try:
        return NETWORKS[name]
    except KeyError:
        raise TunaError(f"unknown network {name!r}; known networks: {', '.join(NETWORKS)}") from None


def relax_module(name: str, seed: int = 0) -> tvm.IRModule:
    """The network as a Relax IRModule with one input ``x`` and its weights as constants."""
    net = network(name)
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(net.input_shape, "float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            out = bb.emit_output(net.body(RelaxOps(bb), x, _Weights(seed)))
        bb.emit_func_output(out)
    return bb.get()


def example_input(name: str, seed: int = 1) -> np.ndarray:
    """A random input of the network's shape."""
    return np.random.default_rng(seed).standard_normal(network(name).input_shape).astype("float32")


def torch_available() -> bool:
    """Whether PyTorch can be imported here (it is optional)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def torch_callable(name: str, seed: int = 0) -> Callable[[np.ndarray], np.ndarray]:
    """The network in PyTorch eager mode with the same weights as :func:`relax_module`.

    Raises
    ------
    TunaError
        When PyTorch is not installed.
    """
    if not torch_available():
        raise TunaError("PyTorch is not installed; `pip install torch` to compare with it")
    net = network(name)
    ops = TorchOps()
    torch = ops.torch
    # Draw the weights once, in the network's order, by tracing with a recording backend.
    tensors: list[np.ndarray] = []
    weights = _Weights(seed)

    def recorded(*shape: int, fan_in: int | None = None) -> np.ndarray:
        tensors.append(weights(*shape, fan_in=fan_in))
        return tensors[-1]

    with torch.no_grad():
        net.body(ops, torch.zeros(net.input_shape), recorded)  # draws every weight once

    def run(inp: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return net.body(ops, torch.from_numpy(inp), _Replay(iter(tensors))).numpy()

    return run


class _Replay:
    """Hands out already-drawn weights in order (so each PyTorch run reuses the same ones)."""

    def __init__(self, it) -> None:
        self.it = it

    def __call__(self, *shape: int, fan_in: int | None = None) -> np.ndarray:
        return next(self.it)
