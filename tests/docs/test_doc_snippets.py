"""Every command and snippet of README.md and docs/*.md runs as written (issue 31, item
2): Python blocks run, shell blocks run, recipe blocks pass the checks ``deep500 run``
makes before running anything; a block marked ``<!-- not run: REASON -->`` is skipped
with that reason (``pytest -ra`` lists them). See ``tests/docs/doc_blocks.py`` for the
markers and ``tests/docs/document_runs.py`` for how a page's blocks run."""
import os
import subprocess

import pytest

from tests.docs.doc_blocks import TEXT, documented_blocks
from tests.docs.document_runs import REPO_ROOT, DocumentRuns

BLOCKS = documented_blocks(REPO_ROOT)
CODE = [block for block in BLOCKS if block.kind != TEXT]


def _files_git_does_not_track() -> set[str]:
    """Untracked and ignored files of the working tree that a block could write: outputs,
    not the Python and Markdown sources other people may be adding meanwhile, nor
    bytecode caches (.venv left out: its files are many)."""
    listed = subprocess.run(["git", "status", "--porcelain", "--ignored",
                             "--untracked-files=all", "--", ".", ":!.venv"],
                            cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return {line[3:] for line in listed.stdout.splitlines()
            if line[:2] in ("??", "!!") and "__pycache__" not in line
            and not line.endswith((".py", ".md"))}


@pytest.fixture(scope="module")
def untracked_before():
    return _files_git_does_not_track()


@pytest.fixture(scope="module")
def document_runs(tmp_path_factory, untracked_before):
    runs = DocumentRuns(BLOCKS, tmp_path_factory.mktemp("documented_blocks"))
    yield runs
    runs.close()


@pytest.mark.slow
@pytest.mark.parametrize("block", CODE, ids=lambda b: f"{b.where}-{b.kind}")
def test_documented_block_runs(block, document_runs):
    if block.not_run:
        pytest.skip(f"{block.where}: not run: {block.not_run}")
    document_runs.run(block)


def test_documented_blocks_wrote_nothing_into_the_repository(document_runs,
                                                            untracked_before):
    """Runs after the blocks: what they wrote (results, logs, builds, checkpoints,
    plots) is in their pages' folders, not in the repository, and nothing was written
    beside the recipes (the folders' copies hold what the repository's holds)."""
    new = sorted(_files_git_does_not_track() - untracked_before)
    assert not new, f"written into the repository while the blocks ran: {new}"
    beside_recipes = sorted(name for folder in document_runs.folders()
                            for name in _files(folder / "recipes")
                            - _files(REPO_ROOT / "recipes"))
    assert not beside_recipes, f"the blocks wrote beside the recipes: {beside_recipes}"


def _files(folder) -> set[str]:
    """Every file under ``folder``, relative to it."""
    return {os.path.relpath(os.path.join(parent, name), folder)
            for parent, _, names in os.walk(folder) for name in names}


def test_every_command_block_says_its_language():
    """An untagged block holding a command would escape the test above."""
    untagged = [b.where for b in BLOCKS if b.kind == TEXT and not b.language
                and b.looks_like_commands]
    assert not untagged, f"tag these blocks ```bash so that they are run: {untagged}"


def test_markers_name_what_exists():
    """A fragment's base recipe exists; a marker sits on a block it applies to."""
    for block in BLOCKS:
        if block.fragment_of:
            assert block.kind == "recipe", block.where
            assert (REPO_ROOT / block.fragment_of).is_file(), block.where
        if block.not_run:
            assert block.kind != TEXT, f"{block.where}: a text block is never run"
        if block.not_run is not None:
            assert block.not_run.strip(), f"{block.where}: say why it is not run"
