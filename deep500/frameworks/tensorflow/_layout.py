"""Tensor layouts of the TensorFlow visitor: ONNX's channels-first (NCHW) and the
channels-last (NHWC) TensorFlow's CPU convolution and pooling kernels take, the
permutations between them, the run-time keys of converted copies, and
:class:`ParameterLayout`, parameters stored in the layout their operator computes in.
See the module docstring of ``deep500.frameworks.tensorflow.visitor``."""
from __future__ import annotations

import math

import numpy as np

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._values import _dims, _shape_list

CL = "|cl"            # key suffix of a tensor's channels-last copy
FLAT = "|flat_cl"     # key suffix of a flattened channels-last tensor
UNUSED = "|unused"    # key of outputs a node computes but the graph does not name
ONNX_LAYOUT, CHANNELS_LAST = "onnx", "channels_last"


# -- layouts ----------------------------------------------------------------------------
def to_channels_last_perm(rank: int) -> tuple:
    """Permutation taking (N, C, D1, ..., Dk) to (N, D1, ..., Dk, C)."""
    return (0,) + tuple(range(2, rank)) + (1,)


def to_onnx_perm(rank: int) -> tuple:
    """Permutation taking (N, D1, ..., Dk, C) to (N, C, D1, ..., Dk)."""
    return (0, rank - 1) + tuple(range(1, rank - 1))


def channels_last_axis(axis: int, rank: int) -> int:
    """Where ONNX axis ``axis`` of a rank-``rank`` tensor sits in channels-last layout."""
    axis %= rank
    return 0 if axis == 0 else rank - 1 if axis == 1 else axis - 1


def _permute(x, perm):
    """``tf.transpose``, or a reshape when the permutation moves no data (the axes
    longer than 1 keep their order, as with one channel or 1×1 maps)."""
    dims = _dims(x)
    if None not in dims:
        kept = [p for p in perm if dims[p] != 1]
        if kept == sorted(kept):
            return tf.reshape(x, [dims[p] for p in perm])
    return tf.transpose(x, perm)


def to_channels_last(x):
    return _permute(x, to_channels_last_perm(len(x.shape)))


def to_onnx_layout(x):
    return _permute(x, to_onnx_perm(len(x.shape)))


def _aligned_channels_last(rank: int):
    """A function taking a lower-rank ONNX operand to the channels-last form of its
    broadcast against a rank-``rank`` tensor (leading size-1 axes, then permuted)."""
    perm = to_channels_last_perm(rank)

    def align(x):
        missing = rank - len(x.shape)
        if isinstance(x, np.ndarray):
            return np.transpose(x.reshape((1,) * missing + x.shape), perm)
        return tf.transpose(tf.reshape(x, [1] * missing + _shape_list(x)), perm)
    return align


# -- parameter layouts -----------------------------------------------------------------
class ParameterLayout:
    """How a parameter is stored when its operator computes in another layout than
    ONNX's: ``stored = reshape(transpose(reshape(value, split), perm), merged)`` (no
    reshapes when ``split`` is None). Stored parameters spare the run a transpose per
    call; fetching, feeding and gradients convert at the network's boundary."""

    def __init__(self, shape, perm, split=None, merged=None):
        self.shape = tuple(shape)          # the ONNX shape
        self.perm = tuple(perm)
        self.split = None if split is None else tuple(split)
        self.merged = None if merged is None else tuple(merged)
        self._inverse = tuple(np.argsort(self.perm))

    @classmethod
    def filter(cls, shape):
        """A convolution weight (O, I, k1, ..., kn) stored as (k1, ..., kn, I, O)."""
        return cls(shape, tuple(range(2, len(shape))) + (1, 0))

    @classmethod
    def transposed(cls, shape):
        """A matrix stored transposed."""
        return cls(shape, (1, 0))

    @classmethod
    def flattened_channels_last(cls, shape, channels, spatial, transposed):
        """A Gemm weight multiplying a flattened (C, d1, ..., dn) tensor, stored as the
        (d1·…·dn·C, out) matrix multiplying the flattened channels-last tensor."""
        n = len(spatial)
        if transposed:   # (out, C·d...) → (out, C, d...) → (d..., C, out)
            split = (shape[0], channels, *spatial)
            perm = tuple(range(2, n + 2)) + (1, 0)
        else:            # (C·d..., out) → (C, d..., out) → (d..., C, out)
            split = (channels, *spatial, shape[1])
            perm = tuple(range(1, n + 1)) + (0, n + 1)
        return cls(shape, perm, split, (channels * math.prod(spatial), -1))

    def to_stored(self, value: np.ndarray) -> np.ndarray:
        value = value.reshape(self.split) if self.split else value
        value = np.transpose(value, self.perm)
        return np.ascontiguousarray(value.reshape(self.merged) if self.merged else value)

    def to_onnx(self, stored: np.ndarray) -> np.ndarray:
        """The ONNX form of a stored value or gradient (a view when no reshape is
        needed)."""
        if self.split:
            stored = stored.reshape([self.split[p] for p in self.perm])
        value = np.transpose(stored, self._inverse)
        return value.reshape(self.shape) if self.split else value

    def _key(self):
        return self.shape, self.perm, self.split, self.merged

    def __eq__(self, other):
        return isinstance(other, ParameterLayout) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())
