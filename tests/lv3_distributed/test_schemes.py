"""The reference distributed schemes under real ``mpirun`` (2, 3 and 4 ranks).

* Theorem 1 of synchronous SGD: ``ConsistentDecentralized`` on p ranks with local batch
  b equals one process with batch p*b (same permutation), with and without momentum.
* Consistent schemes: every rank holds bit-identical parameters after every step
  (SHA-256 of the parameters, per step, per rank).
* Inconsistent schemes: the replicas differ between synchronisations, and the epoch's
  measured ``replica_divergence`` says so.
* Every scheme's bytes, counted exactly as sent, equal its analytic model.

``scripts/check_schemes.py`` trains the same small MLP on the digits for a few steps
and writes per-rank JSON and the final parameters; the single-process comparison runs
here, in the test process.
"""
import functools
import json

import numpy as np
import pytest
from numpy.testing import assert_allclose

import deep500 as d5
from deep500.frameworks import reference as d5ref
from deep500.lv3_distributed import volume as vol
from tests.lv3_distributed.mpi_helpers import SCRIPTS, mpirun

BATCH, STEPS, SEED = 8, 5, 7   # as in check_schemes.py
BASES = {"sgd": (d5ref.GradientDescent, {"learning_rate": 0.1}),
         "momentum": (d5ref.MomentumOptimizer, {"learning_rate": 0.05, "momentum": 0.9})}


#: The runs made so far in this module, by their arguments: a test that needs a run
#: another test already made (the same scheme, ranks, base, steps and options) reads
#: that run's output instead of launching mpirun again.
_RUNS = {}


def run_scheme(tmp_path, ranks, scheme, base="sgd", steps=STEPS, **options):
    key = (ranks, scheme, base, steps, json.dumps(options, sort_keys=True))
    if key not in _RUNS:
        out = tmp_path / f"{scheme}-{ranks}-{base}"
        out.mkdir()
        status, output, _ = mpirun(ranks, "check_schemes.py", out, scheme, "--base", base,
                                   "--steps", steps, "--batch", BATCH,
                                   "--options", json.dumps(options), timeout=180)
        assert status == 0, output[-4000:]
        _RUNS[key] = out
    out = _RUNS[key]
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in range(ranks)]
    params = [dict(np.load(out / f"rank{r}.npz")) for r in range(ranks)]
    return results, params


def single_process(base, global_batch, steps=STEPS):
    """The same MLP trained by one process on the global minibatches (computed once per
    base, batch and steps; each call returns its own copies)."""
    return {name: value.copy()
            for name, value in _single_process(base, global_batch, steps).items()}


@functools.lru_cache(maxsize=None)
def _single_process(base, global_batch, steps):
    train, _ = d5.load_dataset("digits")
    executor = d5ref.from_onnx(single_model())
    base_class, hyper = BASES[base]
    optimizer = base_class(executor, **hyper)
    sampler = d5.ShuffleSampler(train, global_batch, seed=SEED)
    optimizer.train(sampler, steps=steps)
    return {name: executor.network.fetch_tensor(name)
            for name in executor.network.get_params()}


def assert_identical_every_step(results):
    fingerprints = [[step["params"] for step in rank["steps"]] for rank in results]
    assert len(fingerprints[0]) == STEPS
    for rank, prints in enumerate(fingerprints[1:], start=1):
        assert prints == fingerprints[0], f"rank {rank} differs from rank 0"


def assert_measured_equals_analytic(results):
    for rank in results:
        measured, analytic = rank["measured"], rank["analytic"]
        assert measured["counted"] == "exact"
        assert (measured["bytes_sent"], measured["bytes_received"]) == \
            (analytic["bytes_sent"], analytic["bytes_received"]), rank["rank"]
    assert_message_sizes_hold_the_traffic(results)


def assert_message_sizes_hold_the_traffic(results):
    """The epoch's message-size histogram holds exactly the messages and bytes sent,
    every message sized (exact counts, or the ring's modelled chunks)."""
    for rank in results:
        measured, sizes = rank["measured"], rank["measured"]["message_sizes"]
        assert (sizes["messages"], sizes["bytes"]) == (
            measured["messages_sent"], measured["bytes_sent"]), rank["rank"]
        assert sizes["unsized_messages"] == 0, rank["rank"]
        assert sum(row["messages"] for row in sizes["bins"]) == sizes["messages"]


def assert_message_sizes_are_the_ring_chunks(results, params):
    """Data-parallel SGD over the ring allreduce: each step sends the gradient buffer's
    chunks (2(p - 1) messages), so the histogram's bins are the chunks' bins."""
    count = sum(np.asarray(v).size for v in params[0].values())
    for rank in results:
        p, r = rank["size"], rank["rank"]
        expected = {}
        for nbytes, messages in vol.ring_allreduce_message_sizes(count, 4, p, r):
            bin_counts = expected.setdefault(nbytes.bit_length(), [0, 0])
            bin_counts[0] += STEPS * messages
            bin_counts[1] += STEPS * messages * nbytes
        got = {row["bin"]: [row["messages"], row["bytes"]]
               for row in rank["measured"]["message_sizes"]["bins"]}
        assert got == expected, r


# -- Theorem 1 ---------------------------------------------------------------------------
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("base", ["sgd", "momentum"])
def test_decentralized_equals_one_process_with_the_global_batch(tmp_path, ranks, base):
    results, params = run_scheme(tmp_path, ranks, "ConsistentDecentralized", base)
    assert_identical_every_step(results)
    assert_message_sizes_hold_the_traffic(results)
    assert_message_sizes_are_the_ring_chunks(results, params)
    expected = single_process(base, ranks * BATCH)
    moved = max(float(np.abs(params[0][k] - v).max()) for k, v in expected.items())
    for name, value in expected.items():
        # float32 sums in another order: a few ulps of the parameters' magnitude
        assert_allclose(params[0][name], value, rtol=1e-5, atol=2e-6, err_msg=name)
    assert moved < 1e-4
    start = single_process(base, ranks * BATCH, steps=0)
    assert max(float(np.abs(expected[k] - start[k]).max()) for k in start) > 1e-3


def test_wrapping_in_the_base_class_is_data_parallel_sgd(tmp_path):
    """d5.DistributedOptimizer(base), as a Horovod user would write it: the same steps,
    bit for bit, as ConsistentDecentralized with its default ring allreduce."""
    wrapped, _ = run_scheme(tmp_path, 2, "DistributedOptimizer", "momentum")
    reference, _ = run_scheme(tmp_path, 2, "ConsistentDecentralized", "momentum")
    assert_identical_every_step(wrapped)
    assert [s["params"] for s in wrapped[0]["steps"]] == \
        [s["params"] for s in reference[0]["steps"]]
    assert_measured_equals_analytic(wrapped)


def test_distributed_sampler_shards_are_the_global_batches():
    train, _ = d5.load_dataset("digits")
    for size in (2, 3, 4):
        shards = [d5.DistributedSampler(train, BATCH, seed=SEED, rank=r, size=size)
                  for r in range(size)]
        single = d5.ShuffleSampler(train, BATCH * size, seed=SEED)
        assert len(shards[0]) == len(single) == len(train) // (BATCH * size)
        for epoch in range(2):
            for batches, whole in zip(zip(*shards), single):
                for node in ("input", "labels"):
                    glued = np.concatenate([b[node] for b in batches])
                    assert np.array_equal(glued, whole[node])
            assert shards[0].epoch == single.epoch == epoch


# -- consistency and traffic, per scheme ---------------------------------------------------
@pytest.mark.parametrize("ranks,scheme,options", [
    (2, "ConsistentDecentralized", {"algorithm": "mpi"}),
    (3, "ConsistentParameterServer", {}),
    (2, "ConsistentParameterServer", {"root": 1}),
    (3, "ConsistentNeighbors", {"topology": "ring"}),
    (3, "ConsistentNeighbors", {"topology": "torus"}),   # a 1 x 3 torus is the ring
], ids=lambda v: v if isinstance(v, (int, str)) else json.dumps(v))
def test_consistent_schemes_keep_identical_parameters(tmp_path, ranks, scheme, options):
    results, params = run_scheme(tmp_path, ranks, scheme, "momentum", **options)
    assert_identical_every_step(results)
    assert all(r["consistent"] for r in results)
    assert all(r["measured"]["replica_divergence"] == 0.0 for r in results)
    if options.get("algorithm") != "mpi":
        assert_measured_equals_analytic(results)
    else:   # modelled as the ring: its chunks
        assert_message_sizes_hold_the_traffic(results)
        assert_message_sizes_are_the_ring_chunks(results, params)
    # the same steps as data-parallel SGD with the global batch
    expected = single_process("momentum", ranks * BATCH)
    for name, value in expected.items():
        assert_allclose(params[0][name], value, rtol=1e-5, atol=2e-6, err_msg=name)


def test_parameter_server_traffic_concentrates_at_the_root(tmp_path):
    results, _ = run_scheme(tmp_path, 3, "ConsistentParameterServer")
    n = results[1]["analytic"]["bytes_sent"] // STEPS
    sent = [r["measured"]["bytes_sent"] for r in results]
    assert sent == [2 * n * STEPS, n * STEPS, n * STEPS]
    assert_measured_equals_analytic(results)


@pytest.mark.parametrize("topology", ["ring", "torus"])
def test_neighbours_of_four_ranks_are_inconsistent(tmp_path, topology):
    """On a ring of 4, and on a 2 x 2 torus (no diagonals), rank 0 never hears from
    rank 2 directly: the replicas differ."""
    results, params = run_scheme(tmp_path, 4, "ConsistentNeighbors", topology=topology)
    assert not any(r["consistent"] for r in results)
    assert results[0]["steps"][-1]["params"] != results[2]["steps"][-1]["params"]
    assert all(r["measured"]["replica_divergence"] > 0 for r in results)
    assert_measured_equals_analytic(results)
    assert any(not np.array_equal(params[0][k], params[2][k]) for k in params[0])


def test_dpsgd_parameter_mixing_runs_and_counts(tmp_path):
    """D-PSGD: mixing makes a ring of 3 agree, then each rank applies its own
    gradient, so the replicas differ by one local step."""
    results, _ = run_scheme(tmp_path, 3, "ConsistentNeighbors", mix="parameters")
    assert not any(r["consistent"] for r in results)
    assert len({r["steps"][-1]["params"] for r in results}) == 3
    assert all(r["measured"]["replica_divergence"] > 0 for r in results)
    assert_measured_equals_analytic(results)
    losses = [step["loss"] for step in results[0]["steps"]]
    assert all(np.isfinite(losses))


def test_model_averaging_diverges_between_averagings(tmp_path):
    results, _ = run_scheme(tmp_path, 3, "ModelAverageDecentralized", "momentum", period=2)
    assert not any(r["consistent"] for r in results)
    by_step = list(zip(*[[s["params"] for s in r["steps"]] for r in results]))
    for step, prints in enumerate(by_step, start=1):
        if step % 2 == 0:
            assert len(set(prints)) == 1, f"step {step}: averaged, yet ranks differ"
        else:
            assert len(set(prints)) == 3, f"step {step}: local, yet ranks agree"
    # 5 steps end after a local step: the replicas differ and the measurement says so
    assert all(r["measured"]["replica_divergence"] > 0 for r in results)
    assert [r["measured"]["averagings"] for r in results] == [2, 2, 2]
    # measured as each averaging happens, from the mean the allreduce brought anyway
    for r in results:
        before = r["measured"]
        assert 0 < before["divergence_before_sync_mean"] <= before["divergence_before_sync_max"]
    assert_measured_equals_analytic(results)


def test_model_averaging_every_step_is_data_parallel_sgd(tmp_path):
    results, params = run_scheme(tmp_path, 2, "ModelAverageDecentralized", period=1)
    assert_identical_every_step(results)
    expected = single_process("sgd", 2 * BATCH)
    for name, value in expected.items():
        assert_allclose(params[0][name], value, rtol=1e-5, atol=2e-6, err_msg=name)


# -- without MPI ---------------------------------------------------------------------------
def test_schemes_reject_bad_options():
    executor = d5ref.from_onnx(single_model())
    base = d5ref.GradientDescent(executor)
    with pytest.raises(d5.Deep500Error, match="period"):
        d5ref.ModelAverageDecentralized(base, period=0)
    with pytest.raises(d5.Deep500Error, match="topology"):
        d5ref.ConsistentNeighbors(base, topology="hypercube")
    with pytest.raises(d5.Deep500Error, match="root 3"):
        d5ref.ConsistentParameterServer(base, root=3)
    with pytest.raises(d5.Deep500Error, match="algorithm"):
        d5ref.ConsistentDecentralized(base, algorithm="tree")
    wrapped = d5ref.ConsistentDecentralized(base)
    with pytest.raises(d5.Deep500Error, match="already distributed"):
        d5ref.ConsistentDecentralized(wrapped)


def single_model():
    import sys
    sys.path.insert(0, str(SCRIPTS))
    try:
        from check_schemes import small_model
    finally:
        sys.path.remove(str(SCRIPTS))
    return small_model()
