"""Operator families of measured pools, for validation that leaves a whole family out.

A family groups workloads that share their loop nest's structure (every 2-D convolution,
every dense layer), so that leaving one family out of a fit asks whether the model holds
on a kind of operator it never saw, not on another shape of one it did. A pool names its
family in its ``family`` field; pools that do not (the Ansor ones shipped before the field
existed, imported databases) get one from :func:`family_of`, which reads only the
workload's name and its TVMScript, never its timings.
"""

from __future__ import annotations

import re

# The Ansor suite's workloads (tvm.s_tir.meta_schedule.testing.te_workload.CONFIGS) by family.
ANSOR_FAMILIES: dict[str, str] = {
    "C1D": "conv1d",
    "C2D": "conv2d",
    "C3D": "conv3d",
    "CAP": "conv2d",  # capsule convolution: a 2-D convolution with capsule axes
    "DEP": "depthwise",
    "DIL": "conv2d",  # dilated 2-D convolution
    "GMM": "batch_matmul",
    "GRP": "group_conv2d",
    "T2D": "conv2d_transpose",
    "CBR": "conv2d",  # conv2d + bias + ReLU
    "TBG": "batch_matmul",  # transposed batch GEMM
    "NRM": "norm",
    "SFM": "softmax",
}

FAMILIES: tuple[str, ...] = (
    "conv1d", "conv2d", "conv2d_winograd", "conv3d", "group_conv2d", "depthwise", "conv2d_transpose", "dense",
    "batch_matmul", "pool", "softmax", "layernorm", "norm", "layout", "elementwise", "other",
)

_BLOCK = re.compile(r'T\.s?block\("(\w+)"\)')
# A buffer and its shape: a parameter annotation (T.Buffer) or, in an imported database's
# workload, a T.match_buffer of a handle.
_BUFFER = re.compile(r'(\w+)(?::| =) T\.(?:Buffer|match_buffer)\((?:\w+, )?\((.*?)\),\s*"')


def _rank(shape: str) -> int:
    return len([d for d in shape.split(",") if d.strip()])


def _one_channel_per_group(script: str) -> bool:
    """Whether a grouped convolution's weight (a 4-D buffer, second axis the input
    channels per group) has one channel per group: a depthwise convolution."""
    for _, shape in _BUFFER.findall(script):
        dims = [d.strip() for d in shape.split(",") if d.strip()]
        if len(dims) == 4 and re.fullmatch(r"(T\.int64\()?1\)?", dims[1]):
            return True
    return False


def family_of(workload: str, script: str) -> str:
    """The operator family of a workload, from its name and unscheduled TVMScript.

    Parameters
    ----------
    workload : str
        The pool's workload name: an Ansor name (``"GMM"``) or a network task
        (``"resnet50/fused_conv2d_add_relu"``).
    script : str
        The workload's TVMScript.

    Returns
    -------
    str
        One of :data:`FAMILIES`; ``"other"`` when nothing matches.
    """
    if workload.upper() in ANSOR_FAMILIES:
        return ANSOR_FAMILIES[workload.upper()]
    blocks = set(_BLOCK.findall(script))
    if any(b.startswith("group_conv2d") or b.startswith("depth") for b in blocks):
        return "depthwise" if _one_channel_per_group(script) else "group_conv2d"
    if any(b == "bgemm" or "winograd" in b for b in blocks):
        # Winograd's transforms around a batched GEMM: another loop nest than a direct convolution.
        return "conv2d_winograd"
    if any(b.startswith("conv2d_transpose") for b in blocks):
        return "conv2d_transpose"
    for prefix, family in (("conv3d", "conv3d"), ("conv2d", "conv2d"), ("conv1d", "conv1d")):
        if any(b.startswith(prefix) for b in blocks):
            return family
    if any(b.startswith(("matmul", "batch_matmul", "T_matmul", "T_dense", "dense")) for b in blocks):
        # A dense layer multiplies by a weight, a rank-2 right operand (the second buffer); a batch
        # matmul by another activation. Other rank-2 inputs (an attention mask added after the
        # product) do not make it dense.
        ranks = [_rank(shape) for _, shape in _BUFFER.findall(script)]
        return "dense" if len(ranks) > 1 and ranks[1] == 2 else "batch_matmul"
    if any("pool" in b for b in blocks):
        return "pool"
    if any(b.startswith("T_softmax") for b in blocks):
        return "softmax"
    if any("layer_norm" in b or "rms_norm" in b for b in blocks):
        # Layer norm and RMS norm: a reduction along the last axis, then every element scaled by it.
        return "layernorm"
    if blocks and all(b == "root" or b.startswith(("T_reshape", "T_transpose", "T_concat", "T_split"))
                      for b in blocks):
        return "layout"
    if any(b.startswith("T_") for b in blocks) and all(
        b in ("root", "compute") or re.fullmatch(r"T_[a-z_]+", b) for b in blocks
    ):
        # TOPI's operators per element (a per-channel scale and shift, then ReLU's "compute"),
        # copies such as a concatenation among them.
        return "elementwise"
    return "other"
