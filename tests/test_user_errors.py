"""Errors a new user meets in Python (issue 23, item 5): each says what the call takes.

Values given positionally where a dict of inputs goes (`prog.grad(np.eye(3))`) leaked NumPy's
"truth value of an array is ambiguous"; `diffdsl.compile(b"...")` leaked the regular
expression module's "cannot use a string pattern on a bytes-like object"; `objective(wrt="A")`
with no value for A started from zeros without a word.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import diffdsl
from diffdsl.errors import InputError, UsageError

SOURCE = "input A[3, 3]\ninput s\noutput f = s * (A[0, 0] * A[1, 1] - A[2, 2])\n"
EYE = np.eye(3)

CALLS = {
    "prog": lambda p, v: p(v),
    "evaluate": lambda p, v: p.evaluate(v),
    "grad": lambda p, v: p.grad(v),
    "value_and_grad": lambda p, v: p.value_and_grad(v),
    "jacobian": lambda p, v: p.jacobian(v),
    "hessian": lambda p, v: p.hessian(v),
    "hvp": lambda p, v: p.hvp({"A": EYE}, v),
    "vjp": lambda p, v: p.vjp(1.0, v),
    "jvp": lambda p, v: p.jvp({"A": EYE}, v),
    "value_and": lambda p, v: p.value_and("grad", v),
    "objective": lambda p, v: p.objective(v, wrt="A"),
}


@pytest.fixture(scope="module")
def prog():
    return diffdsl.compile(SOURCE, cache=False)


@pytest.mark.parametrize("call", list(CALLS))
def test_an_array_where_the_inputs_go_says_what_the_call_takes(prog, call):
    with pytest.raises(UsageError) as info:
        CALLS[call](prog, EYE)
    name = "prog" if call == "prog" else f"prog.{call}"
    assert str(info.value).startswith(f"diffdsl: error: {name} takes the inputs by name or "
                                      "as a dict, not an ndarray")
    assert f"{name}(A=...)" in str(info.value) and f"{name}({{'A': ...}})" in str(info.value)


@settings(max_examples=40, deadline=None)
@given(value=st.one_of(st.integers(), st.floats(), st.text(), st.binary(),
                       st.lists(st.floats(), max_size=4), st.tuples(st.integers()),
                       hnp.arrays(np.float64, hnp.array_shapes(max_dims=3))),
       call=st.sampled_from(list(CALLS)))
def test_anything_but_a_dict_there_is_refused_plainly(value, call):
    prog = _prog()
    with pytest.raises(UsageError, match="takes the inputs by name or as a dict, not a"):
        CALLS[call](prog, value)


_progs: list = []


def _prog():
    if not _progs:
        _progs.append(diffdsl.compile(SOURCE, cache=False))
    return _progs[0]


def test_a_dict_and_names_still_work(prog):
    assert prog({"A": EYE}, s=2.0) == prog(A=EYE, s=2.0) == 2 * (1 * 1 - 1)
    assert prog.grad({"A": EYE, "s": 1.0})["s"] == 0.0


@pytest.mark.parametrize("source, words", [
    (b"input x\noutput y = x\n", "not bytes"),
    (bytearray(b"input x\noutput y = x\n"), "not a bytearray"),
    (Path("examples/det3.dd"), f"not a {type(Path()).__name__}"),
    (None, "not None"),
])
def test_compile_takes_text(source, words):
    with pytest.raises(UsageError, match=f"compile takes the program's source text \\(a str\\)"
                                         f", {words}") as info:
        diffdsl.compile(source)
    assert "decode" in str(info.value) and "diffdsl.load(path)" in str(info.value)


def test_objective_needs_a_point_to_start_from(prog):
    with pytest.raises(UsageError, match="objective: no starting value for 'A'") as info:
        prog.objective(wrt="A", s=1.0)
    assert "prog.objective(wrt=['A'], A=...)" in str(info.value)
    with pytest.raises(UsageError, match="no value for the fixed input\\(s\\) 's'"):
        prog.objective(wrt="A", A=EYE)
    with pytest.raises(InputError, match="'A' is declared with shape \\[3, 3\\], but its "
                                         "starting value has shape \\[3\\]"):
        prog.objective(wrt="A", A=np.ones(3), s=1.0)
    with pytest.raises(InputError, match="starting value is not a regular array"):
        prog.objective(wrt="A", A=[[1.0], [1.0, 2.0]], s=1.0)
    o = prog.objective(wrt=["A", "s"], A=EYE * 2, s=3.0)
    assert o.x0.tolist() == (EYE * 2).ravel().tolist() + [3.0]
    assert o.fun(o.x0) == 3.0 * (2 * 2 - 2)
