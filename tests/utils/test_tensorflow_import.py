"""TensorFlow's oneDNN banner prints once at most (issue 31, item 7: every run printed it
twice), and nothing else TensorFlow says at import is lost."""
import os
import subprocess
import sys

import pytest

from deep500.utils.tensorflow_import import message_of, without_repeats

BANNER = "oneDNN custom operations are on"


def run_python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, env=env)


def test_absl_prefix_is_ignored_when_lines_are_compared():
    first = "I0000 00:00:1795936017.383623     432 port.cc:153] oneDNN custom operations\n"
    second = "I0000 00:00:1795936027.877856     432 port.cc:153] oneDNN custom operations\n"
    assert message_of(first) == message_of(second) == "oneDNN custom operations"
    assert without_repeats(first + "other\n" + second + "other\n") == first + "other\n"


def test_what_c_code_writes_to_fd_2_comes_out_once_per_line():
    code = ("import os, sys\n"
            "from deep500.utils.tensorflow_import import repeated_stderr_lines_dropped\n"
            "with repeated_stderr_lines_dropped():\n"
            "    os.write(2, b'I0000 00:00:1.1  7 port.cc:153] banner\\n')\n"
            "    print('from python', file=sys.stderr)\n"
            "    os.write(2, b'I0000 00:00:2.2  7 port.cc:153] banner\\n')\n"
            "print('after', file=sys.stderr)\n")
    completed = run_python(code)
    assert completed.returncode == 0, completed.stderr
    lines = completed.stderr.splitlines()
    assert [message_of(line) for line in lines] == ["banner", "from python", "after"]


def test_importing_tensorflow_prints_the_onednn_banner_once():
    pytest.importorskip("tensorflow")
    # TensorFlow's default on x86 (oneDNN on) is the one that printed it twice. The
    # bridge (deep500.frameworks.tensorflow._tf) imports it so; importing the whole
    # bridge would also build its glue.
    env = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    completed = run_python("from deep500.utils.tensorflow_import import import_tensorflow\n"
                           "import_tensorflow()\n", env)
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.count(BANNER) <= 1, completed.stderr
