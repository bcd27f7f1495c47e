"""PyTorch's DistributedDataParallel (gloo) as a Deep500 distributed optimizer.

Under ``mpirun -np 2`` (one launch, ``scripts/ddp_train.py``): the ranks hold identical
parameters after every step; DDP on 2 ranks of local batch b equals one process with
batch 2b (Theorem 1 of synchronous SGD); it matches ``d5ref.ConsistentDecentralized``
on the same ONNX model; the epoch's measurements are there and the modelled gloo
traffic agrees with what the kernel saw the process write; ``d5.test_training`` drives
it. Without MPI: gloo's traffic models, and the errors of starting torch.distributed.
"""
import json
import socket
from datetime import timedelta

import numpy as np
import pytest

import deep500 as d5
from deep500.frameworks import pytorch as d5pt
from deep500.frameworks import reference as d5ref
from deep500.frameworks.pytorch import distributed as ddp_module
from deep500.frameworks.pytorch.distributed import (PyTorchDistributedDataParallel,
                                                    init_torch_distributed)
from deep500.frameworks.pytorch.gloo_traffic import (gloo_broadcast_traffic,
                                                     gloo_ring_allreduce_traffic)
from deep500.lv3_distributed.volume import Traffic, ring_allreduce_traffic
from deep500.networks import create_model
from tests.lv3_distributed.mpi_helpers import mpirun

torch = pytest.importorskip("torch")
STEPS, BATCH, RANKS = 5, 8, 2
# Same learning rates as scripts/ddp_train.py.
BASES = {"ddp-sgd": lambda ex: d5pt.GradientDescent(ex, learning_rate=0.1),
         "ddp-momentum": lambda ex: d5pt.MomentumOptimizer(ex, learning_rate=0.05,
                                                           momentum=0.9)}


def small_model():
    return create_model("mlp", input_shape=(1, 8, 8), hidden=(16,), classes=10,
                        loss="softmax_cross_entropy", seed=3)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    status, output, _ = mpirun(RANKS, "ddp_train.py", out, "--steps", STEPS, "--batch",
                               BATCH, "--training", timeout=240)
    assert status == 0, output[-3000:]
    ranks = [{**json.loads((out / f"rank{r}.json").read_text()), "out": str(out)}
             for r in range(RANKS)]
    parameters = {(r, case): dict(np.load(out / f"rank{r}-{case}.npz"))
                  for r in range(RANKS) for case in ranks[0]["cases"]}
    return ranks, parameters


# -- under mpirun ---------------------------------------------------------------------
@pytest.mark.mpi
@pytest.mark.parametrize("case", ["ddp-sgd", "ddp-momentum"])
def test_ranks_hold_identical_parameters_after_every_step(run, case):
    ranks, parameters = run
    steps = [rank["cases"][case]["steps"] for rank in ranks]
    assert len(steps[0]) == STEPS
    assert [s["params"] for s in steps[0]] == [s["params"] for s in steps[1]]
    for name, value in parameters[(0, case)].items():
        np.testing.assert_array_equal(value, parameters[(1, case)][name])
    assert ranks[0]["cases"][case]["consistent"] is True


@pytest.mark.mpi
@pytest.mark.parametrize("case", ["ddp-sgd", "ddp-momentum"])
def test_ddp_equals_one_process_with_the_global_batch(run, case):
    """Theorem 1 of synchronous SGD: p ranks of batch b (d5.DistributedSampler shards)
    take the steps of one process with batch p*b drawn by a ShuffleSampler of the same
    seed; only the summation order of the gradient differs."""
    _, parameters = run
    train, _ = d5.load_dataset("digits")
    executor = d5pt.from_onnx(small_model())
    optimizer = BASES[case](executor)
    losses = optimizer.train(d5.ShuffleSampler(train, RANKS * BATCH, seed=7), STEPS)
    assert len(losses) == STEPS
    for name, value in parameters[(0, case)].items():
        np.testing.assert_allclose(value, executor.network.fetch_tensor(name),
                                   rtol=1e-5, atol=1e-6, err_msg=name)


@pytest.mark.mpi
def test_ddp_matches_the_reference_consistent_decentralized(run):
    """The same ONNX model, data and learning rate: torch's and the reference's
    numerics differ only in rounding."""
    ranks, parameters = run
    ddp, reference = parameters[(0, "ddp-sgd")], parameters[(0, "ref-sgd")]
    assert sorted(ddp) == sorted(reference)
    for name in ddp:
        np.testing.assert_allclose(ddp[name], reference[name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    losses = [[s["loss"] for s in ranks[0]["cases"][case]["steps"]]
              for case in ("ddp-sgd", "ref-sgd")]
    np.testing.assert_allclose(*losses, rtol=1e-5)


@pytest.mark.mpi
@pytest.mark.parametrize("rank", range(RANKS))
def test_end_epoch_measures_like_the_reference_schemes(run, rank):
    case = run[0][rank]["cases"]["ddp-sgd"]
    measured, analytic = case["measured"], case["analytic"]
    assert set(measured["phase_times"]) == {"forward", "backward_allreduce", "update"}
    assert all(t > 0 for t in measured["phase_times"].values())
    assert measured["rank"] == rank and measured["size"] == RANKS
    assert measured["replica_divergence"] == 0.0
    assert measured["counted"] == "includes modelled"
    gradient_bytes = sum(measured["bucket_bytes"])
    assert gradient_bytes == 4 * (64 * 16 + 16 + 16 * 10 + 10)
    # gloo's ring sends the textbook 2(p-1)/p x n per step: n for 2 ranks.
    assert measured["bytes_sent"] == measured["bytes_received"] == STEPS * gradient_bytes
    assert analytic["bytes_sent"] == measured["bytes_sent"]
    entry = case["volume"]["allreduce:gloo"]
    assert entry["counted"] == "modelled (gloo ring)"
    assert entry["calls"] == STEPS * len(measured["bucket_bytes"])
    broadcast = case["volume"]["broadcast:gloo"]   # at construction, not in the epoch
    assert broadcast["counted"] == "modelled (gloo binomial tree)"
    assert (broadcast["bytes_sent"], broadcast["bytes_received"]) == \
        ((gradient_bytes, 0) if rank == 0 else (0, gradient_bytes))
    assert set(measured["ddp_runtime_stats"]) >= {"backward_comm_time"}
    assert case["hyperparameters"]["backend"] == "gloo"
    assert case["hyperparameters"]["ranks"] == RANKS


@pytest.mark.mpi
@pytest.mark.parametrize("rank", range(RANKS))
def test_modelled_bytes_agree_with_what_the_kernel_saw_written(run, rank):
    """gloo writes its messages to TCP sockets with writev, which Linux counts in
    /proc/self/io; MPI (shared memory) writes nothing during the steps. The written
    bytes are the modelled payload plus gloo's small per-message headers."""
    case = run[0][rank]["cases"]["ddp-sgd"]
    written = case["kernel_io"].get("written")
    if written is None:
        pytest.skip("no /proc/self/io on this system")
    measured = case["measured"]
    assert measured["bytes_sent"] <= written <= \
        measured["bytes_sent"] + 256 * measured["messages_sent"] + 1024


@pytest.mark.mpi
def test_test_training_drives_ddp_and_evaluates_through_the_executor(run):
    ranks, _ = run
    training = ranks[0]["training"]
    assert training["test_accuracy"] > 0.3           # one epoch; chance is 0.1
    summary = training["distributed"]
    assert summary["scheme"] == "PyTorchDistributedDataParallel(MomentumOptimizer)"
    assert summary["size"] == RANKS and summary["consistent"] is True
    epoch = summary["epochs"][0]
    assert epoch["bytes_sent"][0] == epoch["bytes_sent"][1] > 0
    assert epoch["replica_divergence"] == [0.0, 0.0]
    assert set(epoch["phase_times_mean"]) == {"forward", "backward_allreduce", "update"}
    assert ranks[1]["training"]["distributed"] is None


@pytest.mark.mpi
def test_ddp_phases_are_in_each_ranks_timeline(run):
    ranks, _ = run
    out = ranks[0]["out"]
    for rank in range(RANKS):
        with open(f"{out}/ddp_timeline-rank{rank}.json") as handle:
            trace = json.load(handle)
        complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
        assert {e["pid"] for e in complete} == {rank}
        steps = {(e["args"]["epoch"], e["args"]["step"]) for e in complete}
        assert len(steps) == 3  # first_steps=3
        names = [e["name"] for e in complete]
        for phase in ("forward", "backward_allreduce", "update"):
            assert names.count(phase) == 3, names
        lanes = {e["name"]: e["cat"] for e in complete}
        assert lanes == {"forward": "compute", "backward_allreduce": "communication",
                         "update": "compute"}


# -- gloo's traffic ---------------------------------------------------------------------
def test_gloo_ring_is_the_textbook_ring_when_segments_divide_the_buffer():
    for count, size in [(1210, 2), (4096, 4), (3 << 20, 2)]:
        for rank in range(size):
            gloo = gloo_ring_allreduce_traffic(count, 4, size, rank)
            ring = ring_allreduce_traffic(count, 4, size, rank)
            assert gloo[:2] == ring[:2]


def test_gloo_ring_segments_a_short_buffer():
    # 5 float32 over 2 ranks: 4 segments of 8 B (the last one empty); rank 0 sends the
    # 4 B segment and both full ones, and receives the same bytes in 3 messages.
    assert gloo_ring_allreduce_traffic(5, 4, 2, 0) == Traffic(20, 20, 3, 3)
    assert gloo_ring_allreduce_traffic(5, 4, 2, 1) == Traffic(20, 20, 3, 3)
    assert gloo_ring_allreduce_traffic(5, 4, 1, 0) == Traffic(0, 0, 0, 0)


def test_gloo_ring_pipelines_segments_of_at_most_one_mib():
    count, size = 5 << 20, 4                   # 20 MiB: 20 segments of 1 MiB
    traffic = [gloo_ring_allreduce_traffic(count, 4, size, r) for r in range(size)]
    assert all(t.messages_sent == 2 * (20 - 5) for t in traffic)
    assert sum(t.bytes_sent for t in traffic) == sum(t.bytes_received for t in traffic)


@pytest.mark.parametrize("size,root", [(2, 0), (5, 0), (5, 2), (8, 7)])
def test_gloo_broadcast_is_a_binomial_tree(size, root):
    traffic = [gloo_broadcast_traffic(100, size, r, root) for r in range(size)]
    assert traffic[root].bytes_received == 0
    assert all(t.messages_received == 1 for r, t in enumerate(traffic) if r != root)
    assert sum(t.messages_sent for t in traffic) == size - 1
    assert traffic[root].messages_sent == (size - 1).bit_length()


# -- starting torch.distributed ----------------------------------------------------------
@pytest.fixture
def no_process_group():
    dist = torch.distributed
    assert not dist.is_initialized()
    yield dist
    if dist.is_initialized():
        dist.destroy_process_group()


def test_a_torch_without_distributed_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.distributed, "is_available", lambda: False)
    with pytest.raises(d5.UnsupportedError, match="without torch.distributed"):
        init_torch_distributed()
    monkeypatch.setattr(torch.distributed, "is_available", lambda: True)
    monkeypatch.setattr(torch.distributed, "is_gloo_available", lambda: False)
    with pytest.raises(d5.UnsupportedError, match="without the gloo backend"):
        init_torch_distributed()


def test_init_is_idempotent_and_refuses_other_ranks(no_process_group):
    dist = no_process_group
    assert init_torch_distributed(timeout=20) == (0, 1)
    assert dist.is_initialized() and dist.get_backend() == "gloo"
    assert init_torch_distributed(timeout=20) == (0, 1)

    class TwoRanks:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return 2

    with pytest.raises(d5.Deep500Error, match="already running as rank 0 of 1"):
        init_torch_distributed(TwoRanks())


def test_a_rendezvous_that_times_out_is_a_clear_error(no_process_group, monkeypatch):
    dist = no_process_group

    def times_out(*args, **kwargs):
        raise dist.DistStoreError("Timed out after 1 seconds waiting for clients")

    monkeypatch.setattr(dist, "init_process_group", times_out)
    with pytest.raises(d5.Deep500Error, match=r"did not start .* within 1 s .*rank 0: "
                                              r"DistStoreError: Timed out"):
        init_torch_distributed(timeout=1)
    assert not dist.is_initialized()


def test_an_unreachable_store_is_reported_not_hung(no_process_group):
    dist = no_process_group
    with socket.socket() as probe:             # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    reason = ddp_module._join(dist, 1, 2, "127.0.0.1", port, timedelta(seconds=1))
    assert reason and not dist.is_initialized()


def test_only_d5pt_optimizers_on_onnx_executors_are_wrapped():
    with pytest.raises(d5.Deep500Error, match="wraps a d5pt optimizer"):
        PyTorchDistributedDataParallel(
            d5ref.GradientDescent(d5ref.from_onnx(small_model())))
