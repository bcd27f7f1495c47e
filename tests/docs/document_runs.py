"""Runs documented blocks as a reader would: each document in a folder of its own, its
blocks in the order they are written, later blocks seeing what earlier ones defined and
wrote.

- Python blocks run in one persistent interpreter (``block_worker.py``), a namespace
  per document. A block that calls ``d5.mpi_fork`` runs as a script of its own instead
  (``mpi_fork`` re-runs its file under ``mpirun``).
- Shell blocks run in ``bash -e -o pipefail`` with the virtualenv's ``bin`` first on
  the PATH, as after ``. .venv/bin/activate``.
- Recipe (YAML) blocks are checked as ``deep500 run`` checks a recipe before running it.
- File blocks are written into the folder.

Each folder holds a copy of the repository's ``recipes/``, since the README's commands
name recipes from the repository root, and ``.venv`` links to the running interpreter's
environment; nothing runs in the repository itself.
"""
from __future__ import annotations

import json
import os
import pathlib
import select
import shutil
import subprocess
import sys

from tests.docs.doc_blocks import FILE, PYTHON, RECIPE, SHELL, DocBlock

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
WORKER = pathlib.Path(__file__).with_name("block_worker.py")
BLOCK_TIMEOUT_S = 300  # a block's wall-clock limit on a loaded 2-core machine


class BlockFailed(AssertionError):
    """A block raised, exited non-zero or timed out; carries what it printed."""


def block_environment() -> dict:
    """The environment blocks run in: the virtualenv's tools first on the PATH. The C++
    operator glue is not built (about 40 s of compiling for PyTorch and TensorFlow on 2
    cores, more than this test's budget): C++ operators take the Python path that the
    docs describe for a machine without a compiler, with the same results.

    OpenMP threads (PyTorch's, MKL's) sleep while they wait instead of spinning: on the
    test machine's two loaded cores a spinning thread waits for a peer that is not
    running, and a digits MLP step took 35 ms instead of 2 (this test file: 63 CPU-s
    instead of 43 at load 2.5). The blocks assert no times."""
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env.update(DEEP500_TORCH_NATIVE_GLUE="0", DEEP500_TF_EAGER_GLUE="0",
               DEEP500_TF_NATIVE_KERNEL="0", MPLBACKEND="Agg", PYTHONUNBUFFERED="1")
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


class DocumentRuns:
    """The folders, the interpreter and the progress of every document's blocks."""

    def __init__(self, blocks: list[DocBlock], scratch: pathlib.Path):
        self.blocks = blocks
        self.scratch = scratch
        self.env = block_environment()
        self.outcomes: dict[DocBlock, str | None] = {}  # None: ran; else why it failed
        self._worker: subprocess.Popen | None = None

    def folder(self, document: str) -> pathlib.Path:
        folder = self.scratch / document.replace("/", "_").replace(".md", "")
        if not folder.exists():
            folder.mkdir(parents=True)
            shutil.copytree(REPO_ROOT / "recipes", folder / "recipes")
            (folder / ".venv").symlink_to(sys.prefix)  # for '. .venv/bin/activate'
        return folder

    def folders(self) -> list[pathlib.Path]:
        """The pages' folders made so far."""
        return sorted(path for path in self.scratch.iterdir() if path.is_dir())

    def run(self, block: DocBlock) -> None:
        """Run ``block``, and first every runnable block above it in its document that
        has not run (so that one block can be selected alone). Raises BlockFailed."""
        for earlier in self.blocks:
            if earlier == block:
                break
            if earlier.path == block.path and earlier not in self.outcomes and \
                    earlier.kind in (PYTHON, SHELL, FILE) and not earlier.not_run:
                self._run_recording(earlier)
            if earlier.path == block.path and self.outcomes.get(earlier):
                raise BlockFailed(f"{block.where}: an earlier block of the page failed, "
                                  f"{earlier.where}")
        self._run_recording(block)
        if self.outcomes[block]:
            raise BlockFailed(self.outcomes[block])

    def close(self) -> None:
        if self._worker is not None:
            self._worker.kill()  # it holds nothing to save; TensorFlow's exit is slow
            self._worker.wait()
            self._worker = None

    # -- each kind ----------------------------------------------------------------

    def _run_recording(self, block: DocBlock) -> None:
        try:
            {PYTHON: self._python, SHELL: self._shell, RECIPE: self._recipe,
             FILE: self._file}[block.kind](block)
            self.outcomes[block] = None
        except BlockFailed as failure:
            self.outcomes[block] = str(failure)

    def _file(self, block: DocBlock) -> None:
        (self.folder(block.path) / block.file_name).write_text(block.text)

    def _python(self, block: DocBlock) -> None:
        if "mpi_fork(" in block.text:
            self._script(block)
        else:
            self._ask(block, kind="python", document=block.path, code=block.text)

    def _recipe(self, block: DocBlock) -> None:
        recipe = self.folder(block.path) / f"block_{block.line}.yaml"
        recipe.write_text(block.text)
        base = str(REPO_ROOT / block.fragment_of) if block.fragment_of else None
        self._ask(block, kind="recipe", file=str(recipe), base=base)

    def _script(self, block: DocBlock) -> None:
        script = self.folder(block.path) / f"block_{block.line}.py"
        script.write_text(block.text)
        self._subprocess(block, [sys.executable, script.name])

    def _shell(self, block: DocBlock) -> None:
        self._subprocess(block, ["bash", "-e", "-o", "pipefail", "-c", block.commands()])

    def _subprocess(self, block: DocBlock, command: list[str]) -> None:
        try:
            done = subprocess.run(command, cwd=self.folder(block.path), env=self.env,
                                  capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S)
        except subprocess.TimeoutExpired as timeout:
            raise BlockFailed(f"{block.where}: ran past {BLOCK_TIMEOUT_S} s\n"
                              f"{_tail(timeout.stdout)}{_tail(timeout.stderr)}") from None
        if done.returncode != 0:
            raise BlockFailed(f"{block.where}: exit status {done.returncode}\n"
                              f"{_tail(done.stdout)}\n{_tail(done.stderr)}")

    def _ask(self, block: DocBlock, **request) -> None:
        folder = self.folder(block.path)
        log = folder / f"block_{block.line}.log"
        worker = self._started_worker()
        worker.stdin.write(json.dumps({**request, "folder": str(folder), "log": str(log),
                                       "where": block.where}) + "\n")
        worker.stdin.flush()
        ready, _, _ = select.select([worker.stdout], [], [], BLOCK_TIMEOUT_S)
        answer = worker.stdout.readline() if ready else ""
        printed = _tail(log.read_text(errors="replace")) if log.exists() else ""
        if not answer:
            self._worker.kill()
            self._worker.wait()
            self._worker = None
            raise BlockFailed(f"{block.where}: no answer within {BLOCK_TIMEOUT_S} s (or "
                              f"the interpreter died)\n{printed}")
        reply = json.loads(answer)
        if not reply["ok"]:
            raise BlockFailed(f"{block.where}:\n{reply['error']}\nprinted:\n{printed}")

    def _started_worker(self) -> subprocess.Popen:
        if self._worker is None:
            self._worker = subprocess.Popen([sys.executable, str(WORKER)], env=self.env,
                                            cwd=self.scratch, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, text=True)
        return self._worker


def _tail(text, limit: int = 4000) -> str:
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return (text or "")[-limit:]
