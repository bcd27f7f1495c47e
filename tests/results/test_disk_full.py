"""A run whose folder's file system fills up (or is read-only, or refuses a file that
large) ends with exit 2 and one line naming the file and the cause; every record
already on disk is kept whole, the manifest is finalized (``failed`` with that reason
where the disk still takes it) and no temporary file is left behind."""
import errno
import json
import os
import textwrap

import pytest

from deep500.results.files import read_manifest, read_results
from deep500.utils.storage_errors import StorageError, storage_error
from tests.mounts import tmpfs
from tests.recipe.test_run import python_m_deep500


def _recipe(tmp_path, operators: int) -> str:
    shapes = "\n".join(f"        - {{op: Relu, shape: [{n + 2}, 7]}}"
                       for n in range(operators))
    path = tmp_path / "fill.yaml"
    path.write_text(textwrap.dedent("""\
        name: fill
        fixed: {dtype: float32, threads: 1, seed: 0}
        mutable:
          framework: [reference]
          operator:
        %s
        metrics: {WallclockTime: {reruns: 3, warmup: 0}}
        """) % shapes)
    return str(path)


def _check_folder(out) -> dict:
    """What every ending on a full disk leaves: whole records, counted by a final
    manifest, and no temporary file."""
    data = (out / "results.jsonl").read_bytes() if (out / "results.jsonl").exists() else b""
    assert not data or data.endswith(b"\n"), "a record was left cut in two"
    records = [json.loads(line) for line in data.splitlines()]
    manifest = read_manifest(str(out))
    assert manifest["status"] != "running"
    assert manifest["measurements"] == sum(r["kind"] == "measurement" for r in records)
    leftovers = [str(p) for p in out.rglob("*.tmp")]
    assert not leftovers, leftovers
    return manifest


def test_a_full_disk_while_appending_records_ends_the_run_naming_the_file(
        tmp_path, monkeypatch, capsys):
    real_write, calls = os.write, []

    def write(fd, data):  # the second record: half written, then the disk is full
        try:
            name = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            name = ""
        if not name.endswith("results.jsonl"):
            return real_write(fd, data)
        calls.append(len(data))
        if len(calls) == 2:
            return real_write(fd, data[:len(data) // 2])
        if len(calls) >= 3:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    out = tmp_path / "run"
    status, _, err = python_m_deep500(monkeypatch, capsys, "run", _recipe(tmp_path, 3),
                                      "--out", out, "--quiet")
    monkeypatch.setattr(os, "write", real_write)
    results = out / "results.jsonl"
    assert status == 2, err
    assert "Traceback" not in err
    assert (f"cannot write {results}: the disk holding {out} is full (ENOSPC); free "
            f"space there or give --out a folder on another disk") in err
    manifest = _check_folder(out)
    assert len(read_results(str(out))) == 1  # the first record; the half one cut off
    assert manifest["status"] == "failed"
    assert "StorageError: cannot write" in manifest["failure"]["error"]
    assert "(ENOSPC)" in manifest["failure"]["error"]


@pytest.mark.parametrize("number, words", [
    (errno.ENOSPC, "the disk holding {folder} is full (ENOSPC)"),
    (errno.EDQUOT, "the disk quota for {folder} is used up (EDQUOT)"),
    (errno.EROFS, "{folder} is on a read-only file system (EROFS)"),
    (errno.EFBIG, "the file is larger than the file system or the process's file size "
                  "limit (ulimit -f) allows (EFBIG)")])
def test_each_cause_is_named_with_the_path(tmp_path, number, words):
    path = tmp_path / "manifest.json"
    named = storage_error(OSError(number, os.strerror(number)), path)
    assert isinstance(named, StorageError)
    assert str(named).startswith(f"cannot write {path}: "
                                 f"{words.format(folder=tmp_path)}; ")
    assert "\n" not in str(named)
    assert storage_error(OSError(errno.EACCES, "Permission denied"), path) is None


@pytest.fixture
def small_disk(tmp_path):
    """A 256 KiB tmpfs at tmp_path/small (root may mount one), unmounted afterwards."""
    with tmpfs(tmp_path / "small", "256k") as mount:
        yield mount


@pytest.mark.parametrize("operators", [120, 40])  # records fill it; the report does
def test_a_run_into_a_full_tmpfs_ends_with_exit_2_and_a_final_manifest(
        tmp_path, small_disk, monkeypatch, capsys, operators):
    out = small_disk / "run"
    status, _, err = python_m_deep500(monkeypatch, capsys, "run",
                                      _recipe(tmp_path, operators), "--out", out,
                                      "--quiet")
    assert status == 2, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "cannot write" in line]
    assert lines and f"{small_disk}" in lines[-1] and "is full (ENOSPC)" in lines[-1], err
    manifest = _check_folder(out)
    if operators == 120:  # ~2 KiB a record: the records fill it
        assert manifest["status"] == "failed", manifest
        assert "(ENOSPC)" in manifest["failure"]["error"]
        assert 0 < manifest["measurements"] < operators
    else:  # every configuration was measured and kept; the report did not fit
        assert manifest["status"] == "complete" and manifest["measurements"] == operators
    print(lines[-1])


def test_a_training_log_on_a_full_disk_names_its_file():
    """/dev/full answers every write with ENOSPC, as a full disk does."""
    from types import SimpleNamespace

    from deep500.lv2_training.training_events import CSVWriter
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    with pytest.raises(StorageError, match=r"^cannot write /dev/full: the disk holding "
                                           r"/dev is full \(ENOSPC\)"):
        CSVWriter("/dev/full").before_training(None, SimpleNamespace(epochs=[]))


def test_a_manifest_on_a_full_disk_is_rewritten_within_its_blocks(tmp_path, monkeypatch):
    import contextlib

    import deep500.results.files as files
    files.write_manifest(str(tmp_path), {"status": "running", "note": "x" * 100})

    @contextlib.contextmanager
    def full(path, mode="w"):
        raise storage_error(OSError(errno.ENOSPC, "No space left on device"), path)
        yield  # pragma: no cover

    monkeypatch.setattr(files, "atomic_file", full)
    files.write_manifest(str(tmp_path), {"status": "failed", "failure": {"error": "e"}})
    assert read_manifest(str(tmp_path)) == {"status": "failed", "failure": {"error": "e"}}
    too_big = {"status": "failed", "note": "y" * 100_000}  # more than its blocks
    with pytest.raises(StorageError, match="is full"):
        files.write_manifest(str(tmp_path), too_big)
    assert read_manifest(str(tmp_path))["status"] == "failed"  # left as it was


def test_an_epoch_row_the_disk_took_in_part_is_cut_off_again(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from deep500.lv2_training.training_events import CSVWriter
    path = tmp_path / "epochs.csv"
    writer = CSVWriter(str(path))
    writer.before_training(None, SimpleNamespace(epochs=[]))
    header = path.read_bytes()

    def half_then_full(handle, epochs):
        handle.write("1,2,3")
        handle.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(writer, "_write", half_then_full)
    with pytest.raises(StorageError, match=rf"^cannot write {path}: the disk holding"):
        writer.after_training(None, SimpleNamespace(epochs=[object()]))
    assert path.read_bytes() == header
