"""Every invalid machine-file value is a MachineError naming its field: wrong types,
zero or negative sizes and rates, non-finite numbers, and finite numbers outside the
plausible range of their unit (which would make predictions inf)."""
import pytest
import yaml

from deep500.lv3_distributed.collective_models import predict_allreduce
from deep500.utils.machine import MachineError, load_machine


def _data():
    return {"name": "t", "source": "tests",
            "network": {"segments": [{"min_bytes": 0, "max_bytes": None, "alpha_s": 2e-6,
                                      "beta_s_per_byte": 1e-10, "ci_beta": [9e-11, 1.1e-10]}]},
            "reduction": {"gamma_cache_s_per_byte": {"value": 1e-10, "buffer_bytes": 65536},
                          "gamma_memory_s_per_byte": {"value": 3e-10, "buffer_bytes": 1 << 26}},
            "memory": {"bandwidth_bytes_per_s": 1e10},
            "compute": {"peak_flops_per_s": {"gemm": {1: 1e10}}}}


def _gamma_cache(d):
    return d["reduction"]["gamma_cache_s_per_byte"]


def _segment(d):
    return d["network"]["segments"][0]


@pytest.mark.parametrize("edit, field, words", [
    (lambda d: _gamma_cache(d).update(buffer_bytes="abc"),
     "reduction.gamma_cache_s_per_byte.buffer_bytes", "not a number"),
    (lambda d: _gamma_cache(d).update(buffer_bytes=None),
     "reduction.gamma_cache_s_per_byte.buffer_bytes", "not a number"),
    (lambda d: _gamma_cache(d).update(buffer_bytes=0),
     "reduction.gamma_cache_s_per_byte.buffer_bytes", "positive"),
    (lambda d: d["reduction"]["gamma_memory_s_per_byte"].update(buffer_bytes=-1),
     "reduction.gamma_memory_s_per_byte.buffer_bytes", "positive"),
    (lambda d: _segment(d).update(beta_s_per_byte=1e308),
     "network.segments[0].beta_s_per_byte", "plausible range"),
    (lambda d: _segment(d).update(alpha_s=1e9), "network.segments[0].alpha_s", "plausible"),
    (lambda d: _segment(d).update(max_bytes=10 ** 400), "network.segments[0].max_bytes",
     "finite"),
    (lambda d: _segment(d).update(ci_beta=5), "network.segments[0].ci_beta", "two numbers"),
    (lambda d: _segment(d).update(ci_beta=["a", "b"]), "network.segments[0].ci_beta",
     "two numbers"),
    (lambda d: d["memory"].update(bandwidth_bytes_per_s=1e-300),
     "memory.bandwidth_bytes_per_s", "plausible range"),
    (lambda d: d["memory"].update(bandwidth_bytes_per_s=float("inf")),
     "memory.bandwidth_bytes_per_s", "finite"),
    (lambda d: d["compute"]["peak_flops_per_s"]["gemm"].update({1: 1e300}),
     "compute.peak_flops_per_s.gemm.1", "plausible range"),
    (lambda d: d["reduction"].update(gamma_curve=3), "reduction.gamma_curve", "list"),
    (lambda d: d["network"].update(exchange_segments={"a": 1}), "network.exchange_segments",
     "list"),
    (lambda d: d.update(software={"allreduce_in_context": {"algorithms": {
        "ring": [{"nbytes": 4096, "ratio": 1e30}]}}}),
     "software.allreduce_in_context.algorithms.ring[0].ratio", "plausible range"),
])
def test_invalid_values_name_their_field(tmp_path, edit, field, words):
    data = _data()
    edit(data)
    with pytest.raises(MachineError) as error:
        load_machine(data)
    assert f"'{field}'" in str(error.value) and words in str(error.value)
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(MachineError, match=str(path)):
        load_machine(str(path))


def test_values_at_the_ends_of_their_ranges_load_and_predict_finite_times():
    data = _data()
    _segment(data).update(alpha_s=3600, beta_s_per_byte=1.0)
    data["memory"]["bandwidth_bytes_per_s"] = 1.0
    seconds = predict_allreduce("ring", 2 ** 60, 1 << 20, load_machine(data))
    assert 0 < seconds < float("inf")


def test_saving_onto_a_folder_is_a_machine_error_and_leaves_no_temporary_file(tmp_path):
    from deep500.utils.machine import save_machine
    (tmp_path / "m.yaml").mkdir()
    with pytest.raises(MachineError, match="cannot write the machine file"):
        save_machine(_data(), str(tmp_path / "m.yaml"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.yaml"]
