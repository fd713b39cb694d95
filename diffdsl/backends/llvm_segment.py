"""One segment of a graph as the body of an LLVM function (llvm.py): each node one
instruction or a few, spelled by its row's `ll` field in `ops.OPS`; a region node a loop
(llvm_loops, or llvm_spread where it may be split over threads); the outputs stored where
they are computed, or copied after their loops."""

from __future__ import annotations

import functools
import struct

import numpy as np

from ..graph.ir import Graph
from ..graph.ops import OPS, POW_CONST_LL
from .llvm_blocks import nests, strided_loop
from .llvm_loops import add_loop, loop
from .llvm_powers import power_lines
from .llvm_spread import spread_loop

TYPES = {"float64": ("double", "f64", ""), "float32": ("float", "f32", "f")}


def literal(x: float, dtype: str) -> str:
    """An exact LLVM constant: the IEEE bits in hex (a float32 as the double it rounds to)."""
    if dtype == "float32":
        with np.errstate(over="ignore"):
            x = float(np.float32(x))  # rounded as a float32 program rounds it; huge: inf
    return "0x%016X" % struct.unpack("<Q", struct.pack("<d", x))[0]


def spellings(dtype: str) -> dict[str, str]:
    """Each op's `ll` text for `dtype`, operands left as {0}, {1}, {2} and the result {r}."""
    t, suffix, libm = TYPES[dtype]
    texts = {name: row.ll for name, row in OPS.items() if row.ll}
    texts["pow const"] = POW_CONST_LL  # `x ** c`: `_segment` picks it
    return {name: text.replace("{t}", t).replace("{s}", suffix).replace("{f}", libm)
            for name, text in texts.items()}


def segment(graph: Graph, plan, start: int, stop: int, last: bool,
            dtype: str, spell: dict, prefix: str = "") -> list[str]:
    t = TYPES[dtype][0]
    out: list[str] = []
    block = ["entry"]  # the block being written: a region's loop ends in a block of its own
    here: set[int] = set()  # nodes with a name in this segment
    ports: set[int] = set()

    def port(k: int) -> str:
        if k not in ports:
            ports.add(k)
            out.append(f"%p{k}.a = getelementptr inbounds ptr, ptr %p, i64 {k}")
            out.append(f"%p{k} = load ptr, ptr %p{k}.a")
        return f"%p{k}"

    def value(i: int) -> str:
        node = graph.nodes[i]
        if node.op == "const":
            return literal(node.attr, dtype)
        if i not in here:  # an input, or a value from an earlier segment: load it once
            here.add(i)
            if node.op == "part":
                base, e = "%s", plan.areas[node.args[0]]["buf"] + node.attr
            elif i in plan.source:
                k, e = plan.source[i]
                base = port(k)
            else:
                base, e = "%s", plan.slot[i]
            out.append(f"%v{i}.ptr = getelementptr inbounds {t}, ptr {base}, i64 {e}")
            out.append(f"%v{i} = load {t}, ptr %v{i}.ptr")
        return f"%v{i}"

    def store(i: int) -> None:
        for k, e in plan.stores.get(i, ()):
            v = value(i)
            base = port(k)
            out.append(f"%o{k}.{e} = getelementptr inbounds {t}, ptr {base}, i64 {e}")
            if k in plan.adding:
                out.extend([f"%o{k}.{e}.u = load {t}, ptr %o{k}.{e}",
                            f"%o{k}.{e}.v = fadd {t} %o{k}.{e}.u, {v}"])
                v = f"%o{k}.{e}.v"
            out.append(f"store {t} {v}, ptr %o{k}.{e}")

    if start == 0:
        size = 8 if dtype == "float64" else 4
        for k, count, table in plan.fills:
            base = port(k)
            if table is None:
                out.append(f"call void @llvm.memset.p0.i64(ptr {base}, i8 0, "
                           f"i64 {count * size}, i1 false)")
            else:
                out.append(f"call void @llvm.memcpy.p0.p0.i64(ptr {base}, "
                           f"ptr @{prefix.replace('.', '_')}table{k}, "
                           f"i64 {count * size}, i1 false)")
    for i in range(start, stop):
        node = graph.nodes[i]
        if node.op in ("input", "const", "array"):  # read where they lie, when used
            continue
        if node.op == "part":
            store(i)
            continue
        if node.op == "region":
            zero = literal(-0.0, "float64")
            spread = None if i not in plan.spread else functools.partial(
                spread_loop, plan, node.attr, i, t, prefix, zero, "%x")
            out.extend(loop(graph, plan, i, value, port, block, t, prefix, zero, spread))
            continue
        if i in plan.powers:
            args = [value(a) for a in node.args]
            out.extend(power_lines(i, args[0], port(plan.power_port), plan.powers[i],
                                   spell["pow"].format(*args, r=f"%v{i}.p"), t, block))
        else:
            text = spell["pow const" if node.op == "pow" and
                         graph.nodes[node.args[1]].op == "const" else node.op]
            out.append(text.format(*[value(a) for a in node.args], r=f"%v{i}"))
        here.add(i)
        if i in plan.slot:
            out.append(f"%v{i}.ptr = getelementptr inbounds {t}, ptr %s, i64 {plan.slot[i]}")
            out.append(f"store {t} %v{i}, ptr %v{i}.ptr")
        store(i)
    if last:
        for i in plan.late:
            store(i)
        size = 8 if dtype == "float64" else 4
        for n, (k, e, r, start, count) in enumerate(plan.copies):
            out.append(f"%cp{n}.to = getelementptr inbounds {t}, ptr {port(k)}, i64 {e}")
            out.append(f"%cp{n}.from = getelementptr inbounds {t}, ptr %s, "
                       f"i64 {plan.areas[r]['buf'] + start}")
            if k in plan.adding:
                out += add_loop(f"cp{n}", f"%cp{n}.to", f"%cp{n}.from", 0, count, t, block)
                continue
            out.append(f"call void @llvm.memcpy.p0.p0.i64(ptr %cp{n}.to, ptr %cp{n}.from, "
                       f"i64 {count * size}, i1 false)")
        for n, (k, e, r, start, count, steps, runs) in enumerate(nests(plan.strided)):
            out += strided_loop(f"sc{n}", port(k), plan.areas[r]["buf"] + start, e, count,
                                steps, t, block, runs)
    # A region's locals are allocated once, in the entry block, where the optimiser's SROA
    # looks for them (llvm_loops.loop).
    allocas = [line for line in out if " = alloca " in line]
    return allocas + [line for line in out if " = alloca " not in line] if allocas else out
