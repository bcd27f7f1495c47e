"""benchmarks/lv3_telemetry_overhead.py runs end to end: ``--smoke`` starts 2 ranks,
times the distributed recipe's MLP blocking and overlapped with the sampler and the
timeline off, on, and on for every step, prints the direct costs, and ends with the
verdict line. No cost is asserted (3 rounds on 2 shared cores are noise); that every
row is there with finite numbers, and that the direct costs are sane, is."""
import re
import subprocess
import sys

import pytest

LAST = re.compile(r"^telemetry \+ timeline cost: [+-][\d.]+% of a step .*: "
                  r"(MET|NOT MET|UNRESOLVED)$")
VARIANT = re.compile(r"^\s+([\d.]+)\s+(on|on, every step)\s+([+-][\d.]+)%", re.M)
DIRECT = re.compile(r"(blocking|overlapped) sampler thread\s+([\d.]+)% of a core; "
                    r"timeline\s+([\d.]+)% of a step", re.M)


@pytest.mark.mpi
@pytest.mark.slow
def test_smoke_prints_every_variant_the_direct_costs_and_the_verdict_last(repo_root):
    script = repo_root / "benchmarks" / "lv3_telemetry_overhead.py"
    done = subprocess.run([sys.executable, str(script), "--smoke"], capture_output=True,
                          text=True, timeout=400, cwd=repo_root)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    variants = VARIANT.findall(done.stdout)
    assert [v[1] for v in variants] == ["on", "on, every step"] * 2, done.stdout
    assert all(float(v[0]) > 0 for v in variants)
    direct = DIRECT.findall(done.stdout)
    assert [d[0] for d in direct] == ["blocking", "overlapped"], done.stdout
    for _, sampler, timeline in direct:
        assert 0 < float(sampler) < 20 and 0 < float(timeline) < 20
    last = done.stdout.strip().splitlines()[-1]
    assert LAST.match(last), last
