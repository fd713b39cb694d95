"""The C interface of exported functions (`diffdsl export`): the header that documents the
ABI, and the wrappers that call a kernel's `NAME_rows` on one point or on a batch.

The header and the wrappers are the same for the C source (`--c`) and the shared library
(`--shared`, whose `NAME_rows` are the JIT's object code): a caller cannot tell them apart.
Each exported function NAME (a graph) gets

    int  NAME(const double *in..., double *out...)                  one point
    int  NAME_batch(int64_t rows, const double *in..., double *out...)   rows, all batched
    void NAME_rows(double *const *ports, const int64_t *strides, int64_t begin, int64_t end,
                   double *scratch)                                 the kernels' own ABI

with `NAME_SCRATCH` (elements of scratch for `NAME_rows`) and `NAME_PORTS`. The wrappers
return 0, or -1 when the scratch cannot be allocated.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import UsageError
from ..graph.ir import Graph
from .c import TYPES

# A point's scratch up to this many elements lives on the stack; more is allocated.
STACK_SCRATCH = 4096
C_KEYWORDS = set("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while _Bool _Complex _Imaginary int64_t""".split())
# The wrappers' own variables: a port never takes these names.
_LOCALS = {"dd_rows", "dd_ports", "dd_strides", "dd_s", "dd_local"}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Function:
    """One exported function: its C name, its graph and a line saying what it computes."""

    name: str
    graph: Graph
    doc: str


def check_name(name: str) -> str:
    """`name` if it is a C identifier a prefix can start, else a UsageError."""
    if not _IDENTIFIER.match(name) or name in C_KEYWORDS or name.startswith("dd_"):
        raise UsageError(f"'{name}' cannot name exported C functions",
                         hint="give a C identifier (letters, digits and _, not starting with "
                              "a digit or dd_), e.g. --name det3")
    return name


def c_identifier(text: str) -> str:
    """A C identifier made of `text` (a file's stem): other characters become `_`."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    if not name or name[0].isdigit() or name.startswith("dd_") or name in C_KEYWORDS:
        name = "f_" + name
    return name


def port_names(graph: Graph) -> list[str]:
    """Parameter names of the graph's ports (inputs, then outputs), distinct C identifiers:
    "d:A:B" is d_A_B, "@seed" seed, "@t:x" t_x; a clash or a keyword gets a `_` more."""
    taken: set[str] = set(_LOCALS)
    names = []
    for raw in list(graph.inputs) + list(graph.outputs):
        name = re.sub(r"[^A-Za-z0-9_]", "_", raw.lstrip("@")) or "port"
        while name in taken or name in C_KEYWORDS:
            name += "_"
        taken.add(name)
        names.append(name)
    return names


def _shape(shape: tuple) -> str:
    return "".join(f"[{n}]" for n in shape) or " (one element)"


def declarations(fn: Function, dtype: str, scratch: int) -> str:
    """The header's part for one function: what it computes, its ports, its prototypes."""
    t = TYPES[dtype][0]
    g = fn.graph
    names = port_names(g)
    ports = list(g.inputs.items()) + list(g.outputs.items())
    upper = fn.name.upper()
    lines = [f"/* {fn.name}: {fn.doc}", " *"]
    for k, ((raw, port), name) in enumerate(zip(ports, names, strict=True)):
        what = "in " if k < len(g.inputs) else "out"
        lines.append(f" *   {what} ports[{k}] {name}: {t}{_shape(port.shape)}, {port.size} "
                     f"element{'s' * (port.size != 1)} a row, row-major"
                     + (f" ('{raw}')" if raw != name else ""))
    lines += [" */", f"#define {upper}_PORTS {len(ports)}",
              f"#define {upper}_SCRATCH {scratch}",
              f"int {fn.name}({_params(g, names, t)});",
              f"int {fn.name}_batch(int64_t dd_rows, {_params(g, names, t)});",
              f"void {fn.name}_rows({t} *const *ports, const int64_t *strides, int64_t begin, "
              "int64_t end, {t} *scratch);".replace("{t}", t), ""]
    return "\n".join(lines)


def _params(g: Graph, names: list[str], t: str) -> str:
    n_in = len(g.inputs)
    return ", ".join((f"const {t} *" if k < n_in else f"{t} *") + name
                     for k, name in enumerate(names)) or "void"


def wrappers(fn: Function, dtype: str, scratch: int) -> str:
    """`NAME` and `NAME_batch`, calling `NAME_rows`."""
    t = TYPES[dtype][0]
    g = fn.graph
    names = port_names(g)
    n_in = len(g.inputs)
    sizes = [port.size for port in list(g.inputs.values()) + list(g.outputs.values())]
    ports = ", ".join(f"({t} *){n}" if k < n_in else n for k, n in enumerate(names))
    count = max(len(names), 1)
    port_array = f"    {t} *dd_ports[{count}] = {{{ports or '0'}}};"
    if scratch <= STACK_SCRATCH:
        point_scratch = [f"    {t} dd_s[{scratch}];"]
        free = []
    else:
        point_scratch = [f"    {t} *dd_s = ({t} *)malloc(sizeof({t}) * {scratch});",
                         "    if (!dd_s)", "        return -1;"]
        free = ["    free(dd_s);"]
    return "\n".join([
        f"int {fn.name}({_params(g, names, t)})", "{", port_array,
        f"    static const int64_t dd_strides[{count}] = {{0}};", *point_scratch,
        f"    {fn.name}_rows(dd_ports, dd_strides, 0, 1, dd_s);", *free, "    return 0;", "}",
        "",
        f"int {fn.name}_batch(int64_t dd_rows, {_params(g, names, t)})", "{", port_array,
        f"    const int64_t dd_strides[{count}] = {{{', '.join(map(str, sizes)) or '0'}}};",
        f"    {t} *dd_s = ({t} *)malloc(sizeof({t}) * {scratch});",
        "    if (!dd_s)", "        return -1;",
        f"    {fn.name}_rows(dd_ports, dd_strides, 0, dd_rows, dd_s);",
        "    free(dd_s);", "    return 0;", "}", ""])


def header(guard: str, source: str, dtype: str, parts: list[str]) -> str:
    """The whole header: the ABI in words, then each function's `declarations`."""
    t = TYPES[dtype][0]
    return "\n".join([
        f"/* Generated by diffdsl export from {source}: do not edit.",
        " *",
        f" * Every array is {t}, C-contiguous (row-major). For each function NAME below:",
        " *",
        f" *   int NAME(const {t} *in..., {t} *out...)",
        " *       one point: the inputs, then the outputs, in the order listed. Returns 0,",
        " *       or -1 when its scratch could not be allocated.",
        f" *   int NAME_batch(int64_t rows, const {t} *in..., {t} *out...)",
        " *       `rows` points: every array holds `rows` rows of its port's elements, one",
        " *       row after another (in[r * size + e]). Runs serially; returns as NAME.",
        f" *   void NAME_rows({t} *const *ports, const int64_t *strides, int64_t begin,",
        f" *                  int64_t end, {t} *scratch)",
        " *       rows begin..end-1, the kernels' own ABI: ports[k] is port k's data (the",
        " *       inputs, then the outputs), strides[k] its elements per row (0: one value",
        " *       shared by every row: an input the same for all rows), scratch an array of",
        " *       NAME_SCRATCH elements of this caller's own. No function keeps any state:",
        " *       threads may run slices of the rows at once, each with its own scratch.",
        " */",
        f"#ifndef {guard}", f"#define {guard}", "", "#include <stdint.h>", "",
        "#ifdef __cplusplus", 'extern "C" {', "#endif", "", *parts,
        "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {guard} */", ""])
