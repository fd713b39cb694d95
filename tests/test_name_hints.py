"""Two errors a new user meets, and what they now say (issue 23, item 5): a chained comparison
`0 < x < 1`, and a name assigned in only one branch of a dynamic `if` (or only inside a
`while`) used after it. Each is located, says what to write instead, and exits 2 from the
command line without a traceback.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import diffdsl


def compile_(source: str):
    return diffdsl.compile(source, filename="t.dd", cache=False)


CASES = [
    ("input x\noutput y = 0 < x < 1\n", diffdsl.DDSyntaxError, (2, 18),
     "comparisons do not chain", "write `0 < x and x < 1`"),
    ("input x\noutput y = if -1 <= x * 2 < x + 3 <= 9 then 1 else 0\n", diffdsl.DDSyntaxError,
     (2, 27), "comparisons do not chain", "write `-1 <= x * 2 and x * 2 < x + 3 and x + 3 <= 9`"),
    ("input x\nif x > 0 {\n    z = 1\n} else {\n    w = 2\n}\noutput z\n",
     diffdsl.UnknownNameError, (7, 8), "unknown name 'z'",
     "'z' is assigned only in one branch of the `if` at line 2: assign it in both, or before "
     "the `if`"),
    ("input x\nif x > 0 {\n    w = 1\n} else if x < -1 {\n    z = 2\n} else {\n    w = 0\n}\n"
     "output z\n", diffdsl.UnknownNameError, (9, 8), "unknown name 'z'",
     "'z' is assigned only in one branch of the `if` at line 4"),
    ("input x\nt = x\nwhile t > 1 max 3 {\n    h = t / 2\n    t = h\n}\noutput h\n",
     diffdsl.UnknownNameError, (7, 8), "unknown name 'h'",
     "'h' is assigned only inside the `while` loop at line 3, which may run no step: assign it "
     "before the loop"),
]


@pytest.mark.parametrize("source, error, where, message, hint", CASES,
                         ids=["chain", "long chain", "if", "else if", "while"])
def test_the_error_says_what_to_write(source, error, where, message, hint):
    with pytest.raises(error) as caught:
        compile_(source)
    assert (caught.value.span.line, caught.value.span.column) == where
    assert caught.value.message == message
    assert hint in caught.value.hint


def test_a_static_if_or_a_name_assigned_before_needs_no_hint():
    prog = compile_("input x\nz = 0\nif x > 0 {\n    z = 1\n}\nif 1 > 0 {\n    w = 2\n}\n"
                    "output y = z + w + (0 < x and x < 1)\n")
    assert prog(x=0.5) == 4.0 and prog(x=-1.0) == 2.0
    with pytest.raises(diffdsl.UnknownNameError) as caught:
        compile_("input x\noutput y = zz\n")
    assert "only in one branch" not in str(caught.value)


@pytest.mark.parametrize("source", [CASES[0][0], CASES[2][0]], ids=["chain", "if"])
def test_the_command_line_exits_2_without_a_traceback(source, tmp_path):
    path = tmp_path / "bad.dd"
    path.write_text(source)
    done = subprocess.run([sys.executable, "-m", "diffdsl", "eval", str(path), "--inputs",
                           "x=0.5"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "bad.dd:" in done.stderr and "hint:" in done.stderr
    assert "Traceback" not in done.stderr
