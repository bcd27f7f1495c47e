"""The bookkeeping every bridge's native optimizers share
(deep500/frameworks/_bridge/native_optimizer.py, named_optimizers.py), on a NumPy
"framework" whose optimizer classes keep their hyper-parameters as attributes: the
reference names and defaults reach the native class under its own names, hyper-parameters
read and write the native optimizer, the names, and the refusals. The PyTorch and Keras
optimizers are tested in tests/lv2_training/test_native_optimizers.py."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import deep500.frameworks.reference as d5ref
from deep500.frameworks.reference.executor import ReferenceGraphExecutor
from deep500.frameworks._bridge import named_optimizers as named
from deep500.frameworks._bridge.native_optimizer import NativeHyperparameter, NativeOptimizer
from deep500.utils.errors import Deep500Error


class NumpyNative:
    """The "framework's" optimizer base: built over parameter names."""

    def __init__(self, parameters, **options):
        self.parameters = list(parameters)
        for key, value in options.items():
            setattr(self, key, value)


class NumpyAdam(NumpyNative):
    pass


class AttributeHyperparameter(NativeHyperparameter):
    """An attribute of the native optimizer, or an element of a tuple attribute."""

    def read(self, optimizer):
        key, index = (self.native_name if isinstance(self.native_name, tuple)
                      else (self.native_name, None))
        value = getattr(optimizer.native_optimizer, key)
        return value if index is None else value[index]

    def write(self, optimizer, value) -> None:
        key, index = (self.native_name if isinstance(self.native_name, tuple)
                      else (self.native_name, None))
        if index is not None:
            value = tuple(value if i == index else v
                          for i, v in enumerate(getattr(optimizer.native_optimizer, key)))
        setattr(optimizer.native_optimizer, key, value)


class NumpyOptimizer(NativeOptimizer):
    bridge, wraps, trains = "d5np", "NumPy optimizers", "a reference executor"
    executor_types = (ReferenceGraphExecutor,)
    native_base = NumpyNative
    native_kind = "NumpyNative class or instance (e.g. NumpyAdam)"
    hyperparameter = AttributeHyperparameter
    native_names = {"learning_rate": "lr"}

    def _instantiate(self, optimizer_class, kwargs):
        return optimizer_class(self.network.get_params(), **kwargs)

    def _check_instance(self, optimizer) -> None:
        if optimizer.parameters != self.network.get_params():
            raise Deep500Error(f"{self.name}: built over other parameters")

    def _native_state(self) -> dict:
        return {}


class AdamOptimizer(named.AdamOptimizer, NumpyOptimizer):
    native_class = NumpyAdam
    native_names = {"beta1": ("betas", 0), "beta2": ("betas", 1), "epsilon": "eps"}


@pytest.fixture(scope="module")
def executor():
    """loss = sum(x @ W), W a trained parameter."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["y"]),
         helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(np.ones((3, 2), np.float32), "W")])
    return d5ref.from_onnx(helper.make_model(graph,
                                             opset_imports=[helper.make_opsetid("", 17)]))


def test_reference_names_and_defaults_reach_the_native_class(executor):
    adam = AdamOptimizer(executor, learning_rate=0.01, amsgrad=True)
    native = adam.native_optimizer
    assert type(native) is NumpyAdam and native.parameters == ["W"]
    assert (native.lr, native.betas, native.eps, native.amsgrad) == (0.01, (0.9, 0.999),
                                                                     1e-8, True)
    assert adam.hyperparameters() == {"learning_rate": 0.01, "beta1": 0.9, "beta2": 0.999,
                                      "epsilon": 1e-8}
    assert adam.name == "AdamOptimizer"


def test_hyperparameters_read_and_write_the_native_optimizer(executor):
    adam = AdamOptimizer(executor)
    adam.beta2 = np.float32(0.5)             # NumPy scalars are written as numbers
    adam.learning_rate = 0.2
    assert adam.native_optimizer.betas == (0.9, 0.5)
    assert type(adam.native_optimizer.betas[1]) is float
    assert (adam.beta2, adam.learning_rate) == (0.5, 0.2)


def test_native_options_group_tuple_elements():
    assert AdamOptimizer.native_options(learning_rate=1, beta2=3, beta1=2, epsilon=4) == {
        "lr": 1, "betas": (2, 3), "eps": 4}
    assert NumpyOptimizer.native_name("momentum") == "momentum"   # unlisted: same name


def test_the_bridges_own_class_is_named_after_the_native_optimizer(executor):
    generic = NumpyOptimizer(executor, NumpyAdam, lr=0.3)
    assert generic.name == "NumpyOptimizer(NumpyAdam)" and generic.learning_rate == 0.3
    given = NumpyOptimizer(executor, NumpyAdam(["W"], lr=0.1))
    assert given.native_optimizer.lr == 0.1


def test_what_cannot_be_trained_is_refused(executor):
    with pytest.raises(Deep500Error, match=r"^d5np\.AdamOptimizer wraps NumPy optimizers "
                                           r"and trains a reference executor "
                                           r"\(d5np\.from_onnx\(model\)\); got a str "
                                           r"executor \(str\)"):
        AdamOptimizer("not an executor")
    with pytest.raises(Deep500Error, match=r"keyword arguments \['lr'\] only apply when "
                                           r"the optimizer is given as a class"):
        NumpyOptimizer(executor, NumpyAdam(["W"]), lr=0.1)
    with pytest.raises(Deep500Error, match="built over other parameters"):
        NumpyOptimizer(executor, NumpyAdam(["V"]))
    with pytest.raises(Deep500Error, match=r"expected a NumpyNative class or instance "
                                           r"\(e\.g\. NumpyAdam\), got str"):
        NumpyOptimizer(executor, "adam")


def test_state_comes_from_checkpoints_of_the_same_optimizer_only(executor):
    adam = AdamOptimizer(executor)
    assert adam.state == {}
    adam.state = {}
    with pytest.raises(Deep500Error, match="set the state with load_state_dict"):
        adam.state = {"W": {"m": np.zeros(3)}}
    with pytest.raises(Deep500Error, match="Cannot load the state of a GradientDescent "
                                           "into a AdamOptimizer"):
        adam._check_state_owner({"optimizer": "GradientDescent"})
    adam._check_state_owner({"optimizer": "AdamOptimizer"})
