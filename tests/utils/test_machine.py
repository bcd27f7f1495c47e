"""Machine files: loading, the Hockney segments, γ, peak FLOP/s, and bad input."""
import math

import pytest
import yaml

from deep500.utils.errors import Deep500Error
from deep500.utils.machine import MachineError, load_machine, save_machine


def _data():
    return {
        "name": "test",
        "source": "hand-written for tests",
        "network": {"segments": [
            {"min_bytes": 0, "max_bytes": 1024, "alpha_s": 1e-6, "beta_s_per_byte": 1e-9},
            {"min_bytes": 1024, "max_bytes": None, "alpha_s": 4e-6, "beta_s_per_byte": 1e-10},
        ]},
        "reduction": {"gamma_cache_s_per_byte": {"value": 1e-10, "buffer_bytes": 1 << 16},
                      "gamma_memory_s_per_byte": {"value": 3e-10, "buffer_bytes": 1 << 26}},
        "memory": {"bandwidth_bytes_per_s": {"value": 1e10, "ci": [0.9e10, 1.1e10]}},
        "compute": {"peak_flops_per_s": {"gemm": {1: 1e10, 2: 2e10, 4: 3.5e10}}},
    }


def test_segments_gamma_and_peak():
    m = load_machine(_data())
    assert m.alpha == 1e-6
    assert m.p2p_time(100) == pytest.approx(1e-6 + 100e-9)
    assert m.p2p_time(1024) == pytest.approx(4e-6 + 1024e-10)
    assert m.beta(10 ** 8) == 1e-10
    assert m.gamma(1024) == 1e-10 and m.gamma(1 << 28) == 3e-10
    # halfway in log(size) between the two measured buffers
    assert m.gamma(1 << 21) == pytest.approx(2e-10)
    assert m.memory_bandwidth == 1e10
    assert m.peak_flops(1) == 1e10 and m.peak_flops(3) == 2e10 and m.peak_flops(16) == 3.5e10
    assert m.peak_flops(2, "conv") == 2e10  # no conv table: gemm's
    with pytest.raises(MachineError, match="kind 'tpu'"):
        m.peak_flops(1, "tpu")


def test_save_and_load_round_trip(tmp_path):
    path = save_machine(_data(), str(tmp_path / "m.yaml"))
    m = load_machine(path)
    assert m.path == path and m.p2p_time(4096) == pytest.approx(4e-6 + 4096e-10)
    assert load_machine(m) is m


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.pop("memory"), "memory"),
    (lambda d: d["memory"].pop("bandwidth_bytes_per_s"), "memory.bandwidth_bytes_per_s"),
    (lambda d: d["memory"].update(bandwidth_bytes_per_s=-5), "memory.bandwidth_bytes_per_s"),
    (lambda d: d["memory"].update(bandwidth_bytes_per_s="fast"), "memory.bandwidth_bytes_per_s"),
    (lambda d: d["memory"].update(bandwidth_bytes_per_s=float("nan")), "memory.bandwidth_bytes_per_s"),
    (lambda d: d["network"]["segments"][1].update(alpha_s=-1e-6), "network.segments[1].alpha_s"),
    (lambda d: d["network"]["segments"][0].pop("beta_s_per_byte"), "network.segments[0].beta_s_per_byte"),
    (lambda d: d["reduction"].update(gamma_cache_s_per_byte=None), "reduction.gamma_cache_s_per_byte"),
    (lambda d: d["compute"]["peak_flops_per_s"]["gemm"].update({0: 1e9}), "compute.peak_flops_per_s.gemm.0"),
    (lambda d: d["compute"]["peak_flops_per_s"]["gemm"].update({2: True}), "compute.peak_flops_per_s.gemm.2"),
    (lambda d: d.update(software={"allreduce_call_overhead_s": {"ring": -1e-6}}),
     "software.allreduce_call_overhead_s.ring"),
    (lambda d: d.update(software={"allreduce_call_overhead_s": {"mpi": {"value": "x"}}}),
     "software.allreduce_call_overhead_s.mpi"),
    (lambda d: d.update(software={"allreduce_call_overhead_s": [1e-6]}),
     "software.allreduce_call_overhead_s"),
    (lambda d: d.update(software={"fusion_copy": {"per_tensor_s": 1e-6}}),
     "software.fusion_copy.s_per_byte"),
    (lambda d: d.update(software=3), "software"),
])
def test_bad_fields_name_field_and_file(tmp_path, edit, field):
    data = _data()
    edit(data)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(Deep500Error) as error:
        load_machine(str(path))
    message = str(error.value)
    assert f"'{field}'" in message and str(path) in message and "deep500 calibrate" in message


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(MachineError, match="does not exist.*deep500 calibrate"):
        load_machine(str(tmp_path / "none.yaml"))
    (tmp_path / "x.yaml").write_text("network: [unclosed")
    with pytest.raises(MachineError, match="not valid YAML"):
        load_machine(str(tmp_path / "x.yaml"))
    with pytest.raises(MachineError, match="top level must be a mapping"):
        from deep500.utils.machine import machine_from_dict
        machine_from_dict([1, 2])


def test_single_line_network_and_skipped_network():
    data = _data()
    data["network"] = {"alpha_s": {"value": 2e-6, "ci": [1e-6, 3e-6]}, "beta_s_per_byte": 1e-9}
    m = load_machine(data)
    assert m.p2p_time(1000) == pytest.approx(3e-6)
    assert m.segments[0].ci_alpha == (1e-6, 3e-6)
    data["network"] = {"skipped": "calibrated with --no-network"}
    m = load_machine(data)
    assert math.isnan(m.alpha)
    with pytest.raises(MachineError, match="no network measurements.*--np 2"):
        m.p2p_time(10)


def test_gamma_curve_interpolates_in_log_size():
    data = _data()
    data["reduction"]["gamma_curve"] = [{"buffer_bytes": 1 << 16, "value": 1e-10},
                                        {"buffer_bytes": 1 << 20, "value": 1e-10},
                                        {"buffer_bytes": 1 << 24, "value": 5e-10}]
    m = load_machine(data)
    assert m.gamma(1 << 10) == 1e-10 and m.gamma(1 << 18) == 1e-10
    assert m.gamma(1 << 22) == pytest.approx(3e-10)
    assert m.gamma(1 << 30) == 5e-10
    data["reduction"]["gamma_curve"][1]["value"] = -1
    with pytest.raises(MachineError, match=r"'reduction.gamma_curve\[1\].value'"):
        load_machine(data)
