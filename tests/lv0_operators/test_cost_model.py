"""Analytic operator costs and roofline times against hand computation."""
import pytest

from deep500.lv0_operators.cost_model import network_costs, operator_cost, roofline_time
from deep500.utils.errors import Deep500Error


class FakeMachine:
    memory_bandwidth = 10e9

    def peak_flops(self, threads=1, kind="gemm"):
        return {"gemm": 100e9, "conv": 50e9}[kind] * threads


def test_gemm_forward_backward_by_hand():
    # Y[8,16] = X[8,32] W[32,16] + b[16]
    cost = operator_cost("Gemm", [(8, 32), (32, 16), (16,)], [(8, 16)], {}, node="fc")
    assert cost.forward_flops == 2 * 8 * 16 * 32 + 8 * 16
    assert cost.backward_flops == 2 * cost.forward_flops
    ins = 8 * 32 + 32 * 16 + 16
    assert cost.forward_bytes == 4 * (ins + 8 * 16)
    assert cost.backward_bytes == 4 * (8 * 16 + 2 * ins)


def test_conv_and_elementwise_by_hand():
    conv = operator_cost("Conv", [(2, 3, 8, 8), (4, 3, 3, 3)], [(2, 4, 6, 6)], {}, node="c")
    assert conv.forward_flops == 2 * (2 * 4 * 6 * 6) * 3 * 9
    assert conv.kind == "conv"
    relu = operator_cost("Relu", [(2, 4, 6, 6)], [(2, 4, 6, 6)], node="r")
    assert relu.forward_flops == relu.backward_flops == 288
    assert relu.forward_bytes == 4 * 576
    pool = operator_cost("MaxPool", [(2, 4, 6, 6)], [(2, 4, 3, 3)], {"kernel_shape": [2, 2]})
    assert pool.forward_flops == 72 * 4


def test_roofline_picks_the_bound():
    m = FakeMachine()
    gemm = operator_cost("Gemm", [(256, 256), (256, 256)], [(256, 256)], {})
    flops_t = gemm.forward_flops / 100e9
    bytes_t = gemm.forward_bytes / 10e9
    assert roofline_time(gemm, m) == pytest.approx(max(flops_t, bytes_t), rel=1e-12)
    assert roofline_time(gemm, m, threads=2, direction="backward") == pytest.approx(
        max(2 * gemm.forward_flops / 200e9, gemm.backward_bytes / 10e9), rel=1e-12)
    relu = operator_cost("Relu", [(1000,)], [(1000,)])
    assert roofline_time(relu, m, overhead_s=1e-6) == pytest.approx(8000 / 10e9 + 1e-6, rel=1e-12)


def test_transformer_operators_by_hand():
    """Gather reads the rows it gathers, not the table; its backward writes the table;
    Transpose copies; LayerNormalization and ReduceSum count per element."""
    gather = operator_cost("Gather", [(1000, 16), (2, 8)], [(2, 8, 16)], node="embed")
    assert (gather.forward_flops, gather.backward_flops) == (0, 256)
    assert gather.forward_bytes == 4 * (2 * 256 + 16)
    assert gather.backward_bytes == 4 * (16000 + 256 + 16)
    transpose = operator_cost("Transpose", [(2, 8, 4, 4)], [(2, 4, 8, 4)])
    assert (transpose.forward_flops, transpose.backward_flops) == (0, 0)
    assert transpose.forward_bytes == transpose.backward_bytes == 4 * 2 * 256
    norm = operator_cost("LayerNormalization", [(2, 8, 16), (16,), (16,)], [(2, 8, 16)])
    assert (norm.forward_flops, norm.backward_flops) == (7 * 256, 10 * 256)
    reduce = operator_cost("ReduceSum", [(2, 8, 16)], [(2, 8, 1)])
    assert (reduce.forward_flops, reduce.backward_flops) == (256, 0)
    erf = operator_cost("Erf", [(2, 8, 64)], [(2, 8, 64)])
    assert erf.forward_flops == erf.backward_flops == 1024 and erf.kind == "memory"


def test_concat_copies():
    """DenseNet's Concat reads its inputs and writes the output; its backward reads dY
    and writes the slices of it that are the inputs' gradients."""
    concat = operator_cost("Concat", [(2, 64, 8, 8), (2, 32, 8, 8)], [(2, 96, 8, 8)],
                           {"axis": 1})
    assert (concat.forward_flops, concat.backward_flops, concat.kind) == (0, 0, "memory")
    assert concat.forward_bytes == concat.backward_bytes == 4 * 2 * 2 * 96 * 64


def test_unknown_op_names_node_and_says_profile():
    with pytest.raises(Deep500Error, match=r"node 'weird'.*LRN.*profile"):
        operator_cost("LRN", [(1, 2)], [(1, 2)], node="weird")


@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet20", "transformer", "gpt"])
def test_network_costs_cover_the_shipped_models(name):
    from deep500.networks import create_model
    model = create_model(name, batch_size=2, loss="softmax_cross_entropy")
    costs = network_costs(model)
    assert len(costs) == len(model.graph.node)
    compute = [c for c in costs if c.op_type in ("Conv", "Gemm", "MatMul")]
    assert compute and all(c.forward_flops > 0 and c.backward_flops == 2 * c.forward_flops
                           for c in compute)
    assert roofline_time(costs[0], FakeMachine()) >= 0.0


def test_gemm_sizes_of_gemm_and_conv_by_hand():
    # A fully connected layer as the networks store it: W (out, in), transB=1.
    fc = operator_cost("Gemm", [(8, 784), (128, 784), (128,)], [(8, 128)], {"transB": 1})
    assert fc.gemm == (8, 128, 784)
    # Backward: dX (8×128)·(128×784) and dW (784×8)·(8×128).
    assert fc.gemms("forward") == [(8, 128, 784)]
    assert fc.gemms("backward") == [(8, 784, 128), (784, 128, 8)]
    transposed = operator_cost("Gemm", [(784, 8), (784, 128)], [(8, 128)], {"transA": 1})
    assert transposed.gemm == (8, 128, 784)
    # Conv as im2col: W[C_out, C_in·kh·kw] · cols[C_in·kh·kw, N·H·W].
    conv = operator_cost("Conv", [(2, 3, 8, 8), (4, 3, 3, 3)], [(2, 4, 6, 6)], {})
    assert conv.gemm == (4, 2 * 36, 27)
    assert 2 * 4 * 72 * 27 == conv.forward_flops
    relu = operator_cost("Relu", [(2, 4)], [(2, 4)])
    assert relu.gemm == () and relu.gemms("backward") == []


def test_gemm_rate_times_each_size_once_and_round_trips():
    from deep500.lv0_operators.gemm_rate import GemmRate
    rate = GemmRate(repeats=2)
    first = rate.time(8, 64, 32)
    assert 0 < first < 0.1
    assert rate.time(8, 64, 32) == first                 # memoised, not re-timed
    assert rate.rate(8, 64, 32) == pytest.approx(2 * 8 * 64 * 32 / first, rel=1e-12)
    assert rate.seconds([(8, 64, 32), (8, 64, 32)]) == pytest.approx(2 * first, rel=1e-12)
    again = GemmRate(times=rate.to_dict()["times"])
    assert again.time(8, 64, 32) == first
    given = GemmRate(times={(2, 3, 4): 1e-6})
    assert given.rate(2, 3, 4) == pytest.approx(48 / 1e-6)
    # A large product runs faster per FLOP than a 1×1×1 one (call overhead dominates it).
    assert rate.rate(128, 128, 128) > 10 * rate.rate(1, 1, 1)


def test_gemm_rate_rejects_bad_sizes_and_times():
    from deep500.lv0_operators.gemm_rate import GemmRate
    with pytest.raises(Deep500Error, match="sizes must be positive"):
        GemmRate().time(0, 4, 4)
    with pytest.raises(Deep500Error, match="must be positive"):
        GemmRate(times=[[1, 2, 3, 0.0]])
    with pytest.raises(Deep500Error, match="repeats"):
        GemmRate(repeats=0)


def test_gemm_rate_with_torch_times_torch_matmul():
    pytest.importorskip("torch")
    from deep500.lv0_operators.gemm_rate import GemmRate
    rate = GemmRate(repeats=2, library="torch")
    assert rate.library == "torch" and 0 < rate.time(8, 32, 16) < 0.1
    with pytest.raises(Deep500Error, match="library must be"):
        GemmRate(library="cublas")
