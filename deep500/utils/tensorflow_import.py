"""Import TensorFlow with its start-up messages shown once each.

TensorFlow 2.16 and later log "oneDNN custom operations are on ..." (from
``tensorflow/core/util/port.cc``) once from each of the two shared libraries that hold
that check, through absl before absl's logging is initialised, so that neither
``TF_CPP_MIN_LOG_LEVEL`` nor Python's logging silences it and every run printed it
twice. The import runs with file descriptor 2 sent to a temporary file; what it wrote
is then passed on to the real stderr with each repeated message dropped (absl's prefix,
which carries a timestamp, is ignored when comparing).

oneDNN itself is left as TensorFlow sets it (``TF_ENABLE_ONEDNN_OPTS`` is not touched),
so the numerics of a run are those of a plain ``import tensorflow``.
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

# absl's line prefix: severity, date, time, thread id, file:line]
_ABSL_PREFIX = re.compile(r"^[IWEF]\d{4} [\d:.]+\s+\d+ [^\s\]]+:\d+\] ")


def import_tensorflow():
    """``import tensorflow``, its start-up messages shown at most once each (the module,
    or ImportError as the import raises it)."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    # TensorFlow logs start-up chatter at INFO level; keep warnings and errors only.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    with repeated_stderr_lines_dropped():
        import tensorflow
    return tensorflow


def message_of(line: str) -> str:
    """A stderr line without absl's timestamped prefix (two lines with the same message
    are the same line)."""
    return _ABSL_PREFIX.sub("", line.rstrip("\n"))


def without_repeats(text: str) -> str:
    """``text`` with every line whose message was already seen removed."""
    seen, kept = set(), []
    for line in text.splitlines(keepends=True):
        message = message_of(line)
        if message.strip() and message in seen:
            continue
        seen.add(message)
        kept.append(line)
    return "".join(kept)


@contextlib.contextmanager
def repeated_stderr_lines_dropped():
    """Inside, what this process writes to file descriptor 2 (C libraries included) is
    held back; on leaving, however the block ends, it is written to the real stderr
    without repeated lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            text = held.read().decode("utf-8", errors="replace")
            if text:
                os.write(2, without_repeats(text).encode("utf-8"))
