"""Chunked files on the command line: `.npy` inputs memory-mapped, Zarr inputs, `.npy` and
Zarr outputs written chunk by chunk and renamed into place (cli/files.py, datafiles.py).

Every chunked result is compared with the in-memory path (`--output FILE.npz`) on the same
inputs, and det3's with NumPy's determinant and inverse; the chunk size must not change a
single bit. Zarr tests are skipped where zarr is not installed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from diffdsl import cli, datafiles
from diffdsl.cli import files as cli_files

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DET3 = EXAMPLES / "det3.dd"
MATRIX = EXAMPLES / "matrix.dd"

rng = np.random.default_rng(7)
A = rng.normal(size=(50, 3, 3))


def run(capsys, *args):
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def in_memory(capsys, tmp_path, *args) -> dict:
    """The same command through the in-memory path, as the arrays of its .npz output."""
    out = tmp_path / "reference.npz"
    code, _, err = run(capsys, *args, "--output", out)
    assert code == 0, err
    with np.load(out) as saved:
        return {k: saved[k] for k in saved.files}


@pytest.fixture
def zarr():
    return pytest.importorskip("zarr", reason="zarr is not installed (the 'dask' extra)")


def zarr_array(zarr, store: Path, path: str, data: np.ndarray, chunks=None) -> None:
    """An array in a Zarr store, through the calls zarr 2 and 3 share."""
    array = zarr.open_array(store=str(store), path=path, mode="w", shape=data.shape,
                            chunks=chunks or data.shape, dtype=data.dtype)
    array[...] = data


def test_npy_in_npy_out_in_chunks(capsys, tmp_path):
    np.save(tmp_path / "A.npy", A)
    out = tmp_path / "d.npy"
    code, stdout, err = run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'A.npy'}",
                            "--output", out, "--chunk", 7)
    assert code == 0, err
    assert stdout.strip() == f"wrote {out}: d [50] float64"
    np.testing.assert_allclose(np.load(out), np.linalg.det(A), rtol=1e-12)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.npy", "d.npy"]


@pytest.mark.parametrize("command, extra", [
    ("grad", []),
    ("hessian", []),
    ("jacobian", ["--of", "w", "--wrt", "v"]),
    ("vjp", ["--of", "w", "--seed", "SEED"]),
    ("jvp", ["--of", "w", "--tangents", "v=TANGENTS"]),
    ("hvp", ["--of", "q", "--tangents", "v=TANGENTS"]),
])
def test_zarr_output_equals_the_in_memory_path(capsys, tmp_path, zarr, command, extra):
    mats = rng.normal(size=(23, 3, 3))
    vecs = rng.normal(size=(23, 3))
    np.save(tmp_path / "A.npy", mats)
    np.save(tmp_path / "seed.npy", rng.normal(size=(23, 3)))  # batched like the inputs
    np.save(tmp_path / "tangents.npy", rng.normal(size=(23, 3)))
    program = DET3 if command in ("grad", "hessian") else MATRIX
    inputs = [f"A={tmp_path / 'A.npy'}"] + ([] if program == DET3 else [f"v={vecs.tolist()}"])
    extra = [e.replace("SEED", str(tmp_path / "seed.npy"))
             .replace("TANGENTS", str(tmp_path / "tangents.npy")) for e in extra]
    args = [command, program, "--inputs", *inputs, *extra]
    want = in_memory(capsys, tmp_path, *args)
    out = tmp_path / "out.zarr"
    code, stdout, err = run(capsys, *args, "--output", out, "--chunk", 5, "--json")
    assert code == 0, err
    report = json.loads(stdout)
    assert report["output"] == str(out) and sorted(report["arrays"]) == sorted(want)
    group = zarr.open_group(str(out), mode="r")
    assert sorted(group.array_keys()) == sorted(want)
    for key, array in want.items():
        assert report["arrays"][key] == {"shape": list(array.shape), "dtype": "float64"}
        np.testing.assert_array_equal(group[key][...], array)
        assert group[key].chunks[0] == 5


def test_zarr_inputs_by_array_and_by_group(capsys, tmp_path, zarr):
    zarr.open_group(str(tmp_path / "in.zarr"), mode="w")
    zarr_array(zarr, tmp_path / "in.zarr", "mats", A, chunks=(8, 3, 3))
    zarr_array(zarr, tmp_path / "in.zarr", "v", np.array([1.0, -2.0, 0.5]))
    code, _, err = run(capsys, "grad", DET3, "--inputs", f"A={tmp_path / 'in.zarr'}:mats",
                       "--output", tmp_path / "g.zarr", "--chunk", 9)
    assert code == 0, err
    g = zarr.open_group(str(tmp_path / "g.zarr"), mode="r")
    det = np.linalg.det(A)
    np.testing.assert_allclose(g["grad.A"][...],
                               det[:, None, None] * np.linalg.inv(A).transpose(0, 2, 1),
                               rtol=1e-9, atol=1e-12)
    # A group as a FILE of inputs, like an .npz: names are its arrays'.
    zarr.open_group(str(tmp_path / "both.zarr"), mode="w")
    zarr_array(zarr, tmp_path / "both.zarr", "A", A)
    zarr_array(zarr, tmp_path / "both.zarr", "v", np.array([1.0, -2.0, 0.5]))
    want = in_memory(capsys, tmp_path, "eval", MATRIX, "--inputs", tmp_path / "both.zarr")
    code, _, err = run(capsys, "eval", MATRIX, "--inputs", tmp_path / "both.zarr",
                       "--output", tmp_path / "e.zarr")
    assert code == 0, err
    e = zarr.open_group(str(tmp_path / "e.zarr"), mode="r")
    for key, array in want.items():
        np.testing.assert_array_equal(e[key][...], array)


def test_two_batch_axes_chunked_on_the_first(capsys, tmp_path):
    mats = rng.normal(size=(5, 4, 3, 3))
    np.save(tmp_path / "A.npy", mats)
    code, _, err = run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'A.npy'}",
                       "--output", tmp_path / "d.npy", "--chunk", 2)
    assert code == 0, err
    np.testing.assert_allclose(np.load(tmp_path / "d.npy"), np.linalg.det(mats), rtol=1e-12)


def test_default_chunk_follows_the_memory_budget(capsys, tmp_path, monkeypatch):
    np.save(tmp_path / "A.npy", A)
    # One row of det3's eval holds 72 bytes of input and 8 of output: 800 bytes is 10 rows.
    monkeypatch.setattr(cli_files, "CHUNK_BYTES", 800)
    seen = []

    class Bar:
        def update(self, n):
            seen.append(n)

    monkeypatch.setattr(cli_files.progress, "bar",
                        lambda total, desc, unit: _context(Bar(), seen, total, unit))
    code, _, err = run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'A.npy'}",
                       "--output", tmp_path / "d.npy")
    assert code == 0, err
    assert seen == [("total", 50, "rows"), 10, 10, 10, 10, 10]
    np.testing.assert_allclose(np.load(tmp_path / "d.npy"), np.linalg.det(A), rtol=1e-12)


class _context:
    def __init__(self, bar, seen, total, unit):
        self.bar = bar
        seen.append(("total", total, unit))

    def __enter__(self):
        return self.bar

    def __exit__(self, *exc):
        return False


def test_a_failed_run_leaves_the_old_output_and_no_temporary_file(capsys, tmp_path,
                                                                  monkeypatch):
    np.save(tmp_path / "A.npy", A)
    out = tmp_path / "d.npy"
    np.save(out, np.arange(3.0))
    writes = []

    def failing(self, start, block):
        writes.append(start)
        if len(writes) == 3:
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(datafiles.NpyWriter, "write", failing)
    code, _, err = run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'A.npy'}",
                       "--output", out, "--chunk", 10)
    assert code == 2 and "No space left on device" in err and "Traceback" not in err
    np.testing.assert_array_equal(np.load(out), np.arange(3.0))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.npy", "d.npy"]


def test_an_existing_zarr_store_is_replaced_and_nothing_else(capsys, tmp_path, zarr):
    np.save(tmp_path / "A.npy", A)
    zarr.open_group(str(tmp_path / "g.zarr"), mode="w")
    zarr_array(zarr, tmp_path / "g.zarr", "stale", np.zeros(2))
    args = ["grad", DET3, "--inputs", f"A={tmp_path / 'A.npy'}"]
    assert run(capsys, *args, "--output", tmp_path / "g.zarr")[0] == 0
    assert sorted(zarr.open_group(str(tmp_path / "g.zarr"), mode="r").array_keys()) == \
        ["grad.A", "value"]
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    (tmp_path / "file.zarr").write_text("not a store")
    for target in (mine, tmp_path / "file.zarr"):
        code, _, err = run(capsys, *args, "--output", target)
        assert code == 2 and "refusing to replace it" in err
    assert (mine / "notes.txt").read_text() == "keep me"
    assert (tmp_path / "file.zarr").read_text() == "not a store"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.npy", "file.zarr", "g.zarr",
                                                          "mine"]


@pytest.mark.parametrize("args, message", [
    (["grad", DET3, "--inputs", "A=A.npy", "--output", "g.npy"],
     "a .npy file holds one array, but grad gives 2: value, grad.A"),
    (["eval", DET3, "--inputs", "A=A.npy", "--chunk", "10"],
     "--chunk and --scheduler write the results to files"),
    (["eval", DET3, "--inputs", "A=A.npy", "--output", "d.npy", "--chunk", "0"],
     "--chunk must be at least 1 row"),
    (["eval", DET3, "--inputs", "A=A.npy", "--output", "d.npy", "--chunk", "ten"],
     "invalid int value"),
    (["eval", DET3, "--inputs", "A=A.npy", "--output", "d.csv"],
     "--output must name a .npz file, a .npy file or a .zarr folder"),
    (["eval", MATRIX, "--inputs", "A=A.npy", "v=V.npy", "--output", "d.zarr"],
     "batch shapes do not agree"),
    (["eval", DET3, "--inputs", "A=V.npy", "--output", "d.npy"],
     "declared with shape [3, 3], but the value given has shape [49, 3]"),
    (["eval", DET3, "--inputs", "A=missing.zarr", "--output", "d.npy"],
     "no Zarr store at"),
    (["eval", DET3, "--inputs", "A=A.npy", "--output", "no/such/folder/d.npy"],
     "cannot write"),
])
def test_errors_exit_2_before_writing_anything(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    np.save("A.npy", A)
    np.save("V.npy", rng.normal(size=(49, 3)))
    code, _, err = run(capsys, *args)
    assert code == 2, err
    assert message in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.npy", "V.npy"]


def test_a_scheduler_that_cannot_be_reached_is_a_usage_error(capsys, tmp_path):
    pytest.importorskip("distributed", reason="dask.distributed is not installed")
    np.save(tmp_path / "A.npy", A)
    code, _, err = run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'A.npy'}",
                       "--output", tmp_path / "d.npy", "--scheduler", "nonsense://x")
    assert code == 2 and "cannot reach the Dask scheduler at nonsense://x" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["A.npy"]


def test_no_batch_and_an_empty_batch(capsys, tmp_path, zarr):
    one = [[2.0, 0.0, 1.0], [1.0, 3.0, 2.0], [1.0, 1.0, 4.0]]
    args = ["hessian", DET3, "--inputs", f"A={one}"]
    want = in_memory(capsys, tmp_path, *args)
    code, stdout, err = run(capsys, *args, "--output", tmp_path / "h.zarr")
    assert code == 0, err
    assert stdout.strip() == f"wrote {tmp_path / 'h.zarr'}: value [] float64, " \
                             "hessian.A.A [3, 3, 3, 3] float64"
    h = zarr.open_group(str(tmp_path / "h.zarr"), mode="r")
    for key, array in want.items():
        np.testing.assert_array_equal(h[key][...], array)
    np.save(tmp_path / "none.npy", np.zeros((0, 3, 3)))
    code, stdout, err = run(capsys, "grad", DET3, "--inputs", f"A={tmp_path / 'none.npy'}",
                            "--output", tmp_path / "g.zarr")
    assert code == 0, err
    assert zarr.open_group(str(tmp_path / "g.zarr"), mode="r")["grad.A"].shape == (0, 3, 3)
