"""`diffdsl check`: our derivatives against two independent oracles (DESIGN.md, style 9).

For every output and every input of a program:

symbolic
    Our Jacobian graph (`autodiff.jacobian`) is exported to SymPy and compared element by
    element with `sympy.diff` of the exported output. An element is

    - "proven" when SymPy reduces the difference to 0: at once, after `expand` (fast for
      polynomials such as determinants), after `simplify` (small expressions only), or, for
      a Piecewise, case by case over the truth values of its conditions (`simplify` takes
      tens of seconds on the derivative of a max over five elements);
    - "numeric50" when the two agree at every random point, evaluated with 50-digit
      arithmetic, to a relative 1e-30;
    - "rounding" when they agree there to a relative 1e-12 but not to 1e-30: constant folding
      in float64 rounded a constant of our graph that no exact form was found for (`4 / c`
      for an arbitrary float `c` is one rounding away from SymPy's exact quotient);
    - "mismatch" otherwise;
    - "skipped", with the reason, when SymPy cannot differentiate the output, it is too large,
      or the check's `SYMPY_SECONDS` ran out before a large element (finite differences go on).

numeric
    Central finite differences `(f(x + h v) - f(x - h v)) / 2h` against `J v`, with `J` from
    our Jacobian graph evaluated by the NumPy interpreter (the reverse-mode graph and the
    forward-mode graph both), along random directions `v` and, for inputs of up to 25
    elements, along every coordinate.

Random points draw every input element uniformly, reproducibly from `seed`, from the range
given for its input, else from one inside the domains of the program's functions (`domains`);
or the points are given (`values`), for a domain no range describes (positive definite
matrices).

A check that compares nothing cannot fail, so it does not pass: where for some output and
input no element was decided by SymPy and no finite difference was compared (the output is
finite at no point, and SymPy skipped every element), the status is "unchecked", not "ok".
The cheap steps come first: the 50-digit evaluation runs before `simplify`, so a mismatch
never waits for `simplify` to give up. It evaluates every element of an output and input
block with one `lambdify`d mpmath function that shares common subexpressions, so it costs what
the graph costs, not what the (possibly exponentially larger) written-out tree would. The
report is JSON-ready: `{"ok", "status", "checked", "unchecked", "symbolic": {OUT: {IN: ...}},
"numeric": {OUT: {IN: ...}}}` (see `_verdict`).
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import sympy as sp

from .. import progress
from ..backends import numpy as reference
from ..errors import UsageError
from ..graph import autodiff
from ..graph.ir import Graph
from . import domains
from . import export as symbolic
from .oracle import (
    DIGITS,
    evaluate,
    has_unevaluated,
    oracle_diff,
    relative_difference,
    relative_errors,
    short,
)

# The statuses of a symbolic comparison, from the strongest to a mismatch.
RANK = {"proven": 0, "numeric50": 1, "rounding": 2, "skipped": 3, "mismatch": 4}

# symbolic
EXACT_RTOL = 1e-30
ROUNDING_RTOL = 1e-12
PROOF_RTOL = 1e-20  # past it at 50 digits the formulas differ: no proof tried (lgamma: minutes)
EXPAND_LIMIT = 50_000  # tree size (graph-measured) up to which `expand` is tried
SIMPLIFY_LIMIT = 2_000  # count_ops up to which `simplify` is tried
CASES_LIMIT = 6  # relations up to which a Piecewise is split into cases (2**n of them)
CASE_SIMPLIFY_LIMIT = 200  # count_ops up to which `simplify` is tried on each case
TREE_LIMIT = 1_000_000  # tree size beyond which SymPy is not asked at all
DEPTH_LIMIT = 300  # SymPy recurses over expressions; deeper ones exhaust Python's stack
# Elements times terms up to which expressions deep only in the graph (long flat sums, which
# SymPy gets shallow) are still compared: each element's sympy.diff walks its whole sum.
CHAIN_WORK_LIMIT = 2_000_000
MAX_REPORTED = 20  # mismatches listed per output and input
# SymPy's time a check (its diff of 70 squared degree-65 polynomials takes 8 s an element);
# past it, elements larger than SIMPLIFY_LIMIT are skipped and `simplify` is not tried.
SYMPY_SECONDS = 60.0

# numeric
STEP = 1e-6
RTOL = 1e-5
FLOOR = 1e-3  # absolute floor, relative to the size of the values: FD's rounding noise
DIRECTIONS = 2
ELEMENTWISE_MAX = 25


class Report(dict):
    """The JSON-ready result of `check`, remembering in `ranges` where each input's points
    were drawn from (`domains.sampling_ranges`; empty where they were given) and in `given`
    how many points were given (0 where they were drawn), which the JSON does not hold."""

    def __init__(self, ranges: dict, given: int = 0):
        super().__init__(ok=True, status="ok", checked=0, unchecked=[], symbolic={},
                         numeric={})
        self.ranges = ranges
        self.given = given


def check(graph: Graph, points: int = 3, seed: int = 0, domain: dict | None = None,
          values: dict | None = None) -> Report:
    """Check the derivative of every output with respect to every input; see the module.
    `domain` maps input names to the `(low, high)` their elements are drawn from; the other
    inputs get ranges inside the domains of the program's functions (`domains`). `values`,
    instead, gives the points: input name -> array (points, input size), every input."""
    rng = np.random.default_rng(seed)
    if values is not None:
        if domain:
            raise UsageError("domain= says where to draw points, but the points are given",
                             hint="give either points= as values or domain=, not both")
        x0 = {name: np.asarray(values[name], dtype=np.float64) for name in graph.inputs}
        report = Report({}, next(iter(x0.values())).shape[0] if x0 else 0)
    else:
        points = max(1, int(points))
        domains.check_given(graph, domain or {})
        ranges = domains.sampling_ranges(graph, domain or {})
        x0 = {name: rng.uniform(ranges[name]["low"], ranges[name]["high"],
                                size=(points, port.size))
              for name, port in graph.inputs.items()}
        report = Report(ranges)
    if not graph.inputs:
        return _verdict(graph, report)
    syms = symbolic.Symbols(graph)
    sizes, depths = symbolic.expression_sizes(graph, TREE_LIMIT)
    elements = sum(graph.outputs[out].size * port.size for out in graph.outputs
                   for port in graph.inputs.values())
    deadline = time.monotonic() + SYMPY_SECONDS
    with progress.bar(elements, "checking derivatives", unit="element") as shown:
        for out in graph.outputs:
            rev = autodiff.jacobian(graph, out, mode="reverse")
            fwd = autodiff.jacobian(graph, out, mode="forward")
            jac_rev = _evaluate_jacobian(graph, rev, out, x0)
            jac_fwd = _evaluate_jacobian(graph, fwd, out, x0)
            report["numeric"][out] = _numeric(graph, out, x0, [jac_rev, jac_fwd], rng)
            d_ids = [i for name in graph.inputs for i in rev.outputs[autodiff.d_name(name)].ids]
            deepest = max(symbolic.graph_depth(graph, graph.outputs[out].ids),
                          symbolic.graph_depth(rev, d_ids))
            report["symbolic"][out] = symbolic.deep_call(
                min(deepest, DEPTH_LIMIT), _symbolic, graph, out, rev, syms, x0, jac_rev, sizes,
                depths, shown, deadline)
    return _verdict(graph, report)


def _verdict(graph: Graph, report: Report) -> Report:
    """`status`: "mismatch" where an oracle disagrees; else "unchecked" where for some output
    and input nothing was compared (listed in `unchecked` as `[output, input]`), and for a
    program without inputs; else "ok". `checked` counts the comparisons made: elements that
    SymPy decided, and finite differences compared where the output is finite."""
    mismatch = False
    for out in report["symbolic"]:
        for name, sym in report["symbolic"][out].items():
            num = report["numeric"][out][name]
            mismatch = mismatch or sym["status"] == "mismatch" or not num["ok"]
            compared = num["checked"] + sum(n for status, n in sym["counts"].items()
                                            if status != "skipped")
            report["checked"] += compared
            if not compared:
                report["unchecked"].append([out, name])
    if mismatch:
        report["status"] = "mismatch"
    elif report["unchecked"] or not graph.inputs:
        report["status"] = "unchecked"
    report["ok"] = report["status"] == "ok"
    return report


# ---------------------------------------------------------------------------------------------
# helpers


def _evaluate_jacobian(graph: Graph, jac: Graph, out: str, x0: dict) -> dict:
    """input -> array (points, out size, input size); plus "value" -> (points, out size)."""
    values = reference.evaluate(jac, x0)
    size = graph.outputs[out].size
    result = {"value": values["value"]}
    for name, port in graph.inputs.items():
        result[name] = values[autodiff.d_name(name)].reshape(-1, size, port.size)
    return result


def _element(out_shape, in_shape, s, t) -> list[int]:
    return list(symbolic.unravel(s, out_shape)) + list(symbolic.unravel(t, in_shape))


# ---------------------------------------------------------------------------------------------
# numeric


def _numeric(graph: Graph, out: str, x0: dict, jacs: list, rng) -> dict:
    result = {}
    out_shape = graph.outputs[out].shape
    f0 = jacs[0]["value"]  # (points, S)
    for name, port in graph.inputs.items():
        npts, size = x0[name].shape
        dirs = rng.standard_normal((npts, DIRECTIONS, size))
        dirs /= np.maximum(np.abs(dirs).max(axis=2, keepdims=True), 1e-300)
        elementwise = size <= ELEMENTWISE_MAX
        if elementwise:
            eye = np.broadcast_to(np.eye(size), (npts, size, size))
            dirs = np.concatenate([dirs, eye], axis=1)
        k = dirs.shape[1]
        h = STEP * np.maximum(1.0, np.abs(x0[name]).max(axis=1))  # (points,)
        step = h[:, None, None] * dirs  # (points, k, size)
        batch = {}
        for other, value in x0.items():
            rows = np.repeat(value[:, None, :], k, axis=1)  # (points, k, size)
            if other == name:
                plus, minus = rows + step, rows - step
            else:
                plus = minus = rows
            batch[other] = np.concatenate([plus, minus], axis=0).reshape(-1, value.shape[1])
        with np.errstate(all="ignore"):
            fx = reference.evaluate(graph, batch)[out].reshape(2, npts, k, -1)
            fd = (fx[0] - fx[1]) / (2.0 * h[:, None, None])  # (points, k, S)
        worst = (0.0, None)
        checked = 0
        for jac in jacs:
            with np.errstate(all="ignore"):
                jv = np.einsum("pst,pkt->pks", jac[name], dirs)
            rel = relative_errors(fd, jv, f0, FLOOR)
            checked = max(checked, int(np.count_nonzero(~np.isnan(rel))))
            if checked and np.nanmax(rel) > worst[0]:
                p, d, s = np.unravel_index(int(np.nanargmax(rel)), rel.shape)
                worst = (float(rel[p, d, s]), (int(d), int(s)))
        entry = {"max_rel_error": worst[0], "ok": bool(worst[0] <= RTOL)}
        if worst[1] is not None:
            d, s = worst[1]
            if d >= DIRECTIONS:
                entry["worst_element"] = _element(out_shape, port.shape, s, d - DIRECTIONS)
                entry["worst_kind"] = "element"
            else:
                entry["worst_element"] = list(symbolic.unravel(s, out_shape))
                entry["worst_kind"] = "direction"
        else:
            entry["worst_element"] = []
            entry["worst_kind"] = "none"
        entry["directions"] = int(k)
        entry["checked"] = checked  # comparisons made where the output is finite
        result[name] = entry
    return result


# ---------------------------------------------------------------------------------------------
# symbolic


def _symbolic(graph: Graph, out: str, jac: Graph, syms, x0: dict, jac_values: dict,
              sizes: list, depths: list, shown, deadline: float) -> dict:
    """Statuses of the elements of `out`'s Jacobian, counted on the bar `shown` as each is
    decided; past `deadline` (`time.monotonic`), large ones are skipped and no `simplify`
    is tried."""
    out_port = graph.outputs[out]
    names = list(graph.inputs)
    result = {}
    jac_sizes, jac_depths = symbolic.expression_sizes(jac, TREE_LIMIT)
    jac_ids = [i for n in names for i in jac.outputs[autodiff.d_name(n)].ids]
    big = max([sizes[i] for i in out_port.ids] + [jac_sizes[i] for i in jac_ids])
    deep = max([depths[i] for i in out_port.ids] + [jac_depths[i] for i in jac_ids])
    chained = False  # deep in the graph, shallow as SymPy gets it: long flat sums
    if deep > DEPTH_LIMIT:
        deep = max(symbolic.export_depth(graph, out_port.ids),
                   symbolic.export_depth(jac, jac_ids))
        chained = deep <= DEPTH_LIMIT
    work = big * out_port.size * sum(port.size for port in graph.inputs.values())
    reason = None
    if big >= TREE_LIMIT:
        reason = f"the expressions have more than {TREE_LIMIT} terms written out"
    elif deep > DEPTH_LIMIT:
        reason = f"the expressions are {deep} operations deep (SymPy recurses over them)"
    elif chained and work > CHAIN_WORK_LIMIT:
        reason = f"long sums: {work:,} terms to differentiate (elements times terms)"
    if reason is None:
        try:
            f = symbolic.function_exprs(graph, out, syms.plain_atom, deadline)
            ours = symbolic.jacobian_exprs(jac, names, syms.plain_atom, deadline)
        except RecursionError:
            reason = "SymPy ran out of stack building the expressions"
        except symbolic.OutOfTime:
            reason = f"SymPy's {SYMPY_SECONDS:g} s ran out building the expressions"
    if reason is not None:
        for name in names:
            elements = out_port.size * graph.inputs[name].size
            result[name] = {"status": "skipped", "reason": reason, "elements": elements,
                            "counts": {"skipped": elements}, "mismatches": []}
            shown.update(elements)
        return result
    symbols = [s for n in names for s in syms.plain[n]]
    npoints = next(iter(x0.values())).shape[0]
    points = [[float(x0[n][p, k]) for n in names for k in range(graph.inputs[n].size)]
              for p in range(npoints)]
    for name in names:
        port = graph.inputs[name]
        jac_port = jac.outputs[autodiff.d_name(name)]
        with np.errstate(all="ignore"):
            block = np.abs(np.where(np.isfinite(jac_values[name]), jac_values[name], 0.0))
            scales = block.max(axis=(1, 2)) if block.size else np.zeros(npoints)
        decided: dict[tuple, tuple] = {}  # (s, t) -> (status, detail, theirs)
        pending = []  # elements left to the 50-digit evaluation: (s, t, theirs, size)
        for s in range(out_port.size):
            counted = len(decided)
            for t in range(port.size):
                size = jac_sizes[jac_port.ids[s * port.size + t]] + sizes[out_port.ids[s]]
                theirs = None
                if size > SIMPLIFY_LIMIT and time.monotonic() > deadline:
                    decided[s, t] = ("skipped", f"SymPy's {SYMPY_SECONDS:g} s ran out", None)
                    continue
                try:
                    theirs = oracle_diff(f[s], syms.plain[name][t])
                    if has_unevaluated(theirs):
                        decided[s, t] = ("skipped", f"sympy.diff left {theirs}", theirs)
                        continue
                    how = _quick_proof(ours[name][s * port.size + t] - theirs, size)
                except RecursionError:
                    decided[s, t] = ("skipped", "SymPy ran out of stack", theirs)
                    continue
                if how is not None:
                    decided[s, t] = ("proven", how, theirs)
                else:
                    pending.append((s, t, theirs, size))
            shown.update(len(decided) - counted)  # the rest are counted as they are decided
        exprs = [e for s, t, theirs, _ in pending
                 for e in (ours[name][s * port.size + t], theirs)]
        values = evaluate(exprs, symbols, points) if pending else []
        for j, (s, t, theirs, size) in enumerate(pending):
            worst = max((relative_difference(row[2 * j], row[2 * j + 1], float(scale))
                         for row, scale in zip(values, scales, strict=True)), default=0.0)
            try:
                status, detail = decide(ours[name][s * port.size + t], theirs, worst, size,
                                        late=time.monotonic() > deadline)
            except RecursionError:
                status, detail = "skipped", "SymPy ran out of stack"
            decided[s, t] = (status, detail, theirs)
            shown.update()
        counts: dict[str, int] = {}
        mismatches = []
        skip_reasons = []
        for (s, t), (status, detail, theirs) in sorted(decided.items()):
            counts[status] = counts.get(status, 0) + 1
            element = _element(out_port.shape, port.shape, s, t)
            if status == "mismatch" and len(mismatches) < MAX_REPORTED:
                mismatches.append({"element": element,
                                   "output_index": list(symbolic.unravel(s, out_port.shape)),
                                   "input_index": list(symbolic.unravel(t, port.shape)),
                                   "ours": short(ours[name][s * port.size + t]),
                                   "sympy": short(theirs), "detail": detail})
            elif status == "skipped" and len(skip_reasons) < 3:
                skip_reasons.append(f"{element}: {detail}")
        status = max(counts, key=RANK.__getitem__) if counts else "proven"
        entry = {"status": status, "elements": out_port.size * port.size, "counts": counts,
                 "mismatches": mismatches}
        if skip_reasons:
            entry["reason"] = "; ".join(skip_reasons)
        result[name] = entry
    return result


def _quick_proof(diff: sp.Expr, size: int) -> str | None:
    """The difference is 0 at once, or after `expand` (what proves polynomials such as
    determinants); a Piecewise is left to `_prove_zero`, which handles it case by case."""
    if diff == 0:
        return "identical"
    if size <= EXPAND_LIMIT and not diff.has(sp.Piecewise) and sp.expand(diff) == 0:
        return "expand"
    return None


def decide(ours: sp.Expr, theirs: sp.Expr, worst: float, size: int,
           late: bool = False) -> tuple[str, str]:
    """Status of an element whose largest relative difference at the points is `worst`;
    no `simplify` where `late` (SymPy's time ran out)."""
    note = f"relative difference {worst:.3g} at {DIGITS} digits"
    if worst > ROUNDING_RTOL:
        return "mismatch", note
    if size <= SIMPLIFY_LIMIT and not late and worst <= PROOF_RTOL:
        how = _prove_zero(ours - theirs)
        if how is not None:
            return "proven", how
    if worst <= EXACT_RTOL:
        return "numeric50", note
    return "rounding", note


def _prove_zero(diff: sp.Expr) -> str | None:
    """How SymPy shows that `diff` is 0, or None.

    `simplify` is slow on Piecewise (tens of seconds for the derivative of a max over five
    elements), so a Piecewise is split into cases instead: every truth assignment to the
    relations in its conditions collapses it into a plain expression, and each of those must
    be 0. An assignment that no point satisfies is checked as well, which asks more than
    needed; where that fails the element stays "numeric50".
    """
    if not diff.has(sp.Piecewise):
        if sp.count_ops(diff) <= SIMPLIFY_LIMIT and sp.simplify(diff) == 0:
            return "simplify"
        return None
    relations = sorted(diff.atoms(sp.core.relational.Relational), key=sp.default_sort_key)
    if len(relations) > CASES_LIMIT:
        return None
    for values in itertools.product((sp.true, sp.false), repeat=len(relations)):
        case = diff.xreplace(dict(zip(relations, values, strict=True)))
        if case.has(sp.Piecewise) or not _plain_zero(case):
            return None
    return f"{2 ** len(relations)} cases"


def _plain_zero(expr: sp.Expr) -> bool:
    if expr == 0 or sp.expand(expr) == 0:
        return True
    return sp.count_ops(expr) <= CASE_SIMPLIFY_LIMIT and sp.simplify(expr) == 0
