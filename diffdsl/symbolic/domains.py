"""Where `diffdsl check` draws its points by default: inside the domains of the program's
functions, as its graph shows them.

An op defined on part of the line asks for an interval for its argument: `log`, `sqrt`,
`log2`, `log10` a positive one, `log1p` one above -1, `asin`, `acos`, `atanh` one inside
(-1, 1), `acosh` one above 1, `pow` a positive base unless the exponent is a constant integer.
Some only prefer one, away from poles, and give it up where it conflicts with a need:
`lgamma` a positive argument, `tan` one inside (-pi/2, pi/2). A denominator, the base of a
negative integer power and the argument of `cbrt` avoid one point, 0.

Such an argument is traced back to an input element through a chain of steps, each with one
operand that is not a constant and an inverse (`x - 1`, `2 * x`, `1 / x`, `-x`, `exp(x)`,
`x ** 3`...), and the interval goes back through the inverses. An argument that depends on
several elements or on a step with no inverse (`log(x + y)`, `sqrt(x * x)`) says nothing, and
neither does anything used only by a select or a comparison: in `if x > 0 then sqrt(x) else
0` the program means every x. So the analysis never narrows more than the program shows.

Each element's interval becomes the range its points are drawn from: the default [0.5, 1.5)
where the interval holds it (so programs it suited keep their points), else [L + 0.5,
L + 1.5) above a lower bound L, [U - 1.5, U - 0.5) below an upper bound U, or the middle
half of a bounded interval narrower than 2.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UsageError
from ..graph.ir import Graph

LOW, HIGH = 0.5, 1.5  # the default range, where nothing is known
INF = math.inf

# op -> the open interval its argument needs (or, for _PREFER, would rather be in)
_NEED = {"log": (0.0, INF), "log2": (0.0, INF), "log10": (0.0, INF), "sqrt": (0.0, INF),
         "log1p": (-1.0, INF), "asin": (-1.0, 1.0), "acos": (-1.0, 1.0),
         "atanh": (-1.0, 1.0), "acosh": (1.0, INF)}
_PREFER = {"lgamma": (0.0, INF), "tan": (-math.pi / 2, math.pi / 2)}
# Results that are finite 0 or 1 whatever their arguments: nothing they read needs a domain.
_OPAQUE = {"select", "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not"}

# op -> (inverse, increasing, the interval of the op's values): one step of a chain
_INVERSE = {
    "neg": (np.negative, False, (-INF, INF)),
    "exp": (np.log, True, (0.0, INF)),
    "expm1": (np.log1p, True, (-1.0, INF)),
    "log": (np.exp, True, (-INF, INF)),
    "log2": (np.exp2, True, (-INF, INF)),
    "log10": (lambda y: np.power(10.0, y), True, (-INF, INF)),
    "log1p": (np.expm1, True, (-INF, INF)),
    "sqrt": (np.square, True, (0.0, INF)),
    "cbrt": (lambda y: y ** 3, True, (-INF, INF)),
    "sinh": (np.arcsinh, True, (-INF, INF)),
    "asinh": (np.sinh, True, (-INF, INF)),
    "tanh": (np.arctanh, True, (-1.0, 1.0)),
    "atanh": (np.tanh, True, (-INF, INF)),
    "atan": (np.tan, True, (-math.pi / 2, math.pi / 2)),
}


def default_ranges(graph: Graph) -> dict[str, dict]:
    """input name -> {"low": array, "high": array (one bound per element), "ops": names of
    the ops that moved the range away from the default, sorted}."""
    needs, prefers, avoids = _constraints(graph)
    result = {}
    for name, port in graph.inputs.items():
        low, high = np.full(port.size, LOW), np.full(port.size, HIGH)
        ops: set[str] = set()
        for k in range(port.size):
            lo, hi, why = _interval(needs.get((name, k), []), prefers.get((name, k), []),
                                    avoids.get((name, k), []))
            low[k], high[k] = _draw_range(lo, hi)
            if (low[k], high[k]) != (LOW, HIGH):
                ops |= why
        result[name] = {"low": low, "high": high, "ops": sorted(ops)}
    return result


def _constraints(graph: Graph) -> tuple[dict, dict, dict]:
    """(element -> [(lo, hi, op)] needed, the same preferred, element -> [(point, op)])."""
    nodes = graph.nodes
    live = bytearray(len(nodes))  # nodes whose value can reach an output as a number
    for port in graph.outputs.values():
        for i in port.ids:
            live[i] = 1
    for i in range(len(nodes) - 1, -1, -1):
        if live[i] and nodes[i].op not in _OPAQUE:
            for a in nodes[i].args:
                live[a] = 1
    needs: dict = {}
    prefers: dict = {}
    avoids: dict = {}
    for i, node in enumerate(nodes):
        if not live[i]:
            continue
        op, args = node.op, node.args
        for table, found in ((_NEED, needs), (_PREFER, prefers)):
            if op in table:
                _add(found, _back(nodes, args[0], *table[op]), op)
        if op == "pow":
            exponent = _const(nodes, args[1])
            if exponent is None or exponent != math.floor(exponent):
                _add(needs, _back(nodes, args[0], 0.0, INF), op)
            elif exponent < 0:
                _add(avoids, _back(nodes, args[0], 0.0, 0.0), op)
        elif op == "div":
            _add(avoids, _back(nodes, args[1], 0.0, 0.0), "division")
        elif op == "cbrt":
            _add(avoids, _back(nodes, args[0], 0.0, 0.0), op)
    return needs, prefers, avoids


def _add(found: dict, traced, op: str) -> None:
    if traced is not None:
        element, lo, hi = traced
        found.setdefault(element, []).append((lo, hi, op))


def _const(nodes, i: int) -> float | None:
    return nodes[i].attr if nodes[i].op == "const" else None


def _back(nodes, i: int, lo: float, hi: float):
    """The input element that node `i` is a chain of invertible steps of, and the interval
    (a point where lo == hi) that node's interval [lo, hi] asks of it; None if there is none."""
    while nodes[i].op != "input":
        step = _step(nodes, nodes[i], lo, hi)
        if step is None:
            return None
        i, lo, hi = step
        if not (lo <= hi) or (lo == hi and not math.isfinite(lo)):
            return None  # no value of the element gives the interval: not this step's job
    return nodes[i].attr, lo, hi


def _step(nodes, node, lo: float, hi: float):
    """(argument, interval) one step back through `node`, or None."""
    consts = [_const(nodes, a) for a in node.args]
    if node.op in _INVERSE:
        inverse, increasing, (rlo, rhi) = _INVERSE[node.op]
        lo, hi = max(lo, rlo), min(hi, rhi)
        if lo > hi:  # no value of the op is in the interval (tan would wrap it around)
            return None
        return (node.args[0], *_map(inverse, increasing, lo, hi))
    if len(node.args) != 2 or (consts[0] is None) == (consts[1] is None):
        return None
    k = consts[0] if consts[0] is not None else consts[1]
    x = node.args[1] if consts[0] is not None else node.args[0]
    on_left = consts[1] is not None  # the form `x op k`
    if node.op == "add":
        return x, lo - k, hi - k
    if node.op == "sub":
        return (x, lo + k, hi + k) if on_left else (x, k - hi, k - lo)
    if node.op == "mul" and k != 0:
        return (x, *_map(lambda y: y / k, k > 0, lo, hi))
    if node.op == "div" and on_left and k != 0:
        return (x, *_map(lambda y: y * k, k > 0, lo, hi))
    if node.op == "div" and k != 0 and (lo >= 0 or hi <= 0):  # k / x: x = k / y
        return (x, *_map(lambda y: _quotient(k, y, lo >= 0), k < 0, lo, hi))
    if node.op == "pow" and on_left and k > 0 and (k % 2 == 1 or k != math.floor(k)):
        lo = max(lo, 0.0) if k != math.floor(k) else lo
        return (x, *_map(lambda y: np.sign(y) * np.abs(y) ** (1.0 / k), True, lo, hi))
    if node.op == "pow" and not on_left and k > 0 and k != 1:  # k ** x: x = log(y) / log(k)
        return (x, *_map(lambda y: np.log(y) / math.log(k), k > 1, max(lo, 0.0), hi))
    return None


def _quotient(k: float, y: float, positive: bool) -> float:
    """k / y, with y = 0 taken on the side of the interval (+0 or -0)."""
    if y == 0:
        return math.copysign(INF, k) if positive else -math.copysign(INF, k)
    return k / y


def _map(fn, increasing: bool, lo: float, hi: float) -> tuple[float, float]:
    with np.errstate(all="ignore"):
        a, b = float(fn(lo)), float(fn(hi))
    return (a, b) if increasing else (b, a)


def _interval(needs: list, prefers: list, avoids: list) -> tuple[float, float, set]:
    """The element's interval: every need, then each preference that leaves room, then each
    point avoided by keeping one side of it; and the ops that shaped it."""
    lo, hi, why = -INF, INF, set()
    for a, b, op in needs:
        if max(lo, a) < min(hi, b):
            lo, hi = max(lo, a), min(hi, b)
            why.add(op)
    for a, b, op in prefers:
        if max(lo, a) < min(hi, b):
            lo, hi = max(lo, a), min(hi, b)
            why.add(op)
    for point, _, op in avoids:
        if lo < point < hi:
            # The side that holds the default range, else the upper side.
            if point <= HIGH:
                lo = point
            else:
                hi = point
            why.add(op)
    return lo, hi, why


def _draw_range(lo: float, hi: float) -> tuple[float, float]:
    if lo <= LOW and hi >= HIGH:
        return LOW, HIGH
    if lo > -INF and hi >= lo + HIGH + LOW:  # [lo + LOW, lo + HIGH), LOW to spare above
        return lo + LOW, lo + HIGH
    if lo == -INF:
        return hi - HIGH, hi - LOW
    quarter = (hi - lo) / 4
    return lo + quarter, hi - quarter


def check_given(graph: Graph, given: dict) -> None:
    """Ranges given for inputs (`domain=` of `check`), each `(low, high)` with low < high,
    both finite, for an input of `graph`."""
    for name, bounds in given.items():
        if name not in graph.inputs:
            raise UsageError(f"domain= names '{name}', which is not an input",
                             hint=f"the inputs are: {', '.join(graph.inputs)}")
        low, high = bounds
        if not -INF < low < high < INF:
            raise UsageError(f"domain={{'{name}': ({low}, {high})}}: expected (low, high) with "
                             "low < high, both finite")


def sampling_ranges(graph: Graph, given: dict) -> dict[str, dict]:
    """input name -> {"low", "high" (arrays, one bound per element), "from" ("given",
    "program" or "default"), "ops"}: the `(low, high)` given for a name, else the default."""
    found = default_ranges(graph)
    for name, port in graph.inputs.items():
        if name in given:
            low, high = given[name]
            found[name] = {"low": np.full(port.size, float(low)),
                           "high": np.full(port.size, float(high)), "from": "given", "ops": []}
        else:
            found[name]["from"] = "program" if found[name]["ops"] else "default"
    return found


def describe(name: str, entry: dict, shown: int = 4) -> str:
    """`x: points drawn from [1.5, 2.5), clear of the singularities of sqrt`, for people;
    `entry` as `sampling_ranges` gives it."""
    pairs = [f"[{lo:.4g}, {hi:.4g})" for lo, hi in zip(entry["low"], entry["high"], strict=True)]
    if len(set(pairs)) == 1:
        where = f"from {pairs[0]}"
    else:
        more = ", ..." if len(pairs) > shown else ""
        where = "per element from " + ", ".join(pairs[:shown]) + more
    why = {"given": ", as given", "default": ""}.get(
        entry["from"], f", clear of the singularities of {', '.join(entry['ops'])}")
    return f"{name}: points drawn {where}{why}"
