"""Calibration: the piecewise Hockney fit on synthetic times, the measured phases, the
one-rank error, and samples kept on disk when a calibration is stopped."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import deep500 as d5
from deep500.lv3_distributed import calibration
from deep500.lv3_distributed.calibration import software as calibration_software
from deep500.utils.machine import load_machine

DEEP500 = [sys.executable, "-m", "deep500"]


def test_one_line_recovered_exactly():
    sizes = [2 ** k for k in range(0, 24, 2)]
    times = [3e-6 + 2e-10 * n for n in sizes]
    segments = calibration.fit_hockney(sizes, times)
    assert len(segments) == 1
    assert segments[0]["alpha_s"] == pytest.approx(3e-6, rel=1e-6)
    assert segments[0]["beta_s_per_byte"] == pytest.approx(2e-10, rel=1e-6)
    assert segments[0]["min_bytes"] == 0 and segments[0]["max_bytes"] is None


def test_link_bound_fit_floors_a_faster_than_the_link_segment_at_the_last_beta():
    """A token bucket's burst: 16-128 KB cross at 2x the link's rate. ``link_bound``
    gives that segment the large messages' β and refits its α alone (the least squares
    on relative error with β fixed: α = Σ(t - βn)/t² / Σ1/t²); without it the fit keeps
    the burst's β."""
    sizes = [2 ** k for k in range(10, 25)]
    link = 8e-9                               # 125 MB/s
    times = [5e-5 + 0.5 * link * n if n <= 131072 else 3e-4 + link * n for n in sizes]
    plain = calibration.fit_hockney(sizes, times)
    assert len(plain) == 2 and plain[0]["beta_s_per_byte"] == pytest.approx(0.5 * link,
                                                                             rel=1e-6)
    bound = calibration.fit_hockney(sizes, times, link_bound=True)
    first, last = bound
    assert last["beta_s_per_byte"] == pytest.approx(link, rel=1e-6)
    assert first["beta_s_per_byte"] == last["beta_s_per_byte"] and first["beta_floored"]
    assert first["fitted_beta_s_per_byte"] == pytest.approx(0.5 * link, rel=1e-6)
    n = np.asarray([x for x in sizes if x <= 131072], float)
    t = 5e-5 + 0.5 * link * n
    alpha = max(0.0, np.sum((t - link * n) / t ** 2) / np.sum(1 / t ** 2))
    assert first["alpha_s"] == pytest.approx(alpha, rel=1e-9)
    assert first["max_relative_residual"] == pytest.approx(
        np.max(np.abs((alpha + link * n - t) / t)), rel=1e-9)
    # a segment already at or above the floor is left as fitted
    assert "beta_floored" not in last
    assert calibration.fit_hockney(sizes, [5e-5 + link * n for n in sizes],
                                   link_bound=True)[0].get("beta_floored") is None


def test_link_bound_exchange_segments_take_the_ping_pongs_floor():
    """The exchange's segments are floored at the ping-pong's large-message β (each
    direction has its own link at that rate), even its own last segment, whose fit on
    two streams at once can come out faster than the link; without ``link_bound`` the
    fits are left alone."""
    sizes = [2 ** k for k in range(10, 25)]
    link = 8e-9
    pingpong = {n: [2e-5 + link * n] for n in sizes}
    exchange = {n: [3e-5 + 0.7 * link * n] for n in sizes}   # "faster" than the link
    bound = calibration.network_section(pingpong, exchange, link_bound=True)
    assert all(s["beta_s_per_byte"] == pytest.approx(link, rel=1e-6)
               for s in bound["exchange_segments"])
    assert all(s.get("beta_floored") for s in bound["exchange_segments"])
    assert "link-bound" in bound["method"]
    plain = calibration.network_section(pingpong, exchange)
    assert plain["exchange_segments"][-1]["beta_s_per_byte"] == pytest.approx(0.7 * link,
                                                                              rel=1e-6)


def test_protocol_switch_found_and_both_lines_recovered():
    sizes = [2 ** k for k in range(0, 27)]
    # eager below 64 KB, rendezvous (higher α, lower β) from it
    times = [1e-6 + 5e-10 * n if n < 65536 else 2e-5 + 1e-10 * n for n in sizes]
    rng = np.random.default_rng(1)
    noisy = [t * (1 + 0.01 * rng.standard_normal()) for t in times]
    segments = calibration.fit_hockney(sizes, noisy)
    assert len(segments) == 2
    first, second = segments
    assert first["max_bytes"] == 65536 and second["min_bytes"] == 65536
    assert first["alpha_s"] == pytest.approx(1e-6, rel=0.1)
    assert first["beta_s_per_byte"] == pytest.approx(5e-10, rel=0.1)
    assert second["beta_s_per_byte"] == pytest.approx(1e-10, rel=0.05)
    lo, hi = second["ci_beta"]
    assert lo <= second["beta_s_per_byte"] <= hi and hi - lo < 0.2e-10
    assert max(s["max_relative_residual"] for s in segments) < 0.05


def test_no_network_calibration_writes_a_loadable_file(tmp_path):
    out = str(tmp_path / "m.yaml")
    data = calibration.run_calibration(out, network=False, quick=True, progress=False)
    machine = load_machine(out)
    assert data["network"]["skipped"]
    assert machine.gamma_cache > 0 and machine.gamma_memory > 0
    # a NumPy triad on any current CPU moves between 100 MB/s and 1 TB/s
    assert 1e8 < machine.memory_bandwidth < 1e12
    assert set(machine.peak) == {"gemm", "conv"}
    assert 1 in machine.peak["gemm"] and 1e7 < machine.peak_flops(1) < 1e13
    phases = [json.loads(line)["phase"] for line in open(calibration.samples_path_for(out))]
    gammas = len(calibration.Plan.make(quick=True).gamma_sizes)
    assert phases[:gammas + 1] == ["gamma"] * gammas + ["triad"]
    assert "gemm" in phases and "conv" in phases
    assert [n for n, _ in machine.gamma_curve] == calibration.Plan.make(quick=True).gamma_sizes
    # the casts of both 16-bit wires, measured: a cast touches at least 6 bytes per
    # element, so it cannot beat the triad's bandwidth; and it is not slower than 1 µs
    for wire in ("float16", "bfloat16"):
        encode, decode = machine.wire_cast_seconds(wire)
        for cost in (encode, decode):
            assert 6 / machine.memory_bandwidth / 4 < cost < 1e-6, (wire, cost)
    assert phases.count("wire_casts") == 2


def test_one_rank_is_refused_with_what_to_do(tmp_path):
    result = subprocess.run([*DEEP500, "calibrate", "--out", str(tmp_path / "m.yaml"), "--quick"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "ping-pong between two ranks" in result.stderr and "--np 2" in result.stderr
    assert not (tmp_path / "m.yaml").exists()


def test_two_ranks_quick_calibration(quick_machine):
    result, out = quick_machine   # deep500 calibrate --np 2 --quick --quiet (conftest.py)
    assert result.returncode == 0, result.stderr
    machine = load_machine(str(out))
    # shared-memory MPI on one host: latency between 50 ns and 1 ms, 1 MB in under 1 s
    assert 5e-8 < machine.p2p_time(1) < 1e-3
    assert machine.p2p_time(1 << 20) < 1.0
    assert machine.p2p_time(1 << 20) > machine.p2p_time(1)
    sizes = [m["nbytes"] for m in machine.raw["network"]["measurements"]]
    assert sizes == calibration.Plan.make(quick=True).pingpong_sizes
    # the per-call overhead o of every algorithm with a time model, and its samples
    from deep500.lv3_distributed import allreduce_names
    from deep500.lv3_distributed.collective_models import predict_allreduce
    table = machine.raw["software"]["allreduce_call_overhead_s"]
    modelled = allreduce_names()
    assert sorted(table) == sorted(modelled)
    records = [json.loads(line) for line in open(calibration.samples_path_for(str(out)))]
    calls = {r["algorithm"]: r for r in records if r["phase"] == "allreduce_call"}
    assert sorted(calls) == sorted(allreduce_names())
    for name in modelled:
        o = machine.allreduce_overhead(name)
        # o is the median call minus the model, clamped at 0 (a Python call: < 10 ms)
        expected = max(0.0, float(np.median(calls[name]["seconds"]))
                       - predict_allreduce(name, 4, 2, machine))
        assert o == pytest.approx(expected, rel=1e-9, abs=1e-15)
        assert 0.0 <= o < 1e-2 and calls[name]["ranks"] == 2
    # every modelled algorithm in context: its samples, and ratio = median / (model + o)
    context = machine.raw["software"]["allreduce_in_context"]
    assert context["ranks"] == 2 and sorted(context["algorithms"]) == sorted(modelled)
    lines = [r for r in records if r["phase"] == "allreduce_in_context"]
    assert {(r["algorithm"], r["nbytes"]) for r in lines} == {
        (a, n) for a in allreduce_names() for n in calibration_software.CONTEXT_SIZES}
    for name in modelled:
        for row in context["algorithms"][name]:
            seconds = next(r["seconds"] for r in lines
                           if r["algorithm"] == name and r["nbytes"] == row["nbytes"])
            assert len(seconds) == calibration.Plan.make(quick=True).context_repeats
            assert row["measured_median_s"] == pytest.approx(float(np.median(seconds)))
            model = d5.predict_allreduce_call(name, row["nbytes"], 2, machine)
            assert row["ratio"] == pytest.approx(row["measured_median_s"] / model, rel=1e-9)
            # the same factor comes back out of the machine model at the measured size
            assert machine.allreduce_context_factor(name, row["nbytes"]) == \
                pytest.approx(row["ratio"], rel=1e-9)
    # every finished round is on disk as it ends (what a killed calibration keeps)
    rounds = [r for r in records if r["phase"] == "allreduce_in_context_round"]
    assert [r["round"] for r in rounds] == list(
        range(calibration.Plan.make(quick=True).context_repeats))
    # δ_sum and δ_receive at every coherence size, as on disk (median clamped at 0)
    from deep500.lv3_distributed.calibration import coherence
    sizes = list(calibration.Plan.make(quick=True).coherence_sizes)
    samples = coherence.read_coherence_samples(calibration.samples_path_for(str(out)))
    for kind, curve in (("sum", machine.shared_sum_curve),
                        ("receive", machine.shared_receive_curve)):
        assert [int(n) for n, _ in curve] == sizes and sorted(samples[kind]) == sizes
        for n, value in curve:
            assert value == pytest.approx(max(0.0, float(np.median(samples[kind][n]))))
            # a penalty of under 100 ns per byte (6 us per line: none is that slow)
            assert 0.0 <= value < 1e-7
    # overlap beside compute, per non-blocking algorithm: κ >= 0, η >= 1, the medians
    # of the samples on disk (two ranks' rows per repeat)
    from deep500.lv3_distributed.calibration import overlap
    stretches = overlap.read_overlap_samples(calibration.samples_path_for(str(out)))
    assert sorted(stretches) == sorted(overlap.OVERLAP_ALGORITHMS)
    for name, entry in stretches.items():
        kappa, eta = machine.overlap_stretch(name)
        assert kappa == pytest.approx(float(np.median(entry["compute_stretch"])))
        assert eta == pytest.approx(float(np.median(entry["communication_stretch"])))
        assert kappa >= 0.0 and eta >= 1.0
        assert 0 < len(entry["compute_stretch"]) <= 2 * calibration.Plan.make(
            quick=True).overlap_repeats
    # the fusion copy: a per-tensor cost and a per-byte cost below 1 ns/B (> 1 GB/s)
    assert machine.fusion_copy is not None
    per_tensor, per_byte = machine.fusion_copy
    assert 0.0 <= per_tensor < 1e-3 and 0.0 < per_byte < 1e-9


@pytest.mark.slow
def test_stopped_calibration_keeps_its_samples(tmp_path):
    out = tmp_path / "m.yaml"
    samples = tmp_path / "m.samples.jsonl"
    process = subprocess.Popen([*DEEP500, "calibrate", "--np", "2", "--out", str(out), "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while time.time() < deadline:
        if samples.exists() and samples.read_text().count("\n") >= 3:
            break
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode != 0
    assert "samples measured so far" in stderr
    assert not out.exists()
    lines = [json.loads(line) for line in samples.read_text().splitlines() if line.endswith("}")]
    assert len(lines) >= 3 and all(line["phase"] == "pingpong" for line in lines)
    assert calibration.read_pingpong_samples(str(samples))


def test_in_context_samples_of_a_killed_calibration_come_from_its_rounds(tmp_path):
    """A calibration killed in the in-context phase wrote round lines and no summary:
    the samples are read back per (algorithm, size), in round order; a line the kill
    cut is passed over."""
    path = tmp_path / "m.samples.jsonl"
    configurations = [["ring", 4], ["ring", 1024], ["mpi", 4]]
    with open(path, "w") as f:
        for i, seconds in enumerate([[1e-5, 2e-5, 3e-5], [4e-5, 5e-5, 6e-5]]):
            f.write(json.dumps({"phase": "allreduce_in_context_round", "round": i,
                                "ranks": 2, "burst_s": 5e-4,
                                "configurations": configurations,
                                "seconds": seconds}) + "\n")
        f.write('{"phase": "allreduce_in_context_round", "round": 2, "sec')
    samples = calibration_software.read_in_context_samples(str(path))
    assert samples == {"ring": {4: [1e-5, 4e-5], 1024: [2e-5, 5e-5]}, "mpi": {4: [3e-5, 6e-5]}}
    # summary lines, where present, are what counts
    with open(path, "a") as f:
        f.write("\n" + json.dumps({"phase": "allreduce_in_context", "algorithm": "ring",
                                   "ranks": 2, "nbytes": 4, "seconds": [7e-5]}) + "\n")
    assert calibration_software.read_in_context_samples(str(path)) == {"ring": {4: [7e-5]}}


def test_coherence_samples_of_a_killed_calibration_are_read_back(tmp_path):
    """One line per (kind, size) is written as it is measured; a line cut by a kill is
    passed over."""
    from deep500.lv3_distributed.calibration import coherence
    path = tmp_path / "m.samples.jsonl"
    with open(path, "w") as f:
        f.write(json.dumps({"phase": "coherence", "kind": "sum", "nbytes": 65536,
                            "s_per_byte": [1e-10, 2e-10]}) + "\n")
        f.write(json.dumps({"phase": "coherence", "kind": "receive", "nbytes": 65536,
                            "s_per_byte": [3e-10]}) + "\n")
        f.write('{"phase": "coherence", "kind": "sum", "nbytes": 262144, "s_per')
    samples = coherence.read_coherence_samples(str(path))
    assert samples == {"sum": {65536: [1e-10, 2e-10]}, "receive": {65536: [3e-10]}}
    section = coherence.coherence_section(samples)
    assert section["sum_curve"][0]["value"] == pytest.approx(1.5e-10)
    assert section["receive_curve"][0]["n"] == 1
