"""``deep500 run --out`` naming a file (or a path under one) is refused with a
RunFolderError, and the file is left as it was."""
import pytest

from deep500.results.files import RunFolderError
from deep500.results.run_folder import RunFolder


def test_out_naming_a_file_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    with pytest.raises(RunFolderError, match="is a file, not a folder"):
        RunFolder.claim(str(path))
    with pytest.raises(RunFolderError, match="cannot create the folder"):
        RunFolder.claim(str(path / "run"))
    assert path.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == \
        ["notes.txt"]
