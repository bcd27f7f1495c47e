"""The machine file's ``software`` section (per-call allreduce overhead o, fusion copy),
``predict_allreduce_call``, and the machine files shipped in deep500/data/machines."""
import math

import pytest
import yaml

import deep500 as d5
from deep500.lv3_distributed import allreduce_names
from deep500.lv3_distributed.collective_models import predict_allreduce
from deep500.utils.machine import (MachineError, load_machine, machine_to_dict,
                                   save_machine, shipped_machines)


def _data(software=None):
    data = {"name": "t", "source": "tests",
            "network": {"alpha_s": 2e-6, "beta_s_per_byte": 1e-10},
            "reduction": {"gamma_cache_s_per_byte": 1e-10},
            "memory": {"bandwidth_bytes_per_s": 1e10}}
    if software is not None:
        data["software"] = software
    return data


def test_overhead_accessor_defaults_to_zero():
    m = load_machine(_data())
    assert m.allreduce_overhead("ring") == 0.0 and m.fusion_copy_time(1 << 20, 10) == 0.0
    m = load_machine(_data({"allreduce_call_overhead_s": {"ring": {"value": 4e-6, "ci": [3e-6, 5e-6]},
                                                          "mpi": 0}}))
    assert m.allreduce_overhead("ring") == 4e-6 and m.allreduce_overhead("mpi") == 0.0
    assert m.allreduce_overhead("binomial") == 0.0


def test_fusion_copy_time():
    m = load_machine(_data({"fusion_copy": {"per_tensor_s": {"value": 1e-6},
                                            "s_per_byte": {"value": 1e-10}}}))
    assert m.fusion_copy_time(1000, tensors=3) == pytest.approx(3e-6 + 1e-7)


def test_wire_casts_load_round_trip_and_name_a_bad_field(tmp_path):
    casts = {"bfloat16": {"encode_s_per_element": {"value": 4e-9, "ci": [3e-9, 5e-9]},
                          "decode_s_per_element": 1e-9}}
    m = load_machine(_data({"wire_casts": casts}))
    assert m.wire_cast_seconds("bfloat16") == (4e-9, 1e-9)
    assert m.wire_cast_seconds("float16") is None
    assert load_machine(_data()).wire_cast_seconds("bfloat16") is None
    path = str(tmp_path / "m.yaml")
    save_machine(machine_to_dict(m), path)
    assert load_machine(path).wire_cast_seconds("bfloat16") == (4e-9, 1e-9)
    bad = {"bfloat16": {"encode_s_per_element": -1e-9, "decode_s_per_element": 1e-9}}
    with pytest.raises(MachineError, match="software.wire_casts.bfloat16."
                                           "encode_s_per_element' is -1e-09"):
        load_machine(_data({"wire_casts": bad}))
    with pytest.raises(MachineError, match="software.wire_casts.float16.decode_s_per_"
                                           "element' is missing"):
        load_machine(_data({"wire_casts": {"float16": {"encode_s_per_element": 1e-9}}}))


def test_overlap_stretches_load_round_trip_and_name_a_bad_field(tmp_path):
    overlap = {"method": "m", "ranks": 2, "algorithms": {
        "ring": {"compute_stretch": {"value": 0.3, "ci": [0.2, 0.4]},
                 "communication_stretch": {"value": 2.5, "ci": [2.0, 3.0]}}}}
    m = load_machine(_data({"overlap": overlap}))
    assert m.overlap_stretch("ring") == (0.3, 2.5) and m.overlap_stretch("mpi") is None
    assert load_machine(_data()).overlap_stretch("ring") is None
    path = str(tmp_path / "m.yaml")
    save_machine(machine_to_dict(m), path)
    assert load_machine(path).overlap_stretch("ring") == (0.3, 2.5)
    bad = {"algorithms": {"ring": {"compute_stretch": 0.3, "communication_stretch": 0.5}}}
    with pytest.raises(MachineError, match="software.overlap.algorithms.ring."
                                           "communication_stretch' is 0.5"):
        load_machine(_data({"overlap": bad}))
    with pytest.raises(MachineError, match="software.overlap.algorithms.mpi."
                                           "compute_stretch' is missing"):
        load_machine(_data({"overlap": {"algorithms": {"mpi": {
            "communication_stretch": 2.0}}}}))
    with pytest.raises(MachineError, match="software.overlap.algorithms' must map"):
        load_machine(_data({"overlap": {"ring": 1}}))


@pytest.mark.parametrize("algorithm", allreduce_names())
def test_predict_allreduce_call_adds_o(algorithm):
    o = {"ring": 3e-6, "mpi": 1e-6, "segmented_ring": 9e-6}.get(algorithm, 5e-6)
    m = load_machine(_data({"allreduce_call_overhead_s": {algorithm: o}}))
    for nbytes, ranks in ((4, 2), (1 << 20, 8), (12345, 5)):
        bare = predict_allreduce(algorithm, nbytes, ranks, m)
        assert d5.predict_allreduce_call(algorithm, nbytes, ranks, m) == pytest.approx(bare + o)
    assert d5.predict_allreduce_call(algorithm, 1 << 20, 1, m) == 0.0
    # without o in the file, the call is priced as the model alone
    plain = load_machine(_data())
    assert d5.predict_allreduce_call(algorithm, 4096, 4, plain) == \
        predict_allreduce(algorithm, 4096, 4, plain)


def test_software_round_trips_through_save(tmp_path):
    data = _data({"allreduce_call_overhead_s": {"ring": 2e-6},
                  "fusion_copy": {"per_tensor_s": 1e-6, "s_per_byte": 2e-10}})
    m = load_machine(save_machine(data, str(tmp_path / "m.yaml")))
    assert m.allreduce_overhead("ring") == 2e-6 and m.fusion_copy == (1e-6, 2e-10)
    # built without a file: machine_to_dict writes the section too
    rebuilt = load_machine({k: v for k, v in machine_to_dict(
        type(m)(**{**m.__dict__, "raw": {}})).items()})
    assert rebuilt.allreduce_overhead("ring") == 2e-6 and rebuilt.fusion_copy == (1e-6, 2e-10)


def test_shipped_machines_load_and_price_1024_ranks():
    shipped = shipped_machines()
    assert {"infiniband-hdr", "infiniband-edr"} <= set(shipped)
    for name, path in shipped.items():
        m = load_machine(name)
        assert m.path == path and m.name == name and "published" in m.source
        assert load_machine(path).raw == m.raw
        assert m.memory_bandwidth > 1e10 and m.peak_flops(1) > 1e9
        for algorithm in allreduce_names():
            for nbytes in (4, 1 << 20, 100 << 20):
                t = predict_allreduce(algorithm, nbytes, 1024, m)
                assert math.isfinite(t) and t > 0, (name, algorithm, nbytes)
        # 100 MB ring allreduce on 1024 ranks: at least the bandwidth term 2(p-1)/p n β
        n, p = 100 << 20, 1024
        assert predict_allreduce("ring", n, p, m) >= 2 * (p - 1) / p * n * m.beta(n)


def test_shipped_files_cite_their_sources():
    for path in shipped_machines().values():
        text = open(path).read()
        assert "Sources:" in text and "http" in text
        data = yaml.safe_load(text)
        assert data["name"] and data["source"]


def test_unknown_name_lists_the_shipped_machines():
    with pytest.raises(MachineError) as error:
        load_machine("infiniband-xyz")
    assert "infiniband-hdr" in str(error.value) and "infiniband-edr" in str(error.value)


# -- allreduce in context ---------------------------------------------------------------
def _context(rows):
    return {"allreduce_in_context": {"ranks": 2, "algorithms": {"ring": rows}}}


def test_in_context_factor_is_log_interpolated_and_flat_beyond_the_ends():
    m = load_machine(_data(_context([{"nbytes": 1024, "ratio": 2.0},
                                     {"nbytes": 1 << 20, "ratio": 1.0}])))
    assert m.allreduce_context_factor("ring", 16) == 2.0        # below: the first ratio
    assert m.allreduce_context_factor("ring", 1 << 30) == 1.0   # above: the last
    # 32 KB is halfway between 1 KB and 1 MB in log(size)
    assert m.allreduce_context_factor("ring", 32 << 10) == pytest.approx(1.5, rel=1e-12)
    assert m.allreduce_context_factor("mpi", 4096) == 1.0       # none for mpi
    assert load_machine(_data()).allreduce_context_factor("ring", 4096) == 1.0


def test_predict_allreduce_call_in_context_scales_model_and_o():
    m = load_machine(_data({**_context([{"nbytes": 4, "ratio": 1.5},
                                        {"nbytes": 1 << 22, "ratio": 1.5}]),
                            "allreduce_call_overhead_s": {"ring": 3e-6}}))
    call = d5.predict_allreduce_call("ring", 65536, 2, m)
    assert call == pytest.approx(predict_allreduce("ring", 65536, 2, m) + 3e-6, rel=1e-12)
    assert d5.predict_allreduce_call("ring", 65536, 2, m, in_context=True) == \
        pytest.approx(1.5 * call, rel=1e-12)
    assert d5.predict_allreduce_call("ring", 65536, 1, m, in_context=True) == 0.0


@pytest.mark.parametrize("rows, field", [
    ([{"nbytes": 1024, "ratio": -1.0}], "software.allreduce_in_context.algorithms.ring[0].ratio"),
    ([{"nbytes": "big", "ratio": 1.0}], "software.allreduce_in_context.algorithms.ring[0].nbytes"),
    ([{"ratio": 1.0}], "software.allreduce_in_context.algorithms.ring[0].nbytes"),
    ([], "software.allreduce_in_context.algorithms.ring"),
])
def test_bad_in_context_rows_name_the_field(rows, field):
    with pytest.raises(MachineError, match=field.replace("[", r"\[").replace("]", r"\]")):
        load_machine(_data(_context(rows)))


def test_in_context_round_trips(tmp_path):
    rows = [{"nbytes": 4, "ratio": 1.9}, {"nbytes": 65536, "ratio": 1.6}]
    m = load_machine(save_machine(_data(_context(rows)), str(tmp_path / "m.yaml")))
    assert m.allreduce_context["ring"] == ((4, 1.9), (65536, 1.6))
    rebuilt = load_machine({k: v for k, v in machine_to_dict(
        type(m)(**{**m.__dict__, "raw": {}})).items()})
    assert rebuilt.allreduce_context == m.allreduce_context
