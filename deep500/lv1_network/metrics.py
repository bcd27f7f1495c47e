"""White-box metrics of graph executors: per-operator time, framework overhead, peak
memory.

``OperatorTimes`` is an :class:`ExecutorEvent` as well as a metric: the validation
functions install it on the executor, which then brackets every operator with it (only
then — executors skip per-operator hooks when no event asks for them).
"""
from __future__ import annotations

from collections import defaultdict
from time import perf_counter_ns

import numpy as np

from deep500.lv1_network.events import ExecutorEvent
from deep500.utils.device import parse_device
from deep500.utils.errors import Deep500Error
from deep500.utils.metric import MetricResult, TestMetric
from deep500.utils.statistics import summarize


class OperatorTimes(ExecutorEvent, TestMetric):
    """Seconds spent in each operator of the forward pass, per run, and, for runs with
    backprop, in each operator's backward.

    Forward times bracket every operator with ``before_operator``/``after_operator``.
    Backward times come from executors that call ``record_backward_time(op, seconds)``
    (events with ``wants_backward_times``): the reference executor times each node's
    backward function; the PyTorch executor stamps the time at which autograd produces
    the gradient of each node's outputs (tensor hooks) and gives the node the time up
    to the next such stamp (see ``OnnxModule.forward_with_events``); the TensorFlow
    executor (mode='eager') records each node on a tape of its own and times each
    node's gradient call (see ``deep500.frameworks.tensorflow.node_backward``).
    Executors without per-node backward times (onnxruntime runs inference only; an
    executor that never calls ``record_backward_time``) leave ``backward_operators``
    empty and the summary says so in ``backward_note``.

    Executors that cannot call back per operator (onnxruntime) report their own
    profiler's per-node times in ``executor.last_operator_times`` after each run; the
    validation functions feed those in through ``record_run``.
    """
    wants_operator_events = True
    wants_backward_times = True
    measures_time = True
    # the summary's keys
    fields = ("runs", "total_median", "operators", "by_op_type", "backward_runs",
              "backward_total_median", "backward_operators", "backward_note")

    def __init__(self, device=None, backward: bool = True):
        self.set_device(device)
        self.wants_backward_times = bool(backward)
        self.reset()

    def set_device(self, device) -> None:
        """Synchronise ``device`` around each operator (no-op for the CPU)."""
        self.device = parse_device(device)
        self._sync = self.device.synchronize if self.device.is_gpu else None

    def reset(self) -> None:
        self.runs: list[dict[str, float]] = []
        self.op_types: dict[str, str] = {}
        self.saw_backprop = False
        self.backward_runs: list[dict[str, float]] = []
        # per backprop run, the sum of its per-node backward seconds (0.0 where the
        # executor reported none), aligned with ``runs`` for FrameworkOverhead
        self.backward_totals: list[float] = []
        self._current: dict[str, int] | None = None
        self._backward: dict[str, float] = defaultdict(float)
        self._t0 = 0

    def before_executor(self, inputs) -> None:
        self._current = defaultdict(int)

    def before_operator(self, op) -> None:
        if self._sync is not None:
            self._sync()
        self._t0 = perf_counter_ns()

    def after_operator(self, op) -> None:
        if self._sync is not None:
            self._sync()
        self._current[op.name] += perf_counter_ns() - self._t0
        self.op_types.setdefault(op.name, op.op_type)

    def _close_run(self, outputs=None) -> None:
        if self._current:
            self.runs.append({k: v * 1e-9 for k, v in self._current.items()})
        self._current = None

    def after_inference(self, outputs=None) -> None:
        self._close_run()

    def after_backprop(self, outputs=None) -> None:
        self.saw_backprop = True
        self._close_run()
        self.backward_totals.append(float(sum(self._backward.values())))
        if self._backward:
            self.backward_runs.append(dict(self._backward))
        self._backward = defaultdict(float)

    def record_backward_time(self, op, seconds: float) -> None:
        """Add ``seconds`` of backward time to node ``op`` in the current run."""
        self._backward[op.name] += float(seconds)
        self.op_types.setdefault(op.name, op.op_type)

    def record_run(self, times: dict[str, float], op_types: dict[str, str]) -> None:
        """Add a run measured elsewhere (seconds per operator name)."""
        self.runs.append(dict(times))
        for name, op_type in op_types.items():
            self.op_types.setdefault(name, op_type)

    def totals(self) -> list[float]:
        return [sum(run.values()) for run in self.runs]

    def _per_operator(self, runs: list[dict[str, float]]) -> tuple[list[dict], float]:
        names = list(dict.fromkeys(name for run in runs for name in run))
        per_operator = []
        for name in names:
            times = [run.get(name, 0.0) for run in runs]
            per_operator.append({"name": name, "op_type": self.op_types.get(name, "?"),
                                 "median": float(np.median(times))})
        total = float(np.median([sum(r.values()) for r in runs])) if runs else 0.0
        for entry in per_operator:
            entry["share"] = entry["median"] / total if total else 0.0
        return sorted(per_operator, key=lambda e: -e["median"]), total

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        per_operator, total = self._per_operator(self.runs)
        by_type = defaultdict(float)
        for entry in per_operator:
            by_type[entry["op_type"]] += entry["median"]
        backward, backward_total = self._per_operator(self.backward_runs)
        note = None
        if self.saw_backprop and not self.backward_runs:
            note = ("backward per node not available: this executor does not report "
                    "per-node backward times")
        summary = {"runs": len(self.runs), "total_median": total,
                   "operators": per_operator,
                   "by_op_type": dict(sorted(by_type.items(), key=lambda kv: -kv[1])),
                   "backward_runs": len(self.backward_runs),
                   "backward_total_median": backward_total,
                   "backward_operators": backward, "backward_note": note}
        return MetricResult(self.name, summary, primary="total_median", unit="s",
                            samples=self.totals())


class FrameworkOverhead(TestMetric):
    """Whole-network time against the sum of its operators' times.

    overhead = 1 − Σ operator time / network time: the share of a run spent outside
    operators (dispatch, graph interpretation, conversions). The network time brackets
    the whole ``inference`` or ``inference_and_backprop`` call; the operator time is
    what :class:`OperatorTimes` measures inside it, with per-operator events on (they
    themselves add a little to the network time).

    Inference: Σ operator time is the sum of the forward operators' times. Backprop
    (``test_executor_backprop``): the sum of the forward operators' times plus the sum
    of the per-node backward times of the same run, so the overhead is what the step
    spends outside both (planning, gradient bookkeeping and accumulation between nodes,
    conversions of inputs and gradients). What a node's backward time covers is the
    executor's (see ``OperatorTimes``): the reference executor times each node's
    backward function alone, so gradient accumulation counts as overhead, and so does
    TensorFlow's, which times each node's gradient call on the node's own tape; PyTorch
    gives each node the time from its mark to the next one, so autograd's engine
    counts as operator time there. An executor that reports no per-node backward times
    gets ``overhead`` None and a warning: its backward pass cannot be split into
    operators and overhead.
    """
    measures_time = True
    # the summary's keys; "backward_operators" is None for inference
    fields = ("overhead", "network", "operators", "backward_operators")

    def __init__(self, reruns: int = 10, warmup: int = 2, device=None):
        self.reruns = reruns + warmup
        self.warmup = warmup
        self.operator_times = OperatorTimes(device)
        self.device = parse_device(device)
        self.framework = None   # the executor's name, set by the validation functions
        self.reset()

    def reset(self) -> None:
        self._samples: list[int] = []
        self.operator_times.reset()

    def begin(self, inputs=None) -> None:
        if self.device.is_gpu:
            self.device.synchronize()
        self._t0 = perf_counter_ns()

    def end(self, outputs=None) -> None:
        if self.device.is_gpu:
            self.device.synchronize()
        self._samples.append(perf_counter_ns() - self._t0)

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        times = self.operator_times
        network = [s * 1e-9 for s in self._samples[self.warmup:]]
        forward = times.totals()[self.warmup:]
        backward = None
        if times.saw_backprop:
            if not times.backward_runs:
                who = f"the {self.framework} executor" if self.framework else \
                    "this executor"
                return MetricResult(
                    self.name, {"overhead": None, "network": None, "operators": None,
                                "backward_operators": None}, primary="overhead",
                    warnings=[f"framework overhead of backprop needs per-node backward "
                              f"times, and {who} reports none (its backward pass is "
                              f"one call); measure its overhead with "
                              f"test_executor_inference"])
            backward = times.backward_totals[self.warmup:]
            operators = [f + b for f, b in zip(forward, backward)]
        else:
            operators = forward
        pairs = [(n, o) for n, o in zip(network, operators) if n > 0]
        overheads = [1.0 - o / n for n, o in pairs]
        summary = {"overhead": float(np.median(overheads)) if overheads else None,
                   "network": summarize(network).get("median"),
                   "operators": float(np.median(operators)) if operators else None,
                   "backward_operators": (float(np.median(backward)) if backward
                                          else None)}
        return MetricResult(self.name, summary, primary="overhead", samples=overheads)


class PeakMemory(TestMetric):
    """Peak memory of a run: the most bytes allocated at once during the run, above
    what was allocated when it began (weights and fed inputs, already held, are not
    counted; gradients, activations and operators' temporaries are).

    ``method="framework"``: the executor's own allocator or profiler — the reference
    executor's count of live tensors (parameters and inputs included, operators'
    temporaries not), PyTorch's CPU
    allocator events from ``torch.profiler`` or ``torch.cuda.max_memory_allocated``,
    TensorFlow's ``tf.config.experimental.get_memory_info`` on a GPU — or ``None``
    where the executor reports none (TensorFlow on the CPU, whose allocator counts only
    large allocations: recipes then measure a fresh process,
    ``deep500.frameworks.fresh_process_memory``). ``method="tracemalloc"``: the peak
    of traced allocations, which NumPy reports (so it sees everything the reference
    executor allocates, temporaries inside operators too); refused for other executors,
    whose tensors live in their own allocators, invisible to it. ``method="auto"``:
    tracemalloc for the reference executor, the framework's own method for the others.
    Every record names
    the method in ``measured_by``. Memory runs are runs of their own (tracing and
    profiling slow a run down), never timed.
    """

    fields = ("peak_bytes", "method", "measured_by", "reported")  # the summary's keys
    METHODS = ("framework", "tracemalloc", "auto")
    exclusive = True
    TRACED = "tracemalloc (NumPy allocations and the Python heap)"

    def __init__(self, method: str = "framework"):
        if method not in self.METHODS:
            raise Deep500Error(f"PeakMemory method must be one of {list(self.METHODS)}, "
                               f"got {method!r}")
        self.method = method
        self.executor = None
        self._traced = method == "tracemalloc"
        self.reset()

    def reset(self) -> None:
        self._peaks: list[int] = []

    def bind(self, executor) -> None:
        framework = getattr(executor, "framework", None)
        if self.method == "tracemalloc" and framework != "reference":
            raise Deep500Error(
                f"PeakMemory(method='tracemalloc') cannot measure the {framework} "
                f"executor: its tensors live in its own allocator, which tracemalloc "
                f"does not see (it would report only the Python heap). Use "
                f"method='framework' or 'auto'")
        self.executor = executor
        self._traced = self.method == "tracemalloc" or (
            self.method == "auto" and framework == "reference")

    @property
    def measured_by(self) -> str | None:
        if self._traced:
            return self.TRACED
        return getattr(self.executor, "peak_memory_method", None)

    def begin(self, inputs=None) -> None:
        if self._traced:
            import tracemalloc
            if not tracemalloc.is_tracing():
                tracemalloc.start()
            tracemalloc.reset_peak()
            self._baseline = tracemalloc.get_traced_memory()[0]
        elif self.executor is not None:
            self.executor.reset_peak_memory()

    def end(self, outputs=None) -> None:
        if self._traced:
            import tracemalloc
            self._peaks.append(tracemalloc.get_traced_memory()[1] - self._baseline)
            return
        peak = self.executor.peak_memory_bytes() if self.executor is not None else None
        if peak is not None:
            self._peaks.append(int(peak))

    def measure(self, inputs=None, outputs=None, reference_outputs=None) -> MetricResult:
        if self._traced:
            import tracemalloc
            tracemalloc.stop()
        peak = max(self._peaks) if self._peaks else None
        warnings = []
        if peak is None and self.executor is not None:
            note = getattr(self.executor, "peak_memory_note", None)
            warnings.append(f"the {self.executor.framework} executor reports no peak "
                            f"memory in this process" + (f": {note}" if note else ""))
        return MetricResult(self.name, {"peak_bytes": peak, "method": self.method,
                                        "measured_by": self.measured_by if peak is not None
                                        else None, "reported": peak is not None},
                            primary="peak_bytes", unit="bytes", samples=self._peaks,
                            warnings=warnings)
