"""Calls of libm that LLVM's loop vectoriser may widen into calls of a vector math library.

A loop kept as a loop (a region) runs its body once per element; its `exp`, `log`, `sin`,
`pow`... are scalar calls, and LLVM's loop vectoriser widens a call only when it knows a
vector version of it. The emitter's text calls intrinsics (`@llvm.exp.f64`) or libm by name;
`widen` calls instead a name of our own (`@diffdsl_vm_exp`, which the JIT binds to libm's
`exp`, so each element left over after the widened iterations gets libm's value) and lists the
vector versions beside it, in the attribute LLVM reads for them (the vector function ABI:
`_ZGVdN4v_diffdsl_vm_exp(_ZGVdN4v_exp)` says that four lanes of it are glibc's AVX2 `exp`).
The calls must not stay libm's own names: LLVM turns a known libm call into its intrinsic,
and the attribute is lost with the call.

Every call of a function takes the same version's value. One vector version is listed per
function (`one_version`), and the JIT binds `@diffdsl_vm_exp` not to libm's `exp` but to
`@diffdsl_lane_exp` (`lanes`): lane 0 of that version applied to the argument in every lane.
So an element left over after the widened iterations, a loop the vectoriser leaves scalar, a
loop split over threads at another element and straight-line code beside the loops all give
an element the value a widened lane gives it. Two loops that compute one body, the maximum
and the shifted sum of a logsumexp, then agree to the bit; with libm in one and libmvec in
the other, `exp(v - max)` of a `v` near 1e35 was `exp` of an ulp of it, infinity.

Which versions exist is the caller's to say (`native.vector_math`: those of the process's
libmvec that this CPU runs); with none, the text is unchanged and the calls are libm's. glibc
documents its vector functions to 4 ulp (libm's scalar ones are within 1).
"""

from __future__ import annotations

import re

_CALL = re.compile(r"call (double|float) @([\w.]+)\(([^)]*)\)")
_INTRINSIC = re.compile(r"llvm\.(\w+)\.f(?:64|32)")
_SYMBOL = re.compile(r"_ZGV\wN\d+(v+)_\w+")  # the vector function ABI's name: a v an argument
_BITS = {"b": 128, "c": 256, "d": 256, "e": 512}  # a vector's width, by ISA letter
_FIRST_GROUP = 9000  # attribute groups of our own; the emitter writes attributes inline


def scalar_name(callee: str, t: str) -> str:
    """The libm name a call means: `llvm.exp.f32` is `expf`; libm names are spelled already
    with their float suffix."""
    m = _INTRINSIC.fullmatch(callee)
    if m is None:
        return callee
    return m.group(1) + ("f" if t == "float" else "")


def widen(text: str, variants: dict[str, tuple[tuple[str, str, int], ...]]) -> str:
    """`text` with each call of a libm function that has vector versions (`variants`: libm
    name -> (ISA letter, vector symbol, lanes) for each) calling `@diffdsl_vm_NAME`, with the
    declarations and attributes that let the vectoriser use them."""
    used: dict[str, tuple[int, str, int]] = {}  # libm name -> (group, type, arguments)

    def call(m: re.Match) -> str:
        t, callee, args = m.groups()
        name = scalar_name(callee, t)
        if name not in variants:
            return m.group(0)
        group = used.setdefault(name, (_FIRST_GROUP + len(used), t, args.count(",") + 1))[0]
        return f"call {t} @diffdsl_vm_{name}({args}) #{group}"

    text = _CALL.sub(call, text)
    if not used:
        return text
    lines, vectors = [], []
    for name, (group, t, arity) in used.items():
        params = ", ".join([t] * arity)
        lines.append(f"declare {t} @diffdsl_vm_{name}({params}) nounwind willreturn "
                     "memory(none)")
        abi = []
        for isa, symbol, lanes in variants[name]:
            vector = f"<{lanes} x {t}>"
            lines.append(f"declare {vector} @{symbol}({', '.join([vector] * arity)}) "
                         "nounwind willreturn memory(none)")
            abi.append(f"_ZGV{isa}N{lanes}{'v' * arity}_diffdsl_vm_{name}({symbol})")
            vectors.append(symbol)
        lines.append(f'attributes #{group} = {{ "vector-function-abi-variant"='
                     f'"{",".join(abi)}" }}')
    # Kept until the vectoriser runs: the optimiser drops declarations nothing calls yet.
    lines.append(f"@llvm.compiler.used = appending global [{len(vectors)} x ptr] "
                 f"[{', '.join('ptr @' + v for v in vectors)}], section \"llvm.metadata\"")
    return text + "\n".join(lines) + "\n"


def one_version(found: list[tuple[str, str, int]]) -> tuple[tuple[str, str, int], ...]:
    """The one vector version of a function that kernels use, of those this CPU runs (ISA
    letter, symbol, lanes): AVX2's where it runs, the width LLVM's cost model prefers even on
    CPUs with AVX-512; else the first (SSE4's)."""
    for version in found:
        if version[0] == "d":
            return (version,)
    return tuple(found[:1])


def lanes(variants: dict[str, tuple[tuple[str, str, int], ...]]) -> str:
    """A module defining `@diffdsl_lane_NAME` for each function of `variants` (libm name ->
    its one version): the version called with the argument in every lane (not left undefined:
    a lane out of range would take the version's slow path), lane 0 returned."""
    out = []
    for name, ((isa, symbol, count),) in variants.items():
        t = "double" if count * 64 == _BITS[isa] else "float"
        arity = len(_SYMBOL.fullmatch(symbol).group(1))
        vector = f"<{count} x {t}>"
        params = ", ".join(f"{t} %a{i}" for i in range(arity))
        out.append(f"declare {vector} @{symbol}({', '.join([vector] * arity)})")
        out.append(f"define {t} @diffdsl_lane_{name}({params}) {{")
        for i in range(arity):
            out.append(f"  %i{i} = insertelement {vector} poison, {t} %a{i}, i64 0")
            out.append(f"  %s{i} = shufflevector {vector} %i{i}, {vector} poison, "
                       f"<{count} x i32> zeroinitializer")
        args = ", ".join(f"{vector} %s{i}" for i in range(arity))
        out += [f"  %r = call {vector} @{symbol}({args})",
                f"  %o = extractelement {vector} %r, i64 0", f"  ret {t} %o", "}"]
    return "\n".join(out) + "\n"
