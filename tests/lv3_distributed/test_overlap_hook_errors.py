"""An exception raised inside an overlap gradient hook (``GradientBuckets``) during
backprop is reported as the hook's failure, naming the hook and the original error,
not as a malformed model or a shape error."""
import importlib
import sys

import numpy as np
import pytest

from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed.gradient_buckets import GradientBuckets
from deep500.utils.errors import Deep500Error, ModelError, ShapeError
from tests.lv3_distributed.mpi_helpers import SCRIPTS

sys.path.insert(0, str(SCRIPTS))
small_model = importlib.import_module("check_schemes").small_model
sys.path.remove(str(SCRIPTS))


class _Failing(GradientBuckets):
    """A gradient hook whose collective fails (as an MPI error would, a RuntimeError)."""

    def __init__(self, where):
        self.wants_gradients = True
        self.where = where

    def gradient_ready(self, name, gradient):
        if self.where == "gradient_ready":
            raise RuntimeError("MPI_Iallreduce: communicator revoked")

    def backward_progress(self):
        if self.where == "backward_progress":
            raise RuntimeError("MPI_Test: communicator revoked")


def _inputs():
    rng = np.random.default_rng(0)
    return {"input": rng.standard_normal((4, 1, 8, 8)).astype(np.float32),
            "labels": rng.integers(0, 10, 4).astype(np.int64)}


@pytest.mark.parametrize("executor", ["reference", "pytorch"])
@pytest.mark.parametrize("where", ["gradient_ready", "backward_progress"])
def test_a_failing_gradient_hook_is_reported_as_the_hooks_error(executor, where):
    if executor == "reference":
        run = d5ref.from_onnx(small_model())
    else:
        d5pt = pytest.importorskip("deep500.frameworks.pytorch")
        run = d5pt.from_onnx(small_model())
    run.events.append(_Failing(where))
    with pytest.raises(Deep500Error) as error:
        run.inference_and_backprop(_inputs(), "loss")
    message = str(error.value)
    assert not isinstance(error.value, (ModelError, ShapeError)), message
    assert f"event hook _Failing.{where} raised RuntimeError" in message
    assert "communicator revoked" in message and "malformed" not in message
    assert isinstance(error.value.__cause__, RuntimeError)
