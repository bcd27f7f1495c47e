"""Every command and snippet of README.md and docs/*.md runs as written (issue 31, item
2): Python blocks run, shell blocks run, recipe blocks pass the checks ``deep500 run``
makes before running anything; a block marked ``<!-- not run: REASON -->`` is skipped
with that reason (``pytest -ra`` lists them). See ``tests/docs/doc_blocks.py`` for the
markers and ``tests/docs/document_runs.py`` for how a page's blocks run."""
import subprocess

import pytest

from tests.docs.doc_blocks import TEXT, documented_blocks
from tests.docs.document_runs import REPO_ROOT, DocumentRuns

BLOCKS = documented_blocks(REPO_ROOT)
CODE = [block for block in BLOCKS if block.kind != TEXT]


def _repository_state() -> set[str]:
    return set(subprocess.run(["git", "status", "--porcelain", "--ignored"], cwd=REPO_ROOT,
                              capture_output=True, text=True, check=True).stdout.splitlines())


@pytest.fixture(scope="module")
def repository_before():
    return _repository_state()


@pytest.fixture(scope="module")
def document_runs(tmp_path_factory, repository_before):
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
                                                            repository_before):
    """Runs after the blocks: git sees no file the blocks created or changed (results,
    logs, builds, checkpoints go to the pages' folders)."""
    new = sorted(_repository_state() - repository_before)
    assert not new, f"the documented blocks wrote into the repository: {new}"


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
