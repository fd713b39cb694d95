"""Long sums and products as SymPy (issue 23, item 3): a chain of `add`/`sub`/`neg` nodes, or
of `mul` nodes, each used once, is exported as one flat n-ary `Add` or `Mul`, and an input's
`IndexedBase` carries its shape, so that SymPy's printers, `diff`, `lambdify` and `ccode` work
on them. Checked against NumPy and against trees evaluated here in plain Python."""

from __future__ import annotations

import re

import numpy as np
import pytest
import sympy as sp
from draws import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sympy.printing.numpy import NumPyPrinter

import diffdsl
from diffdsl import deepstack
from diffdsl.cli import main
from diffdsl.graph.ir import Builder, Port
from diffdsl.symbolic import check as check_module
from diffdsl.symbolic import export as symbolic
from diffdsl.symbolic.formulas import ORDERED_SYMBOLS, outputs_latex, printed

E = sp.Symbol("e", real=True)


def _chain_source(n: int, generator: bool = False) -> str:
    """The issue's program, its sum over an array product, which lowering writes out as a
    chain of n - 2 two-argument adds; or, `generator`, as the issue wrote it, a loop that
    stays a loop (a region) and is written out for formulas."""
    total = "sum(u[i] * u[i+1] for i in range(n - 1))" if generator else \
        "sum(u[0:n-1] * u[1:n])"
    return f"const n = {n}\ninput u[n]\ninput e\noutput f = e * {total}\n"


def _products(text: str, left: str = r"u\[(\d+)\]", right: str = r"u\[(\d+)\]") -> set:
    """The products of two elements in printed text, as (lower index, higher index): the
    printers order factors as text (`u[100]*u[99]`)."""
    return {tuple(sorted((int(a), int(b)))) for a, b in re.findall(left + r"\*" + right, text)}


N = 10_000  # the size. SymPy's printers order an Add's terms by their monomials
# over all its symbols, n * n steps, tens of seconds a print: diffdsl's own printing of so
# many symbols (formulas.printed) and the C below keep the order SymPy holds them in.
PAIRS = {(i, i + 1) for i in range(N - 1)}


@pytest.fixture(scope="module")
def long_sum():
    """The program, its output `f` as SymPy, and u's base."""
    prog = diffdsl.compile(_chain_source(N))
    assert prog.graph.op_counts().get("add", 0) >= N - 2  # the chain this is about
    return prog, prog.to_sympy()["f"], sp.IndexedBase("u", shape=(N,), real=True)


def test_a_long_sum_is_one_flat_add_and_prints(long_sum):
    _, f, u = long_sum
    total, factor = f.as_independent(E)
    assert f.is_Mul and factor == E
    assert total.is_Add and set(total.args) == {u[i] * u[i + 1] for i in range(N - 1)}
    assert _products(printed(f)) == PAIRS


def test_formulas_of_many_symbols_print_in_sympys_order_the_others_as_sympy_orders_them():
    x = sp.symbols(f"x:{ORDERED_SYMBOLS + 1}", real=True)
    few = sum(x[i] * x[i + 1] for i in range(ORDERED_SYMBOLS - 1))  # ORDERED_SYMBOLS of them
    many = few + x[-1]
    assert printed(few) == str(few) and printed(few, latex=True) == sp.latex(few)
    assert printed(many) == sp.sstr(many, order="none") != str(many)
    assert printed(many, latex=True) == sp.latex(many, order="none")


def test_a_long_sum_differentiates(long_sum):
    _, f, u = long_sum
    d = sp.diff(f, E)
    assert d.is_Add and set(d.args) == {u[i] * u[i + 1] for i in range(N - 1)}
    k = N // 2  # one element: SymPy's derivative by an Indexed takes 15 s at this size
    assert sp.diff(f, u[k]) == E * (u[k - 1] + u[k + 1])


def test_a_long_sum_lambdifies_to_numpys_value(long_sum):
    _, f, u = long_sum
    # Python compiles `a + b + ...` as a nest one level a term: more than about 3,000 terms
    # need a higher recursion limit than the default, SymPy or not.
    # SymPy's own order of the terms (see N), as docs/python.md shows: 2 s, not 35
    printer = NumPyPrinter({"order": "none", "fully_qualified_modules": False, "inline": True,
                            "allow_unknown_functions": True, "user_functions": {}})
    fn = deepstack.call(4 * N, 1 << 28, sp.lambdify, [u, E], f, printer=printer)
    values = np.random.default_rng(7).uniform(-1, 1, N)
    assert fn(values, 1.5) == pytest.approx(1.5 * np.dot(values[:-1], values[1:]), rel=1e-12)


def test_a_long_sum_prints_as_c_and_latex(long_sum):
    prog, f, _ = long_sum
    # an IndexedBase without a shape: IndexException. The terms in SymPy's order of them: see N
    assert _products(sp.ccode(f, order="none")) == PAIRS
    latex = outputs_latex(prog.to_sympy())  # what Jupyter shows for a program
    assert latex.startswith("$\\begin{aligned}f = ") and latex.endswith("\\end{aligned}$")
    assert _products(latex.replace(" ", "*"), r"\{u\}_\{(\d+)\}", r"\{u\}_\{(\d+)\}") == PAIRS


@pytest.mark.parametrize("generator", [False, True])
def test_diff_prints_a_long_derivative_flat(capsys, tmp_path, generator):
    n = 600  # past the depth beyond which the export built nested, unevaluated Adds
    path = tmp_path / "chain.dd"
    path.write_text(_chain_source(n, generator))
    # the generator's loop written out (kept as a loop, it prints as a Sum: below)
    assert main(["diff", str(path), "--wrt", "e", "--limit", "unroll=1000000000"]) == 0
    (line,) = capsys.readouterr().out.splitlines()
    label, formula = line.split(" = ")
    assert label == "d f / d e" and "(" not in formula
    assert _products(formula) == {(i, i + 1) for i in range(n - 1)}
    f = diffdsl.compile(_chain_source(n, generator)).to_sympy(unrolled=True)["f"]
    assert repr(f) == str(f) and _products(repr(f)) == {(i, i + 1) for i in range(n - 1)}
    if generator:
        assert main(["diff", str(path), "--wrt", "e"]) == 0
        assert capsys.readouterr().out.strip() == f"d f / d e = Sum(u[i + 1]*u[i], (i, 0, {n - 2}))"


def test_an_input_base_has_its_shape_so_code_printers_work():
    prog = diffdsl.compile("input q[2, 3]\ninput s\noutput f = q[0, 0] * q[1, 2] + s * q[1, 0]")
    f = prog.to_sympy()["f"]
    (base,) = f.atoms(sp.IndexedBase)
    assert base.shape == (2, 3)
    code = sp.ccode(f)  # row-major offsets: q[1, 2] is q[5], q[1, 0] is q[3]
    assert set(re.findall(r"q\[(\d+)\]", code)) == {"0", "5", "3"}
    fn = sp.lambdify([base, sp.Symbol("s", real=True)], f)
    q = np.arange(1.0, 7.0).reshape(2, 3)
    assert fn(q, 2.0) == q[0, 0] * q[1, 2] + 2.0 * q[1, 0]


# ---------------------------------------------------------------------------------------------
# Any chain, as a class: sums (with sub and neg) of products, of every shape


SHAPES = ("left", "right", "balanced", "random")


def _join(items: list, shape: str, rng, join):
    """Combine `items` into one with `join(a, b)`, nested as `shape` says."""
    items = list(items)
    if shape == "left":
        result = items[0]
        for item in items[1:]:
            result = join(result, item)
        return result
    if shape == "right":
        result = items[-1]
        for item in reversed(items[:-1]):
            result = join(item, result)
        return result
    while len(items) > 1:
        if shape == "balanced":
            items = [join(items[k], items[k + 1]) if k + 1 < len(items) else items[k]
                     for k in range(0, len(items), 2)]
        else:
            k = int(rng.integers(len(items) - 1))
            items[k:k + 2] = [join(items[k], items[k + 1])]
    return items[0]


class _Tree:
    """Graph nodes built beside their value and the value with every sign made +, so that
    a sum's rounding can be judged against its size."""

    def __init__(self, b: Builder, rng, p_neg: float):
        self.b, self.rng, self.p_neg = b, rng, p_neg

    def maybe_neg(self, item):
        node, value, size = item
        if self.rng.random() < self.p_neg:
            return self.b.neg(node), -value, size
        return item

    def add_or_sub(self, a, b):
        if self.rng.random() < 0.5:
            return self.maybe_neg((self.b.add(a[0], b[0]), a[1] + b[1], a[2] + b[2]))
        return self.maybe_neg((self.b.sub(a[0], b[0]), a[1] - b[1], a[2] + b[2]))

    def mul(self, a, b):
        return self.b.mul(a[0], b[0]), a[1] * b[1], a[2] * b[2]


@settings(max_examples=examples(20), deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(terms=st.integers(1, 900), factors=st.integers(1, 60), shape=st.sampled_from(SHAPES),
       factor_shape=st.sampled_from(SHAPES), p_neg=st.sampled_from([0.0, 0.1, 0.5]),
       seed=st.integers(0, 2**32 - 1))
def test_sums_of_products_export_flat_and_right(terms, factors, shape, factor_shape, p_neg,
                                                seed):
    rng = np.random.default_rng(seed)
    size = 40
    x = rng.uniform(0.5, 1.5, size) * rng.choice([-1.0, 1.0], size)
    b = Builder()
    leaves = [(b.input("x", k), float(x[k]), abs(float(x[k]))) for k in range(size)]
    tree = _Tree(b, rng, p_neg)
    products = []
    for _ in range(terms):
        count = int(rng.integers(1, factors + 1))
        picked = [leaves[int(k)] for k in rng.integers(size, size=count)]
        products.append(tree.maybe_neg(_join(picked, factor_shape, rng, tree.mul)))
    root, want, scale = _join(products, shape, rng, tree.add_or_sub)
    graph = b.graph({"x": Port((size,), tuple(node for node, _, _ in leaves))},
                    {"f": Port((), (root,))})
    root = graph.outputs["f"].ids[0]  # the graph keeps what the output reaches, renumbered
    base = sp.IndexedBase("x", shape=(size,), real=True)
    point = {base[k]: sp.Float(float(x[k]), 40) for k in range(size)}

    f = symbolic.to_sympy(graph)["f"]
    # A sum of products of negated elements is an Add of Muls of (-1 and) Indexed elements:
    # a few levels, whatever the graph's depth (which is up to terms + factors).
    assert symbolic.sympy_depth([f]) <= 8
    assert float(f.xreplace(point)) == pytest.approx(want, rel=1e-9, abs=1e-9 * scale)

    # `diff --cse` names what two nodes share and cuts what is deep: a chain is neither.
    users = {}
    for node in graph.nodes:
        for a in set(node.args):
            users[a] = users.get(a, 0) + 1
    shared = sum(1 for i, node in enumerate(graph.nodes)
                 if users.get(i, 0) > 1 and node.op not in ("input", "const"))
    names = sp.numbered_symbols("t")
    assignments, exprs = symbolic.export_shared(graph, [root], lambda n, k: base[k], names)
    assert len(assignments) <= shared
    env = dict(point)
    for symbol, expr in assignments:
        env[symbol] = expr.xreplace(env)
    assert float(exprs[root].xreplace(env)) == pytest.approx(want, rel=1e-9, abs=1e-9 * scale)


def test_check_compares_a_long_sum_with_sympy(monkeypatch):
    """A sum 500 terms long is 1,500 operations deep in the graph, past what check gave SymPy
    (300), but one flat Add as SymPy gets it: its derivatives are proven, where they were
    skipped; and past a budget of work they are skipped, saying why."""
    prog = diffdsl.compile(_chain_source(500))
    report = prog.check(points=2)
    assert report["status"] == "ok"
    assert {n: e["status"] for n, e in report["symbolic"]["f"].items()} == \
        {"u": "proven", "e": "proven"}
    monkeypatch.setattr(check_module, "CHAIN_WORK_LIMIT", 1000)
    report = prog.check(points=2)
    assert report["status"] == "ok"  # the finite differences are compared still
    entry = report["symbolic"]["f"]["u"]
    assert entry["status"] == "skipped" and entry["reason"].startswith("long sums: ")
