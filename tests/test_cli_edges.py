"""Rough edges of the command line: names in messages, repeated inputs, an empty --output,
the cache warning's format, and runs with no usable cache folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from diffdsl import cli

ROOT = Path(__file__).resolve().parent.parent
SUM = "input a[2]\ninput b[2]\noutput y = sum(a * b)\n"


def run(capsys, *args):
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def program(tmp_path):
    path = tmp_path / "p.dd"
    path.write_text(SUM)
    return path


def test_messages_name_the_tangent_and_the_seed_not_internal_names(capsys, program):
    code, _, err = run(capsys, "jvp", program, "--inputs", "a=[[1,2],[3,4]]", "b=[1,1]",
                       "--tangents", "b=[[1,1],[1,1],[1,1]]")
    assert code == 2
    assert "the tangent for 'b'" in err and "@t:" not in err
    code, _, err = run(capsys, "vjp", program, "--inputs", "a=[[1,2],[3,4]]", "b=[1,1]",
                       "--seed", "[1,2,3]")
    assert code == 2
    assert "the seed" in err and "@seed" not in err


@pytest.mark.parametrize("specs", [["b=[1,1]", "b=[5,5]"], ["b=[1,1]", "FILE"]])
def test_an_input_given_twice_is_a_usage_error(capsys, program, tmp_path, specs):
    both = tmp_path / "both.json"
    both.write_text(json.dumps({"b": [5, 5]}))
    specs = [str(both) if s == "FILE" else s for s in specs]
    code, _, err = run(capsys, "eval", program, "--inputs", "a=[1,2]", *specs)
    assert code == 2
    assert "'b' is given twice" in err


def test_an_empty_output_name_is_a_usage_error(capsys, program):
    code, out, err = run(capsys, "eval", program, "--inputs", "a=[1,2]", "b=[3,4]",
                         "--output", "")
    assert code == 2
    assert "--output must name a .npz file" in err


def test_the_cache_warning_is_one_plain_line(tmp_path, program):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")  # no cache below a file, even for root
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(blocker / "cache"))
    env.pop("DIFFDSL_BACKEND", None)
    done = subprocess.run([sys.executable, "-m", "diffdsl", "grad", str(ROOT / "examples" /
                                                                       "det3.dd"),
                           "--inputs", "A=[[2,0,1],[1,3,2],[1,1,1]]", "--backend", "cpu"],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr  # once, though two kernels could not be stored
    assert lines[0].startswith("diffdsl: warning: kernel cache unavailable")
    assert ".py:" not in lines[0]  # no source path and line of ours


def _unprivileged() -> list | None:
    """A command prefix that runs this Python as an unprivileged user (root ignores file
    modes), or None where that cannot be done."""
    if os.geteuid() != 0:
        return []
    prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    try:
        probe = subprocess.run(prefix + [sys.executable, "-c", "import numpy, llvmlite"],
                               capture_output=True, check=False)
    except OSError:
        return None
    return None if probe.returncode else prefix


@pytest.fixture
def open_tmp():
    """A temporary folder that another user can enter (pytest's own is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="diffdsl-ro-"))
    path.chmod(0o755)
    yield path
    subprocess.run(["chmod", "-R", "u+w", str(path)], check=False)
    shutil.rmtree(path, ignore_errors=True)


def test_a_read_only_install_with_no_home_runs_and_no_cache_writes_nothing(open_tmp):
    """As it happens in containers: the package read-only, HOME unset and no cache folder."""
    prefix = _unprivileged()
    if prefix is None:
        pytest.skip("this Python cannot run as an unprivileged user here (setpriv, or a "
                    "virtual environment in a private folder)")
    tmp_path = open_tmp
    site = tmp_path / "site"  # the package laid out as pip installs it
    shutil.copytree(ROOT / "diffdsl", site / "diffdsl",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "grammar", site / "diffdsl" / "grammar")
    work = tmp_path / "work"
    work.mkdir()
    (work / "p.dd").write_text(SUM)
    subprocess.run(["chmod", "-R", "a+rX,a-w", str(site), str(work)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("HOME", "DIFFDSL_CACHE_DIR",
                                                            "XDG_CACHE_HOME", "DIFFDSL_BACKEND")}
    env.update(PYTHONPATH=os.pathsep.join([str(site)] + sys.path[1:]), TMPDIR=str(work),
               PYTHONDONTWRITEBYTECODE="1")
    base = prefix + [sys.executable, "-m", "diffdsl", "grad", str(work / "p.dd"),
                     "--inputs", "a=[1,2]", "b=[3,4]", "--backend", "cpu", "--json"]
    for extra in ([], ["--no-cache"]):
        done = subprocess.run(base + extra, capture_output=True, text=True, env=env,
                              cwd=str(work), check=False)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["grad"] == {"a": [3.0, 4.0], "b": [1.0, 2.0]}
        if extra:
            assert done.stderr == ""  # --no-cache: no cache to warn about, nothing written
        else:
            assert done.stderr.startswith("diffdsl: warning: kernel cache unavailable")
    assert sorted(p.name for p in work.iterdir()) == ["p.dd"]


def test_python_ints_beyond_a_double_are_infinite_not_an_internal_error():
    import diffdsl
    prog = diffdsl.compile("input x\ninput v[2]\noutput y = x * sum(v)\n", cache=False)
    assert prog(x=10**400, v=[1, 2]) == float("inf")
    assert prog(x=1, v=[[1, -10**500], [2, 3]]).tolist() == [float("-inf"), 5.0]
    assert prog.grad(x=2, v=[10**400, 0])["x"] == float("inf")


def test_limits_keyword_applies_to_the_program_and_its_derivatives():
    import numpy as np

    import diffdsl
    source = "input x[20]\noutput y = sum(x[i] * x[j] for i in range(20) for j in range(20))\n"
    small = {"nodes": 1000}  # the program has 629 nodes; building its Hessian takes more
    with pytest.raises(diffdsl.DiffDSLError, match="nodes"):
        diffdsl.compile(source, cache=False, limits={"nodes": 300})
    prog = diffdsl.compile(source, cache=False, limits=small)
    with pytest.raises(diffdsl.DiffDSLError, match="nodes"):
        prog.hessian(x=np.ones(20))  # 400 second derivatives: past the program's limit
    roomy = diffdsl.compile(source, cache=False, limits={"nodes": 100_000})
    assert roomy.hessian(x=np.ones(20))["x"]["x"].shape == (20, 20)


def test_the_file_may_follow_the_options(capsys, program):
    code, out, err = run(capsys, "grad", "--inputs", "a=[1,2]", "b=[3,4]", program, "--json")
    assert code == 0, err
    assert json.loads(out)["grad"] == {"a": [3.0, 4.0], "b": [1.0, 2.0]}
    code, out, err = run(capsys, "jvp", "--inputs", "a=[1,2]", "b=[3,4]", "--tangents",
                         "a=[1,0]", program)
    assert code == 0, err
    code, _, err = run(capsys, "grad", "--inputs", "a=[1,2]")
    assert code == 2 and "FILE is missing" in err


def test_messages_use_python_words_in_python_and_flags_on_the_command_line(capsys, tmp_path):
    import diffdsl
    two = tmp_path / "two.dd"
    two.write_text("input a\noutput y = a\noutput z = 2 * a\n")
    prog = diffdsl.load(two, cache=False)
    for call in (lambda: prog.grad(a=1.0), lambda: prog()):
        with pytest.raises(diffdsl.DiffDSLError) as info:
            call()
        assert "--" not in str(info.value)
    with pytest.raises(diffdsl.DiffDSLError) as info:
        diffdsl.compile("input x[10]\noutput y = sum(x)\n", cache=False, limits={"nodes": 3})
    assert "limits={'nodes': N}" in str(info.value) and "--limit" not in str(info.value)
    _, _, err = run(capsys, "grad", two, "--inputs", "a=1")
    assert "--of NAME" in err and "of=" not in err
    _, _, err = run(capsys, "eval", two)
    assert "--inputs NAME=VALUE" in err
    _, _, err = run(capsys, "eval", two, "--inputs", "a=1", "--limit", "nodes=1")
    assert "--limit nodes=N" in err


@pytest.mark.parametrize("source", [
    "input b\noutput y = " + "**".join(["b"] * 400) + "\n",
    "input x\ny = x\n" + "y = sin(y)\n" * 5000 + "output out = y\n",
], ids=["power tower", "5000 lines"])
def test_printers_and_drawers_survive_deep_graphs(capsys, tmp_path, source):
    path = tmp_path / "deep.dd"
    path.write_text(source)
    code, out, err = run(capsys, "graph", path, "--grad", "-o", tmp_path / "g.dot")
    assert code == 0, err
    assert (tmp_path / "g.dot").read_text().startswith("digraph")
    code, out, err = run(capsys, "diff", path)
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert "--cse" in err  # refused with a way out, before any SymPy work


def test_check_draws_points_from_the_domain_given(capsys, tmp_path):
    path = tmp_path / "sq.dd"
    path.write_text("input x\noutput y = sqrt(x)\n")
    code, out, err = run(capsys, "check", path)
    assert code == 0 and "no point where the output is finite" not in out
    code, out, err = run(capsys, "check", path, "--domain", "x=-2:-1")
    assert code == 0 and "no point where the output is finite" in out  # said plainly
    for bad in ("x=2:1", "x=1", "y=0:1", "x=a:b", "x=0:inf"):
        code, _, err = run(capsys, "check", path, "--domain", bad)
        assert code == 2 and "--domain" in err, bad
