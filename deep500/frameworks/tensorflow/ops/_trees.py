"""The decision trees of a TreeEnsemble node (ai.onnx.ml, opset 5) as arrays, read once
when the model is built, and their evaluation on a batch with TensorFlow operations:
every sample walks every tree at once, one level per step, for as many steps as the
deepest tree has levels (https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsemble.html).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import onnx.numpy_helper

from deep500.frameworks.tensorflow._tf import tf

BRANCH_MEMBER = 6   # nodes_modes: 0 ≤, 1 <, 2 ≥, 3 >, 4 =, 5 ≠, 6 member of a set


def _array(value, dtype) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        value = onnx.numpy_helper.to_array(value)
    return np.asarray([] if value is None else value, dtype).reshape(-1)


@dataclasses.dataclass
class Forest:
    """The node and leaf arrays of the attributes (``members``: per node its set, padded
    with NaN, which no value equals) and the most steps a walk from a root takes."""
    features: np.ndarray
    splits: np.ndarray
    modes: np.ndarray
    true_ids: np.ndarray
    false_ids: np.ndarray
    true_leaf: np.ndarray
    false_leaf: np.ndarray
    missing_true: np.ndarray
    members: np.ndarray
    roots: np.ndarray
    leaf_weights: np.ndarray
    leaf_targets: np.ndarray
    depth: int

    @classmethod
    def from_attributes(cls, a: dict) -> "Forest":
        modes = _array(a.get("nodes_modes"), np.int64)
        n = len(modes)
        missing = _array(a.get("nodes_missing_value_tracks_true"), np.int64)
        forest = cls(features=_array(a.get("nodes_featureids"), np.int64),
                     splits=_array(a.get("nodes_splits"), np.float64), modes=modes,
                     true_ids=_array(a.get("nodes_truenodeids"), np.int64),
                     false_ids=_array(a.get("nodes_falsenodeids"), np.int64),
                     true_leaf=_array(a.get("nodes_trueleafs"), np.int64).astype(bool),
                     false_leaf=_array(a.get("nodes_falseleafs"), np.int64).astype(bool),
                     missing_true=(missing.astype(bool) if len(missing) else
                                   np.zeros(n, bool)),
                     members=_member_sets(modes, a.get("membership_values")),
                     roots=_array(a.get("tree_roots"), np.int64),
                     leaf_weights=_array(a.get("leaf_weights"), np.float64),
                     leaf_targets=_array(a.get("leaf_targetids"), np.int64), depth=0)
        forest.depth = max((forest._levels(root) for root in forest.roots), default=0)
        return forest

    def _levels(self, node: int) -> int:
        """Comparisons on the longest path from interior node ``node`` to a leaf."""
        deepest, pending = 0, [(int(node), 1)]
        while pending:
            node, level = pending.pop()
            deepest = max(deepest, level)
            for child, leaf in ((self.true_ids[node], self.true_leaf[node]),
                                (self.false_ids[node], self.false_leaf[node])):
                if not leaf:
                    pending.append((int(child), level + 1))
        return deepest

    def leaves(self, x):
        """(N, trees) indices into the leaf arrays that the samples of ``x`` (N, F)
        reach."""
        x = tf.cast(x, tf.float64)
        shape = tf.stack([tf.shape(x)[0], len(self.roots)])
        node = tf.broadcast_to(tf.constant(self.roots), shape)
        roots = self.roots
        # A root whose branches are the same leaf is that leaf.
        at_leaf = tf.broadcast_to(tf.constant(
            self.true_leaf[roots] & self.false_leaf[roots]
            & (self.true_ids[roots] == self.false_ids[roots])), shape)
        node = tf.where(at_leaf, tf.broadcast_to(tf.constant(self.true_ids[roots]), shape),
                        node)
        for _ in range(self.depth):
            # A walk at its leaf holds a leaf index: it reads node 0, and stays.
            walking = tf.where(at_leaf, tf.zeros_like(node), node)
            goes_true = self._goes_true(x, walking)
            following = tf.where(goes_true, tf.gather(self.true_ids, walking),
                                 tf.gather(self.false_ids, walking))
            reaches_leaf = tf.where(goes_true, tf.gather(self.true_leaf, walking),
                                    tf.gather(self.false_leaf, walking))
            node = tf.where(at_leaf, node, following)
            at_leaf = at_leaf | reaches_leaf
        return node

    def _goes_true(self, x, node):
        value = tf.gather(x, tf.gather(self.features, node), axis=1, batch_dims=1)
        split = tf.gather(self.splits, node)
        outcomes = [value <= split, value < split, value >= split, value > split,
                    tf.equal(value, split), tf.not_equal(value, split),
                    tf.reduce_any(tf.equal(value[..., tf.newaxis],
                                           tf.gather(self.members, node)), axis=-1)]
        mode = tf.gather(self.modes, node)
        result = outcomes[0]
        for code, outcome in enumerate(outcomes[1:], start=1):
            result = tf.where(tf.equal(mode, code), outcome, result)
        return result | (tf.math.is_nan(value) & tf.gather(self.missing_true, node))


def _member_sets(modes: np.ndarray, values) -> np.ndarray:
    """(nodes, widest set) of the set-membership nodes' sets, in the order the member
    nodes appear, cut from ``membership_values`` at NaNs; NaN elsewhere."""
    sets, current = [], []
    for value in _array(values, np.float64):
        if math.isnan(value):
            sets.append(current)
            current = []
        else:
            current.append(value)
    if current:
        sets.append(current)
    members = np.flatnonzero(modes == BRANCH_MEMBER)
    if len(members) > len(sets):
        raise ValueError(f"{len(members)} set-membership nodes but membership_values "
                         f"holds {len(sets)} NaN-separated sets")
    width = max((len(s) for s in sets), default=0) or 1
    table = np.full((max(len(modes), 1), width), np.nan)
    for node, values in zip(members, sets):
        table[node, :len(values)] = values
    return table
