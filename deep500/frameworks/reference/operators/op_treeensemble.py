"""TreeEnsemble (domain ai.onnx.ml, opset 5): the [N, n_targets] scores of an ensemble
of decision trees on X [N, F]. https://onnx.ai/onnx/operators/onnx_aionnxml_TreeEnsemble.html

Each tree starts at a node of ``tree_roots``; interior node i compares feature
``nodes_featureids[i]`` with ``nodes_splits[i]`` by ``nodes_modes[i]`` (0 ≤, 1 <, 2 ≥,
3 >, 4 =, 5 ≠, 6 member of the node's set: the sets are ``membership_values`` cut at
NaNs, in the order member nodes appear) and goes to its true or false branch, another
node or, where ``nodes_trueleafs`` / ``nodes_falseleafs`` say so, a leaf; a NaN feature
takes the true branch where ``nodes_missing_value_tracks_true`` says so, else the
comparison's outcome. A root whose branches are one leaf is that leaf. Leaf j adds
``leaf_weights[j]`` to target ``leaf_targetids[j]``; ``aggregate_function`` combines a
target's leaves: 0 average over the trees, 1 sum, 2 min, 3 max (0 where no leaf
contributes); ``post_transform`` then maps each row: 0 none, 1 softmax, 2 logistic,
3 softmax over the non-zero scores, 4 probit (the normal distribution's quantile).
"""
import math
from statistics import NormalDist

import numpy as np

from deep500.frameworks.reference.operators._op_common_softmax import softmax
from deep500.frameworks.reference.operators.registry import ReferenceOp, register
from deep500.utils.errors import Deep500Error, ShapeError

_COMPARISONS = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal,
                np.not_equal)
_MEMBER = 6


def _softmax_zero(scores):
    nonzero = scores != 0
    shifted = np.where(nonzero, scores - np.max(scores, -1, keepdims=True), -np.inf)
    exponents = np.where(nonzero, np.exp(shifted), 0.0)
    return exponents / np.maximum(exponents.sum(-1, keepdims=True), np.finfo(float).tiny)


def _probit(scores):
    """The standard normal distribution's quantile: ±inf at 0 and 1, NaN outside."""
    inside = (0 < scores) & (scores < 1)
    result = np.where(scores == 0, -np.inf, np.where(scores == 1, np.inf, np.nan))
    result[inside] = [NormalDist().inv_cdf(p) for p in scores[inside]]
    return result


_POST_TRANSFORMS = {0: lambda s: s, 1: lambda s: softmax(s, -1),
                    2: lambda s: 1.0 / (1.0 + np.exp(-s)), 3: _softmax_zero, 4: _probit}


@register("TreeEnsemble", domain="ai.onnx.ml")
class TreeEnsemble(ReferenceOp):
    defaults = {"aggregate_function": 1, "post_transform": 0, "tree_roots": None,
                "nodes_hitrates": None, "nodes_missing_value_tracks_true": None,
                "nodes_modes": None, "leaf_weights": None, "leaf_targetids": None,
                "nodes_falsenodeids": None, "n_targets": None, "nodes_trueleafs": None,
                "nodes_featureids": None, "nodes_splits": None, "nodes_falseleafs": None,
                "nodes_truenodeids": None, "membership_values": None}

    def __init__(self, **attributes):
        super().__init__(**attributes)
        if self.attr("aggregate_function") not in range(4) or \
                self.attr("post_transform") not in _POST_TRANSFORMS:
            raise Deep500Error(f"{self.op_type}: aggregate_function must be in 0..3 and "
                               f"post_transform in 0..4, got {self.attr('aggregate_function')}"
                               f" and {self.attr('post_transform')}")
        self._modes = np.asarray(self.attr("nodes_modes")).reshape(-1).astype(int)
        self._splits = np.asarray(self.attr("nodes_splits"), np.float64).reshape(-1)
        self._sets = self._member_sets()

    def _member_sets(self) -> dict:
        """{member node: its set of values}."""
        values = self.attr("membership_values")
        sets, current = [], set()
        for value in np.asarray([] if values is None else values, np.float64).reshape(-1):
            if math.isnan(value):
                sets.append(current)
                current = set()
            else:
                current.add(float(value))
        if current:
            sets.append(current)
        members = np.flatnonzero(self._modes == _MEMBER)
        if len(members) > len(sets):
            raise Deep500Error(f"{self.op_type}: {len(members)} set-membership nodes but "
                               f"membership_values holds {len(sets)} NaN-separated sets")
        return {int(node): sets[k] for k, node in enumerate(members)}

    def _goes_true(self, node: int, value: float) -> bool:
        tracks = self.attr("nodes_missing_value_tracks_true")
        if math.isnan(value) and tracks is not None and tracks[node]:
            return True
        if self._modes[node] == _MEMBER:
            return value in self._sets[node]
        return bool(_COMPARISONS[self._modes[node]](value, self._splits[node]))

    def _leaf(self, root: int, row) -> int:
        true_leaf, false_leaf = self.attr("nodes_trueleafs"), self.attr("nodes_falseleafs")
        true_ids, false_ids = self.attr("nodes_truenodeids"), self.attr("nodes_falsenodeids")
        if true_leaf[root] and false_leaf[root] and true_ids[root] == false_ids[root]:
            return true_ids[root]
        node = root
        while True:
            value = float(row[self.attr("nodes_featureids")[node]])
            if self._goes_true(node, value):
                node, is_leaf = true_ids[node], true_leaf[node]
            else:
                node, is_leaf = false_ids[node], false_leaf[node]
            if is_leaf:
                return node

    def forward(self, X):
        X = np.asarray(X)
        if X.ndim != 2:
            raise ShapeError(f"{self.op_type}: X must be [N, F], got shape {list(X.shape)}")
        weights = np.asarray(self.attr("leaf_weights"), np.float64).reshape(-1)
        targets = np.asarray(self.attr("leaf_targetids")).reshape(-1)
        roots, aggregate = self.attr("tree_roots"), self.attr("aggregate_function")
        scores = np.zeros((len(X), self.attr("n_targets")))
        for n, row in enumerate(X):
            leaves = [self._leaf(root, row) for root in roots]
            for target in set(targets[leaves].tolist()):
                values = [weights[j] for j in leaves if targets[j] == target]
                scores[n, target] = (sum(values) / len(roots) if aggregate == 0 else
                                     sum(values) if aggregate == 1 else
                                     min(values) if aggregate == 2 else max(values))
        return _POST_TRANSFORMS[self.attr("post_transform")](scores).astype(X.dtype)

    def backward(self, grads, fwd_inputs, fwd_outputs):
        # Piecewise constant in X (the scores change only where a split is crossed).
        return [np.zeros_like(fwd_inputs[0])]
