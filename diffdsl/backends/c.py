"""Print a graph as C99 source that needs only the C library and libm (`diffdsl export --c`).

The C mirrors the LLVM emitter (llvm.py) statement for statement: the same layout of the
graph (`llvm._Layout`: segments of `SEGMENT` nodes, scratch slots for values a later segment
reads, each region's areas), the same order of operations and the same libm calls, so the
compiled C computes what the JIT kernels compute, and needs the same scratch. Each kernel
`NAME` defines one public function of the kernels' ABI,

    void NAME_rows(double *const *ports, const int64_t *strides, int64_t begin, int64_t end,
                   double *scratch)

rows begin..end: `ports[k]` is the data of port k (the inputs in declaration order, then the
outputs), `strides[k]` its elements per row (0: one value shared by all rows); `scratch` holds
`scratch` elements (the second value `kernel` returns). Everything else is `static`. Names
are stable: `v12` is node 12, `NAME_seg0` the first segment, `NAME_b12_run` the body of the
region at node 12 (regions: c_loops.py).

No fast-math: the C compiler must keep 0.0 and -0.0 apart, IEEE's NaNs and the order of the
sums, as the LLVM emitter does (compile with -O2, not -Ofast; -ffp-contract=off is C99's
default under -std=c99 with GCC).
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import UsageError
from ..graph.ir import Graph, verify
from .c_loops import loop
from .llvm import _Layout as Layout

TYPES = {"float64": ("double", ""), "float32": ("float", "f")}
SIZES = {"float64": 8, "float32": 4}
# Functions the C file defines when a kernel uses the op (`{t}` the float type, `{f}` libm's
# suffix): spelled as the LLVM rows spell them, so NaN, inf and -0.0 come out the same.
HELPERS = {
    # A select without a branch: a condition that depends on the data (which centroid is
    # nearest) is mispredicted half the time, and gcc turns `c ? a : b` on doubles into a
    # jump (measured: the k-means gradient ran 1.8 times as long as LLVM's `select`).
    "select": (
        "static {t} dd_select{f}({t} c, {t} a, {t} b)\n{{\n"
        "    {u} x, y, m = ({u})0 - ({u})(c != 0);  /* all ones where c is true (NaN too) */\n"
        "    memcpy(&x, &a, sizeof x);\n    memcpy(&y, &b, sizeof y);\n"
        "    x = (x & m) | (y & ~m);\n    memcpy(&a, &x, sizeof a);\n    return a;\n}}"),
    "sign": "static {t} dd_sign{f}({t} x) {{ return x > 0 ? 1 : (x < 0 ? -1 : x + 0); }}",
    "logaddexp": (
        "static {t} dd_logaddexp{f}({t} a, {t} b) {{\n"
        "    {t} d = a - b;\n"
        "    {t} z = a == b ? 0 : d;  /* equal infinities: 0, not inf - inf */\n"
        "    return (d > 0 ? a : b) + log1p{f}(exp{f}(-fabs{f}(z)));\n}}"),
}


def _libm(name: str) -> str:
    return f"{name}{{f}}({{0}})"


# Each op as a C expression of its operands {0}, {1}, {2} (names or literals). Comparisons
# are C's: ordered (false on NaN), `!=` unordered, as the LLVM rows' `fcmp`s.
C_OPS = {
    "neg": "-{0}",
    **{name: _libm(name) for name in (
        "exp", "log", "log1p", "expm1", "log2", "log10", "sqrt", "cbrt", "sin", "cos", "tan",
        "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "floor",
        "ceil", "erf", "lgamma")},
    "abs": "fabs{f}({0})",
    "sign": "dd_sign{f}({0})",
    "not": "({0} == 0)",
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "pow": "pow{f}({0}, {1})",
    "atan2": "atan2{f}({0}, {1})",
    "hypot": "hypot{f}({0}, {1})",
    "logaddexp": "dd_logaddexp{f}({0}, {1})",
    "min": "dd_select{f}({0} <= {1}, {0}, {1})",
    "max": "dd_select{f}({0} >= {1}, {0}, {1})",
    "lt": "({0} < {1})",
    "le": "({0} <= {1})",
    "gt": "({0} > {1})",
    "ge": "({0} >= {1})",
    "eq": "({0} == {1})",
    "ne": "({0} != {1})",
    "and": "(({0} != 0) & ({1} != 0))",
    "or": "(({0} != 0) | ({1} != 0))",
    "select": "dd_select{f}({0}, {1}, {2})",
}


def literal(x: float, dtype: str) -> str:
    """An exact C constant: a hexadecimal float (a float32 as the float it rounds to)."""
    if dtype == "float32":
        with np.errstate(over="ignore"):
            x = float(np.float32(x))
    if math.isnan(x):
        text = "NAN"
    elif math.isinf(x):
        text = "INFINITY"
    else:
        text = float.hex(abs(x)) + ("f" if dtype == "float32" else "")
    if math.copysign(1.0, x) < 0 and not math.isnan(x):
        return f"(-{text})"
    return text


def kernel(graph: Graph, name: str, dtype: str = "float64") -> tuple[str, int, list[str]]:
    """C text defining `NAME_rows` for `graph` (and its static helpers), the scratch it needs
    and the helper functions it uses (`HELPERS` keys, defined once per file by `helpers`)."""
    if dtype not in TYPES:
        raise UsageError(f"unknown dtype '{dtype}'; choose float64 or float32")
    verify(graph)
    unit = _Unit(name, dtype)
    plan = unit.function(graph, name + "_")
    n_ports = len(graph.inputs) + len(graph.outputs)
    t = TYPES[dtype][0]
    calls = [f"        {name}_seg{k}(p, scratch);" for k in range(len(plan.segments))]
    lines = unit.lines + [
        f"void {name}_rows({t} *const *ports, const int64_t *strides, int64_t begin, "
        f"int64_t end, {t} *scratch)", "{",
        f"    {t} *p[{max(n_ports, 1)}];",
        "    for (int64_t r = begin; r < end; ++r) {",
        f"        for (int k = 0; k < {n_ports}; ++k)",
        "            p[k] = ports[k] + r * strides[k];",
        *calls, "    }", "}", ""]
    return "\n".join(unit.tables + lines), plan.scratch, sorted(unit.helpers)


def _helper(op: str) -> str | None:
    """The helper function op's spelling calls, if any (min and max are selects)."""
    return "select" if op in ("min", "max") else op if op in HELPERS else None


def helpers(used, dtype: str) -> str:
    """The definitions of the helper functions `used` (names of `HELPERS`)."""
    t, f = TYPES[dtype]
    u = "uint64_t" if dtype == "float64" else "uint32_t"
    return "".join(HELPERS[h].format(t=t, f=f, u=u) + "\n\n" for h in sorted(set(used)))


class _Unit:
    """The static functions of one kernel: the graph's segments and each region's body
    (named by the path of region nodes that leads to it, as llvm._Module names them)."""

    def __init__(self, name: str, dtype: str):
        self.name = name
        self.dtype = dtype
        t, f = TYPES[dtype]
        self.spell = {op: text.replace("{f}", f) for op, text in C_OPS.items()}
        self.lines: list[str] = []
        self.tables: list[str] = []
        self.helpers: set[str] = set()

    def function(self, graph: Graph, prefix: str) -> Layout:
        t = TYPES[self.dtype][0]
        plan = Layout(graph)
        self.helpers |= {_helper(node.op) for node in graph.nodes} - {None}
        for i, node in enumerate(graph.nodes):
            if node.op == "region":
                inner = self.function(node.attr.body, f"{prefix}b{i}_")
                plan.place_region(i, node.attr, inner.scratch)
                calls = [f"    {prefix}b{i}_seg{k}(p, s);" for k in range(len(inner.segments))]
                self.lines += [f"static void {prefix}b{i}_run({t} *const *p, {t} *s)", "{",
                               *calls, "}", ""]
        for k, count, table in plan.fills:
            if table is not None:
                values = ", ".join(literal(x, self.dtype) for x in table)
                self.tables.append(f"static const {t} {prefix}table{k}[{count}] = "
                                   f"{{{values}}};\n")
        for k, (start, stop) in enumerate(plan.segments):
            body = _Segment(self, graph, plan, prefix).lines(start, stop,
                                                             k == len(plan.segments) - 1)
            self.lines += [f"static void {prefix}seg{k}({t} *const *p, {t} *s)", "{",
                           *("    " + line for line in body), "}", ""]
        return plan


class _Segment:
    """The statements of one segment: `value(i)` names node i, loading it once where this
    segment first reads it (an input, a slot, a region's value)."""

    def __init__(self, unit: _Unit, graph: Graph, plan: Layout, prefix: str):
        self.unit, self.graph, self.plan, self.prefix = unit, graph, plan, prefix
        self.t = TYPES[unit.dtype][0]
        self.out: list[str] = []
        self.here: set[int] = set()

    def value(self, i: int) -> str:
        node = self.graph.nodes[i]
        if node.op == "const":
            return literal(node.attr, self.unit.dtype)
        if i not in self.here:
            self.here.add(i)
            if node.op == "part":
                where = f"s[{self.plan.areas[node.args[0]]['buf'] + node.attr}]"
            elif i in self.plan.source:
                k, e = self.plan.source[i]
                where = f"p[{k}][{e}]"
            else:
                where = f"s[{self.plan.slot[i]}]"
            self.out.append(f"const {self.t} v{i} = {where};")
        return f"v{i}"

    def store(self, i: int) -> None:
        for k, e in self.plan.stores.get(i, ()):
            self.out.append(f"p[{k}][{e}] = {self.value(i)};")

    def lines(self, start: int, stop: int, last: bool) -> list[str]:
        graph, plan, t = self.graph, self.plan, self.t
        size = SIZES[self.unit.dtype]
        if start == 0:
            for k, count, table in plan.fills:
                if table is None:
                    self.out.append(f"memset(p[{k}], 0, {count * size});")
                else:
                    self.out.append(f"memcpy(p[{k}], {self.prefix}table{k}, {count * size});")
        for i in range(start, stop):
            node = graph.nodes[i]
            if node.op in ("input", "const", "array"):
                continue
            if node.op == "part":
                self.store(i)
                continue
            if node.op == "region":
                self.out += loop(graph, plan, i, self.value, t, self.prefix,
                                 literal(-0.0, self.unit.dtype))
                continue
            spell = self.unit.spell.get(node.op)
            if spell is None:
                raise UsageError(f"the C export has no spelling of op '{node.op}'")
            self.out.append(f"const {t} v{i} = "
                            + spell.format(*[self.value(a) for a in node.args]) + ";")
            self.here.add(i)
            if i in plan.slot:
                self.out.append(f"s[{plan.slot[i]}] = v{i};")
            self.store(i)
        if last:
            for i in plan.late:
                self.store(i)
            for k, e, r, first, count in plan.copies:
                self.out.append(f"memcpy(p[{k}] + {e}, s + {plan.areas[r]['buf'] + first}, "
                                f"{count * size});")
            for k, e, r, first, count, step, by, width in plan.strided:  # blocks at a step
                self.out.append(f"for (long m = 0; m < {count}; m++) memcpy(p[{k}] + {e} + "
                                f"m * {step}, s + {plan.areas[r]['buf'] + first} + m * {by}, "
                                f"{width * size});")
        return self.out
