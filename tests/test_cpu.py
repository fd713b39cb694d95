"""The CPU backend: parallel batches on both paths, and the kernel cache (tests/test_backends.py
compares it with the numpy interpreter on every example)."""

import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from compare import compare_with_reference

import diffdsl
from diffdsl.backends import cpu

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("path", [ROOT / "examples" / n for n in ("det3.dd", "piecewise.dd",
                                                                   "special.dd")],
                         ids=lambda p: p.name)
@pytest.mark.parametrize("backend", ["cpu-tape", "cpu"])
def test_parallel_batches_match(path, backend, monkeypatch):
    """Rows on threads, each a slice with its own scratch, on machine code and on the tape."""
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 0)
    monkeypatch.setenv(cpu.THREADS_ENV, "3")  # more threads than cores: uneven slices
    prog = diffdsl.load(path)
    compare_with_reference(prog, backend, "float64", (50,), seed=2)
    compare_with_reference(prog, backend, "float64", (), seed=3)


def test_empty_batch():
    prog = diffdsl.load(ROOT / "examples" / "det3.dd", backend="cpu")
    assert prog.grad(A=np.zeros((0, 3, 3)))["A"].shape == (0, 3, 3)


# the cache --------------------------------------------------------------------------------

SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import diffdsl
    prog = diffdsl.load(sys.argv[1], backend="cpu")
    g = prog.grad(A=np.arange(9.0).reshape(3, 3) ** 2)["A"]
    print(json.dumps({"kernels": prog.stats.kernels_built, "g": g.tolist()}))
""")


def _run(cache_dir, *extra_env, check=True):
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(cache_dir))
    env.pop("DIFFDSL_BACKEND", None)
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(ROOT / "examples" / "det3.dd")],
                          capture_output=True, text=True, env=env, check=False)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def test_second_process_compiles_nothing(tmp_path):
    first = json.loads(_run(tmp_path).stdout)
    second = json.loads(_run(tmp_path).stdout)
    assert first["kernels"] >= 1
    assert second["kernels"] == 0
    assert first["g"] == second["g"]


def test_two_processes_building_at_once_both_succeed(tmp_path):
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(tmp_path))
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, str(ROOT / "examples" / "det3.dd")],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    results = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), results
    assert json.loads(results[0][0])["g"] == json.loads(results[1][0])["g"]


def test_corrupt_entries_are_rebuilt(tmp_path):
    good = json.loads(_run(tmp_path).stdout)["g"]
    objects = list(tmp_path.rglob("kernel.o"))
    assert objects
    for obj in objects:
        obj.write_bytes(obj.read_bytes()[: obj.stat().st_size // 2])  # truncated
    again = json.loads(_run(tmp_path).stdout)
    assert again["g"] == good and again["kernels"] >= 1
    for obj in tmp_path.rglob("kernel.o"):
        obj.write_bytes(b"garbage")  # object code replaced
    for meta in tmp_path.rglob("kernel.json"):
        meta.write_text('{"sha256": 1}')  # facts that are not JSON of the right shape
    assert json.loads(_run(tmp_path).stdout)["g"] == good
    for meta in tmp_path.rglob("kernel.json"):
        meta.write_bytes(b"\xff\xfe not utf-8")
    assert json.loads(_run(tmp_path).stdout)["g"] == good


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_cache_builds_in_memory_with_a_warning(tmp_path):
    tmp_path.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        done = _run(tmp_path / "sub")
        assert "building in memory" in done.stderr
    finally:
        tmp_path.chmod(stat.S_IRWXU)


def test_unwritable_cache_builds_in_memory_with_a_warning(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")  # a cache root below a file cannot be made, even by root
    done = _run(blocker / "cache")
    assert "building in memory" in done.stderr
    assert json.loads(done.stdout)["kernels"] >= 1
    assert blocker.read_text() == "not a folder"


def test_no_cache_writes_nothing(tmp_path):
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(tmp_path / "c"))
    done = subprocess.run([sys.executable, "-m", "diffdsl", "grad", str(ROOT / "examples" /
                           "det2.dd"), "--backend", "cpu", "--no-cache", "--inputs",
                           "A=[[1,2],[3,4]]", "--json"], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["grad"]["A"] == [[4.0, -3.0], [-2.0, 1.0]]
    assert not (tmp_path / "c").exists()


def test_cache_info_and_clear(tmp_path):
    _run(tmp_path)
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(tmp_path))
    info = subprocess.run([sys.executable, "-m", "diffdsl", "cache", "info", "--json"],
                          capture_output=True, text=True, env=env, check=True)
    assert json.loads(info.stdout)["entries"] >= 1
    (tmp_path / "keep.txt").write_text("a user's file")
    subprocess.run([sys.executable, "-m", "diffdsl", "cache", "clear"], env=env, check=True,
                   capture_output=True)
    info = subprocess.run([sys.executable, "-m", "diffdsl", "cache", "info", "--json"],
                          capture_output=True, text=True, env=env, check=True)
    assert json.loads(info.stdout)["entries"] == 0
    assert (tmp_path / "keep.txt").read_text() == "a user's file"
