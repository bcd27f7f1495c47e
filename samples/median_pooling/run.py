"""Median pooling as a C++ custom operator, from source to training in two frameworks.

1. compile ``median_pooling.cpp`` with ``d5.compile_custom_cppop`` (cached after the
   first run);
2. check its forward pass against the NumPy version below (float32 and float64);
3. check its backward pass against finite differences (``d5.test_op_gradient``);
4. train a small conv -> median pool -> linear classifier on the digits dataset
   (1x8x8 images) for a few steps in PyTorch (``d5pt.custom_op``) and in TensorFlow
   (``d5tf.custom_op`` inside a ``tf.function``), with the same compiled library.

Run from the repository root::

    .venv/bin/python samples/median_pooling/run.py [--steps 30] [--kernel 2 --stride 2]

It prints one line per check and a summary, and exits with status 1 if a check failed.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

import numpy as np

import deep500 as d5
from deep500.frameworks import reference as d5ref

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "median_pooling.cpp")
CHANNELS = 4   # convolution filters before the pooling
CLASSES = 10   # digits 0-9


def median_pool_numpy(x: np.ndarray, kernel: int, stride: int) -> np.ndarray:
    """The reference: the lower median of every kernel x kernel window of an NCHW array
    (no padding), exactly what the C++ operator computes."""
    windows = np.lib.stride_tricks.sliding_window_view(x, (kernel, kernel), axis=(2, 3))
    windows = windows[:, :, ::stride, ::stride]  # N, C, out_H, out_W, kernel, kernel
    flat = windows.reshape(windows.shape[:4] + (kernel * kernel,))
    return np.sort(flat, axis=-1)[..., (kernel * kernel - 1) // 2]


def pooled_shape(shape, kernel: int, stride: int) -> tuple:
    n, c, h, w = shape
    return (n, c, (h - kernel) // stride + 1, (w - kernel) // stride + 1)


def compile_median_pooling(dtype: str, input_shape, kernel: int, stride: int):
    """A CppOpDescriptor for median pooling of one input shape and dtype (C++ operators
    are compiled for fixed shapes; each shape/dtype/definition set is cached apart)."""
    started = time.perf_counter()
    descriptor = d5.compile_custom_cppop(
        "median_pooling", SOURCE,
        [d5.tensordesc(dtype, input_shape)],
        [d5.tensordesc(dtype, pooled_shape(input_shape, kernel, stride))],
        additional_definitions={"KERNEL": kernel, "STRIDE": stride})
    how = "cache hit" if descriptor.cache_hit else "compiled"
    print(f"  {dtype} {'x'.join(map(str, input_shape))}: {how} in "
          f"{time.perf_counter() - started:.2f} s ({descriptor.library_path})")
    return descriptor


def distinct_values(shape, dtype, rng) -> np.ndarray:
    """A random permutation of 0, 0.1, 0.2, ...: every window has one unique median.

    Finite differences need that: with ties (or values closer than the step eps) a
    perturbation of ±eps can change which element is the median, so the difference
    quotient jumps and no longer measures the gradient the backward pass returns."""
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1).astype(dtype)


class Checks:
    """Named pass/fail results, printed as they come and summarised at the end."""

    def __init__(self):
        self.results = []

    def add(self, name: str, passed: bool, detail: str = "") -> None:
        self.results.append((name, bool(passed), detail))
        print(f"  [{'PASS' if passed else 'FAIL'}] {name}" + (f": {detail}" if detail else ""))

    def run(self, name: str, stage, *args) -> None:
        """Run a stage; an exception in it is a failed check, and the rest still runs."""
        try:
            stage(self, *args)
        except Exception as error:  # noqa: BLE001 - report it and go on
            traceback.print_exc()
            self.add(name, False, f"raised {type(error).__name__}: {error}")

    def summary(self) -> bool:
        failed = [name for name, passed, _ in self.results if not passed]
        print(f"\n== Summary: {len(self.results) - len(failed)}/{len(self.results)} "
              f"checks passed ==")
        for name, passed, detail in self.results:
            print(f"  {'PASS' if passed else 'FAIL'}  {name}")
        print("ALL CHECKS PASSED" if not failed else f"FAILED: {', '.join(failed)}")
        return not failed


# -- Level 0: the operator on its own ----------------------------------------------------
def check_forward(checks: Checks, args, dtype: str, shape) -> None:
    op = d5ref.custom_op(compile_median_pooling(dtype, shape, args.kernel, args.stride))
    x = np.random.default_rng(args.seed).standard_normal(shape).astype(dtype)
    result = d5.test_op_forward(op, [x], [median_pool_numpy(x, args.kernel, args.stride)],
                                [d5.MaxError()])
    # The median is one of the inputs, so the outputs must match exactly.
    error = result["MaxError"].get("absolute")
    checks.add(f"forward {dtype} matches NumPy", error == 0.0, f"max error {error:g}")


def check_gradient(checks: Checks, args) -> None:
    shape = (2, 3, 6, 6)  # small enough for a full Jacobian by finite differences
    op = d5ref.custom_op(compile_median_pooling("float64", shape, args.kernel, args.stride))
    x = distinct_values(shape, np.float64, np.random.default_rng(args.seed))
    result = d5.test_op_gradient(op, [x], metrics=[d5.MaxError()])
    error = result["MaxError"].get("absolute")
    checks.add("gradient float64 matches finite differences", result.passed,
               f"max error {error:.2e}")


# -- Training with the operator inside a model -------------------------------------------
def batches(images, labels, batch: int, steps: int, seed: int):
    """``steps`` random minibatches of exactly ``batch`` samples (the operator was
    compiled for that batch size)."""
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        index = rng.choice(len(images), batch, replace=False)
        yield images[index], labels[index]


def train_pytorch(checks: Checks, args, descriptor, train, held_out) -> None:
    import torch
    from deep500.frameworks import pytorch as d5pt

    torch.manual_seed(args.seed)

    class MedianPoolNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(1, CHANNELS, 3, padding=1)
            self.pool = d5pt.custom_op(descriptor)  # the C++ operator, a torch.nn.Module
            self.fc = torch.nn.Linear(int(np.prod(descriptor.output_descriptors[0].shape[1:])),
                                      CLASSES)

        def forward(self, x):
            return self.fc(torch.relu(self.pool(self.conv(x))).flatten(1))

    model = MedianPoolNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    x_eval, y_eval = (torch.from_numpy(a) for a in held_out)

    with torch.no_grad():
        features = model.conv(x_eval)
        pooled = model.pool(features).numpy()
    expected = median_pool_numpy(features.numpy(), args.kernel, args.stride)
    checks.add("pytorch: custom_op forward matches NumPy", np.array_equal(pooled, expected))

    def evaluate() -> float:
        with torch.no_grad():
            return float(torch.nn.functional.cross_entropy(model(x_eval), y_eval))

    before = evaluate()
    losses, conv_grad_norms = [], []
    for images, labels in batches(*train, args.batch, args.steps, args.seed):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(torch.from_numpy(images)),
                                                 torch.from_numpy(labels))
        loss.backward()
        conv_grad_norms.append(float(model.conv.weight.grad.norm()))
        optimizer.step()
        losses.append(loss.item())
    after = evaluate()
    print("  pytorch training losses: " + " ".join(f"{v:.3f}" for v in losses))
    # The conv layer sits before the C++ operator: it learns only through its backward.
    checks.add("pytorch: gradients reach the conv layer through the C++ op",
               min(conv_grad_norms) > 0, f"smallest |grad| {min(conv_grad_norms):.2e}")
    checks.add("pytorch: training lowers the held-out loss",
               np.all(np.isfinite(losses)) and after < before,
               f"{before:.4f} -> {after:.4f}")


def train_tensorflow(checks: Checks, args, descriptor, train, held_out) -> None:
    import tensorflow as tf
    from deep500.frameworks import tensorflow as d5tf

    tf.random.set_seed(args.seed)
    pool = d5tf.custom_op(descriptor)  # the C++ operator, a differentiable TF function
    init = tf.keras.initializers.GlorotUniform(seed=args.seed)
    features_out = int(np.prod(descriptor.output_descriptors[0].shape[1:]))
    conv_w = tf.Variable(init((3, 3, 1, CHANNELS)))
    conv_b = tf.Variable(tf.zeros([CHANNELS]))
    fc_w = tf.Variable(init((features_out, CLASSES)))
    fc_b = tf.Variable(tf.zeros([CLASSES]))
    variables = [conv_w, conv_b, fc_w, fc_b]
    optimizer = tf.keras.optimizers.Adam(args.lr)

    def conv(x_nchw):
        # TensorFlow convolves NHWC on CPU; the C++ operator reads NCHW.
        h = tf.nn.conv2d(tf.transpose(x_nchw, [0, 2, 3, 1]), conv_w, 1, "SAME") + conv_b
        return tf.transpose(h, [0, 3, 1, 2])

    def loss_fn(x, y):
        pooled = tf.nn.relu(pool(conv(x)))
        logits = tf.reshape(pooled, [args.batch, features_out]) @ fc_w + fc_b
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits))

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(x, y)
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss, tf.norm(grads[0])  # grads[0]: of the conv kernel

    x_eval, y_eval = (tf.constant(a) for a in held_out)
    features = conv(x_eval)
    expected = median_pool_numpy(features.numpy(), args.kernel, args.stride)
    checks.add("tensorflow: custom_op forward matches NumPy",
               np.array_equal(pool(features).numpy(), expected))

    before = float(loss_fn(x_eval, y_eval))
    losses, conv_grad_norms = [], []
    for images, labels in batches(*train, args.batch, args.steps, args.seed):
        loss, conv_grad_norm = train_step(tf.constant(images), tf.constant(labels))
        losses.append(float(loss))
        conv_grad_norms.append(float(conv_grad_norm))
    after = float(loss_fn(x_eval, y_eval))
    print("  tensorflow training losses: " + " ".join(f"{v:.3f}" for v in losses))
    checks.add("tensorflow: gradients reach the conv layer through the C++ op",
               min(conv_grad_norms) > 0, f"smallest |grad| {min(conv_grad_norms):.2e}")
    checks.add("tensorflow: training lowers the held-out loss",
               np.all(np.isfinite(losses)) and after < before,
               f"{before:.4f} -> {after:.4f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=30, help="training steps per framework")
    parser.add_argument("--batch", type=int, default=64, help="minibatch size")
    parser.add_argument("--lr", type=float, default=0.01, help="Adam learning rate")
    parser.add_argument("--kernel", type=int, default=2, help="pooling window size")
    parser.add_argument("--stride", type=int, help="pooling stride (default: the kernel)")
    parser.add_argument("--frameworks", nargs="*", default=["pytorch", "tensorflow"],
                        choices=["pytorch", "tensorflow"], help="frameworks to train in")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    args.stride = args.stride or args.kernel
    started = time.perf_counter()
    checks = Checks()

    print(f"== Level 0: median pooling (KERNEL={args.kernel}, STRIDE={args.stride}) ==")
    for dtype in ("float32", "float64"):
        checks.run(f"forward {dtype} matches NumPy", check_forward, args, dtype,
                   (2, 3, 9, 7))
    checks.run("gradient float64 matches finite differences", check_gradient, args)

    if args.frameworks:
        train, test = d5.load_dataset("digits")  # 1x8x8 images, values in [0, 1]
        train_data = (np.ascontiguousarray(train.data), train.labels())
        held_out = (np.ascontiguousarray(test.data[:args.batch]),
                    test.labels()[:args.batch])
        print(f"\n== Training on digits: {args.steps} steps, batch {args.batch} ==")
        descriptor = compile_median_pooling("float32", (args.batch, CHANNELS, 8, 8),
                                            args.kernel, args.stride)
        stages = {"pytorch": train_pytorch, "tensorflow": train_tensorflow}
        for name in args.frameworks:
            checks.run(f"{name}: training", stages[name], args, descriptor, train_data,
                       held_out)

    passed = checks.summary()
    print(f"Total time {time.perf_counter() - started:.1f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
