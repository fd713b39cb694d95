"""The cache and the user's files (issue 10): every damaged part of a cache entry is rebuilt
once and never warned about again; `cache clear` removes only what diffdsl wrote; files a
command rewrites keep their mode and its temporary files never take a user's name."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import warnings

import numpy as np
import pytest

import diffdsl
from diffdsl import cache

SOURCE = "input x[2]\noutput y = sin(x[0]) * x[1] + x[0] ^ 2\n"
POINT = {"x": np.array([0.3, -1.2])}


def _run(root, monkeypatch):
    """Compile and differentiate SOURCE on the CPU with the cache in `root`; the warnings."""
    monkeypatch.setenv(cache.ENV, str(root))
    cache._warned.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = diffdsl.compile(SOURCE, backend="cpu")
        grad = prog.grad(POINT)["x"]
        batch = prog.grad({"x": np.tile(POINT["x"], (5, 1))})["x"]
    np.testing.assert_allclose(grad, [np.cos(0.3) * -1.2 + 0.6, np.sin(0.3)])
    np.testing.assert_allclose(batch, np.tile(grad, (5, 1)))
    return prog.stats, [str(w.message) for w in caught]


def _not_utf8(path):
    path.write_bytes(b"\xff\xfe\x00garbage\x80")


def _a_folder(path):
    path.unlink()
    (path / "kernel.py").mkdir(parents=True)  # a folder in its place, not even empty


def _truncated(path):
    path.write_bytes(path.read_bytes()[: max(1, path.stat().st_size // 2)])


def _garbage(path):
    path.write_bytes(os.urandom(64))


def _empty(path):
    path.write_bytes(b"")


def _wrong_json(path):
    path.write_text('{"graphs": [], "sha256": 3, "slots": "x"}')


DAMAGE = [_not_utf8, _a_folder, _truncated, _garbage, _empty, _wrong_json]
PARTS = [cache.OBJECT_FILE, cache.META_FILE, cache.PLAN_FILE, "diffdsl-entry"]


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
@pytest.mark.parametrize("part", PARTS)
def test_every_damaged_part_is_rebuilt_once_without_a_warning(tmp_path, monkeypatch, part,
                                                              damage):
    _run(tmp_path, monkeypatch)
    files = sorted(tmp_path.rglob(part))
    assert files, part
    for path in files:
        damage(path)
    stats, warned = _run(tmp_path, monkeypatch)
    assert warned == []
    again, warned = _run(tmp_path, monkeypatch)  # repaired: nothing built, nothing said
    assert warned == [] and again.kernels_built == 0 and again.graphs_built == 0


@pytest.mark.parametrize("damage", ["file", "link"])
def test_an_entry_folder_replaced_by_a_file_or_a_link_is_rebuilt(tmp_path, monkeypatch,
                                                                 damage):
    _run(tmp_path, monkeypatch)
    elsewhere = tmp_path.parent / (tmp_path.name + "-elsewhere")
    elsewhere.mkdir()
    (elsewhere / "keep.txt").write_text("the user's")
    for entry in [p for p in tmp_path.iterdir() if p.is_dir()]:
        shutil.rmtree(entry)
        if damage == "file":
            entry.write_text("not a folder")
        else:
            entry.symlink_to(elsewhere, target_is_directory=True)
    _, warned = _run(tmp_path, monkeypatch)
    assert warned == []
    again, warned = _run(tmp_path, monkeypatch)
    assert warned == [] and again.kernels_built == 0
    assert (elsewhere / "keep.txt").read_text() == "the user's"  # a link is not followed


def test_garbage_written_while_a_run_uses_the_entry(tmp_path, monkeypatch):
    """A program compiled from the cache keeps working when its files change under it."""
    monkeypatch.setenv(cache.ENV, str(tmp_path))
    _run(tmp_path, monkeypatch)
    prog = diffdsl.compile(SOURCE, backend="cpu")
    first = prog.grad(POINT)["x"]
    for path in tmp_path.rglob("*"):
        if path.is_file():
            _garbage(path)
    np.testing.assert_array_equal(prog.grad(POINT)["x"], first)
    _, warned = _run(tmp_path, monkeypatch)
    assert warned == []


def test_cache_clear_deletes_only_diffdsl_entries(tmp_path, monkeypatch):
    _run(tmp_path, monkeypatch)
    ours = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert ours
    mine = tmp_path / "my-project"
    mine.mkdir()
    (mine / "kernel.py").write_text("print('my own kernel')\n")
    (mine / "kernel.json").write_text("{}")
    (mine / "plan.json").write_text("{}")
    forged = tmp_path / "not-a-key"
    forged.mkdir()
    (forged / cache.MARKER_FILE).write_text(cache.MARKER_TEXT.format(key="another"))
    (tmp_path / "notes.txt").write_text("mine")
    env = dict(os.environ, **{cache.ENV: str(tmp_path)})
    done = subprocess.run([sys.executable, "-m", "diffdsl", "cache", "clear", "--json"],
                          capture_output=True, text=True, env=env, check=True)
    assert f'"removed": {len(ours)}' in done.stdout
    assert not any(p.exists() for p in ours)
    assert (mine / "kernel.py").read_text() == "print('my own kernel')\n"
    assert (forged / cache.MARKER_FILE).exists() and (tmp_path / "notes.txt").exists()


@pytest.mark.parametrize("damage", DAMAGE, ids=lambda f: f.__name__.strip("_"))
def test_a_damaged_cuda_module_entry_is_rewritten(tmp_path, damage):
    """The CUDA backend's entries are `kernel.py` modules: the same rule holds for them."""
    store = cache.KernelCache(tmp_path)
    source = "X = 1\n"
    path = store.module_path("k" * 64, source)
    (path.parent / "__pycache__").mkdir()
    damage(path)
    path = store.module_path("k" * 64, source)
    assert path.read_text() == source and store.owns(path.parent)
    assert not (path.parent / "__pycache__").exists()  # Numba's stale code goes with it
    assert store.module_path("k" * 64, source) == path


def _cli(*args, cwd):
    return subprocess.run([sys.executable, "-m", "diffdsl", *args], capture_output=True,
                          text=True, cwd=cwd, check=False)


def test_written_files_keep_their_mode_and_never_take_a_users_name(tmp_path):
    (tmp_path / "f.dd").write_text(SOURCE)
    graph, out = tmp_path / "g.dot", tmp_path / "out.npz"
    mine = tmp_path / "out.npz.tmp.npz"
    for path in (graph, out, mine):
        path.write_text("old")
        path.chmod(0o644)
    assert _cli("graph", "f.dd", "-o", "g.dot", cwd=tmp_path).returncode == 0
    done = _cli("eval", "f.dd", "--inputs", "x=[1, 2]", "--output", "out.npz", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert graph.read_text().startswith("digraph") and np.load(out)["y"].shape == ()
    for path in (graph, out, mine):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert mine.read_text() == "old"  # the user's file of that name is theirs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.dd", "g.dot", "out.npz",
                                                         "out.npz.tmp.npz"]


def test_a_new_file_gets_the_umask_mode(tmp_path):
    (tmp_path / "f.dd").write_text(SOURCE)
    assert _cli("graph", "f.dd", "-o", "new.dot", cwd=tmp_path).returncode == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.dot").stat().st_mode) == 0o666 & ~umask


@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_garbage_in_numbas_files_of_a_cuda_entry_is_dropped(tmp_path, suffix):
    """Numba raises on a damaged index or data file rather than recompiling."""
    import pickle
    store = cache.KernelCache(tmp_path)
    path = store.module_path("k" * 64, "X = 1\n")
    numba_dir = path.parent / "__pycache__"
    numba_dir.mkdir()
    good = pickle.dumps(1) + pickle.dumps((2, {}))
    (numba_dir / "kernel.f-1.py312.nbi").write_bytes(good)
    (numba_dir / "kernel.f-1.py312.0.nbc").write_bytes(pickle.dumps((b"ptx" * 100, 3), -1))
    assert store.module_path("k" * 64, "X = 1\n") == path and numba_dir.is_dir()
    (numba_dir / f"kernel.f-1.py312.1{suffix}").write_bytes(b"\x80\x05garbage")
    assert store.module_path("k" * 64, "X = 1\n") == path and not numba_dir.exists()
