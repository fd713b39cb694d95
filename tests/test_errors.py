"""Every error kind of LANGUAGE.md "Errors", through the API and through the command line.

A compile error names `file:line:col`, shows the line with a caret under the span at fault and
says what was expected; the command line exits 2 and never prints a Python traceback, however
malformed the input. Deep programs compile and evaluate; recursion that depends on data hits
the recursion limit.
"""

import re
import subprocess
import sys

import numpy as np
import pytest

import diffdsl
from diffdsl import cli

# --- helpers -----------------------------------------------------------------------------------


def compile_error(source, kind=diffdsl.DiffDSLError):
    with pytest.raises(kind) as info:
        diffdsl.compile(source, filename="t.dd")
    return info.value


def head(err):
    """The message part of the first line, after `error:` (so no line numbers in it)."""
    first = str(err).splitlines()[0]
    return first.split("error:", 1)[1]


def assert_located(text, filename, line, column, source):
    """TEXT has `FILE:LINE:COL: error:`, then the source line and a caret under COL."""
    prefix = f"{filename}:{line}:{column}: error:"
    assert prefix in text, text
    assert "Traceback" not in text
    rows = text.splitlines()
    start = next(k for k, row in enumerate(rows) if prefix in row)
    src_line = source.splitlines()[line - 1]
    shown = rows[start + 1]
    assert shown.strip() == src_line.strip(), text
    caret = rows[start + 2]
    offset = shown.index(src_line.lstrip()) - (len(src_line) - len(src_line.lstrip()))
    assert set(caret.strip()) == {"^"}, text
    assert caret.index("^") - offset == column - 1, text


def run_subprocess(args, cwd):
    return subprocess.run([sys.executable, "-m", "diffdsl", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def run_cli(capsys, args):
    code = cli.main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- one case per error kind -------------------------------------------------------------------
# (id, source, error class, line, column, regexes the message must match)

CASES = [
    ("syntax-chained-comparison", "input a\noutput y = a < 1 < 2\n",
     diffdsl.DDSyntaxError, 2, 18, []),
    ("syntax-unbalanced", "input a\noutput y = (a + 1))\n", diffdsl.DDSyntaxError, 2, 19, []),
    ("syntax-bad-character", "input a\noutput y = a $ 2\n", diffdsl.DDSyntaxError, 2, 14, []),
    ("unknown-builtin", "input x\noutput y = sqr(x)\n",
     diffdsl.UnknownNameError, 2, 12, [r"sqr", r"sqrt"]),
    ("unknown-local", "input x\nvalue = x * 2\noutput y = valeu + 1\n",
     diffdsl.UnknownNameError, 3, 12, [r"valeu", r"\bvalue\b"]),
    ("unknown-input-name", "input alpha\noutput y = alpah * 2\n",
     diffdsl.UnknownNameError, 2, 12, [r"alpah", r"\balpha\b"]),
    ("unknown-tab-indented", "input x\nfor i in range(2) {\n\ts = x + valeu\n}\noutput s\n",
     diffdsl.UnknownNameError, 3, 10, [r"valeu"]),
    ("unknown-def", "def square(t) = t * t\noutput y = sqare(3)\n",
     diffdsl.UnknownNameError, 2, 12, [r"sqare", r"\bsquare\b"]),
    ("unknown-input-in-def", "input x\ndef f(a) = a + x\noutput y = f(x)\n",
     diffdsl.UnknownNameError, 2, 16, [r"'x'"]),
    ("arity-builtin", "input x\noutput y = sin(x, x)\n",
     diffdsl.ArityError, 2, 12, [r"\b1\b", r"\b2\b"]),
    ("arity-builtin-two", "input x\noutput y = atan2(x)\n",
     diffdsl.ArityError, 2, 12, [r"\b2\b", r"\b1\b"]),
    ("arity-def", "input x\ndef f(a, b) = a + b\noutput y = f(x)\n",
     diffdsl.ArityError, 3, 12, [r"\bf\b", r"\b2\b", r"\b1\b"]),
    ("arity-def-too-many", "def f(a) = a\noutput y = f(1, 2, 3)\n",
     diffdsl.ArityError, 2, 12, [r"\bf\b", r"\b1\b", r"\b3\b"]),
    ("shape-elementwise", "input a[2, 7]\ninput b[3, 5]\noutput y = a + b\n",
     diffdsl.ShapeError, 3, 12, [r"2,\s*7", r"3,\s*5"]),
    ("shape-matmul", "input a[2, 3]\ninput b[4, 5]\noutput y = a @ b\n",
     diffdsl.ShapeError, 3, 12, [r"2,\s*3", r"4,\s*5"]),
    ("static-index", "input x[3]\ninput k\noutput y = x[k]\n",
     diffdsl.StaticValueError, 3, 14, [r"static"]),
    ("static-range-generator", "input n\noutput y = sum(i for i in range(n))\n",
     diffdsl.StaticValueError, 2, 33, [r"static"]),
    ("static-range-loop", "input n\ns = 0\nfor i in range(n) { s += i }\noutput y = s\n",
     diffdsl.StaticValueError, 3, 16, [r"static"]),
    ("static-const", "input x\nconst c = 2 * x\noutput y = c\n",
     diffdsl.StaticValueError, 2, 11, [r"static"]),
    ("static-input-dim", "input n\ninput x[n]\noutput y = sum(x)\n",
     diffdsl.StaticValueError, 2, 9, [r"static"]),
    ("index-out-of-range", "input x[3]\noutput y = x[3]\n",
     diffdsl.IndexRangeError, 2, 14, [r"\b3\b"]),
    ("index-out-of-range-negative", "input x[3]\noutput y = x[-4]\n",
     diffdsl.IndexRangeError, 2, 14, [r"-4"]),
    ("index-out-of-range-axis-1", "input A[2, 2]\noutput y = A[0, 2]\n",
     diffdsl.IndexRangeError, 2, 17, [r"\b2\b"]),
    ("index-out-of-range-static", "const c = [1, 2]\noutput y = c[2]\n",
     diffdsl.IndexRangeError, 2, 14, [r"\b2\b"]),
    ("assign-input", "input x\nx = 2\noutput y = x\n",
     diffdsl.AssignmentError, 2, 1, [r"\bx\b", r"input"]),
    ("assign-const", "const c = 2\nc = 3\noutput y = c\n",
     diffdsl.AssignmentError, 2, 1, [r"\bc\b", r"const"]),
    ("augassign-input", "input x\nx += 1\noutput y = x\n",
     diffdsl.AssignmentError, 2, 1, [r"\bx\b", r"input"]),
    ("indexassign-input", "input x[2]\nx[0] = 1\noutput y = x\n",
     diffdsl.AssignmentError, 2, 1, [r"\bx\b", r"input"]),
    ("assign-const-in-loop", "const c = 2\nfor i in range(2) {\n    c = i\n}\noutput y = c\n",
     diffdsl.AssignmentError, 3, 5, [r"\bc\b", r"const"]),
    ("recursion-data", "input x\ndef f(t) = if t > 0 then f(t - 1) else t\noutput y = f(x)\n",
     diffdsl.RecursionLimitError, 2, 26, [r"\bf\b", r"1000"]),
    ("recursion-static", "def count(n) = if n == 0 then 0 else 1 + count(n - 1)\n"
     "output y = count(5000)\n", diffdsl.RecursionLimitError, 1, 42, [r"\bcount\b"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compile_error_via_api(case):
    _, source, kind, line, column, patterns = case
    err = compile_error(source, kind)
    text = str(err)
    assert text.startswith(f"t.dd:{line}:{column}: error:"), text
    assert_located(text, "t.dd", line, column, source)
    for pattern in patterns:
        assert re.search(pattern, text.split("error:", 1)[1]), (pattern, text)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compile_error_via_cli(case, tmp_path, capsys, monkeypatch):
    _, source, _, line, column, _ = case
    (tmp_path / "t.dd").write_text(source)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, ["eval", "t.dd"])
    assert code == 2, err
    assert out == ""
    assert_located(err, "t.dd", line, column, source)


# One case of each kind also through a real process: `python -m diffdsl`.
SUBPROCESS_CASES = [c for c in CASES if c[0] in {
    "syntax-chained-comparison", "unknown-builtin", "arity-def", "shape-elementwise",
    "static-range-loop", "index-out-of-range", "assign-input", "recursion-data"}]


@pytest.mark.parametrize("case", SUBPROCESS_CASES, ids=[c[0] for c in SUBPROCESS_CASES])
def test_compile_error_via_cli_subprocess(case, tmp_path):
    _, source, _, line, column, _ = case
    (tmp_path / "t.dd").write_text(source)
    result = run_subprocess(["eval", "t.dd"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""
    assert_located(result.stderr, "t.dd", line, column, source)


def test_unknown_name_suggestions_are_the_closest_names():
    err = compile_error("input x\noutput y = sqr(x)\n", diffdsl.UnknownNameError)
    assert "sqrt" in str(err)
    err = compile_error("input x\ntotal = x\noutput y = totl\n", diffdsl.UnknownNameError)
    assert "total" in str(err)
    err = compile_error("const weights = [1, 2]\noutput y = sum(weight)\n",
                        diffdsl.UnknownNameError)
    assert "weights" in str(err)


def test_arity_error_names_the_counts():
    err = compile_error("def f(a, b, c) = a\noutput y = f(1, 2)\n", diffdsl.ArityError)
    message = head(err)
    assert "f" in message and "3" in message and "2" in message


def test_shape_error_message_has_both_shapes():
    err = compile_error("input a[2]\ninput b[3]\noutput y = a * b\n", diffdsl.ShapeError)
    message = head(err)
    assert re.search(r"[\[(]2,?[\])]", message) and re.search(r"[\[(]3,?[\])]", message), message


def test_recursion_error_names_the_function():
    source = ("input x\n"
              "def walk(t, n) = if t > n then walk(t - 1, n + 1) else t\n"
              "output y = walk(x, 0)\n")
    err = compile_error(source, diffdsl.RecursionLimitError)
    assert "walk" in head(err)


def test_assignment_inside_a_def_to_a_const():
    source = "const c = 1\ndef f(a) {\n    c = a\n    return c\n}\noutput y = f(2)\n"
    err = compile_error(source, diffdsl.AssignmentError)
    assert str(err).startswith("t.dd:3:5: error:")


# --- a wrongly shaped input at evaluation ------------------------------------------------------

DET3 = ("# det3.dd\n"
        "input A[3, 3]\n"
        "\n"
        "def det(M) =\n"
        "    if rows(M) == 1 then M[0, 0]\n"
        "    else sum((-1)**j * M[0, j] * det(minor(M, 0, j)) for j in range(cols(M)))\n"
        "\n"
        "output d = det(A)\n")


def assert_input_shape_message(text):
    assert "'A'" in text or " A " in text, text
    assert re.search(r"3,\s*3", text), text            # the declared shape
    assert "input A[3, 3]" in text, text                # the declaration line
    assert "t.dd:2:" in text, text                      # and where it is
    assert "Traceback" not in text


@pytest.mark.parametrize("value", [np.ones((2, 3)), np.ones(3), 1.0, np.ones((3, 3, 2)),
                                   [[1.0, 2.0], [3.0, 4.0]]])
def test_wrongly_shaped_input_via_api(value):
    prog = diffdsl.compile(DET3, filename="t.dd")
    with pytest.raises(diffdsl.InputError) as info:
        prog(A=value)
    assert_input_shape_message(str(info.value))


def test_wrongly_shaped_input_via_cli_subprocess(tmp_path):
    (tmp_path / "t.dd").write_text(DET3)
    result = run_subprocess(["eval", "t.dd", "--inputs", "A=[[1, 2], [3, 4]]"], tmp_path)
    assert result.returncode == 2
    assert_input_shape_message(result.stderr)
    assert result.stdout == ""


def test_wrongly_shaped_input_via_cli_in_process(tmp_path, capsys):
    (tmp_path / "t.dd").write_text(DET3)
    code, out, err = run_cli(capsys, ["eval", tmp_path / "t.dd", "--inputs", "A=[1, 2, 3]"])
    assert code == 2
    assert "input A[3, 3]" in err and re.search(r"3,\s*3", err)
    assert "Traceback" not in err


def test_scalar_input_given_an_array(tmp_path, capsys):
    source = "input x\ninput v[2]\noutput y = x * sum(v)\n"
    (tmp_path / "t.dd").write_text(source)
    prog = diffdsl.compile(source, filename="t.dd")
    assert prog(x=2.0, v=[1.0, 2.0]) == pytest.approx(6.0)
    # a batch of scalars is fine; a v of the wrong size is not
    with pytest.raises(diffdsl.InputError) as info:
        prog(x=2.0, v=[1.0, 2.0, 3.0])
    assert "input v[2]" in str(info.value)
    code, _, err = run_cli(capsys, ["eval", tmp_path / "t.dd", "--inputs", "x=1", "v=[1,2,3]"])
    assert code == 2 and "input v[2]" in err


# --- malformed sources: exit 2, never a traceback ----------------------------------------------

MALFORMED = [
    b"",
    b"# only a comment\n",
    b"\n\n   \n",
    b"\x00\x01\x02\x03",
    b"\xff\xfe\x00garbage\x80\x81",
    b"input x\noutput y = x\xe9\n",
    b"output",
    b"output\n",
    b"output y =\n",
    b"input\n",
    b"input x[\n",
    b"input x[0]\noutput y = 1\n",
    b"input x[2.5]\noutput y = 1\n",
    b"input x[-1]\noutput y = 1\n",
    b"output y = (((1 + 2)\n",
    b"output y = [1, 2\n",
    b"output y = 1 + 2)]\n",
    b"output y = f(\n",
    b"if 1 {\noutput y = 2\n",
    b"}}}\n",
    b"@@@\n",
    b"then else for in\n",
    b"output y = if 1 then 2\n",
    b"output y = if 1 2 else 3\n",
    b"def output(x) = x\n",
    b"input if\n",
    b"output y = 1 < 2 < 3\n",
    b"output y = 1 // 0\n",
    b"def f(x) = x\ndef f(x) = 2 * x\noutput y = f(1)\n",
    b"def f(a, a) = a\noutput y = f(1, 2)\n",
    b"return 1\n",
    b"output y = 1\nreturn 2\n",
    b"def f(x) {\n    input z\n    return x\n}\noutput y = f(1)\n",
    b"def f(x) {\n    const k = 2\n    return x\n}\noutput y = f(1)\n",
    b"def f(x) {\n    return x\n    y = 2\n}\noutput y = f(1)\n",
    b"def f(x) { y = x }\noutput y = f(1)\n",
    b"for i in range(3) {\n    output y = i\n}\n",
    b"input x\ninput x\noutput y = x\n",
    b"output y = 1\noutput y = 2\n",
    b"output 1\noutput 2\n",
    b"x = 1\n",
    b"output y = undefined_name\n",
    b"output y = [1, [2, 3]]\n",
    b"output y = range(3)\n",
    b"output y = sum\n",
    b"output y = zeros(-1)\n",
    b"output y = max([])\n",
    b"output y = [1, 2][0:2:0]\n",
    b"for i in range(3, 0, 0) { }\noutput y = 1\n",
    b"def f(x) = f(x)\noutput y = f(1)\n",
    b"output y = pi()\n",
    b"output y = sin()\n",
    b"output y = foo(i for i in range(3))\n",
    b"output y = [1, 2] < 3\n",
    b"output y = eye(2) @ 3\n",
    b"output y = minor([[1]], 0, 0)\n",
    b"output y = (1, 2)\n",
    b"output y = \"text\"\n",
    b"\t\toutput y = \t@\n",
]


def _malformed_id(source):
    text = source[:30].decode("utf-8", "backslashreplace")
    return repr(text) + (f"...{len(source)}" if len(source) > 30 else "")


@pytest.mark.parametrize("source", MALFORMED, ids=[_malformed_id(s) for s in MALFORMED])
def test_malformed_source_exits_2_without_traceback(source, tmp_path, capsys):
    path = tmp_path / "t.dd"
    path.write_bytes(source)
    code, out, err = run_cli(capsys, ["eval", path])
    assert code == 2, err
    assert "Traceback" not in err
    assert "internal error" not in err
    assert err.strip(), "an error must say something on stderr"
    assert out == ""


def _is_text(source):
    return source.isascii() and b"\x00" not in source


MALFORMED_TEXT = [s for s in MALFORMED if _is_text(s)]


@pytest.mark.parametrize("source", MALFORMED_TEXT, ids=[_malformed_id(s) for s in MALFORMED_TEXT])
def test_malformed_source_raises_a_diffdsl_error_via_api(source):
    with pytest.raises(diffdsl.DiffDSLError) as info:
        diffdsl.compile(source.decode("ascii"), filename="t.dd")
    text = str(info.value)
    assert text.startswith("t.dd:"), text   # a compile error names the file, line and column


@pytest.mark.parametrize("source", [
    b"output y = (((1 + 2)\n",
    b"\xff\xfe\x00garbage\x80\x81",
    b"output y = [1, 2\n",
], ids=["unbalanced", "not-utf8", "unterminated-array"])
def test_malformed_source_via_subprocess(source, tmp_path):
    (tmp_path / "t.dd").write_bytes(source)
    result = run_subprocess(["eval", "t.dd"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "error" in result.stderr


HUGE_NUMBERS = [
    "output y = " + "9" * 400 + "\n",               # an integer no float can hold
    "output y = " + "9" * 5000 + "\n",              # more digits than int() takes by default
    "input x\noutput y = 10 ** 400 * x\n",          # a static integer too big for a float
    "input x\noutput y = 2 ** 2000 + x\n",
    "output y = [1, 2][" + "9" * 30 + "]\n",        # an index far out of range
    "output y = 1e999 * 0\n",                        # a real literal that overflows
]


@pytest.mark.parametrize("source", HUGE_NUMBERS, ids=["400-digits", "5000-digits", "10**400",
                                                      "2**2000", "huge-index", "1e999"])
def test_huge_numbers_never_crash(source, tmp_path, capsys):
    """A number too big for a float may compile to inf or be reported as an error with its
    location (exit 2); it must never be an internal error or a traceback."""
    try:
        diffdsl.compile(source, filename="t.dd")
    except diffdsl.DiffDSLError as err:
        assert str(err).startswith("t.dd:"), str(err)
    (tmp_path / "t.dd").write_text(source)
    code, _, err = run_cli(capsys, ["eval", tmp_path / "t.dd", "--inputs", "x=1"]
                           if "input x" in source else ["eval", tmp_path / "t.dd"])
    assert code in (0, 2), err
    assert "Traceback" not in err and "internal error" not in err
    if code == 2:
        assert "t.dd:" in err


def test_huge_number_via_subprocess(tmp_path):
    (tmp_path / "t.dd").write_text("output y = " + "9" * 5000 + "\n")
    result = run_subprocess(["eval", "t.dd"], tmp_path)
    assert result.returncode in (0, 2), result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_missing_file_exits_2(tmp_path, capsys):
    code, _, err = run_cli(capsys, ["eval", tmp_path / "nope.dd"])
    assert code == 2
    assert "nope.dd" in err and "Traceback" not in err


def test_directory_as_file_exits_2(tmp_path, capsys):
    code, _, err = run_cli(capsys, ["eval", tmp_path])
    assert code == 2
    assert "Traceback" not in err and err.strip()


def test_bad_command_line_exits_2(capsys):
    for args in ([], ["frobnicate"], ["eval"], ["eval", "x.dd", "--dtype", "float16"],
                 ["eval", "x.dd", "--backend", "nonsense"], ["eval", "x.dd", "--inputs"]):
        code, _, err = run_cli(capsys, args)
        assert code == 2, args
        assert "Traceback" not in err and err.strip()


# --- deep programs -----------------------------------------------------------------------------


def test_deeply_nested_parentheses():
    depth = 1000
    source = "input x\noutput y = " + "(" * depth + "x + 1" + ")" * depth + "\n"
    prog = diffdsl.compile(source, filename="t.dd")
    assert prog(x=2.0) == pytest.approx(3.0)


def test_deeply_nested_unary_and_power():
    source = "input x\noutput y = " + "-" * 1001 + "x\noutput z = " + "x ** " * 500 + "1\n"
    prog = diffdsl.compile(source, filename="t.dd")
    x = 1.2
    tower = 1.0
    for _ in range(500):  # right-associative: x ** (x ** (... ** 1))
        tower = x**tower
    out = prog(x=x)
    assert out["y"] == pytest.approx(-x)
    assert out["z"] == pytest.approx(tower, rel=1e-12)


def test_ten_thousand_term_sum():
    terms = 10_000
    source = "input x\noutput y = " + " + ".join(f"{k} * x" for k in range(terms)) + "\n"
    prog = diffdsl.compile(source, filename="t.dd")
    assert prog(x=2.0) == pytest.approx(2.0 * terms * (terms - 1) / 2, rel=1e-12)
    batch = np.array([0.5, -1.0, 3.0])
    np.testing.assert_allclose(prog(x=batch), batch * terms * (terms - 1) / 2, rtol=1e-12)


def test_ten_thousand_term_sum_via_cli(tmp_path, capsys):
    terms = 10_000
    source = "input x\noutput y = " + " + ".join(f"x * {k}" for k in range(terms)) + "\n"
    (tmp_path / "t.dd").write_text(source)
    code, out, err = run_cli(capsys, ["eval", tmp_path / "t.dd", "--inputs", "x=1", "--json"])
    assert code == 0, err
    assert '"y": 49995000.0' in out


def test_recursion_twenty_calls_deep():
    source = ("input x\n"
              "def f(t, n) = if n == 0 then t else f(2 * t + 1, n - 1)\n"
              "output y = f(x, 20)\n")
    prog = diffdsl.compile(source, filename="t.dd")
    for x in (0.0, 1.0, -0.5):
        t = x
        for _ in range(20):
            t = 2 * t + 1
        assert prog(x=x) == pytest.approx(t, rel=1e-15)


def test_recursion_on_a_shape_twenty_deep():
    source = ("input v[20]\n"
              "def total(u) = if len(u) == 1 then u[0] else u[0] + total(u[1:])\n"
              "output s = total(v)\n")
    prog = diffdsl.compile(source, filename="t.dd")
    v = np.arange(1.0, 21.0)
    assert prog(v=v) == pytest.approx(210.0)


def test_recursion_just_under_the_limit_compiles():
    source = "def count(n) = if n == 0 then 0 else 1 + count(n - 1)\noutput y = count(900)\n"
    assert diffdsl.compile(source, filename="t.dd")() == pytest.approx(900.0)


def test_data_dependent_recursion_reports_the_limit(tmp_path, capsys):
    source = ("input x\n"
              "def halve(t) = if t < 1 then t else halve(t / 2)\n"
              "output y = halve(x)\n")
    err = compile_error(source, diffdsl.RecursionLimitError)
    assert "halve" in head(err)
    assert str(err).startswith("t.dd:2:")
    (tmp_path / "t.dd").write_text(source)
    code, _, stderr = run_cli(capsys, ["eval", tmp_path / "t.dd", "--inputs", "x=5"])
    assert code == 2
    assert "halve" in stderr and "Traceback" not in stderr


def test_recursion_limit_error_is_fast():
    """The limit is reached by counting calls, not by exhausting Python's stack."""
    import time

    source = "input x\ndef f(t) = f(t + 1)\noutput y = f(x)\n"
    start = time.perf_counter()
    compile_error(source, diffdsl.RecursionLimitError)
    assert time.perf_counter() - start < 10
