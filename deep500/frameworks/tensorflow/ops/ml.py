"""TensorFlowVisitor: the ml family (``deep500/frameworks/families.py``), classical
machine learning of the ai.onnx.ml domain:
https://onnx.ai/onnx/operators/onnx_aionnxml_Binarizer.html,
.../onnx_aionnxml_ArrayFeatureExtractor.html, .../onnx_aionnxml_LabelEncoder.html,
.../onnx_aionnxml_TreeEnsemble.html.
"""
from __future__ import annotations

import math

import numpy as np
import onnx
import onnx.numpy_helper

from deep500.frameworks.tensorflow._tf import tf
from deep500.frameworks.tensorflow.ops._attributes import _attr, _text
from deep500.frameworks.tensorflow.ops._trees import Forest
from deep500.frameworks.tensorflow.ops._values import _tf_dtype
from deep500.utils.errors import Deep500Error, ShapeError

_LABEL_KINDS = ("floats", "int64s", "strings", "tensor")


def _softmax_of_nonzero(scores):
    """Softmax over a row's non-zero scores; zeros stay zero."""
    nonzero = tf.not_equal(scores, 0)
    shifted = scores - tf.reduce_max(scores, -1, keepdims=True)
    exponents = tf.where(nonzero, tf.exp(tf.where(nonzero, shifted, 0.0)), 0.0)
    return exponents / tf.maximum(tf.reduce_sum(exponents, -1, keepdims=True),
                                  np.finfo(np.float64).tiny)


# TreeEnsemble's post_transform: 0 none, 1 softmax, 2 logistic, 3 softmax of the non-zero
# scores, 4 probit (the standard normal's quantile: ±inf at 0 and 1, NaN outside).
_POST_TRANSFORMS = {0: lambda s: s, 1: lambda s: tf.nn.softmax(s, -1), 2: tf.sigmoid,
                    3: _softmax_of_nonzero, 4: tf.math.ndtri}


def _label(value):
    """A LabelEncoder key or value as a Python value: text for strings, one key for every
    NaN."""
    if isinstance(value, (bytes, np.bytes_)):
        return value.decode("utf-8")
    value = value.item() if isinstance(value, np.generic) else value
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


class MlOps:
    """``visit_<op>`` of the ml family, by operator name, mixed into
    :class:`~deep500.frameworks.tensorflow.visitor.TensorFlowVisitor`."""

    def visit_binarizer(self, op, network) -> None:
        """Binarizer (ai.onnx.ml): 1 where x > threshold, else 0, in x's type."""
        threshold = float(_attr(op, "threshold", 0.0))
        self._unary(op, lambda x: tf.cast(x > tf.cast(threshold, _tf_dtype(x)), _tf_dtype(x)))

    def visit_arrayfeatureextractor(self, op, network) -> None:
        """ArrayFeatureExtractor (ai.onnx.ml): the last axis' elements at the (flattened)
        indices; a vector input gives one row."""
        def extract(x, indices):
            x = tf.convert_to_tensor(x)
            picked = tf.gather(x, tf.reshape(tf.cast(indices, tf.int64), [-1]), axis=-1)
            return picked[None, :] if len(x.shape) == 1 else picked
        self.emit(extract, [self.key(n) for n in op.inputs], op.outputs[0])

    def visit_labelencoder(self, op, network) -> None:
        """LabelEncoder (ai.onnx.ml, opset 4): each element replaced by the value paired
        with it in ``keys_*`` / ``values_*`` (floats, int64s, strings or a tensor), by the
        default of the values' type where it is no key (``default_tensor``, else
        ``default_int64``, ``default_float``, ``default_string``). A NaN key matches every
        NaN; of repeated keys, the last counts. The lookup compares each element with the
        keys (``tf.equal``) and gathers the value of the one it equals."""
        keys, values = self._labels(op, "keys"), self._labels(op, "values")
        if len(keys) != len(values):
            raise self.node_error(op, f"{len(keys)} keys but {len(values)} values; keys_* "
                                      f"and values_* pair up one to one", Deep500Error)
        mapping = dict(zip((_label(k) for k in keys), values))   # the last key counts
        value_dtype, default = self._label_output(op)
        unique_keys = list(mapping)
        nan_key = "NaN" in mapping
        string_keys = any(isinstance(k, str) and k != "NaN" for k in unique_keys) or (
            op.attributes.get("keys_strings") is not None)
        table = tf.constant(np.asarray([mapping[k] for k in unique_keys],
                                       object if value_dtype == object else value_dtype)
                            if unique_keys else np.zeros([0], value_dtype))
        fill = tf.constant(np.asarray(default, object if value_dtype == object
                                      else value_dtype))

        def label_encoder(x):
            x = tf.convert_to_tensor(x)
            if string_keys:
                key_tensor = tf.constant(np.asarray(unique_keys, object), tf.string)
            else:
                numbers = [math.nan if k == "NaN" else k for k in unique_keys]
                key_tensor = tf.constant(np.asarray(numbers, np.float64), x.dtype)
            hits = tf.equal(x[..., tf.newaxis], key_tensor)
            if nan_key and x.dtype.is_floating:
                hits = hits | (tf.math.is_nan(x)[..., tf.newaxis]
                               & tf.math.is_nan(key_tensor))
            found = tf.reduce_any(hits, axis=-1)
            picked = tf.gather(table, tf.argmax(tf.cast(hits, tf.int32), axis=-1))
            return tf.where(found, picked, tf.broadcast_to(fill, tf.shape(picked)))
        self._emit_node(op, label_encoder)

    def visit_treeensemble(self, op, network) -> None:
        """TreeEnsemble (ai.onnx.ml, opset 5): the [N, n_targets] scores of an ensemble
        of decision trees on X [N, F] (the walk: ``ops/_trees.py``). Leaf j adds
        ``leaf_weights[j]`` to target ``leaf_targetids[j]``; ``aggregate_function``
        combines a target's leaves (0 average over the trees, 1 sum, 2 min, 3 max; 0
        where no leaf contributes), ``post_transform`` maps each row (0 none, 1 softmax,
        2 logistic, 3 softmax over the non-zero scores, 4 probit). In float64."""
        a = op.attributes
        aggregate = int(_attr(op, "aggregate_function", 1))
        post = int(_attr(op, "post_transform", 0))
        if aggregate not in range(4) or post not in _POST_TRANSFORMS:
            raise self.node_error(op, f"aggregate_function must be in 0..3 and "
                                      f"post_transform in 0..4, got {aggregate} and {post}",
                                  Deep500Error)
        try:
            forest = Forest.from_attributes(a)
        except ValueError as exc:
            raise self.node_error(op, f"{exc}; fix the model", Deep500Error) from None
        n_targets = int(a["n_targets"])
        targets = np.eye(n_targets, dtype=bool)[forest.leaf_targets]   # (leaves, targets)

        def tree_ensemble(x):
            if len(x.shape) != 2:
                raise self.node_error(op, f"X must be [N, F], got shape {list(x.shape)}",
                                      ShapeError)
            leaves = forest.leaves(x)                                     # (N, trees)
            weights = tf.gather(forest.leaf_weights, leaves)[..., tf.newaxis]
            hits = tf.gather(targets, leaves)                             # (N, trees, T)
            if aggregate in (0, 1):
                scores = tf.reduce_sum(tf.where(hits, weights, 0.0), axis=1)
                if aggregate == 0:
                    scores = scores / len(forest.roots)
            else:
                extreme = tf.reduce_min if aggregate == 2 else tf.reduce_max
                bound = np.inf if aggregate == 2 else -np.inf
                scores = extreme(tf.where(hits, weights, bound), axis=1)
                scores = tf.where(tf.reduce_any(hits, axis=1), scores, 0.0)
            return tf.cast(_POST_TRANSFORMS[post](scores), x.dtype)
        self._emit_node(op, tree_ensemble)

    def _labels(self, op, prefix: str) -> list:
        given = [kind for kind in _LABEL_KINDS
                 if op.attributes.get(f"{prefix}_{kind}") is not None]
        if len(given) != 1:
            raise self.node_error(op, f"give exactly one of "
                                      f"{', '.join(f'{prefix}_{k}' for k in _LABEL_KINDS)}, "
                                      f"got {given}", Deep500Error)
        values = op.attributes[f"{prefix}_{given[0]}"]
        if given[0] == "tensor":
            values = onnx.numpy_helper.to_array(values) if isinstance(
                values, onnx.TensorProto) else np.asarray(values)
            return list(values.reshape(-1))
        return [_label(v) if isinstance(v, bytes) else v for v in values]

    def _label_output(self, op):
        """The output's NumPy dtype (object for strings) and the default value."""
        a = op.attributes
        if a.get("values_tensor") is not None:
            values = self._labels(op, "values")
            dtype = np.asarray(values).dtype if values else np.dtype(np.float32)
            given = a.get("default_tensor")
            if given is not None:
                given = (onnx.numpy_helper.to_array(given) if isinstance(
                    given, onnx.TensorProto) else np.asarray(given))
                default = given.reshape(-1)[0]
                return (np.dtype(object) if dtype.kind in "OUS" else dtype), (
                    _label(default) if dtype.kind in "OUS" else default)
            kind = "strings" if dtype.kind in "OUS" else "floats" if dtype.kind == "f" \
                else "int64s"
        else:
            kind = next(k for k in _LABEL_KINDS if a.get(f"values_{k}") is not None)
            dtype = {"floats": np.dtype(np.float32), "int64s": np.dtype(np.int64),
                     "strings": np.dtype(object)}[kind]
        default = {"floats": a.get("default_float"),
                   "strings": _text(a.get("default_string"), "_Unused")}.get(
            kind, a.get("default_int64"))
        if default is None:
            default = {"floats": -0.0, "int64s": -1}.get(kind, -1)
        return (np.dtype(object) if dtype.kind in "OUS" else dtype), default
