"""Limits on the work of compiling (diffdsl/limits.py, README "Limits").

The rule: a program that asks for more than a limit (bits of a static integer, elements of an
array, steps of unrolled work, nodes of a graph) gets a `LimitError` located at the source
that asked, before the work or the memory is spent, and exit status 2 on the command line;
one within every limit compiles. A limit is raised by an option, never by editing code: the
environment, `--limit NAME=N`, or `diffdsl.limits.using`.
"""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import diffdsl
from diffdsl import cli, limits
from diffdsl.errors import LimitError


def compile_within(source: str, **changes):
    with limits.using(**changes):
        return diffdsl.compile(source, filename="t.dd")


def refused(source: str, name: str, **changes) -> LimitError:
    """The error compiling `source` must raise, quickly and located."""
    start = time.perf_counter()
    with pytest.raises(LimitError) as info:
        compile_within(source, **changes)
    assert time.perf_counter() - start < 5, "a limit must be checked before the work"
    error = info.value
    assert error.span is not None and error.span.filename == "t.dd", str(error)
    # Python wording from the API; the command line names its flag instead
    assert f"limits={{'{name}': N}}" in str(error) and limits.ENV[name] in str(error)
    assert f"--limit {name}=N" in cli.cli_wording(str(error))
    return error


# The issue's cases, each refused in well under a second ----------------------------------
@pytest.mark.parametrize("source, name, line", [
    ("input x\nconst b = 3\nc = b\nfor i in range(40) { c = c * c }\noutput y = x + c\n",
     "int_bits", 4),
    ("input x\noutput y = x * 2 ^ 10**30 ^ 2\n", "int_bits", 2),
    ("input x\noutput y = x * " + "9" * 5000 + "\n", "int_bits", 2),
    # listed: prod is not kept as a loop (sum(x) is, and compiles: test_rows.py)
    ("input x[10000000]\noutput y = prod(x)\n", "elements", 1),
    ("input x\ny = x\nfor i in range(10**9) { y = y * x }\noutput y\n", "steps", 3),
    ("input x\ny = 0\nfor i in range(10**19) { y = y + x }\noutput y\n", "steps", 3),
    ("input x\nc = 0\nfor i in range(10**8) { c = c + 1 }\noutput y = x + c\n", "steps", 3),
    ("input x\nc = [i for i in range(2 * 10**7)]\noutput y = x + c[0]\n", "steps", 2),
    ("input x\nc = [i * j for i in range(5000) for j in range(4000)]\noutput y = x + c[1]\n",
     "elements", 2),
    # unrolled: a left side with the input's rows would be kept by rows (test_rows.py)
    ("input A[300, 300]\noutput y = sum(transpose(A) @ A)\n", "steps", 2),
])
def test_issue_cases_are_refused_where_they_ask(source, name, line):
    error = refused(source, name, elements=100_000)
    assert error.span.line == line


def test_node_limit_is_located_at_the_statement():
    # unroll: the loop written out (kept as a loop, it is a few nodes)
    error = refused("input x\nc = x\nfor i in range(1000) {\n  c = c * x + 1\n}\noutput y = c\n",
                    "nodes", nodes=500, unroll=10**9)
    assert error.span.line == 4


def test_node_limit_holds_for_derivatives():
    prog = compile_within("input x[30]\noutput y = prod(x)\n")
    with limits.using(nodes=200), pytest.raises(LimitError, match="nodes"):
        prog.hessian(x=[1.0] * 30)


# The rule, over generated sizes -----------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 400), limit=st.integers(1, 400))
def test_loop_steps_against_the_limit(n, limit):
    source = f"input x\ny = x\nfor i in range({n}) {{ }}\noutput y\n"
    if n <= limit:
        compile_within(source, steps=limit)
    else:
        assert refused(source, "steps", steps=limit).span.line == 3


@settings(max_examples=40, deadline=None)
@given(dims=st.lists(st.integers(1, 12), min_size=1, max_size=3), limit=st.integers(1, 300))
def test_input_elements_against_the_limit(dims, limit):
    size = 1
    for d in dims:
        size *= d
    source = f"input x[{', '.join(map(str, dims))}]\noutput y = x\n"
    if size <= limit:
        assert compile_within(source, elements=limit).inputs == {"x": tuple(dims)}
    else:
        assert refused(source, "elements", elements=limit).span.line == 1


@settings(max_examples=40, deadline=None)
@given(k=st.integers(0, 300), bits=st.integers(8, 200), spelling=st.sampled_from(
    ["2 ** {k}", "pow(2, {k})", "prod([2 for i in range({k})])", "{literal}"]))
def test_static_integer_bits_against_the_limit(k, bits, spelling):
    expr = spelling.format(k=k, literal=2 ** k)
    source = f"input x\nconst c = {expr}\noutput y = x + c\n"
    if k + 1 <= bits:  # 2 ** k has k + 1 bits
        assert compile_within(source, int_bits=bits)(x=0.0) == float(2 ** k)
    else:
        assert refused(source, "int_bits", int_bits=bits).span.line == 2


def test_limits_from_the_environment(monkeypatch):
    monkeypatch.setenv("DIFFDSL_MAX_STEPS", "5")
    with pytest.raises(LimitError, match="the limit is 5 steps"):
        diffdsl.compile("input x\nfor i in range(6) { }\noutput y = x\n")
    monkeypatch.setenv("DIFFDSL_MAX_STEPS", "many")
    with pytest.raises(LimitError, match="DIFFDSL_MAX_STEPS must be a positive integer"):
        diffdsl.compile("input x\noutput y = x\n")


def test_limit_option_on_the_command_line(tmp_path, capsys):
    path = tmp_path / "loop.dd"
    path.write_text("input x\nfor i in range(100) { }\noutput y = x\n")
    assert cli.main(["eval", str(path), "--inputs", "x=1", "--limit", "steps=10"]) == 2
    assert "loop.dd:2:10: error: this loop" in capsys.readouterr().err
    assert cli.main(["eval", str(path), "--inputs", "x=1", "--limit", "steps=1000"]) == 0
    assert cli.main(["eval", str(path), "--inputs", "x=1", "--limit", "stepz=10"]) == 2
    assert "the limits are: int_bits, elements, steps, nodes" in capsys.readouterr().err


def test_defaults_are_documented_in_the_language_reference():
    """docs/language.md's limits table (the README links to it) names every limit, its
    default and its environment variable."""
    from pathlib import Path
    doc = (Path(__file__).resolve().parent.parent / "docs" / "language.md").read_text()
    for name in limits.NAMES:
        row = next((line for line in doc.splitlines() if line.startswith(f"| `{name}` |")), "")
        assert f"`{limits.ENV[name]}`" in row, name
        assert f"| {getattr(limits.Limits(), name):,} |" in row, name
