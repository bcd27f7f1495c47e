"""Running a recipe at other git revisions, as ``asv run A..B`` does: for ``deep500
history --run A..B RECIPE`` and ``deep500 bisect``.

Each revision is checked out in one temporary git worktree (``git worktree add
--detach``, then ``git checkout --detach`` for the next revision), and ``deep500 run
RECIPE`` runs there with the revision's recipe, its results stored in the results
database like any run (the manifest's git revision is the worktree's, the revision
run). The worktree is removed when the runs end, however they end.

The worktree's path is the same for every revision and every session on one
repository (``$TMPDIR/deep500-worktree-<hash of the repository's path>``, held by one
session at a time), because a configuration names its files by absolute path (a C++
kernel's source): runs of a recipe from the worktree compare with each other across
sessions, not with runs of the same recipe from the repository's own checkout.

The environment: every revision runs in the project's own Python environment (this
interpreter, :data:`CAVEAT` says what that means), not in a virtual environment built
per revision as asv builds one. The worktree's root is put first on ``PYTHONPATH``, so
a pure-Python package at the root of the repository (Deep500's own ``deep500/``) is
imported from the revision run.

A range is git's: ``A..B`` is every commit reachable from B and not from A (A itself
excluded; ``A^..B`` includes it), oldest first; a single revision runs that one.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from deep500.store.database import StoreError

CAVEAT = ("caveat: each revision runs in a temporary git worktree with this Python "
          "environment ({python}), not one built per revision: the worktree's root "
          "comes first on PYTHONPATH, so a pure-Python package at the root of the "
          "repository is imported from the revision, but installed dependencies, "
          "compiled extensions and packages installed outside the checkout are this "
          "environment's, whatever the revision asks for")


def caveat() -> str:
    return CAVEAT.format(python=sys.executable)


@dataclass
class Revision:
    sha: str
    subject: str

    @property
    def short(self) -> str:
        return self.sha[:7]


def _git(args: list, cwd: str, what: str) -> str:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              timeout=120)
    except FileNotFoundError:
        raise StoreError(f"{what}: git is not installed (it is needed to check "
                         f"revisions out)") from None
    if done.returncode != 0:
        raise StoreError(f"{what}: git {' '.join(args)} failed in {cwd}: "
                         f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def repository_of(recipe: str) -> tuple[str, str]:
    """(root of the git repository holding ``recipe``, the recipe's path inside it)."""
    path = os.path.realpath(recipe)
    if not os.path.isfile(path):
        raise StoreError(f"{recipe}: no such recipe file")
    root = _git(["rev-parse", "--show-toplevel"], os.path.dirname(path),
                f"{recipe} is not in a git repository, so its revisions cannot be "
                f"run").strip()
    return root, os.path.relpath(path, os.path.realpath(root))


def resolve(root: str, spec: str) -> list[Revision]:
    """The revisions of ``spec`` (``A..B`` or one revision), oldest first."""
    if ".." in spec:
        shas = _git(["rev-list", "--reverse", spec, "--"], root,
                    f"--run {spec}").split()
    else:
        shas = [_git(["rev-parse", "--verify", "--quiet", f"{spec}^{{commit}}"], root,
                     f"{spec} is not a revision of {root}").strip()]
    if not shas:
        raise StoreError(f"--run {spec}: the range holds no commit (A..B excludes A and "
                         f"what A reaches; write A^..B to include A)")
    return [revision(root, sha) for sha in shas]


def revision(root: str, spec: str) -> Revision:
    """One revision, by any name git understands."""
    text = _git(["log", "-1", "--format=%H%x00%s", f"{spec}^{{commit}}", "--"], root,
                f"{spec} is not a revision of {root}")
    sha, _, subject = text.strip().partition("\0")
    return Revision(sha, subject)


@dataclass
class RevisionRun:
    revision: Revision
    status: int | None  # deep500 run's exit status; None: the recipe is not there
    folder: str | None
    output: str = ""


class RevisionRunner:
    """Runs one recipe at revisions of its repository, in one temporary worktree (a
    context manager: the worktree is removed on exit)."""

    def __init__(self, recipe: str, database: str, results: str | None = None,
                 select: str | None = None, out=None):
        self.root, self.relative = repository_of(recipe)
        self.database = os.path.abspath(database)
        stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
        name = os.path.splitext(os.path.basename(recipe))[0]
        self.results = os.path.abspath(results or os.path.join(
            "results", "revisions", f"{name}-{stamp}"))
        self.select = select
        self.out = out or sys.stdout
        self.scratch = self.worktree = None

    def __enter__(self):
        digest = hashlib.sha1(os.path.realpath(self.root).encode()).hexdigest()[:12]
        self.scratch = os.path.join(tempfile.gettempdir(), f"deep500-worktree-{digest}")
        _claim(self.scratch, self.root)
        self.worktree = os.path.join(self.scratch, "checkout")
        subprocess.run(["git", "worktree", "prune"], cwd=self.root, capture_output=True)
        self.out.write(caveat() + "\n")
        return self

    def __exit__(self, *exc):
        if os.path.isdir(self.worktree):
            subprocess.run(["git", "worktree", "remove", "--force", self.worktree],
                           cwd=self.root, capture_output=True)
        shutil.rmtree(self.scratch, ignore_errors=True)
        subprocess.run(["git", "worktree", "prune"], cwd=self.root, capture_output=True)
        return False

    def _checkout(self, sha: str) -> None:
        if os.path.isdir(self.worktree) and not os.path.exists(
                os.path.join(self.worktree, ".git")):
            shutil.rmtree(self.worktree)  # left by a session that was killed
        if not os.path.isdir(self.worktree):
            _git(["worktree", "add", "--detach", "--force", self.worktree, sha], self.root,
                 f"checking {sha[:7]} out")
            return
        _git(["checkout", "--detach", "--force", "--quiet", sha], self.worktree,
             f"checking {sha[:7]} out")
        _git(["clean", "-fdxq"], self.worktree, "cleaning the worktree")

    def run(self, revision: Revision) -> RevisionRun:
        """``deep500 run`` of the recipe at ``revision``, stored in the database."""
        self._checkout(revision.sha)
        recipe = os.path.join(self.worktree, self.relative)
        if not os.path.isfile(recipe):
            return RevisionRun(revision, None, None, f"{self.relative} is not in "
                                                     f"{revision.short}")
        folder = os.path.join(self.results, revision.sha[:10])
        suffix = 2
        while os.path.lexists(folder):
            folder = os.path.join(self.results, f"{revision.sha[:10]}-{suffix}")
            suffix += 1
        os.makedirs(self.results, exist_ok=True)
        command = [sys.executable, "-m", "deep500", "run", recipe, "--out", folder,
                   "--db", self.database, "--quiet",
                   *(["--select", self.select] if self.select else [])]
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(
            [self.worktree] + ([environment["PYTHONPATH"]]
                               if environment.get("PYTHONPATH") else []))
        done = subprocess.run(command, cwd=self.worktree, env=environment,
                              capture_output=True, text=True)
        return RevisionRun(revision, done.returncode, folder,
                           (done.stdout + done.stderr).strip())


def _claim(folder: str, root: str) -> None:
    """Take ``folder`` for this process (its pid in ``folder/owner``); a folder whose
    owner is gone (a killed session) is taken over, one whose owner runs is refused."""
    while True:
        try:
            os.mkdir(folder)
            break
        except FileExistsError:
            owner = None
            try:
                with open(os.path.join(folder, "owner")) as handle:
                    owner = int(handle.read().strip() or 0)
            except (OSError, ValueError):
                pass
            if owner and _alive(owner):
                raise StoreError(f"another deep500 history --run or bisect (process "
                                 f"{owner}) is running revisions of {root} in {folder}; "
                                 f"wait for it to end") from None
            subprocess.run(["git", "worktree", "remove", "--force",
                            os.path.join(folder, "checkout")], cwd=root,
                           capture_output=True)
            shutil.rmtree(folder, ignore_errors=True)
    with open(os.path.join(folder, "owner"), "w") as handle:
        handle.write(str(os.getpid()))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe(run: RevisionRun) -> str:
    """One line of a revision's run: revision, subject, outcome, folder."""
    head = f"{run.revision.short} {run.revision.subject[:50]}"
    if run.status is None:
        return f"{head}: not run ({run.output})"
    outcome = {0: "measured", 1: "measured, some configuration failed or missed a "
                                 "threshold"}.get(run.status, f"failed (exit status "
                                                              f"{run.status})")
    last = run.output.splitlines()[-1] if run.output and run.status not in (0, 1) else ""
    return f"{head}: {outcome}: {run.folder}" + (f": {last}" if last else "")


def run_range(spec: str, recipe: str, database: str, select: str | None = None,
              results: str | None = None, out=None) -> list[RevisionRun]:
    """``deep500 history --run SPEC RECIPE``: run the recipe at every revision of
    ``spec``, oldest first, saying each as it ends."""
    out = out or sys.stdout
    root, _ = repository_of(recipe)
    revisions = resolve(root, spec)
    out.write(f"{len(revisions)} revision(s) of {root}\n")
    runs = []
    with RevisionRunner(recipe, database, results, select, out) as runner:
        for number, item in enumerate(revisions, 1):
            out.write(f"[{number}/{len(revisions)}] {item.short} {item.subject[:60]} ...\n")
            out.flush()
            runs.append(runner.run(item))
            out.write("  " + describe(runs[-1]) + "\n")
    return runs
