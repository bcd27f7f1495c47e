"""Level-1 executors against the runtimes and native models they stand in for.

In one run, for every zoo model (default LeNet and ResNet-20, ``create_model(name,
batch_size=B, seed=0)``) and batch size B (default 32 and 64):

1. Inference by ONNX interpreters, on the models of ``--reference-models`` (default
   MLP, LeNet, the transformer encoder, whose input is int64 tokens, and ResNet-20).
   a. ``d5ref.from_onnx(model)`` against onnx's ``onnx.reference.ReferenceEvaluator``
      (model); target: ReferenceEvaluator / d5ref >= 10 on MLP, LeNet and the
      transformer (the reference executor is at least ten times faster than the ONNX
      reference interpreter); shown without a target for ResNet-20, whose matrix
      products alone take a large share of ReferenceEvaluator's time. Also
      ReferenceEvaluator against a raw onnxruntime session, without a target: the
      speedup a hand-tuned runtime gets over the same interpreter, i.e. the ceiling of
      what the 10x target can ask of an operator-by-operator NumPy executor. And the
      floor of any im2col executor (``gemm_floor.py``): the model's Conv, Gemm and
      MatMul matrix products alone in NumPy; ReferenceEvaluator / floor is the largest
      speedup an executor that lowers convolutions to im2col and BLAS (d5ref, and the
      ReferenceEvaluator of onnx >= 1.15 itself) can reach on this machine.
      Target: d5ref / floor <= 1.5 for ResNet-20 at batch 32 (shown for every model and
      batch). Below the floor table, where d5ref's time goes (``OperatorTimes``, a few
      runs): per operator type, the matrix operators' excess over the floor (im2col,
      layout copies, bias), the other operators, and the interpreter's own time (the
      run minus its operators).
   b. ``d5ort.from_onnx(model, threads=T)`` against a raw ``onnxruntime.InferenceSession``
      with the same session options (T intra-op threads, 1 inter-op thread, sequential
      execution, default graph optimisations): the overhead of Deep500's interface
      over ``session.run``, printed without a target.
2. PyTorch: ``d5pt.from_onnx`` against a hand-written ``torch.nn.Module`` of the same
   architecture holding the same weights (``benchmarks/native_models.py``; eval mode).
   Inference: the native call under ``torch.no_grad()``. Inference + backprop: forward,
   mean cross entropy on fixed labels, backward; on the Deep500 side the loss is the
   zoo's ``softmax_cross_entropy`` attached to the ONNX model and ``y="loss"``. Both
   sides set every ``.grad`` to None first. Target: d5pt / native <= 1.02.
3. TensorFlow: ``d5tf.from_onnx(model, mode="eager")`` against the native Keras model
   (channels_last) called eagerly, and ``mode="function"`` against the same Keras call
   traced once in a ``tf.function``; inference (``training=False``) and inference +
   backprop (``tf.GradientTape``, mean sparse softmax cross entropy). Target: d5tf /
   native <= 1.02 for each mode.

What both sides of a comparison share: the ONNX model and its weights, the input batch
(seeded standard normal; labels seeded), float32, the thread counts
(``deep500.utils.threads.set_thread_counts(T)``, T = ``--threads``, set before any
framework starts) and the C allocator's settings (below). A Deep500 executor takes NumPy
inputs in ONNX's layout and returns NumPy outputs (and, with backprop, the loss and
every parameter's gradient); the native side does the same work a user of that
interface needs: it starts from NumPy inputs (NHWC for Keras, whose user's data is
channels-last already) and returns the outputs, loss and parameter gradients as NumPy
arrays. In the BatchNormalization nodes, scale, bias, mean and variance are redrawn
(seeded) before anything is built, so that the agreement checks would catch a wrongly
mapped statistic; values do not change timings.

Allocator: with glibc, ``mallopt`` fixes the mmap threshold (32 MiB) and the trim
threshold (2 GiB) before any framework starts. glibc's defaults adapt both to the sizes
freed so far, so whether a tensor of a few MiB comes from fresh, page-faulting ``mmap``
memory or from the reused heap depends on the process's history and on each side's
order of allocations and frees. Measured on ResNet-20 at batch 32 (1 thread): early in
a process, ~9,000 page faults per inference for d5pt and ~5,000 for the native module,
none a few calls later, and d5pt / native between 0.93 and 1.2 from run to run; with the
thresholds fixed, no page faults and a stable ratio. ``--system-malloc`` keeps glibc's
defaults.

Correctness first: before any timing, each pair's outputs (and loss) must agree within
max|a - b| <= 1e-4 * max(1, max|b|), and so must the gradients of every native
parameter (in the native layout) — an AssertionError stops the run otherwise.

Method (as ``lv0_overhead.py``): each side is warmed up (>= 2 calls: traces, caches,
allocator pools), then the two alternate in paired rounds, the order flipping every
round so that drift and order effects cancel. In a round each side makes ``calls``
back-to-back calls (per side, enough to last about ``--round-seconds``, at least 1; the
table shows them as baseline/Deep500), with the garbage collector off, as ``timeit``
does (a full collection runs once before the rounds). Each round gives a ratio of the
two sides' mean time per call; the table shows the median time per batch of each side,
the median per-round ratio and the interquartile range of the per-round ratios, and
MET / NOT MET per target. Comparisons whose calls are slow get fewer rounds
(at least 5) so that one comparison's timed rounds take about ``--max-seconds``.

Run:  python benchmarks/lv1_executors.py [--models lenet resnet20] [--batches 32 64]
                                         [--rounds 20] [--threads 2] [--smoke]
"""
from __future__ import annotations

import argparse
import gc
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from deep500.utils.allocator import fix_allocator_thresholds  # noqa: E402
from benchmark_targets import TARGETS, add_check_option, expected_run_time  # noqa: E402
from gemm_floor import gemm_floor_seconds  # noqa: E402
from deep500.utils.threads import set_thread_counts  # noqa: E402

TOLERANCE = 1e-4
FRAMEWORKS = ("reference", "onnxruntime", "pytorch", "tensorflow")
REFERENCE_MODELS = ("mlp", "lenet", "transformer", "resnet20")
SPEEDUP_MODELS = ("mlp", "lenet", "transformer")  # judged against the 10x target
FLOOR_TARGET = 1.5                                 # d5ref / floor, judged on ...
FLOOR_JUDGED = (("resnet20", 32),)                 # ... these (model, batch)
LOSS = "softmax_cross_entropy"


# -- measuring ------------------------------------------------------------------------------
@dataclass
class Measurement:
    """Paired rounds of one comparison: per round, the mean seconds per call of the
    Deep500 side and of the baseline."""
    ours: list
    baseline: list
    calls_ours: int
    calls_baseline: int

    @property
    def ratios(self) -> np.ndarray:
        return np.array(self.ours) / np.array(self.baseline)


def _mean_seconds(fn, calls: int) -> float:
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - start) / calls
    finally:
        gc.enable()


def measure(ours, baseline, args) -> Measurement:
    """Warm up both zero-argument callables, then time them in paired rounds."""
    for fn in (ours, baseline):
        for _ in range(args.warmup):
            fn()
    t_ours = min(_mean_seconds(ours, 1) for _ in range(2))
    t_base = min(_mean_seconds(baseline, 1) for _ in range(2))
    calls_ours = max(1, int(round(args.round_seconds / t_ours)))
    calls_base = max(1, int(round(args.round_seconds / t_base)))
    affordable = int(args.max_seconds / (calls_ours * t_ours + calls_base * t_base))
    rounds = min(args.rounds, max(5, affordable))
    # Once, not per round: with TensorFlow loaded a full collection takes ~0.3 s.
    gc.collect()
    pairs_ours, pairs_base = [], []
    for index in range(rounds):
        if index % 2:
            b = _mean_seconds(baseline, calls_base)
            o = _mean_seconds(ours, calls_ours)
        else:
            o = _mean_seconds(ours, calls_ours)
            b = _mean_seconds(baseline, calls_base)
        pairs_ours.append(o)
        pairs_base.append(b)
    return Measurement(pairs_ours, pairs_base, calls_ours, calls_base)


# -- agreement ------------------------------------------------------------------------------
def agree(what: str, ours, reference, tolerance: float = TOLERANCE) -> None:
    """Assert max|ours - reference| <= tolerance * max(1, max|reference|)."""
    # Raised, not asserted: the check must hold under ``python -O`` too.
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    if ours.shape != reference.shape:
        raise AssertionError(f"{what}: shapes differ, {ours.shape} vs {reference.shape}")
    scale = max(1.0, float(np.abs(reference).max(initial=0.0)))
    error = float(np.abs(ours - reference).max(initial=0.0))
    if not error <= tolerance * scale:
        raise AssertionError(f"{what}: max difference {error:.3g} exceeds {tolerance:g} "
                             f"x {scale:.3g}")


# -- tables ---------------------------------------------------------------------------------
@dataclass
class Section:
    """One comparison table. ``speedup``: ratio = baseline / Deep500 (a target is a
    minimum); else ratio = Deep500 / baseline (a target is a maximum)."""
    title: str
    baseline: str
    ours: str
    target: float | None
    speedup: bool = False

    @property
    def ratio_name(self) -> str:
        return (f"{self.baseline}/{self.ours}" if self.speedup
                else f"{self.ours}/{self.baseline}")

    def header(self) -> None:
        target = ("no target" if self.target is None else
                  f"target {'>=' if self.speedup else '<='} {self.target:g}")
        print(f"\n== {self.title} ==\nratio = {self.ratio_name} ({target}); times are per "
              f"batch, medians over rounds", flush=True)
        print(f"{'model':<10} {'batch':>5} {'pass':<10} {self.baseline:>14} "
              f"{self.ours:>14} {'ratio':>7} {'IQR of rounds':>16} {'rounds x calls':>16}  target",
              flush=True)


@dataclass
class Row:
    section: Section
    model: str
    batch: int
    phase: str
    m: Measurement
    floor: tuple | None = None  # (seconds, GFLOP) of the model's matrix products alone
    judged: bool = True         # False: the section's target does not apply to this row
    breakdown: dict | None = None  # where d5ref's time goes (see ``time_breakdown``)

    def ratio_values(self) -> np.ndarray:
        return 1.0 / self.m.ratios if self.section.speedup else self.m.ratios

    @property
    def ratio(self) -> float:
        return float(np.median(self.ratio_values()))

    @property
    def met(self) -> bool | None:
        target = self.section.target
        if target is None or not self.judged:
            return None
        return self.ratio >= target if self.section.speedup else self.ratio <= target

    def print(self) -> None:
        low, high = np.percentile(self.ratio_values(), [25, 75])
        verdict = {None: "-", True: "MET", False: "NOT MET"}[self.met]
        rounds = f"{len(self.m.ours)} x {self.m.calls_baseline}/{self.m.calls_ours}"
        print(f"{self.model:<10} {self.batch:>5} {self.phase:<10} "
              f"{_ms(statistics.median(self.m.baseline)):>14} "
              f"{_ms(statistics.median(self.m.ours)):>14} {self.ratio:>7.3f} "
              f"{f'[{low:.3f}, {high:.3f}]':>16} {rounds:>16}  {verdict}", flush=True)


def floor_verdict(row) -> bool | None:
    """d5ref / floor against FLOOR_TARGET where (model, batch) is judged, else None."""
    if (row.model, row.batch) not in FLOOR_JUDGED:
        return None
    return statistics.median(row.m.ours) / row.floor[0] <= FLOOR_TARGET


def print_floors(rows: list) -> list:
    """The im2col floor under each RefEval/d5ref row (see the module docstring, 1a);
    returns the rows whose d5ref/floor misses its target."""
    print("\n== Floor of an im2col executor: the model's matrix products alone "
          "(gemm_floor.py) ==\nmost = RefEval/floor, the largest RefEval/d5ref any "
          f"im2col + BLAS executor can reach here; target d5ref/floor <= {FLOOR_TARGET:g} "
          f"for {', '.join(f'{m} batch {b}' for m, b in FLOOR_JUDGED)}", flush=True)
    print(f"{'model':<10} {'batch':>5} {'RefEval':>14} {'floor':>14} {'GFLOP/s':>8} "
          f"{'most':>7} {'d5ref/floor':>12}  target", flush=True)
    missed = []
    for row in rows:
        seconds, gflop = row.floor
        refeval, d5ref = statistics.median(row.m.baseline), statistics.median(row.m.ours)
        verdict = floor_verdict(row)
        if verdict is False:
            missed.append(row)
        print(f"{row.model:<10} {row.batch:>5} {_ms(refeval):>14} {_ms(seconds):>14} "
              f"{gflop / seconds:>8.1f} {refeval / seconds:>7.2f} {d5ref / seconds:>12.2f}  "
              f"{ {None: '-', True: 'MET', False: 'NOT MET'}[verdict]}", flush=True)
    for row in rows:
        if row.breakdown is not None:
            print_breakdown(row)
    return missed


MATRIX_OPS = ("Conv", "Gemm", "MatMul")


def time_breakdown(executor, feed, runs: int) -> dict:
    """Where d5ref's inference time goes, over ``runs`` runs with per-operator events on
    (``FrameworkOverhead``: per run, the whole run and the sum of its operators): the
    median run, the median of the operators' sums, and the median time per operator
    type."""
    import deep500 as d5
    overhead = d5.FrameworkOverhead(reruns=runs, warmup=1)
    result = d5.test_executor_inference(executor, feed, metrics=[overhead])
    summary = result["FrameworkOverhead"].summary
    by_type = overhead.operator_times.measure().summary["by_op_type"]
    return {"wall": summary["network"], "operators": summary["operators"],
            "interpreter": summary["overhead"] * summary["network"],
            "by_op_type": by_type}


def print_breakdown(row) -> None:
    """``row.breakdown`` against the floor: what an im2col executor cannot avoid (the
    floor) and what d5ref adds to it."""
    b, floor = row.breakdown, row.floor[0]
    wall = b["wall"]
    matrix = sum(t for op, t in b["by_op_type"].items() if op in MATRIX_OPS)
    other = sum(t for op, t in b["by_op_type"].items() if op not in MATRIX_OPS)
    print(f"\n-- where d5ref's time goes: {row.model} batch {row.batch} (median run with "
          f"per-operator events: {_ms(wall)}; x floor = multiple of the floor) --",
          flush=True)
    parts = [("matrix products (the floor)", floor),
             (f"{'/'.join(MATRIX_OPS)} beyond the floor: im2col, copies, bias",
              matrix - floor),
             ("other operators", other),
             ("interpreter (run minus operators)", b["interpreter"])]
    for label, seconds in parts:
        print(f"  {label:<58} {_ms(seconds):>12} {seconds / floor:>7.2f} x floor",
              flush=True)
    top = ", ".join(f"{op} {_ms(t)}" for op, t in list(b["by_op_type"].items())[:6])
    print(f"  by operator type: {top}", flush=True)


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


# -- models and data ------------------------------------------------------------------------
def zoo_model(name: str, batch: int):
    """The zoo model with redrawn batch-normalisation tensors (see the docstring)."""
    from onnx import numpy_helper

    from deep500.networks import create_model
    model = create_model(name, batch_size=batch, seed=0)
    rng = np.random.default_rng(1)
    draws = {1: lambda n: rng.uniform(0.5, 1.5, n), 2: lambda n: rng.normal(0, 0.1, n),
             3: lambda n: rng.normal(0, 0.1, n), 4: lambda n: rng.uniform(0.5, 2.0, n)}
    redraw = {node.input[i]: draws[i] for node in model.graph.node
              if node.op_type == "BatchNormalization" for i in draws}
    for tensor in model.graph.initializer:
        if tensor.name in redraw:
            value = numpy_helper.to_array(tensor)
            tensor.CopyFrom(numpy_helper.from_array(
                redraw[tensor.name](value.shape).astype(value.dtype), tensor.name))
    return model


def with_loss(model):
    from deep500.utils.onnx_interop.losses import add_loss
    return add_loss(model, LOSS, output="output")


def batch_data(model, batch: int):
    dims = model.graph.input[0].type.tensor_type.shape.dim
    shape = [batch] + [d.dim_value for d in dims[1:]]
    classes = model.graph.output[0].type.tensor_type.shape.dim[1].dim_value
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    labels = rng.integers(0, classes, batch).astype(np.int64)
    return x, labels


# -- comparisons ----------------------------------------------------------------------------
def reference_feed(model, batch: int) -> dict:
    """The model's input: standard normal floats, or, for an integer input (token ids),
    ids drawn over the vocabulary (the row count of the table that a Gather reads it
    with)."""
    from onnx import helper
    value = model.graph.input[0]
    dtype = helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
    shape = [batch] + [d.dim_value for d in value.type.tensor_type.shape.dim[1:]]
    rng = np.random.default_rng(2)
    if not np.issubdtype(dtype, np.integer):
        return {value.name: rng.standard_normal(shape).astype(dtype)}
    tables = {i.name: i.dims[0] for i in model.graph.initializer}
    vocab = min([tables[n.input[0]] for n in model.graph.node if n.op_type == "Gather"
                 and n.input[1] == value.name and n.input[0] in tables] or [2])
    return {value.name: rng.integers(0, vocab, shape).astype(dtype)}


def bench_reference(name, batch, args, section, ceiling=None):
    import onnx.reference

    import deep500.frameworks.reference as d5ref
    model = zoo_model(name, batch)
    feed = reference_feed(model, batch)
    ours = d5ref.from_onnx(model)
    evaluator = onnx.reference.ReferenceEvaluator(model)
    agree(f"{name}/{batch} d5ref vs ReferenceEvaluator", ours.inference(feed)["output"],
          evaluator.run(None, feed)[0])
    m = measure(lambda: ours.inference(feed), lambda: evaluator.run(None, feed), args)
    rows = [Row(section, name, batch, "inference", m, floor=gemm_floor_seconds(model),
                judged=name in SPEEDUP_MODELS,
                breakdown=time_breakdown(ours, feed, max(2, min(args.rounds, 5))))]
    if ceiling is not None:
        session = _raw_session(model, args.threads)
        ceiling_m = measure(lambda: session.run(None, feed),
                            lambda: evaluator.run(None, feed), args)
        rows.append(Row(ceiling, name, batch, "inference", ceiling_m))
    return rows


def _raw_session(model, threads: int):
    """A plain onnxruntime session: T intra-op threads, one inter-op thread, sequential."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model.SerializeToString(), options,
                                providers=["CPUExecutionProvider"])


def bench_onnxruntime(name, batch, args, section):

    import deep500.frameworks.onnxruntime as d5ort
    model = zoo_model(name, batch)
    x, _ = batch_data(model, batch)
    feed = {"input": x}
    ours = d5ort.from_onnx(model, threads=args.threads)
    session = _raw_session(model, args.threads)
    agree(f"{name}/{batch} d5ort vs onnxruntime", ours.inference(feed)["output"],
          session.run(None, feed)[0])
    m = measure(lambda: ours.inference(feed), lambda: session.run(None, feed), args)
    return [Row(section, name, batch, "inference", m)]


def bench_pytorch(name, batch, args, section):
    import torch
    import torch.nn.functional as F

    import deep500.frameworks.pytorch as d5pt
    from native_models import torch_model_from_onnx
    model = zoo_model(name, batch)
    x, labels = batch_data(model, batch)
    module, keys = torch_model_from_onnx(name, model)
    parameters = list(module.named_parameters())

    def native_inference():
        with torch.no_grad():
            return {"output": module(torch.from_numpy(x)).numpy()}

    def native_backprop():
        for _, p in parameters:
            p.grad = None
        logits = module(torch.from_numpy(x))
        loss = F.cross_entropy(logits, torch.from_numpy(labels))
        loss.backward()
        result = {"output": logits.detach().numpy(), "loss": loss.detach().numpy()}
        for key, p in parameters:
            result[key] = p.grad.numpy()
        return result

    inference = d5pt.from_onnx(model)
    feed = {"input": x}
    agree(f"{name}/{batch} d5pt vs native (inference)", inference.inference(feed)["output"],
          native_inference()["output"])
    rows = [Row(section, name, batch, "inference",
                measure(lambda: inference.inference(feed), native_inference, args))]
    del inference

    backprop = d5pt.from_onnx(with_loss(model))
    feed = {"input": x, "labels": labels}
    ours, theirs = backprop.inference_and_backprop(feed, "loss"), native_backprop()
    where = f"{name}/{batch} d5pt vs native (backprop)"
    agree(where + " output", ours["output"], theirs["output"])
    agree(where + " loss", ours["loss"], theirs["loss"])
    native_keys = {k for k, _ in parameters}
    for onnx_name, key in keys.items():
        if key in native_keys:
            agree(f"{where} gradient of {onnx_name}", ours[onnx_name + ".grad"], theirs[key])
    rows.append(Row(section, name, batch, "backprop",
                    measure(lambda: backprop.inference_and_backprop(feed, "loss"),
                            native_backprop, args)))
    return rows


def bench_tensorflow(name, batch, args, sections):
    import tensorflow as tf

    import deep500.frameworks.tensorflow as d5tf
    from native_models import keras_model_from_onnx
    model = zoo_model(name, batch)
    x, labels = batch_data(model, batch)
    x_nhwc = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    keras_model, mapping = keras_model_from_onnx(name, model)
    variables = keras_model.trainable_variables
    position = {id(v): i for i, v in enumerate(variables)}

    def call(xt):
        return keras_model(xt, training=False)

    def step(xt, lt):
        with tf.GradientTape() as tape:
            logits = keras_model(xt, training=False)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(lt, logits))
        return logits, loss, tape.gradient(loss, variables)

    natives = {"eager": (call, step), "function": (tf.function(call), tf.function(step))}
    rows = []
    for mode in ("eager", "function"):
        section = sections[mode]
        native_call, native_step = natives[mode]

        def native_inference():
            return {"output": native_call(tf.convert_to_tensor(x_nhwc)).numpy()}

        def native_backprop():
            logits, loss, grads = native_step(tf.convert_to_tensor(x_nhwc),
                                              tf.convert_to_tensor(labels))
            return {"output": logits.numpy(), "loss": loss.numpy(),
                    "grads": [g.numpy() for g in grads]}

        inference = d5tf.from_onnx(model, mode=mode)
        feed = {"input": x}
        agree(f"{name}/{batch} d5tf {mode} vs Keras (inference)",
              inference.inference(feed)["output"], native_inference()["output"])
        rows.append(Row(section, name, batch, "inference",
                        measure(lambda: inference.inference(feed), native_inference, args)))
        del inference

        backprop = d5tf.from_onnx(with_loss(model), mode=mode)
        feed = {"input": x, "labels": labels}
        ours, theirs = backprop.inference_and_backprop(feed, "loss"), native_backprop()
        where = f"{name}/{batch} d5tf {mode} vs Keras (backprop)"
        agree(where + " output", ours["output"], theirs["output"])
        agree(where + " loss", ours["loss"], theirs["loss"])
        for onnx_name, (variable, to_native) in mapping.items():
            if id(variable) in position:
                agree(f"{where} gradient of {onnx_name}",
                      to_native(ours[onnx_name + ".grad"]),
                      theirs["grads"][position[id(variable)]])
        rows.append(Row(section, name, batch, "backprop",
                        measure(lambda: backprop.inference_and_backprop(feed, "loss"),
                                native_backprop, args)))
        del backprop
    return rows


# -- main -----------------------------------------------------------------------------------
def _arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["lenet", "resnet20"],
                        help="models of the onnxruntime, PyTorch and TensorFlow tables")
    parser.add_argument("--reference-models", nargs="+", default=list(REFERENCE_MODELS),
                        help="models of the reference executor's tables (MLP, LeNet and "
                             "the transformer are judged against the 10x target)")
    parser.add_argument("--batches", nargs="+", type=int, default=[32, 64])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--round-seconds", type=float, default=0.1,
                        help="time of one side's calls in one round")
    parser.add_argument("--max-seconds", type=float, default=20.0,
                        help="timed rounds of one comparison take about this long when "
                             "its calls are slow (never fewer than 5 rounds)")
    parser.add_argument("--warmup", type=int, default=3, help="warm-up calls per side")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--frameworks", nargs="+", default=list(FRAMEWORKS),
                        choices=FRAMEWORKS)
    parser.add_argument("--system-malloc", action="store_true",
                        help="keep glibc's adaptive mmap/trim thresholds")
    parser.add_argument("--smoke", action="store_true",
                        help="a quick check that everything runs: batch 4, 2 rounds of "
                             "one call, 1 warm-up call (numbers are not meaningful)")
    add_check_option(parser)
    args = parser.parse_args()
    if args.smoke:
        args.batches, args.rounds, args.round_seconds = [4], 2, 0.0
        args.max_seconds, args.warmup = 0.0, 1
    return args


# Comparisons (timed pairs) per model and batch: d5ref and its ceiling; d5ort inference;
# d5pt inference and backprop; d5tf eager and function, inference and backprop.
COMPARISONS = {"reference": 2, "onnxruntime": 1, "pytorch": 2, "tensorflow": 4}


def _expected_run_time(args) -> None:
    """Fast calls finish a comparison in their paired rounds, slow ones take up to
    --max-seconds; model building, warm-up and the floors come on top."""
    count = sum(COMPARISONS[f] * len(args.reference_models if f == "reference" else
                                     args.models) * len(args.batches)
                for f in args.frameworks)
    fast = 2 * args.rounds * args.round_seconds
    slowest = max(fast, args.max_seconds)
    expected_run_time(count * fast, f"timed rounds of {count} comparisons: {fast:g} s "
                      f"each with fast calls, up to {slowest:g} s with slow ones; model "
                      f"building and warm-up on top", at_most=count * slowest)


def main() -> int:
    args = _arguments()
    _expected_run_time(args)
    # Before any framework is imported, so that each starts with these settings.
    malloc = "glibc defaults (--system-malloc)" if args.system_malloc else fix_allocator_thresholds()
    set_thread_counts(args.threads)
    import onnx
    import onnxruntime
    versions = [f"onnx {onnx.__version__}", f"onnxruntime {onnxruntime.__version__}"]
    if "pytorch" in args.frameworks:
        import torch
        versions.append(f"torch {torch.__version__}")
    if "tensorflow" in args.frameworks:
        import deep500.frameworks.tensorflow  # noqa: F401  (quiet TensorFlow import)
        import keras
        import tensorflow as tf
        versions += [f"tensorflow {tf.__version__}", f"keras {keras.__version__}"]
    conditions = set_thread_counts(args.threads)
    print(f"Level-1 executors vs baselines: {', '.join(versions)}; numpy {np.__version__}; "
          f"python {platform.python_version()}", flush=True)
    print(f"threads: {conditions}; cpus: {os.cpu_count()}; load average at start: "
          f"{os.getloadavg()[0]:.2f}; malloc: {malloc}", flush=True)
    print(f"models {args.models} (reference: {args.reference_models}), batches "
          f"{args.batches}; up to {args.rounds} paired rounds "
          f"of ~{args.round_seconds:g} s per side, timed rounds ~{args.max_seconds:g} s "
          f"per comparison; {args.warmup} warm-up calls per side", flush=True)

    sections = {
        "reference": Section("Inference: onnx.reference.ReferenceEvaluator vs d5ref",
                             "RefEval", "d5ref", 10.0, speedup=True),
        # Context for the 10x target: the speedup a hand-tuned runtime gets over the same
        # interpreter (fused, blocked kernels); d5ref runs ONNX operator by operator in
        # NumPy, so this is the ceiling of what the target can ask of it.
        "reference_ceiling": Section("Inference: onnx.reference.ReferenceEvaluator vs raw "
                                     "onnxruntime (ceiling for the d5ref target)",
                                     "RefEval", "ort", None, speedup=True),
        "onnxruntime": Section("Inference: raw onnxruntime.InferenceSession vs d5ort",
                               "ort", "d5ort", None),
        "pytorch": Section("PyTorch: native torch.nn.Module vs d5pt.from_onnx",
                           "native", "d5pt", 1.02),
        "tf_eager": Section("TensorFlow eager: native Keras (eager) vs "
                            "d5tf.from_onnx(mode='eager')", "keras", "d5tf", 1.02),
        "tf_function": Section("TensorFlow function: native Keras in tf.function vs "
                               "d5tf.from_onnx(mode='function')", "keras", "d5tf", 1.02),
    }
    benches = {"reference": bench_reference, "onnxruntime": bench_onnxruntime,
               "pytorch": bench_pytorch}
    rows: list[Row] = []
    floor_missed: list[Row] = []
    start = time.perf_counter()
    for framework in args.frameworks:
        if framework == "tensorflow":
            tf_sections = {"eager": sections["tf_eager"], "function": sections["tf_function"]}
            # Both modes run per model and batch (they share the Keras model); print the
            # two tables one after the other.
            tf_rows = []
            for name in args.models:
                for batch in args.batches:
                    tf_rows += bench_tensorflow(name, batch, args, tf_sections)
            for mode in ("eager", "function"):
                tf_sections[mode].header()
                for row in tf_rows:
                    if row.section is tf_sections[mode]:
                        row.print()
            rows += tf_rows
            continue
        section = sections[framework]
        section.header()
        if framework == "reference":
            print(f"(the target is judged on {', '.join(SPEEDUP_MODELS)}; the other models' "
                  f"rows show '-')", flush=True)
        framework_rows = []
        for name in (args.reference_models if framework == "reference" else args.models):
            for batch in args.batches:
                if framework == "reference":
                    new_rows = bench_reference(name, batch, args, section,
                                               sections["reference_ceiling"])
                else:
                    new_rows = benches[framework](name, batch, args, section)
                for row in new_rows:
                    if row.section is section:
                        row.print()
                framework_rows += new_rows
        if framework == "reference":
            sections["reference_ceiling"].header()
            for row in framework_rows:
                if row.section is sections["reference_ceiling"]:
                    row.print()
            floor_missed += print_floors([row for row in framework_rows
                                          if row.floor is not None])
        rows += framework_rows

    judged = [r for r in rows if r.met is not None]
    missed = [r for r in judged if not r.met]
    floor_judged = sum(1 for r in rows if r.floor is not None and
                       floor_verdict(r) is not None)
    met = len(judged) - len(missed) + floor_judged - len(floor_missed)
    print(f"\nTargets: {met} MET, {len(missed) + len(floor_missed)} NOT MET "
          f"({time.perf_counter() - start:.0f} s)", flush=True)
    floors = {(r.model, r.batch): r.floor for r in rows if r.floor is not None}
    for row in missed:
        reach = ""
        floor = floors.get((row.model, row.batch))
        if row.section.speedup and floor is not None:
            most = statistics.median(row.m.baseline) / floor[0]
            if most < row.section.target:
                # No im2col + BLAS executor can be faster than the matrix products alone.
                reach = (f"; out of reach here: RefEval takes only {most:.2f}x the "
                         f"model's matrix products alone (the floor above), so no "
                         f"executor reaches {row.section.target:g}x")
        print(f"  NOT MET: {row.section.title.split(':')[0]} {row.model} batch {row.batch} "
              f"{row.phase}: {row.section.ratio_name} = {row.ratio:.3f}{reach}", flush=True)
    for row in floor_missed:
        print(f"  NOT MET: Floor {row.model} batch {row.batch}: d5ref/floor = "
              f"{statistics.median(row.m.ours) / row.floor[0]:.3f} (target <= "
              f"{FLOOR_TARGET:g})", flush=True)
    for row in judged:
        TARGETS.judge(f"{row.section.title.split(':')[0]} {row.model} batch {row.batch} "
                      f"{row.phase}", row.met)
    for row in rows:
        if row.floor is not None:
            TARGETS.judge(f"Floor {row.model} batch {row.batch}", floor_verdict(row))
    return TARGETS.exit_status(args.check)


if __name__ == "__main__":
    sys.exit(main())
