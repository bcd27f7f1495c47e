"""Checks shared by the reference-operator tests: forward against PyTorch (an independent
implementation), backward against PyTorch autograd and against finite differences."""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import pytest

import deep500 as d5
from deep500.lv0_operators.custom_op import as_tuple

torch = pytest.importorskip("torch")

# Tolerances for comparing two float implementations of the same operator.
TOLERANCES = {np.float32: dict(rtol=1e-4, atol=1e-5), np.float64: dict(rtol=1e-10, atol=1e-12)}


def tolerances(dtype) -> dict:
    return TOLERANCES[np.dtype(dtype).type]


def check_forward(op, inputs: Sequence, torch_fn: Callable, **tol):
    """op.forward(*inputs) equals torch_fn(*torch inputs) within dtype tolerances."""
    outputs = as_tuple(op.forward(*inputs))
    with torch.no_grad():
        expected = as_tuple(torch_fn(*[torch.from_numpy(np.array(x)) if x is not None else None
                                       for x in inputs]))
    assert len(outputs) >= len(expected)
    dtype = next(np.asarray(x).dtype for x in inputs if np.issubdtype(np.asarray(x).dtype,
                                                                     np.floating))
    tol = {**tolerances(dtype), **tol}
    for got, want in zip(outputs, expected):
        if want is None:
            continue
        want = want.numpy()
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.dtype == want.dtype or not np.issubdtype(want.dtype, np.floating), \
            (got.dtype, want.dtype)
        np.testing.assert_allclose(got, want, **tol)
    return outputs


def check_backward(op, inputs: Sequence, torch_fn: Callable, wrt: Sequence[int] | None = None,
                   seed: int = 0, **tol):
    """op.backward equals torch autograd's vector-Jacobian product for the same upstream
    gradients (one random gradient per floating output)."""
    rng = np.random.default_rng(seed)
    outputs = as_tuple(op.forward(*inputs))
    upstream = [rng.standard_normal(o.shape).astype(o.dtype)
                if np.issubdtype(o.dtype, np.floating) else None for o in outputs]
    grads = as_tuple(op.backward(upstream, list(inputs), outputs))
    if wrt is None:
        wrt = [i for i, x in enumerate(inputs)
               if x is not None and np.issubdtype(np.asarray(x).dtype, np.floating)]
    tensors = []
    for i, x in enumerate(inputs):
        if x is None:
            tensors.append(None)
            continue
        t = torch.from_numpy(np.array(x))
        if i in wrt:
            t.requires_grad_(True)
        tensors.append(t)
    torch_outputs = as_tuple(torch_fn(*tensors))
    pairs = [(o, torch.from_numpy(g)) for o, g in zip(torch_outputs, upstream)
             if g is not None and o is not None and o.requires_grad]
    torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])
    tol = {**tolerances(inputs[wrt[0]].dtype), **tol}
    for i in wrt:
        expected = tensors[i].grad
        expected = np.zeros_like(inputs[i]) if expected is None else expected.numpy()
        assert grads[i] is not None, f"no gradient for input {i}"
        assert np.shape(grads[i]) == expected.shape
        np.testing.assert_allclose(grads[i], expected, err_msg=f"gradient of input {i}", **tol)
    return grads


def check_gradient(op, inputs: Sequence, **kwargs):
    """d5.test_op_gradient passes (finite differences), in float64 by default."""
    result = d5.test_op_gradient(op, inputs, **kwargs)
    assert result.passed, result.details
    return result
