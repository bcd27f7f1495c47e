"""benchmarks/lv3_models.py runs end to end under ``mpirun -np 2``: ``--smoke`` calibrates
the network and γ, checks and times every allreduce algorithm at 1, 4 and 64 KB, prints
predicted, measured, their ratio and the coherence state per row and the error line
last; with ``--machine``
it predicts from that file. The 15% target is not asserted (timings belong to the
benchmark)."""
import pathlib
import re

import pytest
import yaml

from deep500.lv3_distributed import allreduce_names
from tests.lv3_distributed.mpi_helpers import mpirun

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "lv3_models.py"
LAST = re.compile(r"allreduce model median relative error \(>= 64 KB\): (\d+\.\d)%$")


def _rows(out):
    return re.findall(r"^\s*(\d+ [KM]B) (\w+)\s+([\d.,]+ [um]s)\s+([\d.,]+ [um]s)\s+(\d+\.\d{3})"
                      r"\s+(\d+\.\d{3}) [A-C?]$",
                      out, flags=re.M)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One calibrating ``--smoke --save-machine`` run, read by both tests: its exit
    status, its output and the machine file it saved."""
    saved = tmp_path_factory.mktemp("lv3_models") / "machine.yaml"
    status, out, _ = mpirun(2, SCRIPT, "--smoke", "--save-machine", str(saved), timeout=300)
    return status, out, saved


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_prints_every_algorithm_and_the_error_last(calibrated):
    status, out, saved = calibrated
    assert status == 0, out[-3000:]
    rows = _rows(out)
    modelled = allreduce_names()   # every registered algorithm has a time model
    assert {(size, name) for size, name, *_ in rows} == {
        (size, name) for size in ("1 KB", "4 KB", "64 KB") for name in modelled}, out
    assert LAST.search(out.strip().splitlines()[-1]), out[-500:]
    assert "# per-call overhead o (4-byte allreduce minus its model): " in out
    assert "# without the per-call overhead o: median relative error (>= 64 KB)" in out
    machine = yaml.safe_load(saved.read_text())
    assert machine["network"]["segments"] and machine["network"]["exchange_segments"]
    # δ_sum and δ_receive are calibrated, printed and saved; the textbook model's error too
    assert [p["buffer_bytes"] for p in machine["network"]["coherence"]["sum_curve"]] == \
        [64 << 10, 1 << 20]
    assert "# delta_sum (into a buffer the peer read): 64 KB " in out
    assert "# without delta (the textbook alpha-beta-gamma + o): median relative error" in out
    # the o measured here is saved with the machine, and read back from it below
    assert sorted(machine["software"]["allreduce_call_overhead_s"]) == sorted(modelled)
    assert "(measured)" in out

    status, again, _ = mpirun(2, SCRIPT, "--smoke", "--machine", str(saved), timeout=300)
    assert status == 0, again[-3000:]
    assert f"# machine: {saved}" in again
    line = next(l for l in again.splitlines() if l.startswith("# per-call overhead o"))
    assert line.count("(file)") == len(modelled) and "(measured)" not in line
    assert LAST.search(again.strip().splitlines()[-1])


@pytest.mark.mpi
def test_rows_in_another_state_than_the_machine_file_are_kept_and_marked(calibrated,
                                                                          tmp_path):
    """A machine file whose δ_sum (50 ns/B) no probe here comes near: every row is
    measured in another coherence state; with --machine nothing can be calibrated
    again, so the rows are kept, marked '?', counted, and the error line still comes."""
    status, out, calibrated_machine = calibrated
    assert status == 0, out[-3000:]
    saved = tmp_path / "machine.yaml"
    machine = yaml.safe_load(calibrated_machine.read_text())
    for key in ("sum_curve", "receive_curve"):
        for point in machine["network"]["coherence"][key]:
            point["value"] = 5e-8
    saved.write_text(yaml.safe_dump(machine))
    status, out, _ = mpirun(2, SCRIPT, "--smoke", "--machine", str(saved), timeout=300)
    assert status == 0, out[-3000:]
    rows = _rows(out)
    assert rows and all(line.rstrip().endswith("?") for line in out.splitlines()
                        if re.match(r"^\s*\d+ [KM]B \w+\s+[\d.,]+ [um]s", line))
    assert f"# {len(rows)} row(s) measured in another coherence state than the machine " \
           f"file's (state ?)" in out
    assert LAST.search(out.strip().splitlines()[-1]), out[-500:]
