"""Whole networks for ``tuna bench network`` and ``tuna tune``, batch 1: ResNet-18, ResNet-50,
MobileNetV2, one encoder layer of BERT-base and of BERT-large, a one-layer ViT, one Llama-style
decoder layer, one GPT-2 decoder layer, and networks cut to a few stages (ResNeXt-50,
Whisper-tiny's audio encoder, ConvNeXt-T, EfficientNet-B0, YOLOv8n's backbone, ShuffleNetV2,
MnasNet, SqueezeNet, Inception-v3);
:data:`NETWORKS` lists them.

Each network is written once, against a small set of tensor operations (:class:`RelaxOps`
builds a TVM Relax module; :class:`TorchOps` runs PyTorch eagerly with the same weights),
so both frameworks compute the same graph. Weights are random (seeded), nothing is
downloaded. Batch normalisation is folded into each convolution's bias, as inference
compilers do, so the convolutional networks are conv + bias (+ ReLU or ReLU6) throughout.
"""

from __future__ import annotations

import functools
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

    def conv(self, x, w: np.ndarray, b: np.ndarray, stride: int, padding: int | tuple[int, int], groups: int = 1):
        """``padding``: one size for both axes, or (rows, columns)."""
        y = self._emit(relax.op.nn.conv2d(x, relax.const(w), strides=stride, padding=padding, groups=groups))
        return self._emit(relax.op.add(y, relax.const(b.reshape(1, -1, 1, 1))))

    def conv1d(self, x, w: np.ndarray, b: np.ndarray, stride: int, padding: int):
        y = self._emit(relax.op.nn.conv1d(x, relax.const(w), strides=stride, padding=padding))
        return self._emit(relax.op.add(y, relax.const(b.reshape(1, -1, 1))))

    def relu(self, x):
        return self._emit(relax.op.nn.relu(x))

    def relu6(self, x):
        return self._emit(relax.op.clip(x, 0.0, 6.0))

    def add(self, x, y):
        return self._emit(relax.op.add(x, y))

    def max_pool(self, x, size: int, stride: int, padding: int):
        return self._emit(relax.op.nn.max_pool2d(x, size, stride, padding))

    def avg_pool(self, x, size: int, stride: int, padding: int):
        """Average over each window, the padding counted as zeros (PyTorch's default)."""
        return self._emit(relax.op.nn.avg_pool2d(x, size, stride, padding, count_include_pad=True))

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

    def rms_norm(self, x, gamma: np.ndarray):
        return self._emit(relax.op.nn.rms_norm(x, relax.const(gamma), axes=[-1], epsilon=1e-5))

    def linear(self, x, w: np.ndarray):
        """``x @ w`` with ``w`` stored (in, out), no bias."""
        return self._emit(relax.op.matmul(x, relax.const(w)))

    def add_constant(self, x, c: np.ndarray):
        return self._emit(relax.op.add(x, relax.const(c)))

    def multiply(self, x, y):
        return self._emit(relax.op.multiply(x, y))

    def silu(self, x):
        return self._emit(relax.op.nn.silu(x))

    def sigmoid(self, x):
        return self._emit(relax.op.sigmoid(x))

    def multiply_constant(self, x, c: np.ndarray):
        return self._emit(relax.op.multiply(x, relax.const(c)))

    def split(self, x, parts: int):
        """``x`` cut into ``parts`` equal pieces along the channels (axis 1)."""
        t = self._emit(relax.op.split(x, parts, axis=1))
        return [self._emit(relax.TupleGetItem(t, i)) for i in range(parts)]

    def concat(self, xs):
        """The tensors ``xs`` joined along the channels (axis 1)."""
        return self._emit(relax.op.concat(xs, axis=1))


class TorchOps:
    """The same operations in PyTorch, run eagerly (imported only when asked for)."""

    def __init__(self) -> None:
        import torch  # optional: tuna does not depend on it

        self.torch = torch
        self.f = torch.nn.functional

    def _t(self, a: np.ndarray):
        return self.torch.from_numpy(np.ascontiguousarray(a))

    def conv(self, x, w, b, stride, padding, groups=1):
        return self.f.conv2d(x, self._t(w), self._t(b), stride=stride, padding=padding, groups=groups)

    def conv1d(self, x, w, b, stride, padding):
        return self.f.conv1d(x, self._t(w), self._t(b), stride=stride, padding=padding)

    def relu(self, x):
        return self.f.relu(x)

    def relu6(self, x):
        return self.f.relu6(x)

    def add(self, x, y):
        return x + y

    def max_pool(self, x, size, stride, padding):
        return self.f.max_pool2d(x, size, stride, padding)

    def avg_pool(self, x, size, stride, padding):
        return self.f.avg_pool2d(x, size, stride, padding, count_include_pad=True)

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

    def rms_norm(self, x, gamma):
        return self.f.rms_norm(x, (gamma.shape[0],), self._t(gamma), eps=1e-5)

    def linear(self, x, w):
        return x @ self._t(w)

    def add_constant(self, x, c):
        return x + self._t(c)

    def multiply(self, x, y):
        return x * y

    def silu(self, x):
        return self.f.silu(x)

    def sigmoid(self, x):
        return self.torch.sigmoid(x)

    def multiply_constant(self, x, c):
        return x * self._t(c)

    def split(self, x, parts):
        return list(self.torch.chunk(x, parts, dim=1))

    def concat(self, xs):
        return self.torch.cat(xs, dim=1)


# ---------------------------------------------------------------------------------------
# The networks, written once against the operations above
# ---------------------------------------------------------------------------------------


def _conv(ops: Any, weights: _Weights, x: Any, cin: int, cout: int, k: int | tuple[int, int], stride: int = 1,
          groups: int = 1, padding: int | tuple[int, int] | None = None) -> Any:
    """A ``k x k`` convolution (``k``: rows, columns where not square) ``cin -> cout`` in ``groups``
    groups, padded to keep the size (``k // 2`` along each axis) unless ``padding`` is given, with
    a bias (where a network folds batch norm, into it); its weights drawn now, kernel then bias."""
    kh, kw = (k, k) if isinstance(k, int) else k
    w = weights(cout, cin // groups, kh, kw, fan_in=cin // groups * kh * kw)
    if padding is None:
        padding = kh // 2 if kh == kw else (kh // 2, kw // 2)
    return ops.conv(x, w, weights(cout), stride, padding, groups)


def _resnet(ops: Any, x: Any, weights: _Weights, stages: tuple[int, ...], bottleneck: bool,
            classes: int = 1000, groups: int = 1, group_width: int = 64) -> Any:
    """ResNet (He et al., 2016) for 224x224 images, batch norm folded into the convolutions:
    ``stages[i]`` blocks of width 64 * 2**i, basic (two 3x3) or bottleneck (1x1, 3x3, 1x1 to
    four times the width; stride on the 3x3 as in torchvision's v1.5). ResNeXt (Xie et al., 2017)
    is the bottleneck form whose 3x3 convolution has ``groups`` groups of ``group_width * 2**i``
    channels each (torchvision's ``width_per_group`` is ``group_width``)."""

    conv = functools.partial(_conv, ops, weights)
    y = ops.relu(conv(x, 3, 64, 7, 2))
    y = ops.max_pool(y, 3, 2, 1)
    cin = 64
    for stage, blocks in enumerate(stages):
        width = groups * group_width * 2**stage
        cout = 4 * 64 * 2**stage if bottleneck else width
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = conv(y, cin, cout, 1, stride) if stride != 1 or cin != cout else y
            if bottleneck:
                z = ops.relu(conv(y, cin, width, 1))
                z = ops.relu(conv(z, width, width, 3, stride, groups))
                z = conv(z, width, cout, 1)
            else:
                z = ops.relu(conv(y, cin, cout, 3, stride))
                z = conv(z, cout, cout, 3)
            y = ops.relu(ops.add(z, shortcut))
            cin = cout
    y = ops.flatten(ops.global_avg_pool(y), cin)
    return ops.dense(y, weights(cin, classes, fan_in=cin), weights(classes))


def _resnet18(ops: Any, x: Any, weights: _Weights) -> Any:
    """ResNet-18: basic blocks, 2 per stage."""
    return _resnet(ops, x, weights, (2, 2, 2, 2), bottleneck=False)


def _resnet50(ops: Any, x: Any, weights: _Weights) -> Any:
    """ResNet-50: bottleneck blocks, 3, 4, 6 and 3 per stage."""
    return _resnet(ops, x, weights, (3, 4, 6, 3), bottleneck=True)


def _resnext50_stages12(ops: Any, x: Any, weights: _Weights) -> Any:
    """ResNeXt-50 (32x4d) cut to its first two stages (3 and 4 blocks) and the classifier."""
    return _resnet(ops, x, weights, (3, 4), bottleneck=True, groups=32, group_width=4)


def _mobilenet_v2(ops: Any, x: Any, weights: _Weights, classes: int = 1000) -> Any:
    """MobileNetV2 (Sandler et al., 2018), width 1.0, for 224x224 images: inverted residual
    blocks of 1x1 expansion, 3x3 depthwise and 1x1 projection, ReLU6, batch norm folded."""

    conv = functools.partial(_conv, ops, weights)

    y = ops.relu6(conv(x, 3, 32, 3, 2))
    cin = 32
    # (expansion t, output channels c, repeats n, first stride s): Table 2 of the paper.
    for t, c, n, s in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                       (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            z = ops.relu6(conv(y, cin, hidden, 1, 1)) if t != 1 else y
            z = ops.relu6(conv(z, hidden, hidden, 3, stride, groups=hidden))
            z = conv(z, hidden, c, 1, 1)
            y = ops.add(z, y) if stride == 1 and cin == c else z
            cin = c
    y = ops.relu6(conv(y, cin, 1280, 1, 1))
    y = ops.flatten(ops.global_avg_pool(y), 1280)
    return ops.dense(y, weights(1280, classes, fan_in=1280), weights(classes))


def _dense(ops: Any, weights: _Weights, x: Any, cin: int, cout: int, bias: bool = True) -> Any:
    """A dense layer ``cin -> cout``, with a bias unless ``bias=False``, its weights drawn now."""
    w = weights(cin, cout, fan_in=cin)
    return ops.dense(x, w, weights(cout)) if bias else ops.linear(x, w)


def _self_attention(ops: Any, weights: _Weights, x: Any, seq: int, hidden: int, heads: int,
                    causal: bool = False, bias: bool = True) -> Any:
    """Multi-head self-attention over ``x`` (1, seq, hidden), through its output projection.

    ``causal`` masks each token's scores for the tokens after it (a decoder's attention);
    ``bias=False`` gives the projections no bias (as Llama's).
    """
    d = hidden // heads

    def split_heads(t):  # (1, seq, hidden) -> (1, heads, seq, d)
        return ops.transpose(ops.reshape(t, (1, seq, heads, d)), (0, 2, 1, 3))

    q, k, v = (split_heads(_dense(ops, weights, x, hidden, hidden, bias)) for _ in range(3))
    scores = ops.scale(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))), 1.0 / math.sqrt(d))
    if causal:
        # A large negative number rather than -inf: exp underflows to 0 all the same, and no NaN can appear.
        scores = ops.add_constant(scores, np.triu(np.full((seq, seq), -1e9, "float32"), k=1))
    ctx = ops.matmul(ops.softmax(scores), v)
    ctx = ops.reshape(ops.transpose(ctx, (0, 2, 1, 3)), (1, seq, hidden))
    return _dense(ops, weights, ctx, hidden, hidden, bias)


def _feed_forward(ops: Any, weights: _Weights, x: Any, hidden: int, ffn: int) -> Any:
    """The encoder's feed-forward block: ``hidden -> ffn``, GELU, ``ffn -> hidden``."""
    return _dense(ops, weights, ops.gelu(_dense(ops, weights, x, hidden, ffn)), ffn, hidden)


def _bert_layer(ops: Any, x: Any, weights: _Weights, seq: int = 128, hidden: int = 768, heads: int = 12,
                ffn: int = 3072) -> Any:
    """One BERT encoder layer (Devlin et al., 2019): self-attention and feed-forward, post-norm.

    The defaults are BERT-base's sizes; BERT-large has ``hidden=1024, heads=16, ffn=4096``.
    """
    ones, zeros = np.ones(hidden, "float32"), np.zeros(hidden, "float32")
    y = ops.layer_norm(ops.add(_self_attention(ops, weights, x, seq, hidden, heads), x), ones, zeros)
    return ops.layer_norm(ops.add(_feed_forward(ops, weights, y, hidden, ffn), y), ones, zeros)


def _vit_layer(ops: Any, x: Any, weights: _Weights, image: int = 224, patch: int = 16, hidden: int = 768,
               heads: int = 12, ffn: int = 3072, classes: int = 1000) -> Any:
    """A ViT-B/16-sized network (Dosovitskiy et al., 2021) cut to one encoder layer: a 16x16
    patch embedding (a strided conv), one pre-norm encoder layer over the 196 patch tokens and
    a classifier on their mean.

    The class token and the position embeddings are left out: they change no task's shapes
    beyond one more token, and the 196 tokens give the dense, batch-matmul, softmax and
    layer-norm tasks lengths that are not a power of two.
    """
    side = image // patch
    seq = side * side
    y = _conv(ops, weights, x, 3, hidden, patch, patch, padding=0)  # (1, hidden, side, side)
    y = ops.transpose(ops.reshape(y, (1, hidden, seq)), (0, 2, 1))  # (1, seq, hidden)
    ones, zeros = np.ones(hidden, "float32"), np.zeros(hidden, "float32")
    y = ops.add(y, _self_attention(ops, weights, ops.layer_norm(y, ones, zeros), seq, hidden, heads))
    y = ops.add(y, _feed_forward(ops, weights, ops.layer_norm(y, ones, zeros), hidden, ffn))
    y = ops.reshape(ops.transpose(y, (0, 2, 1)), (1, hidden, side, side))
    y = ops.flatten(ops.global_avg_pool(y), hidden)
    return _dense(ops, weights, y, hidden, classes)


def _llama_layer(ops: Any, x: Any, weights: _Weights, seq: int = 96, hidden: int = 960, heads: int = 15,
                 ffn: int = 2560) -> Any:
    """One Llama-style decoder layer (Touvron et al., 2023) at SmolLM-360M's sizes (hidden 960,
    15 heads of 64, FFN 2560), prefilling 96 tokens: pre-RMSNorm, causal self-attention without
    biases, and a SwiGLU feed-forward block (``silu(x W_gate) * (x W_up)``, then ``W_down``).

    Rotary position embeddings and grouped key/value heads are left out: the first is an
    element-wise rotation of q and k, the second repeats k and v across heads; neither adds a
    loop nest that the tuned operators here lack.
    """
    ones = np.ones(hidden, "float32")
    y = ops.add(x, _self_attention(ops, weights, ops.rms_norm(x, ones), seq, hidden, heads, causal=True, bias=False))
    h = ops.rms_norm(y, ones)
    gate = ops.silu(_dense(ops, weights, h, hidden, ffn, bias=False))
    up = _dense(ops, weights, h, hidden, ffn, bias=False)
    return ops.add(y, _dense(ops, weights, ops.multiply(gate, up), ffn, hidden, bias=False))


def _gpt2_layer(ops: Any, x: Any, weights: _Weights, seq: int = 256, hidden: int = 768, heads: int = 12,
                ffn: int = 3072) -> Any:
    """One GPT-2 decoder layer (Radford et al., 2019) at GPT-2 small's sizes (hidden 768, 12 heads,
    FFN 3072) over 256 tokens: pre-norm, causal self-attention with biases, a GELU feed-forward
    block, and the model's final layer norm.

    Position embeddings are left out (an add to the input). Its 256 tokens give the dense,
    batch-matmul, softmax and layer-norm tasks shapes no other network here has.
    """
    ones, zeros = np.ones(hidden, "float32"), np.zeros(hidden, "float32")
    y = ops.add(x, _self_attention(ops, weights, ops.layer_norm(x, ones, zeros), seq, hidden, heads, causal=True))
    y = ops.add(y, _feed_forward(ops, weights, ops.layer_norm(y, ones, zeros), hidden, ffn))
    return ops.layer_norm(y, ones, zeros)


def _whisper_encoder(ops: Any, x: Any, weights: _Weights, frames: int = 1000, mels: int = 80, hidden: int = 384,
                     heads: int = 6, ffn: int = 1536) -> Any:
    """Whisper-tiny's audio encoder (Radford et al., 2022) cut to its convolutional stem and one
    pre-norm layer, over 10 s of audio (``frames`` 1,000 frames of 80 mel bins): two width-3 1-D
    convolutions with GELU (the second of stride 2, to 500 tokens), one encoder layer (hidden
    384, 6 heads of 64, a GELU feed-forward block of 1536) and the encoder's final layer norm.

    The sinusoidal position embeddings are left out (an add to the stem's output). The 500
    tokens and 384 channels give every task a shape no other network here has, and the stem two
    1-D convolutions.
    """
    seq = (frames - 1) // 2 + 1  # the stride-2 convolution's output length (width 3, padding 1)
    y = ops.gelu(ops.conv1d(x, weights(hidden, mels, 3, fan_in=3 * mels), weights(hidden), 1, 1))
    y = ops.gelu(ops.conv1d(y, weights(hidden, hidden, 3, fan_in=3 * hidden), weights(hidden), 2, 1))
    y = ops.transpose(y, (0, 2, 1))  # (1, seq, hidden)
    ones, zeros = np.ones(hidden, "float32"), np.zeros(hidden, "float32")
    y = ops.add(y, _self_attention(ops, weights, ops.layer_norm(y, ones, zeros), seq, hidden, heads))
    y = ops.add(y, _feed_forward(ops, weights, ops.layer_norm(y, ones, zeros), hidden, ffn))
    return ops.layer_norm(y, ones, zeros)


def _convnext_stage1(ops: Any, x: Any, weights: _Weights, dim: int = 96, blocks: int = 3,
                     classes: int = 1000) -> Any:
    """ConvNeXt-T (Liu et al., 2022) cut to its stem and first stage: a 4x4 stride-4 patch
    convolution to 96 channels and a layer norm, three ConvNeXt blocks at 56x56, then the
    classifier (mean over the image, layer norm, dense).

    A block is a 7x7 depthwise convolution, then, channels last, a layer norm, a dense layer to
    four times the width with GELU, one back, a per-channel layer scale and the residual add.
    The depthwise convolution runs channels first (NCHW), so each block transposes twice, as
    torchvision's implementation does.
    """
    side = 56
    ones, zeros = np.ones(dim, "float32"), np.zeros(dim, "float32")

    def to_last(t):  # (1, dim, side, side) -> (1, side * side, dim)
        return ops.transpose(ops.reshape(t, (1, dim, side * side)), (0, 2, 1))

    def to_first(t):  # (1, side * side, dim) -> (1, dim, side, side)
        return ops.reshape(ops.transpose(t, (0, 2, 1)), (1, dim, side, side))

    y = _conv(ops, weights, x, 3, dim, 4, 4, padding=0)
    y = ops.layer_norm(to_last(y), ones, zeros)
    for _ in range(blocks):
        z = _conv(ops, weights, to_first(y), dim, dim, 7, groups=dim)  # depthwise 7x7
        z = ops.layer_norm(to_last(z), ones, zeros)
        z = _dense(ops, weights, ops.gelu(_dense(ops, weights, z, dim, 4 * dim)), 4 * dim, dim)
        y = ops.add(y, ops.multiply_constant(z, weights(dim)))
    y = ops.layer_norm(ops.flatten(ops.global_avg_pool(to_first(y)), dim), ones, zeros)
    return _dense(ops, weights, y, dim, classes)


def _efficientnet_b0_stem(ops: Any, x: Any, weights: _Weights) -> Any:
    """EfficientNet-B0 (Tan and Le, 2019) cut to its stem and first two stages, batch norm folded:
    a 3x3 stride-2 convolution to 32 channels with SiLU, one MBConv1 block (3x3 depthwise, SiLU,
    squeeze-and-excitation, 1x1 projection to 16) and the first MBConv6 block of stage two (1x1
    expansion to 96, 3x3 stride-2 depthwise, squeeze-and-excitation, 1x1 projection to 24).

    Squeeze-and-excitation (Hu et al., 2018) pools each channel over the image, passes the means
    through two 1x1 convolutions (to a quarter of the block's input channels, SiLU, then back,
    sigmoid) and scales the channels by the result. Output (1, 24, 56, 56).
    """

    conv = functools.partial(_conv, ops, weights)

    def squeeze_excite(x, channels, squeezed):
        s = ops.silu(conv(ops.global_avg_pool(x), channels, squeezed, 1, 1))
        return ops.multiply(x, ops.sigmoid(conv(s, squeezed, channels, 1, 1)))

    y = ops.silu(conv(x, 3, 32, 3, 2))
    y = squeeze_excite(ops.silu(conv(y, 32, 32, 3, 1, groups=32)), 32, 8)
    y = conv(y, 32, 16, 1, 1)
    y = ops.silu(conv(y, 16, 96, 1, 1))
    y = squeeze_excite(ops.silu(conv(y, 96, 96, 3, 2, groups=96)), 96, 4)
    return conv(y, 96, 24, 1, 1)


def _yolov8n_backbone(ops: Any, x: Any, weights: _Weights) -> Any:
    """YOLOv8n's backbone (Ultralytics, 2023) cut to its first three stages and an SPPF block,
    batch norm folded, every convolution followed by SiLU.

    Two 3x3 stride-2 convolutions (3 -> 16 -> 32 channels); a C2f block at 32 channels (a 1x1
    convolution whose output is split in two halves, one bottleneck of two 3x3 convolutions with
    a residual on the second half, the three tensors concatenated and a 1x1 convolution back to
    32); a third 3x3 stride-2 convolution to 64; and SPPF (He et al.'s spatial pyramid pooling as
    YOLOv5 chains it; YOLOv8n's backbone ends with one at 256 channels, here it follows the third
    stage at 64): a 1x1 convolution to 32, three 5x5 stride-1 max pools in a row, the four
    tensors concatenated and a 1x1 convolution back to 64. Output (1, 64, 40, 40) for 3x320x320.
    """

    def conv(x, cin, cout, k, stride=1):
        return ops.silu(_conv(ops, weights, x, cin, cout, k, stride))

    y = conv(conv(x, 3, 16, 3, 2), 16, 32, 3, 2)
    a, b = ops.split(conv(y, 32, 32, 1), 2)
    m = ops.add(b, conv(conv(b, 16, 16, 3), 16, 16, 3))
    y = conv(ops.concat([a, b, m]), 48, 32, 1)
    y = conv(conv(y, 32, 64, 3, 2), 64, 32, 1)
    p1 = ops.max_pool(y, 5, 1, 2)
    p2 = ops.max_pool(p1, 5, 1, 2)
    p3 = ops.max_pool(p2, 5, 1, 2)
    return conv(ops.concat([y, p1, p2, p3]), 128, 64, 1)


def _shufflenet_v2_stage2(ops: Any, x: Any, weights: _Weights, classes: int = 1000) -> Any:
    """ShuffleNetV2 1.0x (Ma et al., 2018) cut to its stem, first stage and the classifier, batch
    norm folded: a 3x3 stride-2 convolution to 24 channels with ReLU and a 3x3 stride-2 max pool
    (to 56x56), then stage 2's four units at 116 channels (28x28), then the mean over the image
    and a dense layer from 116 channels.

    A unit's branch is a 1x1 convolution with ReLU, a 3x3 depthwise convolution (no ReLU) and a
    1x1 convolution with ReLU, at 58 channels. The first unit (stride 2) feeds its whole input to
    that branch and to a second one (a 3x3 stride-2 depthwise convolution, then a 1x1 convolution
    with ReLU); the others split the channels in two halves and run the branch on the second.
    Each unit concatenates its two halves and shuffles the channels (two groups interleaved:
    reshape, transpose, reshape), as torchvision's implementation does. The convolutions' widths
    of 24, 58 and 116 channels are not multiples of 16 (58 and 116 not even of 8).
    """
    conv = functools.partial(_conv, ops, weights)
    width, side = 116, 28
    half = width // 2

    def shuffle(t):
        t = ops.transpose(ops.reshape(t, (1, 2, half, side, side)), (0, 2, 1, 3, 4))
        return ops.reshape(t, (1, width, side, side))

    def branch(t, cin, stride):
        t = conv(ops.relu(conv(t, cin, half, 1)), half, half, 3, stride, groups=half)
        return ops.relu(conv(t, half, half, 1))

    y = ops.max_pool(ops.relu(conv(x, 3, 24, 3, 2)), 3, 2, 1)  # (1, 24, 56, 56)
    left = ops.relu(conv(conv(y, 24, 24, 3, 2, groups=24), 24, half, 1))
    y = shuffle(ops.concat([left, branch(y, 24, 2)]))
    for _ in range(3):
        a, b = ops.split(y, 2)
        y = shuffle(ops.concat([a, branch(b, half, 1)]))
    return _dense(ops, weights, ops.flatten(ops.global_avg_pool(y), width), width, classes)


def _mnasnet_stages123(ops: Any, x: Any, weights: _Weights) -> Any:
    """MnasNet-A1 as torchvision builds it (``mnasnet1_0``; Tan et al., 2019), batch norm folded,
    cut to its stem and first three stages: a 3x3 stride-2 convolution to 32 channels with ReLU, a
    separable block (3x3 depthwise with ReLU, 1x1 projection to 16), then three inverted residual
    blocks to 24 channels (expansion 3, 3x3 depthwise, the first at stride 2) and three to 40
    (expansion 3, 5x5 depthwise, the first at stride 2), ReLU after expansion and depthwise, a
    residual where a block keeps its size. Output (1, 40, 28, 28).
    """
    conv = functools.partial(_conv, ops, weights)
    y = ops.relu(conv(x, 3, 32, 3, 2))
    y = conv(ops.relu(conv(y, 32, 32, 3, 1, groups=32)), 32, 16, 1, 1)
    cin = 16
    for cout, k in ((24, 3), (40, 5)):
        for i in range(3):
            stride = 2 if i == 0 else 1
            hidden = cin * 3
            z = ops.relu(conv(y, cin, hidden, 1, 1))
            z = conv(ops.relu(conv(z, hidden, hidden, k, stride, groups=hidden)), hidden, cout, 1, 1)
            y = ops.add(z, y) if stride == 1 else z
            cin = cout
    return y


def _squeezenet11_fires2to5(ops: Any, x: Any, weights: _Weights) -> Any:
    """SqueezeNet 1.1 (Iandola et al., 2016; torchvision's ``squeezenet1_1``) cut to its stem and
    first four fire modules: a 3x3 stride-2 convolution to 64 channels without padding (to
    111 x 111) with ReLU and a 3x3 stride-2 max pool (to 55 x 55), fire modules 2 and 3 (squeeze
    to 16 channels, expand to 64 + 64), a max pool (to 27 x 27), fire modules 4 and 5 (squeeze to
    32, expand to 128 + 128) and a last max pool (to 13 x 13). A fire module squeezes with a 1x1
    convolution and ReLU, then concatenates a 1x1 and a padded 3x3 convolution of the squeeze,
    each with ReLU. The pools take no padding and, at these sizes, torchvision's ``ceil_mode``
    changes nothing. Output (1, 256, 13, 13).
    """
    conv = functools.partial(_conv, ops, weights)

    def fire(t, cin, squeeze, expand):
        s = ops.relu(conv(t, cin, squeeze, 1))
        return ops.concat([ops.relu(conv(s, squeeze, expand, 1)), ops.relu(conv(s, squeeze, expand, 3))])

    y = ops.max_pool(ops.relu(conv(x, 3, 64, 3, 2, padding=0)), 3, 2, 0)  # (1, 64, 55, 55)
    y = ops.max_pool(fire(fire(y, 64, 16, 64), 128, 16, 64), 3, 2, 0)  # (1, 128, 27, 27)
    return ops.max_pool(fire(fire(y, 128, 32, 128), 256, 32, 128), 3, 2, 0)


def _inception_v3_6a6b(ops: Any, x: Any, weights: _Weights) -> Any:
    """Inception-v3 (Szegedy et al., 2016; torchvision's ``inception_v3``) cut to its grid
    reduction Mixed_6a and the first block of factorized 7x7 convolutions Mixed_6b, from the
    288 x 35 x 35 feature map that Mixed_5d gives. Every convolution has ReLU (batch norm folded).
    Mixed_6a concatenates an unpadded 3x3 stride-2 convolution to 384 channels, a 1x1 to 64 then
    a padded 3x3 to 96 then an unpadded 3x3 stride-2 one, and an unpadded 3x3 stride-2 max pool
    (768 channels at 17 x 17). Mixed_6b concatenates a 1x1 convolution to 192 channels, a 1x1 to
    128 then 1x7 and 7x1 convolutions (the last to 192), a 1x1 to 128 then four alternating 7x1
    and 1x7 ones (the last to 192), and a padded 3x3 stride-1 average pool (padding counted, as
    torchvision's) then a 1x1 to 192. Output (1, 768, 17, 17).
    """

    def conv(t, cin, cout, k, stride=1, padding=None):
        return ops.relu(_conv(ops, weights, t, cin, cout, k, stride, padding=padding))

    y = ops.concat([conv(x, 288, 384, 3, 2, padding=0),
                    conv(conv(conv(x, 288, 64, 1), 64, 96, 3), 96, 96, 3, 2, padding=0),
                    ops.max_pool(x, 3, 2, 0)])
    b7 = conv(conv(conv(y, 768, 128, 1), 128, 128, (1, 7)), 128, 192, (7, 1))
    d7 = conv(y, 768, 128, 1)
    for cout, k in zip((128, 128, 128, 192), ((7, 1), (1, 7)) * 2):
        d7 = conv(d7, 128, cout, k)
    return ops.concat([conv(y, 768, 192, 1), b7, d7, conv(ops.avg_pool(y, 3, 1, 1), 768, 192, 1)])


def _densenet121_block1(ops: Any, x: Any, weights: _Weights, growth: int = 32, layers: int = 6) -> Any:
    """DenseNet-121 (Huang et al., 2017; torchvision's ``densenet121``) cut to its first dense
    block and first transition, from the 64 x 56 x 56 feature map its stem gives. Each of the six
    dense layers takes the concatenation of all earlier feature maps (64, 96, ..., 224 channels),
    applies batch norm and ReLU (a per-channel scale and shift: it follows a concatenation, so it
    folds into no convolution), a 1x1 convolution to 128 channels with ReLU (the second batch
    norm folded into it) and a padded 3x3 convolution to 32 channels, and appends its output. The
    transition applies batch norm and ReLU to the 256 channels, a 1x1 convolution to 128 and a
    2x2 stride-2 average pool. Every convolution has a bias (:func:`_conv`), where torchvision's
    3x3 and transition convolutions have none: one more addition in those tasks' epilogues.
    Output (1, 128, 28, 28).
    """

    def preact(t, c):
        return ops.relu(ops.add_constant(ops.multiply_constant(t, 1.0 + weights(1, c, 1, 1)), weights(1, c, 1, 1)))

    feats, c = [x], 64
    for _ in range(layers):
        y = ops.relu(_conv(ops, weights, preact(ops.concat(feats) if len(feats) > 1 else x, c), c, 4 * growth, 1))
        feats.append(_conv(ops, weights, y, 4 * growth, growth, 3))
        c += growth
    y = _conv(ops, weights, preact(ops.concat(feats), c), c, c // 2, 1)
    return ops.avg_pool(y, 2, 2, 0)


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
        Network("resnet50", "ResNet-50, batch 1, 3x224x224, random weights", (1, 3, 224, 224), _resnet50),
        Network("resnext", "ResNeXt-50 (32x4d) cut to its stem, first two stages (3 and 4 bottleneck blocks "
                "whose 3x3 convolutions have 32 groups) and the classifier; batch 1, 3x224x224, random weights",
                (1, 3, 224, 224), _resnext50_stages12),
        Network("mobilenetv2", "MobileNetV2, batch 1, 3x224x224, random weights", (1, 3, 224, 224),
                _mobilenet_v2),
        Network("bert", "BERT-base encoder layer, batch 1, 128 tokens, random weights", (1, 128, 768), _bert_layer),
        Network("bert-large", "BERT-large encoder layer, batch 1, 128 tokens, random weights", (1, 128, 1024),
                functools.partial(_bert_layer, hidden=1024, heads=16, ffn=4096)),
        Network("vit", "ViT-B/16-sized: patch embedding, one pre-norm encoder layer over 196 tokens, "
                "mean-pooled classifier; batch 1, 3x224x224, random weights", (1, 3, 224, 224), _vit_layer),
        Network("llama", "Llama-style decoder layer at SmolLM-360M's sizes: RMSNorm, causal attention, SwiGLU; "
                "batch 1, 96 tokens, random weights", (1, 96, 960), _llama_layer),
        Network("gpt2", "GPT-2 small decoder layer: pre-norm, causal attention, GELU feed-forward, final layer "
                "norm; batch 1, 256 tokens, random weights", (1, 256, 768), _gpt2_layer),
        Network("whisper", "Whisper-tiny audio encoder cut to its 1-D convolution stem and one pre-norm layer; "
                "batch 1, 80 mel bins x 1,000 frames (10 s, 500 tokens), random weights", (1, 80, 1000),
                _whisper_encoder),
        Network("convnext", "ConvNeXt-T cut to its stem and first stage (three blocks at 96 channels, 56x56) "
                "and the classifier; batch 1, 3x224x224, random weights", (1, 3, 224, 224), _convnext_stage1),
        Network("efficientnet", "EfficientNet-B0 cut to its stem and first two stages (an MBConv1 block and the "
                "first MBConv6 block, each with squeeze-and-excitation); batch 1, 3x224x224, random weights",
                (1, 3, 224, 224), _efficientnet_b0_stem),
        Network("yolo", "YOLOv8n's backbone cut to its first three stages (a C2f block at 32 channels) and an "
                "SPPF block at 64 channels; batch 1, 3x320x320, random weights", (1, 3, 320, 320),
                _yolov8n_backbone),
        Network("shufflenet", "ShuffleNetV2 1.0x cut to its stem, stage 2 (four units at 116 channels, "
                "channel shuffles) and the classifier; batch 1, 3x224x224, random weights", (1, 3, 224, 224),
                _shufflenet_v2_stage2),
        Network("mnasnet", "MnasNet-A1 (torchvision's mnasnet1_0) cut to its stem and first three stages (24 and "
                "40 channels; 3x3 and 5x5 depthwise convolutions); batch 1, 3x224x224, random weights",
                (1, 3, 224, 224), _mnasnet_stages123),
        Network("squeezenet", "SqueezeNet 1.1 (torchvision's squeezenet1_1) cut to its stem and first four fire "
                "modules (1x1 squeezes, 1x1 and 3x3 expansions concatenated, three 3x3 stride-2 max pools); "
                "batch 1, 3x224x224, random weights", (1, 3, 224, 224), _squeezenet11_fires2to5),
        Network("inception", "Inception-v3 (torchvision's inception_v3) cut to its grid reduction Mixed_6a and "
                "first factorized-7x7 block Mixed_6b (1x7 and 7x1 convolutions, a 3x3 average pool); batch 1, "
                "input the 288x35x35 feature map of Mixed_5d, random weights", (1, 288, 35, 35),
                _inception_v3_6a6b),
        Network("densenet", "DenseNet-121 (torchvision's densenet121) cut to its first dense block (six layers "
                "of batch norm, ReLU, 1x1 and 3x3 convolutions over the concatenated feature maps, 64 to 256 "
                "channels at 56x56) and first transition; batch 1, input the 64x56x56 feature map of the stem, "
                "random weights", (1, 64, 56, 56), _densenet121_block1),
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


def fused(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """Legalise and fuse as ``compile_relax`` does, so that the extracted tasks match its keys."""
    from tvm.relax import pipeline

    passes = [
        *pipeline.library_dispatch_passes(target),
        relax.transform.LegalizeOps(),
        relax.transform.AnnotateTIROpPattern(),
        relax.transform.FoldConstant(),
        relax.transform.FuseOps(),
        relax.transform.FuseTIR(),
    ]
    with target:
        return tvm.transform.Sequential(passes)(mod)


def extract_tasks(mod: tvm.IRModule, target: tvm.target.Target) -> list[Any]:
    """MetaSchedule's tuning tasks of a Relax module for ``target``, sorted by task name."""
    from tvm.s_tir import meta_schedule as ms

    tasks = ms.relax_integration.extract_tasks(fused(mod, target), target)
    return sorted(tasks, key=lambda t: t.task_name)


def network_tasks(name: str, target: Any, machine: str | None = None) -> list[Any]:
    """MetaSchedule's tuning tasks of network ``name`` for ``target``, sorted by task name."""
    from .workloads import as_machine, tvm_target

    return extract_tasks(relax_module(name), tvm_target(as_machine(target, machine)))


def cpu_tasks(name: str) -> list[Any]:
    """The tuning tasks of network ``name`` as every CPU target sees them.

    Extracted for a plain ``llvm`` target: Relax legalises operators to the same TIR for
    every CPU, and the schedule, not the task, carries what is machine-specific.
    """
    return extract_tasks(relax_module(name), tvm.target.Target("llvm"))


def task_module(name: str, task: str) -> tvm.IRModule:
    """The TIR of one tuning task of a network (``task`` as :func:`cpu_tasks` names it).

    Raises
    ------
    WorkloadError
        For an unknown network or task; the message lists the network's tasks.
    """
    from ..errors import WorkloadError

    if name not in NETWORKS:
        raise WorkloadError(f"unknown network {name!r}; known networks: {', '.join(NETWORKS)}")
    tasks = cpu_tasks(name)
    for t in tasks:
        if t.task_name == task:
            return t.dispatched[0]
    raise WorkloadError(f"network {name} has no task {task!r}; its tasks: {', '.join(t.task_name for t in tasks)}")


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
