"""Accuracy metrics, heat maps and FLOP counts, on hand-computed examples."""
import json
import math

import numpy as np
import pytest

import deep500 as d5
from deep500.utils.errors import ShapeError
from deep500.utils.flops import FLOPs, conv_output_spatial, flop_count
from deep500.utils.heatmaps import DiffHeatmap, VarHeatmap
from deep500.utils.metric import run_measured
from deep500.utils.norm_metrics import L1Error, L2Error, MaxError, norm_errors
from deep500.utils.wallclock import WallclockTime

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# out - ref = [0, 2, -2]; |ref| = [1, 0, 5]
OUT = np.array([1.0, 2.0, 3.0])
REF = np.array([1.0, 0.0, 5.0])


# -- norm errors -----------------------------------------------------------------------
@pytest.mark.parametrize("metric, absolute, relative", [
    (L1Error, 4.0, 4.0 / 6.0),
    (L2Error, math.sqrt(8.0), math.sqrt(8.0) / math.sqrt(26.0)),
    (MaxError, 2.0, 2.0 / 5.0),
])
def test_single_output(metric, absolute, relative):
    result = metric().measure(None, [OUT], [REF])
    assert result.metric == metric.__name__
    assert result.summary["absolute"] == pytest.approx(absolute, rel=1e-14)
    assert result.summary["relative"] == pytest.approx(relative, rel=1e-14)
    assert result.primary == "relative" and result.value == result.summary["relative"]
    assert len(result.summary["per_output"]) == 1
    # A bare array is one output, the same as a one-element list.
    assert metric().measure(None, OUT, REF).summary == result.summary


def test_error_is_computed_in_float64():
    # 2**24 + 1 is not a float32, and int8 differences overflow: both are taken in float64.
    out = np.array([16777217], dtype=np.int64)
    ref = np.array([16777216], dtype=np.int64)
    assert L1Error().measure(None, [out], [ref]).summary["absolute"] == 1.0
    small = np.array([120], dtype=np.int8), np.array([-120], dtype=np.int8)
    assert MaxError().measure(None, [small[0]], [small[1]]).summary["absolute"] == 240.0


@pytest.mark.parametrize("metric, per_output", [
    # output 0: OUT vs REF; output 1: diff [0, 10] against [100, 100]
    (L1Error, [(4.0, 4.0 / 6.0), (10.0, 10.0 / 200.0)]),
    (L2Error, [(math.sqrt(8.0), math.sqrt(8.0 / 26.0)), (10.0, 10.0 / math.sqrt(20000.0))]),
    (MaxError, [(2.0, 0.4), (10.0, 0.1)]),
])
def test_multiple_outputs_report_the_worst(metric, per_output):
    outs = [OUT, np.array([[100.0, 110.0]])]
    refs = [REF, np.array([[100.0, 100.0]])]
    summary = metric().measure(None, outs, refs).summary
    got = [value for p in summary["per_output"] for value in (p["absolute"], p["relative"])]
    assert got == pytest.approx([value for pair in per_output for value in pair], rel=1e-14)
    # Worst absolute comes from output 1, worst relative from output 0.
    assert summary["absolute"] == pytest.approx(per_output[1][0], rel=1e-14)
    assert summary["relative"] == pytest.approx(per_output[0][1], rel=1e-14)


def test_dict_outputs_are_matched_by_name():
    outs = {"b": np.array([0.0, 3.0]), "a": OUT}
    refs = {"a": REF, "b": np.array([0.0, 1.0])}
    summary = L1Error().measure(None, outs, refs).summary
    # Reference order: "a" first.
    assert [p["absolute"] for p in summary["per_output"]] == [4.0, 2.0]
    with pytest.raises(ShapeError, match=r"\['c'\]"):
        L1Error().measure(None, outs, {**refs, "c": REF})


def test_none_reference_is_skipped():
    summary = L2Error().measure(None, [OUT, OUT], [None, REF]).summary
    assert len(summary["per_output"]) == 1
    assert summary["absolute"] == pytest.approx(math.sqrt(8.0), rel=1e-14)


def test_shape_mismatch_raises():
    with pytest.raises(ShapeError, match=r"Output 1 has shape \(3,\).*\(1, 3\)"):
        L1Error().measure(None, [OUT, OUT], [REF, REF.reshape(1, 3)])
    with pytest.raises(ShapeError, match="2 reference outputs but only 1"):
        MaxError().measure(None, [OUT], [REF, REF])


def test_zero_reference():
    zero = np.zeros(3)
    exact = L2Error().measure(None, [zero], [zero]).summary
    assert exact["absolute"] == 0.0 and exact["relative"] == 0.0
    wrong = L2Error().measure(None, [OUT], [zero])
    assert wrong.summary["absolute"] == pytest.approx(math.sqrt(14.0), rel=1e-14)
    assert wrong.summary["relative"] == math.inf
    # Infinity survives JSON as a string, not as invalid JSON.
    data = json.loads(wrong.to_json(), parse_constant=pytest.fail)
    assert data["summary"]["relative"] == "inf"


def test_empty_outputs():
    empty = np.zeros((0, 3))
    for metric in (L1Error, L2Error, MaxError):
        summary = metric().measure(None, [empty], [empty]).summary
        assert summary["absolute"] == 0.0 and summary["relative"] == 0.0


def test_norm_errors_helper():
    errors = norm_errors([OUT], [REF])
    assert set(errors) == {"L1Error", "L2Error", "MaxError"}
    assert errors["MaxError"]["relative"] == pytest.approx(0.4, rel=1e-14)
    assert d5.L1Error is L1Error and d5.L2Error is L2Error and d5.MaxError is MaxError


# -- heat maps -------------------------------------------------------------------------
def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert len(data) > 5000, f"{path} is only {len(data)} bytes"


def test_diff_heatmap_writes_png(tmp_path):
    out = np.zeros((4, 6), np.float32)
    ref = np.zeros((4, 6), np.float32)
    ref[3, 2] = 6.0
    path = tmp_path / "nested" / "diff.png"
    result = DiffHeatmap(str(path)).measure(None, [out], [ref])
    assert_png(path)
    assert result.value == str(path)
    assert result.summary["max"] == 6.0
    assert result.summary["mean"] == pytest.approx(6.0 / 24, rel=1e-14)
    assert d5.DiffHeatmap is DiffHeatmap


def test_diff_heatmap_bare_arrays_and_output_index(tmp_path):
    out = np.zeros((3, 4))
    ref = np.zeros((3, 4))
    ref[2, 1] = 5.0  # not in row 0: a bare array must not be split into rows
    bare = DiffHeatmap(str(tmp_path / "bare.png")).measure(None, out, ref)
    assert bare.summary["max"] == 5.0
    second = DiffHeatmap(str(tmp_path / "second.png"), output_index=1).measure(
        None, {"x": out, "y": np.ones((2, 2, 5))}, {"x": ref, "y": np.zeros((2, 2, 5))})
    assert second.summary["max"] == 1.0 and second.summary["mean"] == 1.0
    assert_png(tmp_path / "second.png")


def test_var_heatmap_deterministic_outputs_have_zero_variance(tmp_path):
    heatmap = VarHeatmap(str(tmp_path / "var.png"), reruns=4)
    value = np.arange(12.0).reshape(3, 4)
    run_measured(lambda: (value * 2.0,), [heatmap])
    result = heatmap.measure(None, None, None)
    assert_png(tmp_path / "var.png")
    assert result.summary["runs"] == 4
    assert result.value == 0.0 and result.summary["mean_variance"] == 0.0


def test_var_heatmap_noisy_outputs(tmp_path):
    rng = np.random.default_rng(7)
    produced = []

    def noisy():
        produced.append(rng.normal(size=(2, 3, 8)))
        return [produced[-1]]

    heatmap = VarHeatmap(str(tmp_path / "var_noisy.png"), reruns=6)
    timer = WallclockTime(reruns=3, warmup=0, ci_warn_fraction=100.0)
    run_measured(noisy, [timer, heatmap])
    assert len(produced) == 6  # max(reruns of the two metrics)
    result = heatmap.measure(None, None, None)
    expected = np.stack(produced).var(axis=0)
    assert result.summary["runs"] == 6
    assert result.value == pytest.approx(expected.max(), rel=1e-12)
    assert result.summary["mean_variance"] == pytest.approx(expected.mean(), rel=1e-12)
    assert result.value > 0.1  # variance of unit normals over 6 samples, 48 elements
    assert_png(tmp_path / "var_noisy.png")


def test_var_heatmap_keeps_copies_and_needs_two_runs(tmp_path):
    heatmap = VarHeatmap(str(tmp_path / "v.png"), reruns=2)
    buffer = np.zeros(3)
    heatmap.end([buffer])
    buffer += 1.0  # an in-place update after end() must not change what was recorded
    heatmap.end(None)  # ignored
    with pytest.raises(RuntimeError, match="at least 2"):
        heatmap.measure(None, None, None)
    heatmap.end(buffer)
    assert heatmap.measure(None, None, None).value == pytest.approx(0.25, rel=1e-14)
    heatmap.reset()
    with pytest.raises(RuntimeError, match="got 0"):
        heatmap.measure(None, None, None)
    assert VarHeatmap.requires_outputs is True


# -- FLOPs -----------------------------------------------------------------------------
M, K, N = 3, 4, 5


@pytest.mark.parametrize("shapes, attributes, expected", [
    ([(M, K), (K, N)], {}, 2 * M * N * K),                               # 120
    ([(M, K), (K, N), (M, N)], {}, 2 * M * N * K + M * N),               # 135
    ([(M, K), (K, N), (N,)], {"beta": 0.5}, 2 * M * N * K + M * N),      # C broadcast
    ([(M, K), (K, N), (M, N)], {"beta": 0.0}, 2 * M * N * K),            # C unused
    ([(M, K), (K, N), None], {}, 2 * M * N * K),                          # C absent
    ([(K, M), (K, N), (M, N)], {"transA": 1}, 2 * M * N * K + M * N),    # 135, not 140
    ([(M, K), (N, K)], {"transB": 1}, 2 * M * N * K),                     # 120, not 96
    ([(K, M), (N, K), (M, N)], {"transA": 1, "transB": 1}, 135),
])
def test_gemm_flops(shapes, attributes, expected):
    assert flop_count("Gemm", shapes, attributes) == expected


@pytest.mark.parametrize("shapes, expected", [
    ([(3, 4), (4, 5)], 120),
    ([(2, 1, 3, 4), (7, 4, 5)], 2 * 7 * 120),   # batch axes (2, 1) and (7,) -> (2, 7)
    ([(6, 3, 4), (4, 5)], 6 * 120),
    ([(4,), (4,)], 8),                          # dot product
    ([(3, 4), (4,)], 24),                       # matrix-vector
    ([(4,), (2, 4, 5)], 2 * 2 * 5 * 4),         # vector-matrix, broadcast over 2
])
def test_matmul_flops(shapes, expected):
    assert flop_count("MatMul", shapes) == expected


def test_matmul_incompatible_batch_raises():
    with pytest.raises(ValueError):
        flop_count("MatMul", [(2, 3, 4), (3, 4, 5)])


@pytest.mark.parametrize("shapes, attributes, expected", [
    # 1x3x5x5 * 8x3x3x3 -> 1x8x3x3 outputs, each 27 multiply-adds
    ([(1, 3, 5, 5), (8, 3, 3, 3)], {}, 2 * 72 * 27),
    ([(1, 3, 5, 5), (8, 3, 3, 3), (8,)], {}, 2 * 72 * 27 + 72),
    # groups 2, strides (2, 1), pads (1, 0, 1, 0), dilations (1, 2):
    # H_out = (10 + 2 - 3) // 2 + 1 = 5, W_out = (12 - 5) // 1 + 1 = 8
    # outputs 2*6*5*8 = 480, each (4/2)*3*3 = 18 multiply-adds
    ([(2, 4, 10, 12), (6, 2, 3, 3)],
     {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 0], "dilations": [1, 2]}, 2 * 480 * 18),
    ([(2, 4, 10, 12), (6, 2, 3, 3), (6,)],
     {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 0], "dilations": [1, 2]},
     2 * 480 * 18 + 480),
    # depthwise: group = C = M = 4, 1x4x6x6 with 3x3 and pads 1 -> 6x6
    ([(1, 4, 6, 6), (4, 1, 3, 3)], {"group": 4, "pads": [1, 1, 1, 1]}, 2 * 4 * 36 * 9),
    # SAME_UPPER with stride 2: ceil(7 / 2) = 4 per axis
    ([(1, 1, 7, 7), (2, 1, 3, 3)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]},
     2 * 2 * 16 * 9),
    # 1-D: length 10, kernel 3 -> 8 outputs per channel
    ([(1, 2, 10), (3, 2, 3)], {}, 2 * 3 * 8 * 2 * 3),
])
def test_conv_flops(shapes, attributes, expected):
    assert flop_count("Conv", shapes, attributes) == expected


def test_conv_output_extent_matches_torch():
    torch = pytest.importorskip("torch")
    x = torch.zeros(2, 4, 10, 12)
    w = torch.zeros(6, 2, 3, 3)
    y = torch.nn.functional.conv2d(x, w, stride=(2, 1), padding=(1, 0), dilation=(1, 2),
                                   groups=2)
    assert list(y.shape[2:]) == conv_output_spatial([10, 12], [3, 3], [2, 1], [1, 0, 1, 0],
                                                    [1, 2]) == [5, 8]


def test_unknown_operator_has_no_count():
    assert flop_count("Relu", [(3, 4)]) is None
    assert d5.flop_count is flop_count


def _timer_with_samples(samples_ns):
    timer = WallclockTime(reruns=len(samples_ns), warmup=0)
    timer._samples_ns = list(samples_ns)
    return timer


def test_flops_metric_gflops_from_median():
    timer = _timer_with_samples([1_000_000, 3_000_000, 2_000_000])  # median 2 ms
    result = FLOPs(4_000_000, timer=timer).measure()
    assert result.summary["flops"] == 4_000_000
    assert result.value == pytest.approx(4e6 / 2e-3 / 1e9, rel=1e-12)  # 2 GFLOP/s
    assert result.unit == "GFLOP/s" and result.primary == "gflops_per_s"
    assert d5.FLOPs is FLOPs


def test_flops_metric_with_a_measured_region():
    timer = WallclockTime(reruns=5, warmup=1, ci_warn_fraction=100.0)
    metric = FLOPs(timer=timer)
    metric.set_operator("MatMul", [(64, 32), (32, 16)], {})
    assert metric.flops == 2 * 64 * 16 * 32
    a, b = np.ones((64, 32)), np.ones((32, 16))
    run_measured(lambda: a @ b, [metric, timer])
    median = timer.measure().value
    result = metric.measure()
    assert result.value == pytest.approx(metric.flops / median / 1e9, rel=1e-12)


def test_flops_metric_without_count_or_timer():
    assert FLOPs(1000).measure().value is None          # no timer
    assert FLOPs(timer=_timer_with_samples([10])).measure().value is None  # no count
    given = FLOPs(7)
    given.set_operator("Gemm", [(M, K), (K, N)], {})
    assert given.flops == 7  # an explicit count is kept
    unknown = FLOPs()
    unknown.set_operator("Relu", [(3,)], {})
    assert unknown.flops is None
