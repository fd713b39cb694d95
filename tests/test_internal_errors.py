"""Inputs the fuzzer found to crash the command line (exit 3, a traceback) now give a clear
error with exit 2, or work. Each class is drawn over its whole range: integers of any length,
nesting of any depth, arrays of any rank, loops of any length, towers of any height.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffdsl import cli


def run(capsys, *args) -> tuple[int, str]:
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    assert "internal error" not in captured.err, captured.err
    return code, captured.err


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# `capsys` is read out (and so emptied) once per example, so sharing it between examples is safe.
FAST = settings(max_examples=25, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FAST
@given(digits=st.integers(1, 6000), sign=st.sampled_from(["", "-"]))
def test_integer_inputs_of_any_length(tmp_path_factory, capsys, digits, sign):
    """An input is a real: an integer past the range of doubles is inf, as 1e400 is."""
    path = write(tmp_path_factory.mktemp("int"), "x.dd", "input x\noutput y = x\n")
    code, err = run(capsys, "eval", path, "--json", "--inputs", f"x={sign}{'9' * digits}")
    assert code == 0, err


def test_huge_integer_input_is_inf(tmp_path, capsys):
    path = write(tmp_path, "x.dd", "input x\noutput y = 2 * x\n")
    assert cli.main(["eval", str(path), "--json", "--inputs", "x=" + "9" * 5000]) == 0
    assert json.loads(capsys.readouterr().out) == {"outputs": {"y": "inf"}}


@FAST
@given(depth=st.integers(1, 12000))
def test_json_lists_nested_any_depth(tmp_path_factory, capsys, depth):
    folder = tmp_path_factory.mktemp("deep")
    path = write(folder, "x.dd", "input x\noutput y = x\n")
    value = write(folder, "x.json", "[" * depth + "1" + "]" * depth)
    code, err = run(capsys, "eval", path, "--inputs", f"x={value}")
    if depth > 64:
        assert code == 2 and "nested" in err, err
    else:  # a batch of scalars of shape (1,) * depth
        assert code == 0, err


@FAST
@given(depth=st.integers(1, 80))
def test_array_literals_nested_any_depth(tmp_path_factory, capsys, depth):
    literal = "[" * depth + "1" + "]" * depth
    path = write(tmp_path_factory.mktemp("lit"), "a.dd",
                 f"input x\noutput y = x + size({literal})\n")
    code, err = run(capsys, "eval", path, "--inputs", "x=1")
    assert code == (0 if depth <= 32 else 2), err
    if depth > 32:
        assert "a.dd:2:" in err and "at most 32" in err


@FAST
@given(rank=st.integers(1, 80), how=st.sampled_from(["input", "zeros"]))
def test_arrays_of_any_rank(tmp_path_factory, capsys, rank, how):
    dims = ", ".join(["1"] * rank)
    source = (f"input x[{dims}]\noutput y = sum(x)\n" if how == "input"
              else f"input x\noutput y = x + sum(zeros({dims}))\n")
    folder = tmp_path_factory.mktemp("rank")
    path = write(folder, "r.dd", source)
    # (past rank 32 the program is refused before its inputs are read)
    value = np.ones((1,) * min(rank, 32)) if how == "input" else np.ones(())
    np.save(folder / "x.npy", value)
    code, err = run(capsys, "eval", path, "--inputs", f"x={folder / 'x.npy'}")
    assert code == (0 if rank <= 32 else 2), err
    if rank > 32:
        assert "r.dd:" in err and "at most 32" in err


@FAST
@given(exponent=st.integers(0, 40))
def test_range_of_any_length(tmp_path_factory, capsys, exponent):
    path = write(tmp_path_factory.mktemp("range"), "r.dd",
                 f"input x\nc = 0\nfor i in range(10**{exponent} - 10**{exponent} + 3) "
                 f"{{ c = c + 1 }}\nd = [1 for i in range(10**{exponent}) if i < 0]\n"
                 "output y = x + c\n")
    code, err = run(capsys, "eval", path, "--inputs", "x=1", "--limit", "steps=1000")
    assert code == (0 if exponent <= 2 else 2), err
    if code == 2:
        assert "r.dd:4:" in err and "--limit steps" in err


@FAST
@given(a=st.integers(0, 60), b=st.integers(0, 60))
def test_static_power_towers(tmp_path_factory, capsys, a, b):
    path = write(tmp_path_factory.mktemp("pow"), "p.dd",
                 f"input x\noutput y = x * 2 ^ {a}**{b} ^ 2\n")
    code, err = run(capsys, "eval", path, "--inputs", "x=1")
    assert code in (0, 2), err
    if code == 2:
        assert "p.dd:2:" in err and "static integer" in err


def test_power_tower_of_400_levels_differentiated(tmp_path, capsys):
    path = write(tmp_path, "tower.dd", "input b\noutput y = " + "**".join(["b"] * 400) + "\n")
    code, err = run(capsys, "grad", path, "--inputs", "b=1.1")
    assert code == 0, err
    code, err = run(capsys, "diff", path)
    assert code == 2 and "--cse" in err, err


def test_deep_chain_prints(tmp_path, capsys):
    """Printing recurses in SymPy: 300 levels print on a thread with a stack to match."""
    path = write(tmp_path, "chain.dd", "input x\noutput y = " + "sin(" * 300 + "x"
                 + ")" * 300 + "\n")
    assert cli.main(["diff", str(path)]) == 0
    assert capsys.readouterr().out.startswith("d y / d x = ")


def test_reader_that_goes_away_ends_quietly(tmp_path):
    """`diffdsl eval ... | head`: no traceback, the status of a process ended by SIGPIPE."""
    path = write(tmp_path, "big.dd", "input x\noutput y = [x * i for i in range(100000)]\n")
    env = dict(os.environ, DIFFDSL_BACKEND="numpy")
    proc = subprocess.Popen([sys.executable, "-m", "diffdsl", "eval", str(path), "--json",
                             "--inputs", "x=1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env)
    assert proc.stdout.read(10) == b'{"outputs"'
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == cli.EXIT_PIPE_CLOSED, err
    assert err == ""


def test_eye_of_a_negative_size(tmp_path, capsys):
    path = write(tmp_path, "e.dd", "input x\noutput y = x + size(eye(-1))\n")
    code, err = run(capsys, "eval", path, "--inputs", "x=1")
    assert code == 2 and "e.dd:2:" in err and "negative" in err, err
