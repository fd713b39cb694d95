"""A full disk is the user's to fix (issue 23, item 5): a plain error naming the file, exit
status 2 (docs/cli.md, "Exit status"), nothing partial left behind.

Standard output on /dev/full fails for real (ENOSPC). Files fail for real under a file size
limit (RLIMIT_FSIZE with SIGXFSZ ignored: EFBIG, "File too large"), in a subprocess; and in
this process with the writes patched to raise ENOSPC at each stage: the file made at its full
size, the rows written, Zarr's metadata, `.npz` output.
"""

from __future__ import annotations

import errno
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffdsl import cli, datafiles

DET = Path(__file__).resolve().parent.parent / "examples" / "det3.dd"
A = "[[1, 2, 3], [4, 5, 6], [7, 8, 10]]"
FULL = Path("/dev/full")


def run_cli(*args, stdout=subprocess.PIPE, fsize=None, cwd=None):
    """`python -m diffdsl ARGS`; `fsize` bytes the largest file it may write."""
    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past it fails, EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    return subprocess.run([sys.executable, "-m", "diffdsl", *map(str, args)], stdout=stdout,
                          stderr=subprocess.PIPE, text=True, cwd=cwd,
                          preexec_fn=None if fsize is None else limit, timeout=300)


def left_in(folder: Path) -> list:
    return sorted(p.name for p in folder.iterdir() if p.name != "A.npy")


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [
    ["grad", DET, "--inputs", f"A={A}"],
    ["eval", DET, "--inputs", f"A={A}", "--json"],
    ["--help"],
    ["diff", DET],
])
def test_standard_output_on_a_full_disk(args):
    with open(FULL, "w") as full:
        done = run_cli(*args, stdout=full)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "diffdsl: error: cannot write standard output (/dev/full): No space left on device"]


def batch_file(folder: Path) -> Path:
    path = folder / "A.npy"
    np.save(path, np.random.default_rng(0).uniform(size=(20_000, 3, 3)))
    return path


@pytest.mark.parametrize("command, output, fsize", [
    ("eval", "out.npy", 100),  # the file made at its full size fails
    ("grad", "out.zarr", 100),  # Zarr's metadata fails
    ("grad", "out.zarr", 100_000),  # a chunk of rows fails
    ("grad", "out.npz", 1000),
])
def test_output_files_past_a_size_limit(tmp_path, command, output, fsize):
    batch_file(tmp_path)
    done = run_cli(command, DET, "--inputs", "A=A.npy", "--output", output, fsize=fsize,
                   cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert f"diffdsl: error: cannot write {output}" in done.stderr
    assert "File too large" in done.stderr and "internal error" not in done.stderr
    assert left_in(tmp_path) == []  # no partial file, no temporary one


def enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("patch, output", [
    ((datafiles.NpyWriter, "__init__"), "out.npy"),
    ((datafiles.NpyWriter, "write"), "out.npy"),
    ((datafiles.ZarrWriter, "__init__"), "out.zarr"),
    ((datafiles.ZarrWriter, "write"), "out.zarr"),
    ((np, "savez"), "out.npz"),
])
def test_no_space_left_at_each_stage(tmp_path, monkeypatch, capsys, patch, output):
    batch_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(*patch, enospc)
    status = cli.main(["grad" if output != "out.npy" else "eval", str(DET), "--inputs",
                       "A=A.npy", "--output", output])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(f"diffdsl: error: cannot write {output}") and \
        err.rstrip().endswith("No space left on device"), err
    assert left_in(tmp_path) == []


def test_an_old_result_stays_whole_when_the_new_one_fails(tmp_path, monkeypatch, capsys):
    batch_file(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert cli.main(["eval", str(DET), "--inputs", "A=A.npy", "--output", "out.npy"]) == 0
    before = np.load(tmp_path / "out.npy")
    monkeypatch.setattr(datafiles.NpyWriter, "write", enospc)
    assert cli.main(["eval", str(DET), "--inputs", "A=A.npy", "--output", "out.npy"]) == 2
    assert "cannot write out.npy" in capsys.readouterr().err
    assert np.array_equal(np.load(tmp_path / "out.npy"), before)
    assert left_in(tmp_path) == ["out.npy"]


def test_rows_are_written_with_python_writes_that_report_the_cause(tmp_path):
    """`ndarray.tofile` says only "N requested and 0 written" on a full disk; the writer's
    error names the cause."""
    writer = datafiles.NpyWriter(tmp_path / "x.npy", (4, 2), "float64")
    writer.write(2, np.ones((2, 2), dtype=np.float32))
    assert np.array_equal(np.load(tmp_path / "x.npy"), [[0, 0], [0, 0], [1, 1], [1, 1]])
    if FULL.exists():
        writer.path = str(FULL)
        with pytest.raises(OSError) as info:
            writer.write(0, np.ones((4, 2)))
        assert info.value.errno == errno.ENOSPC
