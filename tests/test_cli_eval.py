"""`diffdsl eval` as INTERFACE.md fixes it: input specs, batches, --json, --output, --dtype and
the human-readable output. Values are checked against NumPy computed here, independently.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from diffdsl import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
DET3 = EXAMPLES / "det3.dd"
MATRIX = EXAMPLES / "matrix.dd"

RTOL = 1e-12

A0 = np.array([[2.0, 0.0, 1.0], [1.0, 3.0, 2.0], [1.0, 1.0, 1.0]])
A1 = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]])
V0 = np.array([1.0, -2.0, 0.5])


def run(capsys, *args):
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def run_json(capsys, *args):
    code, out, err = run(capsys, *args, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert set(data) == {"outputs"}
    return data["outputs"]


def as_json(value):
    return json.dumps(np.asarray(value).tolist())


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# Independent NumPy versions of examples/matrix.dd.
def matrix_outputs(a, v):
    n = a.shape[-1]
    hilbert = np.array([[1.0 / (i + j + 1) for j in range(n)] for i in range(n)])
    s = a @ a.T
    c = a * v[None, :]
    return {"t": np.trace(s @ hilbert + np.eye(n)), "q": v @ a @ v, "w": c.T @ v}


# --- input specs -------------------------------------------------------------------------------


def test_name_equals_json(capsys):
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={as_json(A0)}")
    assert out["d"] == pytest.approx(np.linalg.det(A0), rel=RTOL)


def test_name_equals_json_with_spaces_and_floats(capsys):
    out = run_json(capsys, "eval", DET3, "--inputs", "A=[[2.0, 0, 1e0], [1, 3, 2], [1, 1, 1.0]]")
    assert out["d"] == pytest.approx(np.linalg.det(A0), rel=RTOL)


def test_name_equals_npy_file(tmp_path, capsys):
    path = tmp_path / "a.npy"
    np.save(path, A1)
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={path}")
    assert out["d"] == pytest.approx(np.linalg.det(A1), rel=RTOL)


def test_name_equals_json_file(tmp_path, capsys):
    path = write(tmp_path, "a.json", as_json(A1))
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={path}")
    assert out["d"] == pytest.approx(np.linalg.det(A1), rel=RTOL)


def test_json_file_of_several_inputs(tmp_path, capsys):
    path = write(tmp_path, "in.json", json.dumps({"A": A1.tolist(), "v": V0.tolist()}))
    out = run_json(capsys, "eval", MATRIX, "--inputs", path)
    expected = matrix_outputs(A1, V0)
    for name in ("t", "q"):
        assert out[name] == pytest.approx(expected[name], rel=RTOL)
    np.testing.assert_allclose(out["w"], expected["w"], rtol=RTOL)


def test_npz_file_of_several_inputs(tmp_path, capsys):
    path = tmp_path / "in.npz"
    np.savez(path, A=A1, v=V0)
    out = run_json(capsys, "eval", MATRIX, "--inputs", path)
    expected = matrix_outputs(A1, V0)
    assert out["t"] == pytest.approx(expected["t"], rel=RTOL)
    assert out["q"] == pytest.approx(expected["q"], rel=RTOL)
    np.testing.assert_allclose(out["w"], expected["w"], rtol=RTOL)


def test_repeated_inputs_option(capsys):
    out = run_json(capsys, "eval", MATRIX, "--inputs", f"A={as_json(A1)}",
                   "--inputs", f"v={as_json(V0)}")
    assert out["q"] == pytest.approx(V0 @ A1 @ V0, rel=RTOL)


def test_several_specs_after_one_inputs_option(capsys):
    out = run_json(capsys, "eval", MATRIX, "--inputs", f"A={as_json(A1)}", f"v={as_json(V0)}")
    assert out["q"] == pytest.approx(V0 @ A1 @ V0, rel=RTOL)


def test_mixed_spec_kinds(tmp_path, capsys):
    npy = tmp_path / "v.npy"
    np.save(npy, V0)
    doc = write(tmp_path, "a.json", json.dumps({"A": A0.tolist()}))
    out = run_json(capsys, "eval", MATRIX, "--inputs", doc, f"v={npy}")
    expected = matrix_outputs(A0, V0)
    np.testing.assert_allclose(out["w"], expected["w"], rtol=RTOL)
    assert out["t"] == pytest.approx(expected["t"], rel=RTOL)


def test_scalar_inputs(tmp_path, capsys):
    path = write(tmp_path, "p.dd", "input x\ninput y\noutput r = hypot(x, y)\noutput s = x - y\n")
    out = run_json(capsys, "eval", path, "--inputs", "x=3", "y=4.0")
    assert out == {"r": pytest.approx(5.0), "s": pytest.approx(-1.0)}


def test_program_without_inputs(tmp_path, capsys):
    path = write(tmp_path, "p.dd", "output y = 2 ** -1 + 7 // 2\n")
    code, out, err = run(capsys, "eval", path)
    assert code == 0, err
    assert out.split("=")[0].strip() == "y"
    assert float(out.split("=")[1]) == pytest.approx(3.5)


@pytest.mark.parametrize("backend", ["numpy", "cpu", "auto"])
def test_every_backend_evaluates_programs_with_and_without_inputs(backend, tmp_path, capsys):
    """The tests default to the numpy interpreter (conftest.py); the command line's own
    default is `auto`, so the compiled backends get the same small programs here."""
    if backend != "numpy":
        pytest.importorskip("numba")
    path = write(tmp_path, "p.dd", "output y = 2 ** -1 + 7 // 2\n")
    out = run_json(capsys, "eval", path, "--backend", backend)
    assert out == {"y": 3.5}
    batch = random_matrices((3, 3, 3), seed=12)
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={as_json(batch)}", "--backend", backend)
    np.testing.assert_allclose(out["d"], np.linalg.det(batch), rtol=1e-10, atol=1e-14)
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={as_json(A0)}", "--backend", backend)
    assert out["d"] == pytest.approx(np.linalg.det(A0), rel=RTOL)


def test_source_file_with_a_utf8_byte_order_mark(tmp_path, capsys):
    """Editors on Windows write a BOM; Python reads such source files, so should diffdsl."""
    path = tmp_path / "p.dd"
    path.write_bytes(b"\xef\xbb\xbfinput x\noutput y = 2 * x\n")
    out = run_json(capsys, "eval", path, "--inputs", "x=2")
    assert out == {"y": 4.0}


def test_json_nan_and_infinity_inputs(tmp_path, capsys):
    path = write(tmp_path, "p.dd", "input x[3]\noutput y = 2 * x\n")
    out = run_json(capsys, "eval", path, "--inputs", "x=[NaN, Infinity, -Infinity]")
    assert out["y"] == ["nan", "inf", "-inf"]


# --- bad inputs: exit 2 with a message, never a traceback --------------------------------------


def assert_usage_error(code, out, err, *fragments):
    assert code == 2, (out, err)
    assert "Traceback" not in err
    assert "internal error" not in err
    assert err.strip()
    for fragment in fragments:
        assert fragment in err, err


def test_unknown_input_name(capsys):
    result = run(capsys, "eval", DET3, "--inputs", f"A={as_json(A0)}", "B=1")
    assert_usage_error(*result, "B")


def test_unknown_input_name_in_a_json_file(tmp_path, capsys):
    path = write(tmp_path, "in.json", json.dumps({"A": A0.tolist(), "Z": 1}))
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", path), "Z")


def test_unknown_input_name_in_an_npz_file(tmp_path, capsys):
    path = tmp_path / "in.npz"
    np.savez(path, A=A0, extra=np.zeros(2))
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", path), "extra")


def test_missing_input(capsys):
    assert_usage_error(*run(capsys, "eval", DET3), "A")


def test_missing_one_of_two_inputs(capsys):
    assert_usage_error(*run(capsys, "eval", MATRIX, "--inputs", f"A={as_json(A0)}"), "v")


@pytest.mark.parametrize("value", [
    "[[1, 2], [3, 4]",       # unterminated
    "[1, 2,, 3]",
    "{not json}",
    "abc",
    "",
    "[[1, 0, 0], [0, 1, 0], [0, 0]]",   # ragged
    '"text"',
    '{"a": 1}',
    "[[1, 0, 0], [0, 1, 0], [0, 0, \"x\"]]",
])
def test_malformed_json_value(value, capsys):
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", f"A={value}"))


@pytest.mark.parametrize("value", ["null", "[1, null, 3]", "true", "[true, false, 1]"])
def test_json_values_that_are_not_numbers(value, tmp_path, capsys):
    """INTERFACE.md: VALUE is a JSON number or nested list (of numbers); null and booleans are
    not numbers, and must not turn silently into NaN or 1.0."""
    path = write(tmp_path, "p.dd", "input x[3]\noutput y = sum(x)\n" if "[" in value
                 else "input x\noutput y = x\n")
    assert_usage_error(*run(capsys, "eval", path, "--inputs", f"x={value}"))


def test_malformed_json_file(tmp_path, capsys):
    path = write(tmp_path, "in.json", '{"A": [[1, 2, 3], ')
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", path))
    path = write(tmp_path, "list.json", "[1, 2, 3]")   # not an object of name -> value
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", path))
    value = write(tmp_path, "value.json", "[[1, 2, 3], oops]")
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", f"A={value}"))


def test_json_file_that_is_not_utf8(tmp_path, capsys):
    path = tmp_path / "in.json"
    path.write_bytes(b'\xff\xfe{"A": 1}')
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", path))
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", f"A={path}"))


def test_missing_and_corrupt_npy_files(tmp_path, capsys):
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'none.npy'}"))
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'none.json'}"))
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"this is not an npy file")
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", f"A={bad}"))


def test_corrupt_npz_file(tmp_path, capsys):
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"PK\x03\x04 truncated zip")
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", bad))


def test_npz_file_given_as_one_value(tmp_path, capsys):
    """`NAME=VALUE` takes a .npy or .json file; an .npz there is a bad input, not a crash."""
    path = tmp_path / "a.npz"
    np.savez(path, A=A0)
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", f"A={path}"))


@pytest.mark.parametrize("spec", ["A", "=1", "1A=2", "A[0]=1", "nonexistent.json",
                                  "nonexistent.npz", "A:=1"])
def test_bad_spec(spec, capsys):
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", spec))


def test_inputs_file_of_the_wrong_kind(tmp_path, capsys):
    path = write(tmp_path, "in.txt", "A=1")
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", path))


def test_wrongly_shaped_value(capsys):
    result = run(capsys, "eval", DET3, "--inputs", "A=[[1, 2], [3, 4]]")
    assert_usage_error(*result, "A", "input A[3, 3]", "det3.dd:2:")


def test_scalar_where_array_declared(capsys):
    assert_usage_error(*run(capsys, "eval", DET3, "--inputs", "A=1"), "input A[3, 3]")


# --- batches -----------------------------------------------------------------------------------


def random_matrices(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape)


def test_batch_of_one_input(capsys):
    batch = random_matrices((4, 3, 3))
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={as_json(batch)}")
    np.testing.assert_allclose(out["d"], np.linalg.det(batch), rtol=1e-10, atol=1e-14)


def test_batch_with_two_leading_dimensions(tmp_path, capsys):
    batch = random_matrices((2, 5, 3, 3), seed=1)
    path = tmp_path / "a.npy"
    np.save(path, batch)
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={path}")
    got = np.array(out["d"])
    assert got.shape == (2, 5)
    np.testing.assert_allclose(got, np.linalg.det(batch), rtol=1e-10, atol=1e-14)


def test_shared_and_batched_inputs(capsys):
    vs = random_matrices((5, 3), seed=2)
    out = run_json(capsys, "eval", MATRIX, "--inputs", f"A={as_json(A1)}", f"v={as_json(vs)}")
    assert np.array(out["t"]).shape == (5,)
    assert np.array(out["q"]).shape == (5,)
    assert np.array(out["w"]).shape == (5, 3)
    for k, v in enumerate(vs):
        expected = matrix_outputs(A1, v)
        assert out["t"][k] == pytest.approx(expected["t"], rel=RTOL)
        assert out["q"][k] == pytest.approx(expected["q"], rel=RTOL)
        np.testing.assert_allclose(out["w"][k], expected["w"], rtol=RTOL, atol=1e-14)


def test_two_batched_inputs(tmp_path, capsys):
    a = random_matrices((2, 3, 3, 3), seed=3)
    v = random_matrices((2, 3, 3), seed=4)
    np.savez(tmp_path / "in.npz", A=a, v=v)
    out = run_json(capsys, "eval", MATRIX, "--inputs", tmp_path / "in.npz")
    w = np.array(out["w"])
    assert w.shape == (2, 3, 3)
    for i in range(2):
        for j in range(3):
            expected = matrix_outputs(a[i, j], v[i, j])
            np.testing.assert_allclose(w[i, j], expected["w"], rtol=RTOL, atol=1e-14)
            assert out["q"][i][j] == pytest.approx(expected["q"], rel=RTOL)


def test_batch_of_scalars(tmp_path, capsys):
    path = write(tmp_path, "p.dd", "input x\ninput c\noutput y = c * x ** 2\n")
    xs = np.array([[0.0, 1.0, 2.0], [-1.0, 0.5, 3.0]])
    out = run_json(capsys, "eval", path, "--inputs", f"x={as_json(xs)}", "c=2")
    np.testing.assert_allclose(out["y"], 2 * xs**2, rtol=RTOL)


@pytest.mark.parametrize("v_shape", [(4, 3), (2, 2, 3), (3,) + (1, 3)])
def test_batches_that_disagree(v_shape, capsys):
    a = random_matrices((2, 3, 3), seed=5)
    v = random_matrices(v_shape, seed=6)
    result = run(capsys, "eval", MATRIX, "--inputs", f"A={as_json(a)}", f"v={as_json(v)}")
    assert_usage_error(*result)


def test_batch_shapes_do_not_broadcast(capsys):
    a = random_matrices((1, 3, 3), seed=7)     # batch [1] and batch [4] must not broadcast
    v = random_matrices((4, 3), seed=8)
    assert_usage_error(*run(capsys, "eval", MATRIX, "--inputs", f"A={as_json(a)}",
                            f"v={as_json(v)}"))


# --- output formats ----------------------------------------------------------------------------

NONFINITE = ("input x\n"
             "output a = log(x)\n"
             "output b = -log(x)\n"
             "output c = sqrt(x - 1)\n"
             "output v = [log(x), x + 1, sqrt(x - 1)]\n"
             "output m = [[x, log(x)], [-log(x), 2 * x]]\n")


def test_json_output_shape_and_nonfinite_values(tmp_path, capsys):
    path = write(tmp_path, "p.dd", NONFINITE)
    code, out, err = run(capsys, "eval", path, "--inputs", "x=0", "--json")
    assert code == 0, err
    data = json.loads(out)          # one JSON object and nothing else on stdout
    assert data == {"outputs": {
        "a": "-inf", "b": "inf", "c": "nan",
        "v": ["-inf", 1.0, "nan"],
        "m": [[0.0, "-inf"], ["inf", 0.0]],
    }}
    assert "NaN" not in out and "Infinity" not in out   # strict JSON


def test_json_output_of_a_batch_with_nonfinite_values(tmp_path, capsys):
    path = write(tmp_path, "p.dd", NONFINITE)
    out = run_json(capsys, "eval", path, "--inputs", "x=[0, 1]")
    assert out["a"] == ["-inf", 0.0]
    assert out["m"] == [[[0.0, "-inf"], ["inf", 0.0]], [[1.0, 0.0], [-0.0, 2.0]]]


def test_json_output_nests_lists_in_the_output_shape(tmp_path, capsys):
    path = write(tmp_path, "p.dd", "input x[2, 3]\noutput y = 2 * x\noutput s = sum(x)\n")
    x = np.arange(6.0).reshape(2, 3)
    out = run_json(capsys, "eval", path, "--inputs", f"x={as_json(x)}")
    assert out["y"] == (2 * x).tolist()
    assert out["s"] == 15.0
    assert isinstance(out["s"], float)


def test_output_npz(tmp_path, capsys):
    target = tmp_path / "out.npz"
    code, _, err = run(capsys, "eval", MATRIX, "--inputs", f"A={as_json(A1)}",
                       f"v={as_json(V0)}", "--output", target)
    assert code == 0, err
    expected = matrix_outputs(A1, V0)
    with np.load(target) as data:
        assert sorted(data.files) == ["q", "t", "w"]
        assert data["t"].shape == ()
        assert data["w"].shape == (3,)
        for name in ("t", "q", "w"):
            np.testing.assert_allclose(data[name], expected[name], rtol=RTOL)


def test_output_npz_of_a_batch(tmp_path, capsys):
    batch = random_matrices((6, 3, 3), seed=9)
    np.save(tmp_path / "a.npy", batch)
    target = tmp_path / "out.npz"
    code, _, err = run(capsys, "eval", DET3, "--inputs", f"A={tmp_path / 'a.npy'}",
                       "--output", target, "--json")
    assert code == 0, err
    with np.load(target) as data:
        assert data["d"].shape == (6,)
        np.testing.assert_allclose(data["d"], np.linalg.det(batch), rtol=1e-10, atol=1e-14)


def test_output_npz_replaces_an_existing_file(tmp_path, capsys):
    target = tmp_path / "out.npz"
    target.write_bytes(b"old contents, not an npz")
    code, _, err = run(capsys, "eval", DET3, "--inputs", f"A={as_json(A0)}", "--output", target)
    assert code == 0, err
    with np.load(target) as data:
        assert float(data["d"]) == pytest.approx(np.linalg.det(A0), rel=RTOL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]   # no temporary left


def test_output_npz_failed_write_leaves_the_old_file(tmp_path, capsys, monkeypatch):
    """Atomic replacement: a write that fails half-way must not clobber the existing file."""
    target = tmp_path / "out.npz"
    np.savez(target, d=np.array(42.0))
    before = target.read_bytes()

    def broken_save(file, *args, **kwargs):
        if hasattr(file, "write"):
            file.write(b"partial")
        else:
            name = os.fspath(file)
            with open(name if name.endswith(".npz") else name + ".npz", "wb") as f:
                f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", broken_save)
    monkeypatch.setattr(np, "savez_compressed", broken_save)
    code, _, err = run(capsys, "eval", DET3, "--inputs", f"A={as_json(A0)}", "--output", target)
    assert code == 2
    assert "Traceback" not in err
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz"]


@pytest.mark.parametrize("where", ["missing-dir", "a-directory", "not-npz"])
def test_output_to_a_bad_path(where, tmp_path, capsys):
    if where == "missing-dir":
        target = tmp_path / "no" / "such" / "dir" / "out.npz"
    elif where == "a-directory":
        target = tmp_path / "taken.npz"
        target.mkdir()
    else:
        target = tmp_path / "out.txt"
    result = run(capsys, "eval", DET3, "--inputs", f"A={as_json(A0)}", "--output", target)
    assert_usage_error(*result)


def test_dtype_float32(tmp_path, capsys):
    # 1 + 1e-10 is 1 in float32 and not in float64: the program really runs in float32
    path = write(tmp_path, "p.dd", "input x\noutput y = x + 1e-10\noutput z = x / 3\n")
    out64 = run_json(capsys, "eval", path, "--inputs", "x=1")
    out32 = run_json(capsys, "eval", path, "--inputs", "x=1", "--dtype", "float32")
    assert out64["y"] == 1.0 + 1e-10
    assert out32["y"] == 1.0
    assert out64["z"] == 1.0 / 3.0
    assert out32["z"] == float(np.float32(1.0) / np.float32(3.0))
    target = tmp_path / "out.npz"
    code, _, err = run(capsys, "eval", path, "--inputs", "x=[1, 2]", "--dtype", "float32",
                       "--output", target)
    assert code == 0, err
    with np.load(target) as data:
        assert data["z"].dtype == np.float32
        np.testing.assert_array_equal(data["z"], np.array([1, 2], np.float32) / np.float32(3))


def test_dtype_float32_matches_float64_closely(capsys):
    batch = random_matrices((3, 3, 3), seed=10)
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={as_json(batch)}", "--dtype", "float32")
    np.testing.assert_allclose(out["d"], np.linalg.det(batch), rtol=1e-4, atol=1e-5)


def test_human_output_labels_each_output(capsys):
    code, out, err = run(capsys, "eval", MATRIX, "--inputs", f"A={as_json(A1)}",
                         f"v={as_json(V0)}")
    assert code == 0, err
    expected = matrix_outputs(A1, V0)
    lines = out.splitlines()
    labelled = {line.split("=", 1)[0].strip(): line.split("=", 1)[1] for line in lines
                if "=" in line and not line.startswith(" ")}
    assert set(labelled) == {"t", "q", "w"}
    assert float(labelled["t"]) == pytest.approx(expected["t"], rel=1e-9)
    assert float(labelled["q"]) == pytest.approx(expected["q"], rel=1e-9)
    assert [line.split("=")[0].strip() for line in lines if "=" in line] == ["t", "q", "w"]


def test_human_output_of_det3(capsys):
    code, out, err = run(capsys, "eval", DET3, "--inputs", f"A={as_json(A0)}")
    assert code == 0, err
    label, value = out.strip().split("=")
    assert label.strip() == "d"
    assert float(value) == pytest.approx(np.linalg.det(A0), rel=RTOL)


def test_human_output_of_a_batch_labels_each_output(capsys):
    vs = random_matrices((2, 3), seed=11)
    code, out, err = run(capsys, "eval", MATRIX, "--inputs", f"A={as_json(A1)}",
                         f"v={as_json(vs)}")
    assert code == 0, err
    labels = [line.split("=")[0].strip() for line in out.splitlines()
              if "=" in line and not line.startswith(" ")]
    assert labels == ["t", "q", "w"]


def test_backend_numpy_gives_the_same_values(capsys):
    out = run_json(capsys, "eval", DET3, "--inputs", f"A={as_json(A1)}", "--backend", "numpy")
    assert out["d"] == pytest.approx(np.linalg.det(A1), rel=RTOL)


# --- through a real process --------------------------------------------------------------------


def test_eval_subprocess_json():
    result = subprocess.run(
        [sys.executable, "-m", "diffdsl", "eval", str(DET3), "--inputs", f"A={as_json(A0)}",
         "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["outputs"]["d"] == pytest.approx(np.linalg.det(A0), rel=RTOL)


@pytest.mark.skipif(shutil.which("diffdsl") is None, reason="console script not installed")
def test_console_script_exit_status():
    # as a user runs it: the default backend, not the one conftest.py picks for the tests
    env = {k: v for k, v in os.environ.items() if k != "DIFFDSL_BACKEND"}
    ok = subprocess.run(["diffdsl", "eval", str(DET3), "--inputs", f"A={as_json(A0)}"],
                        capture_output=True, text=True, timeout=120, env=env)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.startswith("d =")
    assert float(ok.stdout.split("=")[1]) == pytest.approx(np.linalg.det(A0), rel=RTOL)
    bad = subprocess.run(["diffdsl", "eval", str(DET3), "--inputs", "A=[1, 2]"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr and "input A[3, 3]" in bad.stderr
