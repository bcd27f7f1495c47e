"""What the TensorFlow visitor and its operator modules share: tensor layouts
(ONNX channels-first vs TensorFlow channels-last) and their permutations, helpers on
NumPy and TensorFlow values, parameters stored in their operator's layout
(:class:`ParameterLayout`) and the :class:`Plan` a network runs. See the module
docstring of ``deep500.frameworks.tensorflow.visitor``."""
from __future__ import annotations

import math

import numpy as np
import onnx

from deep500.frameworks.tensorflow._tf import tf

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


def _dims(x) -> list:
    """Static dimensions (None where unknown) of a tensor, variable or array."""
    return list(x.shape)


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


def _shape_list(x) -> list:
    """Dimensions, with a dynamic tensor for those unknown statically."""
    dims = _dims(x)
    if None not in dims:
        return dims
    dynamic = tf.shape(x)
    return [d if d is not None else dynamic[i] for i, d in enumerate(dims)]


# -- small helpers used by the closures ------------------------------------------------
def _is_np(*values) -> bool:
    return all(isinstance(v, np.ndarray) for v in values)


def _static(value):
    """The value of a constant operand as a NumPy array, or None if only known at run
    time (inside a traced function)."""
    if value is None or isinstance(value, np.ndarray):
        return value
    return tf.get_static_value(value)


def _ints(value) -> list[int] | None:
    static = _static(value)
    return None if static is None else [int(v) for v in np.reshape(static, -1)]


def _tf_dtype(x):
    return tf.as_dtype(x.dtype)


def _like(value, x):
    """``value`` in ``x``'s dtype (ONNX lets some parameters differ in precision)."""
    if value is None or tf.as_dtype(value.dtype) == _tf_dtype(x):
        return value
    return tf.cast(value, _tf_dtype(x))


def _onnx_to_np_dtype(elem_type: int) -> np.dtype:
    return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


# Element types TensorFlow computes with (it stores, but cannot cast, float8 and int4).
TF_DTYPE_NAMES = frozenset(("bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                            "uint32", "uint64", "float16", "bfloat16", "float32", "float64"))


def tf_supports_dtype(dtype) -> bool:
    return dtype is not None and np.dtype(dtype).name in TF_DTYPE_NAMES


def _is_floating(dtype) -> bool:
    return np.issubdtype(np.dtype(dtype), np.floating)


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# -- convolution and pooling geometry ---------------------------------------------------












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


# -- the plan ----------------------------------------------------------------------------
class Plan:
    """What a network runs: ``steps``, a flat list of ``(fn, input keys, output key)``
    (a tuple of keys when ``fn`` returns several tensors), and per step the ONNX
    operation it belongs to (``None`` for the final layout conversions of outputs)."""

    def __init__(self):
        self.steps: list[tuple] = []
        self.step_ops: list = []
        self.constants: dict = {}      # build-time values: converted constants, '' → None
        self.layouts: dict[str, str] = {}
        # ONNX name → (key, function) of tensors held in another layout
        self.converters: dict[str, tuple] = {}
        self.parameter_layouts: dict[str, ParameterLayout] = {}
        self.outputs: list[str] = []
        # Graph inputs whose values decide shapes (axes, pads, slice bounds, ...): a
        # traced function takes them as constants, retracing when they change.
        self.static_inputs: set[str] = set()
        self.node_steps: list[tuple] = []   # (op, [steps]) in order, for operator events

    def add(self, op, fn, inputs, output) -> None:
        self.steps.append((fn, tuple(inputs), output))
        self.step_ops.append(op)

    def finish(self) -> None:
        groups: list[tuple] = []
        for op, step in zip(self.step_ops, self.steps):
            if groups and groups[-1][0] is op:
                groups[-1][1].append(step)
            else:
                groups.append((op, [step]))
        self.node_steps = groups


# -- the visitor -------------------------------------------------------------------------
