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

Which versions exist is the caller's to say (`native.vector_math`: those of the process's
libmvec that this CPU runs); with none, the text is unchanged. glibc documents its vector
functions to 4 ulp (libm's scalar ones are within 1); a loop's elements may take either.
"""

from __future__ import annotations

import re

_CALL = re.compile(r"call (double|float) @([\w.]+)\(([^)]*)\)")
_INTRINSIC = re.compile(r"llvm\.(\w+)\.f(?:64|32)")
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
