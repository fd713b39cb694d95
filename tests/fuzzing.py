"""A program generator and a differential checker (issue 10, "A fuzzer in the project").

`programs()` is a Hypothesis strategy for `.dd` source text. It follows the grammar and the type
rules: inputs `x` (scalar), `v[2]` and `A[2, 2]`; expressions of three types (scalar, vector,
matrix) built from literals, inputs, locals, arithmetic, powers, unary and binary builtins,
reductions, matrix products, indexing, comprehensions, `if ... then ... else` with dynamic or
static conditions, calls of a `def`, and derivatives taken inside the program (`grad(e, t)`,
`hessian(e, t)`, `jacobian([...], t)[k]` by any scalar name in scope, `grad(e, v)` by a
vector); statements (`const`, assignments, compound assignments, a static `for` loop, a
`while c max N` loop with a dynamic condition and sometimes a `break if`, a dynamic `if` block)
before one scalar output `y` and sometimes a vector output `z`. A few programs are mutated
afterwards (a character replaced, a token dropped, a name misspelt, a shape mixed up), so that
the error paths are walked too.

`check(source, seed)` runs one program and says what happened (an `Outcome`):
- "error": a `DiffDSLError` with a source location, what a bad program must give;
- "evaluated": it compiled, and then every comparison below held;
- "disagreement": two ways of computing the same number differ (the detail says which);
- "internal": any other exception, or an error without a location (the traceback or message).

The comparisons, at random points: numpy and cpu backends on values (one point and a batch of
rows), the Jacobian of `y` (where y is finite) forward and reverse on the cpu and reverse on
numpy, and the
Jacobian along a random direction against central finite differences. Finite differences are
compared only where the function is smooth at that point: two step sizes must give the same
difference (a kink or a jump between the points, at `abs`, `max`, a comparison, makes them
differ) and every value must be finite.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

import diffdsl
from diffdsl.errors import DiffDSLError
from diffdsl.language.builtins.table import BUILTINS

SHAPES = {"x": (), "v": (2,), "A": (2, 2)}
NUMBERS = ["0", "1", "2", "3", "0.5", ".25", "1.5", "2.5e-1", "1e1", "0.1"]


def _have(*names: str) -> list[str]:
    """The builtins of `names` this diffdsl has (LANGUAGE.md lists some not yet built): the
    generator widens by itself as they arrive."""
    return [n for n in names if n in BUILTINS] or ["sin"]


SMOOTH = _have("sin", "cos", "tanh", "exp", "atan", "sinh", "sigmoid", "softplus", "erf", "cbrt")
DOMAIN = _have("log", "sqrt", "log1p", "asin", "acos", "acosh", "atanh", "lgamma", "tan")
KINKED = _have("abs", "sign", "floor", "ceil")
REDUCE = _have("sum", "prod", "max", "min", "mean", "logsumexp", "norm")
MATRIX_TO_SCALAR = _have("det", "trace", "sum")
BINARY = ["+", "-", "*", "/"]
COMPARE = ["<", "<=", ">", ">=", "==", "!="]


# --- the generator ----------------------------------------------------------------------------

@st.composite
def scalar(draw, env, depth):
    """A scalar expression over the names in `env` (name -> "s", "v" or "m")."""
    names = [n for n, t in env.items() if t == "s"]
    vectors = [n for n, t in env.items() if t == "v"]
    matrices = [n for n, t in env.items() if t == "m"]
    if depth <= 0 or draw(st.integers(0, 4)) == 0:
        kinds = ["num"] + ["name"] * bool(names) + ["elem"] * bool(vectors) + \
            ["melem"] * bool(matrices)
        kind = draw(st.sampled_from(kinds))
        if kind == "num":
            return draw(st.sampled_from(NUMBERS))
        if kind == "name":
            return draw(st.sampled_from(names))
        if kind == "elem":
            return f"{draw(st.sampled_from(vectors))}[{draw(st.sampled_from([0, 1, -1]))}]"
        return f"{draw(st.sampled_from(matrices))}[{draw(st.integers(0, 1))}, " \
               f"{draw(st.integers(-2, 1))}]"
    sub = scalar(env, depth - 1)
    kind = draw(st.sampled_from(
        ["bin", "bin", "bin", "neg", "pow", "smooth", "smooth", "domain", "kinked", "if",
         "minmax", "two", "reduce", "dot", "det", "gen", "call", "static_if", "inner"]))
    if kind == "bin":
        return f"({draw(sub)} {draw(st.sampled_from(BINARY))} {draw(sub)})"
    if kind == "neg":
        return f"-{draw(sub)}"
    if kind == "pow":
        exponent = draw(st.sampled_from(["2", "3", "-1", "0", "1", "0.5", "(-2)"]))
        return f"({draw(sub)}) {draw(st.sampled_from(['**', '^']))} {exponent}"
    if kind in ("smooth", "domain", "kinked"):
        table = {"smooth": SMOOTH, "domain": DOMAIN, "kinked": KINKED}[kind]
        return f"{draw(st.sampled_from(table))}({draw(sub)})"
    if kind == "if":
        return f"(if {draw(condition(env, depth - 1))} then {draw(sub)} else {draw(sub)})"
    if kind == "static_if":
        return f"(if {draw(st.integers(0, 3))} > 1 then {draw(sub)} else {draw(sub)})"
    if kind == "minmax":
        return f"{draw(st.sampled_from(['min', 'max']))}({draw(sub)}, {draw(sub)})"
    if kind == "inner" and names:
        return draw(inner_derivative(env, depth - 1, names))
    if kind == "two":
        fn = draw(st.sampled_from(_have("atan2", "hypot", "clip")))
        if fn == "clip":
            return f"clip({draw(sub)}, -1, 1)"
        return f"{fn}({draw(sub)}, {draw(sub)})"
    vec = vector(env, depth - 1)
    if kind == "reduce":
        fn = draw(st.sampled_from(REDUCE))
        return f"{fn}({draw(vec)})"
    if kind == "dot":
        return f"dot({draw(vec)}, {draw(vec)})"
    if kind == "det":
        fn = draw(st.sampled_from(MATRIX_TO_SCALAR))
        return f"{fn}({draw(matrix(env, depth - 1))})"
    if kind == "gen":
        inner = dict(env, i="s")
        return f"sum({draw(scalar(inner, depth - 1))} for i in range({draw(st.integers(0, 3))}))"
    if "f" in env and env["f"] == "def":
        return f"f({draw(sub)}, {draw(sub)})"
    return draw(sub)


@st.composite
def inner_derivative(draw, env, depth, names):
    """A scalar derivative taken inside the program, of an expression by a scalar name."""
    sub = scalar(env, depth)
    var = draw(st.sampled_from(names))
    form = draw(st.sampled_from(["grad", "grad", "hessian", "jacobian"]))
    if form == "jacobian":
        return f"jacobian([{draw(sub)}, {draw(sub)}], {var})[{draw(st.integers(-2, 1))}]"
    return f"{form}({draw(sub)}, {var})"


@st.composite
def condition(draw, env, depth):
    sub = scalar(env, max(depth, 0))
    kind = draw(st.sampled_from(["cmp", "cmp", "cmp", "and", "or", "not"]))
    if kind == "cmp":
        return f"{draw(sub)} {draw(st.sampled_from(COMPARE))} {draw(sub)}"
    if kind == "not":
        return f"not ({draw(sub)} < {draw(sub)})"
    return f"({draw(sub)} < {draw(sub)}) {kind} ({draw(sub)} > {draw(sub)})"


@st.composite
def vector(draw, env, depth):
    """An expression of shape (2,)."""
    vectors = [n for n, t in env.items() if t == "v"]
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        if vectors and draw(st.booleans()):
            return draw(st.sampled_from(vectors))
        return f"[{draw(scalar(env, 0))}, {draw(scalar(env, 0))}]"
    sub = vector(env, depth - 1)
    s = scalar(env, depth - 1)
    kind = draw(st.sampled_from(["scale", "add", "fn", "matvec", "literal", "softmax", "comp",
                                 "row", "if", "grad"]))
    if kind == "scale":
        return f"({draw(s)} {draw(st.sampled_from(['*', '/']))} {draw(sub)})" \
            if draw(st.booleans()) else f"({draw(sub)} * {draw(s)})"
    if kind == "add":
        return f"({draw(sub)} {draw(st.sampled_from(['+', '-', '*']))} {draw(sub)})"
    if kind == "fn":
        return f"{draw(st.sampled_from(SMOOTH + KINKED))}({draw(sub)})"
    if kind == "matvec":
        return f"({draw(matrix(env, depth - 1))} @ {draw(sub)})"
    if kind == "literal":
        return f"[{draw(s)}, {draw(s)}]"
    if kind == "softmax" and "softmax" in BUILTINS:
        return f"softmax({draw(sub)})"
    if kind == "comp":
        inner = dict(env, k="s")
        return f"[{draw(scalar(inner, depth - 1))} for k in range(2)]"
    if kind == "row":
        return f"{draw(matrix(env, depth - 1))}[{draw(st.integers(-2, 1))}]"
    if kind == "grad" and vectors:  # the gradient by a vector name has its shape
        return f"grad({draw(s)}, {draw(st.sampled_from(vectors))})"
    return f"(if {draw(condition(env, depth - 1))} then {draw(sub)} else {draw(sub)})"


@st.composite
def matrix(draw, env, depth):
    """An expression of shape (2, 2)."""
    matrices = [n for n, t in env.items() if t == "m"]
    if depth <= 0 or draw(st.integers(0, 3)) == 0:
        if matrices and draw(st.booleans()):
            return draw(st.sampled_from(matrices))
        return draw(st.sampled_from(["eye(2)", "ones(2, 2)", "[[1, 2], [0.5, -1]]"]))
    sub = matrix(env, depth - 1)
    kind = draw(st.sampled_from(["mul", "add", "scale", "transpose", "fn", "outer", "inv"]))
    if kind == "mul":
        return f"({draw(sub)} @ {draw(sub)})"
    if kind == "add":
        return f"({draw(sub)} {draw(st.sampled_from(['+', '-', '*']))} {draw(sub)})"
    if kind == "scale":
        return f"({draw(scalar(env, depth - 1))} * {draw(sub)})"
    if kind == "transpose":
        return f"transpose({draw(sub)})"
    if kind == "fn":
        return f"{draw(st.sampled_from(SMOOTH))}({draw(sub)})"
    if kind == "inv" and "inv" in BUILTINS:
        return f"inv(eye(2) * 3 + {draw(sub)} * 0.1)"
    v = vector(env, depth - 1)
    return f"[{draw(v)}, {draw(v)}]"


@st.composite
def programs(draw, mutate=True):
    """`.dd` source text: inputs, statements, `output y` (scalar), maybe `output z` (vector)."""
    inputs = draw(st.lists(st.sampled_from(["x", "v", "A"]), min_size=1, max_size=3,
                           unique=True))
    lines = [f"input {n}" + {"x": "", "v": "[2]", "A": "[2, 2]"}[n] for n in inputs]
    env = {n: {"x": "s", "v": "v", "A": "m"}[n] for n in inputs}
    depth = draw(st.integers(1, 4))
    if draw(st.booleans()):
        lines.append(f"const c = {draw(st.sampled_from(NUMBERS))}")
        env["c"] = "s"
    if draw(st.booleans()):
        params = {"a": "s", "b": "s", **({"c": "s"} if "c" in env else {})}
        body = draw(scalar(params, 2))
        if draw(st.booleans()):
            lines.append(f"def f(a, b) = {body}")
        else:  # a body with a dynamic if and a return
            lines += ["def f(a, b) {", f"    r = {body}", f"    if a > b {{ r = r * "
                      f"{draw(scalar(params, 1))} }}", "    return r", "}"]
        env["f"] = "def"
    for k in range(draw(st.integers(0, 4))):
        lines.extend(draw(statement(env, depth, k)))
    lines.append(f"output y = {draw(scalar(env, depth))}")
    if draw(st.integers(0, 3)) == 0:
        lines.append(f"output z = {draw(vector(env, depth - 1))}")
    source = "\n".join(lines) + "\n"
    if mutate and draw(st.integers(0, 9)) == 0:
        source = draw(mutation(source))
    return source


@st.composite
def statement(draw, env, depth, k):
    """One statement that binds `t{k}` (a scalar or a vector), as lines of text."""
    name = f"t{k}"
    kind = draw(st.sampled_from(["assign", "assign", "vassign", "loop", "if", "setitem",
                                 "while"]))
    if kind in ("vassign", "setitem"):
        value = draw(vector(env, depth - 1))
        env[name] = "v"
        if kind == "vassign":
            return [f"{name} = {value}"]
        return [f"{name} = {value}", f"{name}[{draw(st.integers(-2, 1))}] = "
                f"{draw(scalar(env, depth - 1))}",
                f"{name} {draw(st.sampled_from(['+=', '*=', '-=', '/=']))} "
                f"{draw(vector(env, depth - 1))}"]
    value = draw(scalar(env, depth - 1))
    if kind == "assign":
        env[name] = "s"
        return [f"{name} = {value}"]
    if kind == "while":
        env[name] = "s"
        step = draw(scalar(env, depth - 1))
        cond = draw(st.one_of(condition(env, depth - 1),
                              st.sampled_from([f"abs({name}) < 4", f"{name} > -1"])))
        op = draw(st.sampled_from(["+=", "*=", "-=", "="]))
        body = [f"    {name} {op} {step} * 0.5"]
        if draw(st.booleans()):
            body.insert(draw(st.integers(0, 1)), f"    break if {draw(condition(env, 0))}")
        return [f"{name} = {value}", f"while {cond} max {draw(st.integers(0, 4))} {{", *body,
                "}"]
    if kind == "loop":
        env[name] = "s"
        step = draw(scalar(dict(env, i="s"), depth - 1))
        op = draw(st.sampled_from(["+=", "*=", "-="]))
        return [f"{name} = {value}", f"for i in range({draw(st.integers(0, 3))}) {{",
                f"    {name} {op} {step} * 0.5", "}"]
    env[name] = "s"
    cond = draw(condition(env, depth - 1))
    return [f"{name} = {value}", f"if {cond} {{", f"    {name} = {draw(scalar(env, depth - 1))}",
            "} else {", f"    {name} = {draw(scalar(env, depth - 1))}", "}"]


@st.composite
def mutation(draw, source):
    """A small damage: what a typing user does."""
    kind = draw(st.sampled_from(["replace", "drop", "misspell", "shape", "duplicate"]))
    if kind == "replace":
        at = draw(st.integers(0, len(source) - 1))
        char = draw(st.sampled_from(list("()[]{},;=+-*/^@<>x0.9e \n#")))
        return source[:at] + char + source[at + 1:]
    if kind == "drop":
        at = draw(st.integers(0, len(source) - 1))
        return source[:at] + source[at + 2:]
    if kind == "misspell":
        return source.replace("output", "outptu", 1) if draw(st.booleans()) else \
            source.replace("sin(", "sni(", 1)
    if kind == "shape":
        return source.replace("output y = ", "output y = v + ", 1)
    lines = source.splitlines()
    line = draw(st.sampled_from(lines))
    return source + line + "\n"


# --- the checker ------------------------------------------------------------------------------

@dataclass
class Outcome:
    kind: str  # "error", "evaluated", "disagreement" or "internal"
    detail: str = ""


def check(source: str, seed: int = 0) -> Outcome:
    """Run `source` every way and compare; never raises."""
    try:
        prog = diffdsl.compile(source, filename="fuzz.dd", cache=False)
    except DiffDSLError as exc:
        return _located(exc)
    except Exception:  # anything else is a bug: kept with its traceback
        return Outcome("internal", traceback.format_exc())
    try:
        return _compare(prog, np.random.default_rng(seed))
    except DiffDSLError as exc:
        if getattr(exc, "span", None) is not None:
            return Outcome("error", str(exc))
        return Outcome("internal", f"error without a location at evaluation: {exc}")
    except Exception:
        return Outcome("internal", traceback.format_exc())


def _located(exc: DiffDSLError) -> Outcome:
    if getattr(exc, "span", None) is None:
        return Outcome("internal", f"compile error without a location: {exc}")
    return Outcome("error", str(exc))


def _point(prog, rng, rows=None, grid=None) -> dict:
    """Random inputs; on the `grid` (one time in three unless said), small integers, so that
    ties (`max(a, b)` with a == b), kinks (`abs(0)`) and the edges of domains (`sqrt(0)`,
    `log(1)`) are met."""
    lead = () if rows is None else (rows,)
    if grid if grid is not None else rng.integers(3) == 0:
        return {n: rng.integers(-2, 3, size=lead + tuple(s)).astype(float)
                for n, s in prog.inputs.items()}
    return {n: rng.normal(size=lead + tuple(s)) for n, s in prog.inputs.items()}


# Ops whose value jumps: where their argument sits exactly on the jump, one ulp decides.
STEPS = frozenset(("floor", "ceil", "round", "sign", "lt", "le", "gt", "ge", "eq", "ne"))


def _values_disagree(prog, point, rows) -> str | None:
    ref = prog.evaluate(point, backend="numpy")
    got = prog.evaluate(point, backend="cpu")
    for name in ref:
        if not _close(ref[name], got[name], 1e-7):
            return (f"value of {name}, numpy vs cpu, rows={rows}: "
                    f"{ref[name]!r} vs {got[name]!r} at {point!r}")
    return None


def _rounding_at_a_step(prog, point, rng, disagree) -> bool:
    """Whether a disagreement at a grid point is one ulp meeting a jump. NumPy's and libm's
    transcendental functions may differ in the last bit (NumPy's SIMD cbrt(2) is correctly
    rounded, glibc's is one ulp above), and on the grid a value such as det(cbrt(2 A)) lands
    exactly on a jump of `ceil` or a comparison. The backends must then agree (`disagree`
    gives None) at points nudged off the grid by a millionth; a wrong kernel still disagrees
    there."""
    if not any(node.op in STEPS for node in prog.graph.nodes):
        return False
    for _ in range(3):
        nudged = {n: v + rng.uniform(-1e-6, 1e-6, np.shape(v)) for n, v in point.items()}
        if disagree(nudged) is not None:
            return False
    return True


def _compare(prog, rng) -> Outcome:
    for rows in (None, 3):
        grid = bool(rng.integers(3) == 0)
        point = _point(prog, rng, rows, grid=grid)
        detail = _values_disagree(prog, point, rows)
        if detail is not None and not (grid and _rounding_at_a_step(
                prog, point, rng, lambda p, rows=rows: _values_disagree(prog, p, rows))):
            return Outcome("disagreement", detail)
    # `y`, unless a mutation took it away
    of = "y" if "y" in prog.outputs else next(iter(prog.outputs))
    grid = bool(rng.integers(3) == 0)
    point = _point(prog, rng, grid=grid)
    base, detail = _jacobians(prog, point, of)
    if detail is not None and not (grid and _rounding_at_a_step(
            prog, point, rng, lambda p: _jacobians(prog, p, of)[1])):
        return Outcome("disagreement", detail)
    if grid:
        # At a tie or a kink the language's conventions (the first argument of `max` takes
        # the derivative, abs'(0) = 0) need not be the limit of differences: not compared.
        return Outcome("evaluated", "finite differences skipped: a point on the grid")
    return _finite_differences(prog, point, base, rng, of)


def _jacobians(prog, point, of) -> tuple[dict, str | None]:
    """The reverse cpu Jacobian of `of` at `point`, and how forward mode or the numpy backend
    disagrees with it (None: they agree)."""
    jacs = {"reverse cpu": prog.jacobian(point, of=of, mode="reverse", backend="cpu"),
            "forward cpu": prog.jacobian(point, of=of, mode="forward", backend="cpu"),
            "reverse numpy": prog.jacobian(point, of=of, mode="reverse", backend="numpy")}
    base = jacs["reverse cpu"]
    # Where y is NaN or infinite the function is undefined, and the two modes may say NaN or
    # 0 for an input that reaches y only through a select's condition (forward mode carries
    # NaN * 0, reverse mode never visits that input): derivatives are compared where y is
    # finite.
    defined = np.isfinite(np.asarray(prog.evaluate(point, backend="numpy")[of]))
    # Where an intermediate is infinite (a division by an exact 0), forward mode multiplies a
    # zero tangent by it (NaN) where reverse mode may never visit that path (0): there, only
    # derivatives both modes find finite are compared. The same holds where an intermediate's
    # derivative is infinite (sqrt'(0) in sqrt(x - x): reverse mode sums inf - inf = NaN where
    # forward mode's tangent 1 - 1 is 0 before it meets the inf); the routing of exact zeros
    # through selects in both modes is tested apart (test_select_routing, test_forward_routing).
    fragile = not (_intermediates_finite(prog, point, prog.graph) and _intermediates_finite(
        prog, point, prog.derivative("jacobian", of, mode="reverse")))
    for label, jac in jacs.items():
        for name in base:
            a, b = base[name][defined], jac[name][defined]
            if fragile:
                a, b = (np.where(np.isfinite(a) & np.isfinite(b), v, 0.0) for v in (a, b))
            # An infinite partial derivative (cbrt'(0), sqrt'(0)) reaches reverse mode as
            # +-inf but forward mode as NaN where it meets the other inputs' zero tangents
            # (inf * 0): both modes say the derivative does not exist, so they agree there.
            broken = ~np.isfinite(a) & ~np.isfinite(b)
            a, b = np.where(broken, 0.0, a), np.where(broken, 0.0, b)
            if not _close(a, b, 1e-7):
                return base, (f"d y/d {name}, reverse cpu vs {label}: "
                              f"{base[name]!r} vs {jac[name]!r} at {point!r}")
    return base, None


def _intermediates_finite(prog, point, graph) -> bool:
    """Whether every node of `graph` (the program's or a derivative's, over the program's
    inputs) is finite at `point` (the reference interpreter, asked for every node)."""
    from diffdsl.backends import numpy as reference
    from diffdsl.graph.ir import Graph, Port

    every = Graph(graph.nodes, graph.inputs,
                  {f"n{i}": Port((), (i,)) for i in range(len(graph.nodes))})
    flat = {n: np.asarray(point[n], dtype=float).reshape(-1) for n in graph.inputs}
    values = reference.evaluate(every, flat)
    return all(np.all(np.isfinite(v)) for v in values.values())


FINE = 1e-4  # the third step, as a fraction of the first


def _finite_differences(prog, point, jac, rng, of) -> Outcome:
    direction = {n: rng.normal(size=np.shape(v)) for n, v in point.items()}
    # J·d for each element of y (y may be an array when a mutation made it one)
    along = sum(np.tensordot(jac[n], direction[n], axes=np.ndim(direction[n])) for n in jac)

    def y(t):
        moved = {n: point[n] + t * direction[n] for n in point}
        return np.asarray(prog.evaluate(moved, backend="numpy")[of], dtype=float)

    h = 1e-4
    at = {t: y(t) for t in (-h, -h / 2, 0.0, h / 2, h, -FINE * h, FINE * h)}
    if not all(np.all(np.isfinite(v)) for v in at.values()):
        return Outcome("evaluated", "finite differences skipped: not finite")
    central = [(at[h] - at[-h]) / (2 * h), (at[h / 2] - at[-h / 2]) / h]
    left, right = (at[0.0] - at[-h / 2]) / (h / 2), (at[h / 2] - at[0.0]) / (h / 2)
    fine = (at[FINE * h] - at[-FINE * h]) / (2 * FINE * h)
    scale = 1 + np.abs(along) + np.abs(central[1])
    rounding = 1e-6 * (1 + np.abs(at[0.0]))  # fine's rounding error: 2e-8 of |y|
    # Smooth here: two step sizes agree (no jump nearby), so do the slopes on either side
    # (no kink at the point, where central differences average the two slopes), and so does
    # a step 10**4 times finer: `ceil(x ** -2)` near x = 0.04 jumps every 4e-5, so at the
    # step sizes above its staircase looks like a line of slope -20000, and is flat between.
    if np.any(np.abs(central[0] - central[1]) > 1e-5 * scale) or \
            np.any(np.abs(left - right) > 1e-2 * scale) or \
            np.any(np.abs(fine - central[1]) > 1e-3 * scale + rounding):
        return Outcome("evaluated", "finite differences skipped: not smooth here")
    if np.any(np.abs(along - central[1]) > 1e-4 * scale):
        return Outcome("disagreement", f"Jacobian along a direction {along!r} vs central "
                                       f"differences {central!r} at {point!r}")
    return Outcome("evaluated")


def _close(a, b, rtol: float) -> bool:
    """Equal within `rtol` of the larger magnitude; non-finite values must match exactly."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape:
        return False
    finite = np.isfinite(a) & np.isfinite(b)
    same = (np.isnan(a) & np.isnan(b)) | (a == b)
    scale = np.maximum(1.0, np.maximum(np.abs(a), np.abs(b)))
    near = np.abs(np.where(finite, a - b, 0.0)) <= rtol * np.where(finite, scale, 1.0)
    return bool(np.all(same | (finite & near)))
