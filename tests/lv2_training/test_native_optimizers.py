"""Framework-native optimizers (``d5pt.*`` on torch.optim, ``d5tf.*`` on Keras) behind
the Level-2 Optimizer interface: the same trajectories as the reference optimizers
where the formulas agree, schedules through ``learning_rate``, gradient modifiers,
framework-neutral state round trips."""
import numpy as np
import pytest

from deep500.lv1_network.events import ExecutorEvent
from deep500.lv2_training.optimizer import OptimizerEvent, UpdateRuleOptimizer
from deep500.lv2_training.trajectory import trajectory_divergence
from deep500.networks import create_model
from deep500.utils.errors import Deep500Error

torch = pytest.importorskip("torch")

import deep500.frameworks.pytorch as d5pt  # noqa: E402
import deep500.frameworks.reference as d5ref  # noqa: E402
from deep500.frameworks.pytorch import optimizers as pt_optimizers  # noqa: E402
from deep500.frameworks.reference import optimizers as ref_optimizers  # noqa: E402

STEPS = 6
# The reference, PyTorch and TensorFlow executors compute the same gradients up to
# float32 rounding; over STEPS steps the measured relative L2 distance of all
# parameters stays below 1.5e-6 wherever the formulas match (2e-8 to 1.3e-6).
MATCHING = 1e-5

CASES = [("GradientDescent", {}),
         ("MomentumOptimizer", {}),
         ("MomentumOptimizer", {"nesterov": True}),
         ("AdamOptimizer", {"learning_rate": 0.01}),
         # AdaGrad from a zero accumulator is ill conditioned: the first step is
         # lr*g/sqrt(g*g + eps) ~ lr*sign(g), so gradients of ~1e-5 that differ by float32
         # rounding between frameworks move parameters by O(lr) differently (measured:
         # 7.7e-3 divergence on one CPU, below 1e-5 on another). Starting from s0 = 0.01
         # bounds d(step)/dg by lr/sqrt(s0), so rounding stays rounding (Keras form vs
         # Keras: 1.7e-8); eps = 0.01 keeps the reference's sqrt(s) + eps and Keras'
         # sqrt(s + eps) measurably apart (3.8e-3).
         ("AdaGradOptimizer", {"initial_accumulator_value": 0.01, "epsilon": 0.01}),
         ("RMSPropOptimizer", {"learning_rate": 0.001})]
IDS = ["sgd", "momentum", "nesterov", "adam", "adagrad", "rmsprop"]


@pytest.fixture(scope="module")
def model():
    return create_model("lenet", input_shape=(1, 8, 8), loss="softmax_cross_entropy",
                        seed=0)


@pytest.fixture(scope="module")
def batches():
    rng = np.random.default_rng(0)
    return [{"input": rng.standard_normal((16, 1, 8, 8)).astype(np.float32),
             "labels": rng.integers(0, 10, 16)} for _ in range(STEPS)]


def parameters(executor) -> dict:
    return {p: np.array(executor.network.fetch_tensor(p)) for p in
            executor.network.get_params()}


def contains_framework_objects(value) -> bool:
    if isinstance(value, dict):
        return any(contains_framework_objects(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(contains_framework_objects(v) for v in value)
    return not isinstance(value, (np.ndarray, np.generic, int, float, bool, str,
                                  type(None)))


class ScaleGradientsInPlace(OptimizerEvent):
    def __init__(self, factor):
        self.factor = factor

    def modify_gradients(self, optimizer, gradients):
        for grad in gradients.values():
            grad *= self.factor


class Halving(OptimizerEvent):
    """A schedule: learning rate ``initial / 2**step``, set only through the
    ``learning_rate`` attribute."""

    def __init__(self, initial):
        self.initial = initial

    def before_optimizer_step(self, optimizer, inputs):
        optimizer.learning_rate = self.initial / 2 ** optimizer.step_count


# -- PyTorch ----------------------------------------------------------------------------
@pytest.mark.parametrize("name, options", CASES, ids=IDS)
def test_torch_optimizer_follows_reference(model, batches, name, options):
    reference = getattr(ref_optimizers, name)(d5ref.from_onnx(model), **options)
    native = getattr(pt_optimizers, name)(d5pt.from_onnx(model), **options)
    assert native.hyperparameters() == reference.hyperparameters()
    result = trajectory_divergence(reference, native, batches, STEPS)
    assert result.max_relative_l2 < MATCHING, result
    np.testing.assert_allclose(result.loss_b, result.loss_a, rtol=1e-5)


TORCH_LOOPS = {"GradientDescent": lambda p: torch.optim.SGD(p, lr=0.1),
               "MomentumOptimizer": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
               "AdamOptimizer": lambda p: torch.optim.Adam(p, lr=0.01),
               "AdaGradOptimizer": lambda p: torch.optim.Adagrad(p, lr=0.01),
               "RMSPropOptimizer": lambda p: torch.optim.RMSprop(p, lr=0.001)}


@pytest.mark.parametrize("name", sorted(TORCH_LOOPS))
def test_torch_optimizer_equals_plain_torch_loop(model, batches, name):
    options = {"learning_rate": {"GradientDescent": 0.1, "MomentumOptimizer": 0.1,
                                 "AdamOptimizer": 0.01, "AdaGradOptimizer": 0.01,
                                 "RMSPropOptimizer": 0.001}[name]}
    executor = d5pt.from_onnx(model)
    optimizer = getattr(pt_optimizers, name)(executor, **options)
    plain = d5pt.from_onnx(model).network
    module = plain.module
    torch_optimizer = TORCH_LOOPS[name](list(plain.parameter_values.values()))
    for batch in batches:
        ours = optimizer.step(batch)["loss"]
        torch_optimizer.zero_grad()
        loss = module(input=torch.from_numpy(batch["input"]),
                      labels=torch.from_numpy(batch["labels"]))["loss"]
        loss.backward()
        torch_optimizer.step()
        assert float(ours) == float(loss.detach())
    for p, value in parameters(executor).items():
        np.testing.assert_array_equal(value, plain.fetch_tensor(p), err_msg=p)
    assert optimizer.step_count == len(batches)


class RecordBackprop(ExecutorEvent):
    """An executor event that keeps what ``after_backprop`` receives."""

    def __init__(self):
        self.seen = []

    def after_backprop(self, outputs):
        self.seen.append(sorted(outputs))


def test_torch_step_converts_gradients_only_when_read(model, batches):
    """Without executor events or gradient modifiers a step leaves the gradients in
    torch (no per-step NumPy conversion); fetch_tensor still reads them, equal to what
    inference_and_backprop returns. An executor event gets them as arrays."""
    executor = d5pt.from_onnx(model)
    optimizer = pt_optimizers.GradientDescent(executor, learning_rate=0.0)
    names = executor.network.get_params()
    outputs = optimizer.step(batches[0])
    assert set(outputs) == {"loss", "output"}
    fetched = {p: np.array(executor.network.fetch_tensor(p + ".grad")) for p in names}
    full = executor.inference_and_backprop(batches[0], "loss")   # lr 0: same weights
    for p in names:
        assert np.any(fetched[p]), p
        np.testing.assert_array_equal(fetched[p], full[p + ".grad"], err_msg=p)

    recorder = RecordBackprop()
    watched = d5pt.from_onnx(model, events=[recorder])
    outputs = pt_optimizers.GradientDescent(watched).step(batches[0])
    assert recorder.seen == [sorted(outputs)]
    assert {p + ".grad" for p in names} <= set(outputs)


def test_torch_learning_rate_property_drives_schedules(model, batches):
    executor = d5pt.from_onnx(model)
    groups = [{"params": [executor.network.parameter_values["fc3.weight"]]},
              {"params": [v for k, v in executor.network.parameter_values.items()
                          if k != "fc3.weight"]}]
    optimizer = pt_optimizers.TorchOptimizer(
        executor, torch.optim.SGD(groups, lr=0.1, momentum=0.9))
    assert optimizer.learning_rate == 0.1
    optimizer.learning_rate = np.float64(0.05)
    assert [g["lr"] for g in optimizer.torch_optimizer.param_groups] == [0.05, 0.05]
    assert type(optimizer.torch_optimizer.param_groups[0]["lr"]) is float

    # The same schedule on the reference and the torch momentum optimizers.
    reference = ref_optimizers.MomentumOptimizer(d5ref.from_onnx(model),
                                                 events=[Halving(0.2)])
    native = pt_optimizers.MomentumOptimizer(d5pt.from_onnx(model), events=[Halving(0.2)])
    result = trajectory_divergence(reference, native, batches, STEPS)
    assert result.max_relative_l2 < MATCHING
    assert native.learning_rate == reference.learning_rate == 0.2 / 2 ** (STEPS - 1)
    constant = pt_optimizers.MomentumOptimizer(d5pt.from_onnx(model), learning_rate=0.2)
    constant.train(batches)
    assert not np.allclose(constant.network.fetch_tensor("fc3.weight"),
                           native.network.fetch_tensor("fc3.weight"))


def test_torch_hyperparameters_map_onto_param_groups(model):
    adam = pt_optimizers.AdamOptimizer(d5pt.from_onnx(model), beta2=0.99, epsilon=1e-6)
    assert adam.hyperparameters() == {"learning_rate": 0.001, "beta1": 0.9, "beta2": 0.99,
                                      "epsilon": 1e-6}
    adam.beta1 = 0.8
    assert adam.torch_optimizer.param_groups[0]["betas"] == (0.8, 0.99)
    rms = pt_optimizers.RMSPropOptimizer(d5pt.from_onnx(model), decay=0.9)
    assert rms.torch_optimizer.param_groups[0]["alpha"] == 0.9 and rms.decay == 0.9


@pytest.mark.parametrize("name, options", [CASES[1], CASES[3]], ids=["momentum", "adam"])
def test_torch_state_round_trip_through_checkpoint(model, batches, tmp_path, name,
                                                   options):
    from deep500.lv2_training.checkpoint import read_checkpoint, save_checkpoint
    first = getattr(pt_optimizers, name)(d5pt.from_onnx(model), **options)
    first.train(batches[:3])
    state = first.state_dict()
    assert not contains_framework_objects(state)
    assert set(state["state"]) == set(first.network.get_params())
    path = save_checkpoint(tmp_path / "ckpt.npz", first.network, {"optimizer": state})
    loaded = read_checkpoint(path)

    executor = d5pt.from_onnx(model)
    for p, value in loaded.parameters.items():
        executor.network.feed_tensor(p, value)
    second = getattr(pt_optimizers, name)(executor, learning_rate=1.0)
    second.load_state_dict(loaded.state["optimizer"])
    assert second.step_count == 3
    assert second.learning_rate == first.learning_rate
    first.train(batches[3:])
    second.train(batches[3:])
    for p, value in parameters(first.executor).items():
        np.testing.assert_array_equal(value, executor.network.fetch_tensor(p), err_msg=p)
    slots = second.state["fc1.weight"]
    assert all(isinstance(v, np.ndarray) for v in slots.values())


def test_torch_gradient_modifiers(model, batches):
    from deep500.lv2_training.gradient_modifiers import WeightDecay
    # Assigning new arrays (WeightDecay) matches the reference and torch's own decay.
    reference = ref_optimizers.MomentumOptimizer(d5ref.from_onnx(model),
                                                 events=[WeightDecay(0.01)])
    native = pt_optimizers.MomentumOptimizer(d5pt.from_onnx(model),
                                             events=[WeightDecay(0.01)])
    assert trajectory_divergence(reference, native, batches, STEPS).max_relative_l2 < MATCHING
    own = pt_optimizers.MomentumOptimizer(d5pt.from_onnx(model), weight_decay=0.01)
    own.train(batches)
    for p, value in parameters(own.executor).items():
        np.testing.assert_allclose(native.network.fetch_tensor(p), value, rtol=1e-5,
                                   atol=1e-7, err_msg=p)
    # Changing the NumPy gradients in place reaches torch's .grad too.
    halved = pt_optimizers.GradientDescent(d5pt.from_onnx(model), learning_rate=0.1,
                                           events=[ScaleGradientsInPlace(0.5)])
    plain = pt_optimizers.GradientDescent(d5pt.from_onnx(model), learning_rate=0.05)
    result = trajectory_divergence(plain, halved, batches, STEPS)
    assert result.max_relative_l2 < 1e-6


def test_torch_optimizer_refuses_what_it_cannot_train(model):
    with pytest.raises(Deep500Error, match="PyTorch executor"):
        pt_optimizers.AdamOptimizer(d5ref.from_onnx(model))
    executor = d5pt.from_onnx(model)
    stranger = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(Deep500Error, match="not parameters of network"):
        pt_optimizers.TorchOptimizer(executor, torch.optim.SGD([stranger], lr=0.1))
    with pytest.raises(Deep500Error, match="torch.optim.Optimizer class or instance"):
        pt_optimizers.TorchOptimizer(executor, "adam")
    generic = pt_optimizers.TorchOptimizer(executor, torch.optim.Adam, lr=0.01)
    with pytest.raises(Deep500Error, match="Cannot load the state"):
        generic.load_state_dict(pt_optimizers.GradientDescent(executor).state_dict())


# -- TensorFlow / Keras -----------------------------------------------------------------
@pytest.fixture(scope="module")
def d5tf():
    pytest.importorskip("tensorflow")
    import deep500.frameworks.tensorflow as d5tf
    return d5tf


@pytest.fixture(scope="module")
def tf_optimizers(d5tf):
    from deep500.frameworks.tensorflow import optimizers
    return optimizers


class KerasFormAdam(UpdateRuleOptimizer):
    """Keras 3's Adam: epsilon added to sqrt(v) before the bias correction, which
    Keras computes in float32 (``1 - 0.999`` is then 1.3e-5 off, 6e-6 in the step)."""

    def __init__(self, executor, learning_rate, beta1=0.9, beta2=0.999, epsilon=1e-8):
        super().__init__(executor)
        self.learning_rate, self.beta1, self.beta2, self.epsilon = (
            learning_rate, beta1, beta2, epsilon)

    def update_rule(self, grad, old_param, param_name):
        t = self.step_count + 1
        m = self.slot(param_name, "m", old_param)
        v = self.slot(param_name, "v", old_param)
        m += (grad - m) * (1 - self.beta1)
        v += (grad * grad - v) * (1 - self.beta2)
        one, t = np.float32(1), np.float32(t)
        alpha = (np.float32(self.learning_rate) * np.sqrt(one - np.float32(self.beta2) ** t)
                 / (one - np.float32(self.beta1) ** t))
        return old_param - m * alpha / (np.sqrt(v) + self.epsilon)


class KerasFormAdaGrad(UpdateRuleOptimizer):
    """Keras 3's Adagrad: epsilon under the square root."""

    def __init__(self, executor, learning_rate=0.01, initial_accumulator_value=0.0,
                 epsilon=1e-10):
        super().__init__(executor)
        self.learning_rate, self.epsilon = learning_rate, epsilon
        self.initial_accumulator_value = initial_accumulator_value

    def update_rule(self, grad, old_param, param_name):
        s = self.slot(param_name, "sum", old_param, self.initial_accumulator_value)
        s += grad * grad
        return old_param - self.learning_rate * grad / np.sqrt(s + self.epsilon)


class KerasFormRMSProp(UpdateRuleOptimizer):
    """Keras 3's RMSprop: epsilon under the square root."""

    def __init__(self, executor, learning_rate, decay=0.99, epsilon=1e-8):
        super().__init__(executor)
        self.learning_rate, self.decay, self.epsilon = learning_rate, decay, epsilon

    def update_rule(self, grad, old_param, param_name):
        s = self.slot(param_name, "square", old_param)
        s *= self.decay
        s += (1 - self.decay) * grad * grad
        return old_param - self.learning_rate * grad / np.sqrt(s + self.epsilon)


KERAS_FORMS = {"AdamOptimizer": KerasFormAdam, "AdaGradOptimizer": KerasFormAdaGrad,
               "RMSPropOptimizer": KerasFormRMSProp}
# Measured with this model and these batches over 6 steps (relative L2 distance of all
# parameters from the reference's): Adam 1.1e-2, AdaGrad 3.8e-3, RMSProp 8.8e-2. The
# Keras-form rules above bring each below MATCHING, so the whole gap is the formula.
KERAS_GAPS = {"AdamOptimizer": 0.03, "AdaGradOptimizer": 0.15, "RMSPropOptimizer": 0.25}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("name, options", CASES, ids=IDS)
def test_keras_optimizer_follows_reference(model, batches, d5tf, tf_optimizers, mode,
                                           name, options):
    native = getattr(tf_optimizers, name)(d5tf.from_onnx(model, mode=mode), **options)
    assert native.hyperparameters() == pytest.approx(
        getattr(ref_optimizers, name)(d5ref.from_onnx(model), **options).hyperparameters())
    if name in KERAS_FORMS:
        keras_form = KERAS_FORMS[name](d5ref.from_onnx(model), **options)
        result = trajectory_divergence(keras_form, native, batches, STEPS)
        assert result.max_relative_l2 < MATCHING, result
        native = getattr(tf_optimizers, name)(d5tf.from_onnx(model, mode=mode), **options)
        reference = getattr(ref_optimizers, name)(d5ref.from_onnx(model), **options)
        gap = trajectory_divergence(reference, native, batches, STEPS)
        assert 1e-4 < gap.max_relative_l2 < KERAS_GAPS[name], gap
    else:
        reference = getattr(ref_optimizers, name)(d5ref.from_onnx(model), **options)
        result = trajectory_divergence(reference, native, batches, STEPS)
        assert result.max_relative_l2 < MATCHING, result


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_keras_adam_converges(d5tf, tf_optimizers, mode):
    model = create_model("mlp", input_shape=(1, 4, 4), hidden=(32,),
                         loss="softmax_cross_entropy", seed=0)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((256, 1, 4, 4)).astype(np.float32)
    labels = np.argmax(x.reshape(256, 16)[:, :4], axis=1).astype(np.int64)
    optimizer = tf_optimizers.AdamOptimizer(d5tf.from_onnx(model, mode=mode),
                                            learning_rate=0.01)
    losses = [float(optimizer.step({"input": x[i:i + 64], "labels": labels[i:i + 64]})
                    ["loss"]) for _ in range(10) for i in range(0, 256, 64)]
    assert np.mean(losses[-4:]) < 0.5 * np.mean(losses[:4]), losses


def test_keras_fused_step_in_function_mode(model, batches, d5tf, tf_optimizers):
    eager = tf_optimizers.AdamOptimizer(d5tf.from_onnx(model, mode="eager"),
                                        learning_rate=0.01)
    executor = d5tf.from_onnx(model, mode="function")
    fused = tf_optimizers.AdamOptimizer(executor, learning_rate=0.01)
    assert fused.fused and not eager.fused
    result = trajectory_divergence(eager, fused, batches, STEPS)
    assert result.max_relative_l2 < MATCHING, result
    traces = executor.trace_count
    outputs = fused.step(batches[0])
    assert executor.trace_count == traces and executor.fused_update is None
    assert set(outputs) >= {"loss", "output", "conv1.weight.grad"}
    # Backpropagation alone, outside the optimizer's step, updates nothing.
    before = parameters(executor)
    executor.inference_and_backprop(batches[1])
    for p, value in parameters(executor).items():
        np.testing.assert_array_equal(value, before[p], err_msg=p)


def test_keras_learning_rate_schedule_without_retracing(model, batches, d5tf,
                                                        tf_optimizers):
    reference = ref_optimizers.GradientDescent(d5ref.from_onnx(model), events=[Halving(0.2)])
    native = tf_optimizers.GradientDescent(d5tf.from_onnx(model, mode="function"),
                                           events=[Halving(0.2)])
    assert trajectory_divergence(reference, native, batches, STEPS).max_relative_l2 < MATCHING
    assert native.learning_rate == pytest.approx(0.2 / 2 ** (STEPS - 1))
    assert native._traced_update.experimental_get_tracing_count() == 1
    assert native.executor.trace_count == 1
    native.learning_rate = 0.5
    assert float(native.keras_optimizer.learning_rate.numpy()) == 0.5


@pytest.mark.parametrize("mode", ["eager", "function"])
def test_keras_state_round_trip_through_checkpoint(model, batches, d5tf, tf_optimizers,
                                                   tmp_path, mode):
    from deep500.lv2_training.checkpoint import read_checkpoint, save_checkpoint
    first = tf_optimizers.AdamOptimizer(d5tf.from_onnx(model, mode=mode),
                                        learning_rate=0.01)
    first.train(batches[:3])
    state = first.state_dict()
    assert not contains_framework_objects(state)
    # Slots are per parameter, in ONNX's layout (conv filters are stored transposed).
    assert state["state"]["conv1.weight"]["momentum"].shape == (6, 1, 5, 5)
    assert int(state["optimizer_variables"]["iteration"]) == 3
    path = save_checkpoint(tmp_path / "ckpt.npz", first.network, {"optimizer": state})
    loaded = read_checkpoint(path)

    executor = d5tf.from_onnx(model, mode=mode)
    for p, value in loaded.parameters.items():
        executor.network.feed_tensor(p, value, is_param=True)
    second = tf_optimizers.AdamOptimizer(executor, learning_rate=1.0)
    second.load_state_dict(loaded.state["optimizer"])
    assert second.step_count == 3 and second.learning_rate == pytest.approx(0.01)
    first.train(batches[3:])
    second.train(batches[3:])
    for p, value in parameters(first.executor).items():
        np.testing.assert_allclose(executor.network.fetch_tensor(p), value, rtol=1e-6,
                                   atol=1e-7, err_msg=p)


def test_keras_gradient_modifiers_in_onnx_layout(model, batches, d5tf, tf_optimizers):
    from deep500.lv2_training.gradient_modifiers import WeightDecay
    reference = ref_optimizers.MomentumOptimizer(d5ref.from_onnx(model),
                                                 events=[WeightDecay(0.01)])
    executor = d5tf.from_onnx(model, mode="function")
    assert executor.network.layouts   # some parameters are stored in other layouts
    native = tf_optimizers.MomentumOptimizer(executor, events=[WeightDecay(0.01)])
    assert trajectory_divergence(reference, native, batches, STEPS).max_relative_l2 < MATCHING


def test_keras_native_model(d5tf, tf_optimizers):
    import keras
    tf = pytest.importorskip("tensorflow")
    keras.utils.set_random_seed(0)
    keras_model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, "relu"),
                                    keras.layers.Dense(3)])

    def loss_fn(outputs, inputs):
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            inputs["labels"], outputs["output"]))

    executor = d5tf.TensorFlowNativeGraphExecutor(keras_model, ["input"], ["output"],
                                                  loss_fn=loss_fn, mode="function")
    optimizer = tf_optimizers.KerasOptimizer(executor, keras.optimizers.Adam,
                                             learning_rate=0.05)
    assert optimizer.name == "KerasOptimizer(Adam)"
    rng = np.random.default_rng(2)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    labels = np.argmax(x[:, :3], axis=1).astype(np.int64)
    losses = [float(optimizer.step({"input": x, "labels": labels})["loss"])
              for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0]


def test_keras_optimizer_refuses_what_it_cannot_train(model, d5tf, tf_optimizers):
    import keras
    with pytest.raises(Deep500Error, match="TensorFlow executor"):
        tf_optimizers.AdamOptimizer(d5pt.from_onnx(model))
    executor = d5tf.from_onnx(model)
    built = keras.optimizers.SGD()
    built.build([keras.Variable(np.zeros(2, np.float32))])
    with pytest.raises(Deep500Error, match="already built"):
        tf_optimizers.KerasOptimizer(executor, built)
    with pytest.raises(Deep500Error, match="keras.optimizers.Optimizer"):
        tf_optimizers.KerasOptimizer(executor, torch.optim.SGD)
