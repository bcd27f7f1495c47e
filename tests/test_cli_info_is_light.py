"""``deep500 info`` answers at once (issue 31, item 7: it took 20 s importing PyTorch and
TensorFlow). Judged by what it imports and by its CPU time, which another process's load
does not inflate as it does wall time."""
import json
import resource
import subprocess
import sys

# Run in a fresh interpreter: report what `deep500 info` left imported.
PROBE = """
import contextlib, io, json, sys
from deep500.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    status = main(["info", "--json"])
heavy = ("torch", "tensorflow", "onnx", "numpy", "deep500.frameworks", "deep500.lv1_network")
print(json.dumps({"status": status, "imported": [m for m in heavy if m in sys.modules]}))
"""


def test_info_imports_no_framework_and_takes_under_2_cpu_seconds():
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    completed = subprocess.run([sys.executable, "-c", PROBE], capture_output=True,
                               text=True, timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert completed.returncode == 0, completed.stderr
    probe = json.loads(completed.stdout.strip().splitlines()[-1])
    assert probe == {"status": 0, "imported": []}
    cpu_seconds = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert cpu_seconds <= 2.0, f"deep500 info used {cpu_seconds:.2f} CPU seconds"


def test_import_deep500_loads_nothing_until_a_name_is_used():
    probe = ("import sys, deep500 as d5\n"
             "before = 'numpy' in sys.modules or 'deep500.lv2_training' in sys.modules\n"
             "trainer = d5.Trainer\n"
             "print(before, trainer.__module__, 'Trainer' in d5.__all__)\n")
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                               text=True, timeout=120)
    assert completed.stdout.split() == ["False", "deep500.lv2_training.trainer", "True"], \
        completed.stderr
