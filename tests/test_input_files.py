"""Input files on the command line that are missing, cut short or not what they are named
(issue 23, item 5): each a plain error that says so, exit status 2.

A missing file was "bad input spec" (as if the name were malformed) or "not a JSON number";
a JSON object file cut short was "not a JSON number or list ... at column 7", the line left
out; a text file named `.npy` got NumPy's message about pickled data.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffdsl import cli
from diffdsl.cli import specs
from diffdsl.errors import InputError

DET = str(Path(__file__).resolve().parent.parent / "examples" / "det3.dd")
A = [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 10.0]]


def error_of(args: list, capsys) -> str:
    """The one error line (and hint) a run prints; its status must be 2."""
    status = cli.main(args)
    out = capsys.readouterr()
    assert status == 2, out
    assert "Traceback" not in out.err and "internal error" not in out.err
    return out.err


@pytest.mark.parametrize("spec, words", [
    ("missing.json", "diffdsl: error: no such file 'missing.json'"),
    ("missing.npz", "diffdsl: error: no such file 'missing.npz'"),
    ("data/inputs", "diffdsl: error: no such file 'data/inputs'"),
    ("A=missing.npy", "diffdsl: error: A: no such file 'missing.npy'"),
    ("A=missing.npz", "diffdsl: error: A: no such file 'missing.npz'"),
    ("A=missing.json", "diffdsl: error: A: no such file 'missing.json'"),
    ("A=data/matrix", "diffdsl: error: A: no such file 'data/matrix'"),
])
@pytest.mark.parametrize("chunked", [False, True])
def test_a_missing_file_is_reported_missing(tmp_path, monkeypatch, capsys, spec, words,
                                            chunked):
    monkeypatch.chdir(tmp_path)
    extra = ["--output", "out.npy"] if chunked else []
    assert error_of(["eval", DET, "--inputs", spec, *extra], capsys).startswith(words)


def test_json_text_is_still_json(capsys):
    text = "[[1, 2, 3], [4, 5, 6]"
    err = error_of(["eval", DET, "--inputs", f"A={text}"], capsys)
    assert f"A: not a JSON number or list: the text ends at column {len(text)}, before its " \
        "JSON does" in err
    assert "no such file" not in error_of(["eval", DET, "--inputs", "A=[1/2]"], capsys)


def test_a_json_object_file_cut_short_says_so_with_its_line(tmp_path, capsys):
    text = json.dumps({"A": A}, indent=1)[:-12]
    path = tmp_path / "inputs.json"
    path.write_text(text)
    last = text.split("\n")
    err = error_of(["eval", DET, "--inputs", str(path)], capsys)
    assert err.startswith(f"diffdsl: error: {path}: not valid JSON: the file ends at line "
                          f"{len(last)}, column {len(last[-1])}, before its JSON does")
    assert "(is it cut short?)" in err and '{"A": [[1, 2], [3, 4]], "s": 2.5}' in err
    path.write_text('{"A": [[1, 2, 3],\n  [4, 5, 6]\n  [7, 8, 10]]}')  # a comma left out
    err = error_of(["eval", DET, "--inputs", str(path)], capsys)
    assert "not valid JSON: Expecting ',' delimiter at line 3, column 3" in err


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(1, 200), indent=st.sampled_from([None, 1, 4]))
def test_any_cut_of_an_inputs_file_is_located(tmp_path_factory, cut, indent):
    text = json.dumps({"A": A}, indent=indent)
    cut = min(cut, len(text) - 1)
    path = tmp_path_factory.mktemp("cut") / "inputs.json"
    path.write_text(text[:cut])
    with pytest.raises(InputError) as info:
        specs.read_specs([str(path)])
    message = str(info.value)
    assert f"{path}: not valid JSON" in message
    line = int(message.split(" line ")[1].split(",")[0])
    assert 1 <= line <= text[:cut].count("\n") + 1


@pytest.mark.parametrize("content, words", [
    (b"1 2 3\n4 5 6\n7 8 10\n", "it holds text"),
    (b"", "it is empty"),
    (b"\x00\x01binary\x00", "it does not begin as NumPy's .npy files do"),
])
@pytest.mark.parametrize("chunked", [False, True])
def test_a_file_named_npy_that_is_not_one(tmp_path, monkeypatch, capsys, content, words,
                                          chunked):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "A.npy").write_bytes(content)
    extra = ["--output", "out.npy"] if chunked else []
    err = error_of(["eval", DET, "--inputs", "A=A.npy", *extra], capsys)
    assert err.startswith(f"diffdsl: error: A: A.npy is not a .npy file: {words}")
    assert "numpy.save" in err and "pickle" not in err


def test_a_file_named_npz_that_is_not_one(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.npz").write_text("A = 1\n")
    err = error_of(["eval", DET, "--inputs", "in.npz"], capsys)
    assert err.startswith("diffdsl: error: in.npz is not an .npz file: it holds text")
    assert "pickle" not in err


def test_real_files_still_read(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    np.save("A.npy", np.array(A))
    np.savez("in.npz", A=np.array(A))
    (tmp_path / "in.json").write_text(json.dumps({"A": A}))
    want = np.linalg.det(np.array(A))
    for spec in ("A=A.npy", "in.npz", "in.json"):
        assert cli.main(["eval", DET, "--inputs", spec, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["outputs"]["d"] == pytest.approx(want)
