"""Nothing writes outside the folder the user named: run names become one path
component, default run folders are claimed by ``mkdir`` (concurrent runs get ``-2``,
``-3``, ...), a refused ``--out`` is left untouched, ``--append`` refuses a folder that
``deep500 run`` did not write, and reports, plots and manifests are written by temp
file + rename, never through a link planted in the run folder."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from deep500.recipe import run_recipe
from deep500.report import write_reports
from deep500.results.files import (RunFolderError, ResultsWriter, read_manifest,
                                   write_manifest)
from deep500.results.folder_claims import new_run_folder, run_name_component
from deep500.results.run_folder import LOCK_FILE, RunFolder, default_run_path
from deep500.results.safe_write import UnsafePathError

REPO = Path(__file__).resolve().parents[2]

RECIPE = textwrap.dedent("""
    name: ../../escaped
    fixed: {dtype: float32, threads: 1, seed: 0, framework: reference}
    mutable:
      operator: [{op: Relu, shape: [8, 16]}, {op: Gemm, inputs: [[8, 4], [4, 2]]}]
    metrics: {WallclockTime: {reruns: 2, warmup: 0}}
""")


def _snapshot(folder: Path) -> dict:
    """Every entry under ``folder`` (links not followed) with its content or target."""
    seen = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink():
            seen[str(path)] = ("link", os.readlink(path))
        elif path.is_file():
            seen[str(path)] = ("file", path.read_bytes(), path.stat().st_mtime_ns)
        else:
            seen[str(path)] = ("folder",)
    return seen


@pytest.fixture(scope="module")
def named_run(tmp_path_factory) -> Path:
    """A real run of a recipe named ``../../escaped``, without ``--out``."""
    root = tmp_path_factory.mktemp("named")
    (root / "escaped.yaml").write_text(RECIPE)
    cwd = os.getcwd()
    os.chdir(root)
    try:
        summary = run_recipe("escaped.yaml", None, argv=["deep500", "run"], progress=False,
                             write_report=False)
    finally:
        os.chdir(cwd)
    return root / summary.output_dir


def _copy_run(source: Path, target: Path) -> Path:
    target.mkdir(parents=True)
    for name in ("results.jsonl", "manifest.json"):
        (target / name).write_bytes((source / name).read_bytes())
    return target


# -- run names -------------------------------------------------------------------------

@pytest.mark.parametrize("name, component", [
    ("../../x", "x"), ("/abs/path", "abs_path"), ("..", "run"), ("", "run"),
    (".hidden", "hidden"), ("a b/c\\d", "a_b_c_d"), ("quick-start_1.2", "quick-start_1.2"),
    ("café", "caf"), ("x" * 300, "x" * 80), ("a\x00b\nc", "a_b_c"), (12, "12")])
def test_a_run_name_becomes_one_safe_path_component(name, component):
    assert run_name_component(name) == component


def test_a_recipe_named_outside_results_runs_inside_it(named_run):
    assert named_run.parent.name == "results"
    assert named_run.name.startswith("escaped-")
    assert read_manifest(str(named_run))["recipe"]["name"] == "../../escaped"
    assert not list(named_run.parents[2].glob("escaped-*"))


@pytest.mark.parametrize("name", ["../../x", "/abs/path", "..", "a/../../b"])
def test_the_default_folder_stays_in_results_whatever_the_name(tmp_path, monkeypatch,
                                                              name):
    monkeypatch.chdir(tmp_path)
    path = default_run_path(name)
    assert os.path.dirname(path) == "results" and os.path.isdir(path)
    assert os.path.realpath(path).startswith(str(tmp_path.resolve() / "results") + os.sep)


# -- default folders claimed atomically ------------------------------------------------

CLAIMER = textwrap.dedent("""
    import os, sys, time
    from deep500.results.run_folder import RunFolder
    from deep500.results.folder_claims import new_run_folder
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.001)
    path = new_run_folder(sys.argv[1], "same-second")
    folder = RunFolder.claim(path)
    print(path, flush=True)
    sys.stdin.read()   # holds the folder until the test has seen every claim
    folder.release()
""")


def test_concurrent_runs_without_out_each_claim_their_own_folder(tmp_path):
    go = tmp_path / "go"
    processes = [subprocess.Popen([sys.executable, "-c", CLAIMER, str(tmp_path / "results"),
                                   str(go)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, cwd=REPO)
                 for _ in range(4)]
    go.touch()
    paths = []
    for process in processes:
        paths.append(process.stdout.readline().strip())
    for process in processes:
        _, error = process.communicate("", timeout=120)
        assert process.returncode == 0, error[-2000:]
    base = str(tmp_path / "results" / "same-second")
    assert sorted(paths) == sorted([base, f"{base}-2", f"{base}-3", f"{base}-4"])


def test_a_folder_created_by_someone_else_is_never_the_new_one(tmp_path):
    (tmp_path / "base").mkdir()
    (tmp_path / "base-2").write_text("a file, not a folder")
    assert new_run_folder(str(tmp_path), "base") == str(tmp_path / "base-3")


# -- a refused --out is left untouched -------------------------------------------------

def test_a_refused_non_empty_out_is_left_untouched(tmp_path):
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0\n")
    before = _snapshot(folder)
    with pytest.raises(RunFolderError, match=r"etc is not empty \(passwd\): one run per "
                                             r"folder"):
        RunFolder.claim(str(folder))
    assert _snapshot(folder) == before
    assert not (folder / LOCK_FILE).exists()


def test_a_refused_out_on_the_command_line_is_left_untouched(tmp_path):
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "hosts").write_text("127.0.0.1 localhost\n")
    (tmp_path / "escaped.yaml").write_text(RECIPE)
    before = _snapshot(folder)
    completed = subprocess.run([sys.executable, "-m", "deep500", "run",
                                str(tmp_path / "escaped.yaml"), "--out", str(folder),
                                "--quiet"], capture_output=True, text=True, timeout=300,
                               cwd=REPO)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "is not empty (hosts)" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert _snapshot(folder) == before


def test_a_folder_another_run_holds_is_in_use_and_a_released_one_is_not_empty(named_run,
                                                                             tmp_path):
    folder = _copy_run(named_run, tmp_path / "run")
    holder = RunFolder.claim(str(folder), append=True)  # stands for the other run
    before = _snapshot(folder)
    with pytest.raises(RunFolderError, match=rf"run is in use by another deep500 run "
                                             rf"\(process {os.getpid()} on "):
        RunFolder.claim(str(folder))
    assert _snapshot(folder) == before
    holder.release()
    with pytest.raises(RunFolderError, match=r"run is not empty \(manifest.json, "
                                             r"results.jsonl\)"):
        RunFolder.claim(str(folder))


# -- --append only into a Deep500 run folder -------------------------------------------

@pytest.mark.parametrize("manifest", [None, {"name": "my project", "version": 3}, [1, 2]])
def test_append_refuses_a_folder_that_deep500_run_did_not_write(tmp_path, manifest):
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "report.md").write_text("# my own report\n")
    (folder / "report.html").write_text("<p>mine</p>")
    if manifest is not None:
        (folder / "manifest.json").write_text(json.dumps(manifest))
    before = _snapshot(folder)
    expected = (r"--append .*mine: not a Deep500 run folder \(" +
                (r"it has no manifest.json" if manifest is None else
                 r"its manifest.json is not one deep500 run wrote") +
                r"; it holds .*report.html.*\); --append adds a session to a folder that "
                r"'deep500 run' wrote")
    with pytest.raises(RunFolderError, match=expected if not isinstance(manifest, list)
                       else r"a manifest is a JSON object"):
        RunFolder.claim(str(folder), append=True)
    assert _snapshot(folder) == before


def test_append_adds_a_session_to_a_deep500_run_folder(named_run, tmp_path):
    folder = _copy_run(named_run, tmp_path / "run")
    claimed = RunFolder.claim(str(folder), append=True)
    try:
        assert claimed.session == 1 and claimed.history[0]["recipe"]["name"] == \
            "../../escaped"
    finally:
        claimed.release()
    empty = tmp_path / "empty"
    empty.mkdir()
    RunFolder.claim(str(empty), append=True).release()  # nothing there to fold in


@pytest.mark.parametrize("name", ["manifest.json", "results.jsonl", "plots", "training",
                                  LOCK_FILE])
def test_append_refuses_a_run_folder_with_a_link_in_place_of_its_files(named_run,
                                                                      tmp_path, name):
    folder = _copy_run(named_run, tmp_path / "run")
    outside = tmp_path / "outside"
    outside.write_text("not Deep500's\n")
    if (folder / name).exists():
        os.replace(folder / name, tmp_path / name)
        outside = tmp_path / name
    (folder / name).symlink_to(outside)
    before, target = _snapshot(folder), outside.read_bytes()
    with pytest.raises(RunFolderError, match=rf"{name} is a symbolic link \(to .*\) where "
                                             rf"Deep500 writes a run's files; .*remove "
                                             rf"the link"):
        RunFolder.claim(str(folder), append=True)
    assert _snapshot(folder) == before and outside.read_bytes() == target


def test_a_lock_link_is_refused_even_in_an_empty_folder(tmp_path):
    folder = tmp_path / "empty"
    folder.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (folder / LOCK_FILE).symlink_to(victim)
    with pytest.raises(RunFolderError, match=r"\.deep500\.lock is a symbolic link"):
        RunFolder.claim(str(folder))
    assert victim.read_text() == "keep me\n"


# -- reports, plots, manifests: temp file + rename, no link followed -------------------

def test_a_report_over_planted_links_replaces_them_and_spares_their_targets(named_run,
                                                                          tmp_path):
    folder = _copy_run(named_run, tmp_path / "run")
    victims = {name: tmp_path / f"victim-{name}" for name in ("report.md", "report.html")}
    for name, victim in victims.items():
        victim.write_text("keep me\n")
        (folder / name).symlink_to(victim)
    (folder / "plots").mkdir()
    plot_victim = tmp_path / "victim.png"
    plot_victim.write_bytes(b"keep me")
    (folder / "plots" / "level0_time.png").symlink_to(plot_victim)
    paths = write_reports(str(folder))
    assert [Path(p).name for p in paths] == ["report.md", "report.html"]
    for name, victim in victims.items():
        assert victim.read_text() == "keep me\n"
        assert not (folder / name).is_symlink() and "Deep500 report" in \
            (folder / name).read_text()
    assert plot_victim.read_bytes() == b"keep me"
    assert not (folder / "plots" / "level0_time.png").is_symlink()
    assert (folder / "plots" / "level0_time.png").read_bytes()[:4] == b"\x89PNG"
    assert not [p for p in folder.rglob("*.tmp")]


def test_a_symlinked_plots_folder_is_refused_and_receives_nothing(named_run, tmp_path):
    folder = _copy_run(named_run, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "plots").symlink_to(elsewhere)
    with pytest.raises(UnsafePathError, match=r"plots is a symbolic link \(to .*elsewhere"
                                              r"'\) where Deep500 writes the report's "
                                              r"plots; it writes only inside the run "
                                              r"folder: remove the link"):
        write_reports(str(folder))
    assert list(elsewhere.iterdir()) == []


def test_deep500_report_on_a_symlinked_plots_folder_exits_2_with_the_reason(named_run,
                                                                          tmp_path):
    folder = _copy_run(named_run, tmp_path / "run")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (folder / "plots").symlink_to(elsewhere)
    completed = subprocess.run([sys.executable, "-m", "deep500", "report", str(folder)],
                               capture_output=True, text=True, timeout=300, cwd=REPO)
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "plots is a symbolic link" in completed.stderr
    assert "Traceback" not in completed.stderr
    assert list(elsewhere.iterdir()) == []


def test_the_manifest_is_written_over_a_planted_link_not_through_it(tmp_path):
    victim = tmp_path / "victim.json"
    victim.write_text("keep me\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").symlink_to(victim)
    write_manifest(str(folder), {"status": "running"})
    assert victim.read_text() == "keep me\n"
    assert not (folder / "manifest.json").is_symlink()
    assert read_manifest(str(folder)) == {"status": "running"}
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json"]


def test_records_are_never_appended_through_a_planted_link(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "results.jsonl").symlink_to(victim)
    with pytest.raises(OSError):
        ResultsWriter(str(folder))
    assert victim.read_text() == "keep me\n"
