"""Print a graph as LLVM IR text (DESIGN.md, decision 5): the one emitter of the kernels.

Each node is one instruction (or a few) spelled by its row's `ll` field in `ops.OPS`; the
emitter adds only the plumbing. The module defines, for one dtype:

    @diffdsl_rows(ptr ports, ptr strides, i64 begin, i64 end, ptr scratch)
        rows begin..end: `ports[k]` is the data of port k (the inputs in declaration order,
        then the outputs), `strides[k]` its elements per row (0: one value shared by all rows)
    @diffdsl_point(self, args, nargs)
        one row, as a CPython builtin taking its arguments the METH_FASTCALL way: the arrays
        of the ports and a scratch array, each a NumPy array object whose data pointer is
        read at `data_offset` (found and checked at run time by the backend), so a call from
        Python costs what a call of a builtin function costs and converts nothing
    @diffdsl_batch(self, args, nargs)
        `diffdsl_rows` as such a builtin: the ports' arrays, an int64 array of their steps,
        the scratch and an int64 array [begin, end] (the GIL is held: for batches run on one
        thread; threads call `diffdsl_rows` through ctypes, which releases it)
    @diffdsl_spread(ptr ports, ptr scratch, ptr context)
        one row whose long loops split over the pool's threads (llvm_spread), called through
        ctypes; `@diffdsl_spread_bytes()` says the memory each slice of theirs needs

Big graphs stay fast to compile when shaped for the code generator: the body is cut into
non-inlined segments of about `SEGMENT` instructions (a node and its stores), and a value
used in a later segment goes through a slot of the scratch array, so no live range crosses a
segment and the register allocator works on short ranges. Inputs are loaded where a segment
first uses them; an output is stored where it is computed. Names are stable: `%v12` is node
12, in whichever segment holds it; `%v12.ptr` is its address in the scratch or an input, and
the op rows' temporaries are `%v12.` and one letter, so the two never meet.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from itertools import pairwise

import numpy as np

from ..graph.ir import Graph, verify
from .llvm_blocks import strided_copies
from .llvm_cold import cold_segments
from .llvm_entries import entries
from .llvm_loops import accumulates
from .llvm_powers import running_powers, still_streams
from .llvm_segment import TYPES, literal, segment, spellings
from .llvm_spread import spreads, stride
from .llvm_vector import widen

SEGMENT = 250  # nodes and stores per segment: compile time per node grows with it
_CALL = re.compile(r"call (double|float) @([\w.]+)\(([^)]*)\)")
# An output port with this many +0.0 constants is zeroed as a block (memset), and one with
# this many other constants copied from a table (memcpy): a Jacobian of a million mostly
# constant elements is then a few instructions, not a million stores.
ZERO_BLOCK = 64
COPY_BLOCK = 16  # a run of this many of a region's values in an output is copied as a block
TABLE_BLOCK = 4096


def emit(graph: Graph, dtype: str, data_offset: int, header: str = "",
         vector_math: dict | None = None, straight: tuple | None = None,
         spread: bool = False) -> tuple[str, int]:
    """The module's text (`header` goes in a comment on its first line) and the number of
    scratch elements an evaluation needs. A malformed graph is refused here (`ir.verify`).
    `vector_math` names the vector versions of libm's functions the loops may call
    (llvm_vector.widen; none: libm's alone, as a program linked elsewhere needs).
    `straight`: (low, high), the sizes of the code outside a graph's loops that may be left
    unoptimised: its segments with no loop are then `optnone` (`llvm_cold`). `spread`: long
    loops may be split over threads (llvm_spread; `diffdsl_spread_bytes` says their areas)."""
    verify(graph)
    t = TYPES[dtype][0]
    module = _Module(dtype, straight, spread)
    plan = module.function(graph, "")
    lines = [f"; diffdsl kernel {header}".rstrip(),
             f"; {dtype}; {len(graph.nodes)} nodes; {len(plan.segments)} segments; "
             f"{plan.scratch} scratch", ""]
    lines += module.lines + entries(plan, len(graph.inputs) + len(graph.outputs), t, data_offset,
                                    module.spread_bytes)
    lines += sorted(module.callees.values()) + module.tables
    if module.tables or module.fills:
        lines += ["declare void @llvm.memset.p0.i64(ptr, i8, i64, i1)",
                  "declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)"]
    text = "\n".join(lines) + "\n"
    if vector_math and plan.areas:  # only loops are vectorised
        text = widen(text, vector_math)
    return text, plan.scratch


class _Module:
    """The functions of one kernel: the graph's segments and, for each region, its body's
    (named by the path of region nodes that leads to it: `@b12.seg0` is the first segment
    of the body of node 12; `@b12` runs them)."""

    def __init__(self, dtype: str, straight: tuple | None = None, spread: bool = False):
        self.dtype = dtype
        self.straight = straight
        self.spread = spread
        self.spread_bytes = 0  # the largest slice's area of a loop split over threads
        self.spell = spellings(dtype)
        self.lines: list[str] = []
        self.callees: dict[str, str] = {}
        self.tables: list[str] = []
        self.fills = False

    def function(self, graph: Graph, prefix: str, adds: frozenset = frozenset(),
                 still: frozenset = frozenset()) -> _Layout:
        """Emit the segments of `graph` as `@{prefix}seg{k}` (and the bodies of its regions);
        its layout, which says how much scratch it needs. The outputs named in `adds` are
        added to what their ports hold, not stored (`llvm_loops.accumulates`)."""
        t = TYPES[self.dtype][0]
        plan = _Layout(graph, adds)
        plan.write_in_place(graph)
        if prefix:  # a loop's body: powers of the index as running products (llvm_powers)
            plan.powers = {n: (k, s) for k, (n, s) in  # `still`: streams of stride 0
                           enumerate(running_powers(graph, t, still).items())}
        for op in {node.op for node in graph.nodes}:
            for m in _CALL.finditer(self.spell.get(op, "")):
                self.callees[m.group(2)] = f"declare {m.group(1)} @{m.group(2)}(" + \
                    ", ".join([m.group(1)] * (m.group(3).count(",") + 1)) + ") nounwind"
        for i, node in enumerate(graph.nodes):
            if node.op == "region":
                adds = accumulates(node.attr)
                inner_adds = {"@sum"} if adds else set()
                if plan.direct.get(i, (None,))[0] in plan.adding:  # its rows add up there
                    inner_adds.add("@map")
                inner = self.function(node.attr.body, f"{prefix}b{i}.", frozenset(inner_adds),
                                      still_streams(node.attr))
                plan.place_region(i, node.attr, inner.scratch)
                plan.areas[i].update(adds=adds, powers=len(inner.powers))  # for the loop
                if self.spread and not prefix and spreads(node.attr):
                    plan.spread[i] = stride(node.attr, plan.areas[i], t)
                    self.spread_bytes = max(self.spread_bytes, plan.spread[i])
                self._runner(f"{prefix}b{i}.", inner)
        cold = cold_segments(graph, plan.segments, self.straight) if not prefix else set()
        for k, (start, stop) in enumerate(plan.segments):
            body = segment(graph, plan, start, stop, k == len(plan.segments) - 1,
                           self.dtype, self.spell, prefix)
            context = "" if prefix else ", ptr %x"  # the pool's, or null (llvm_spread)
            # One segment is inlined into the entries (the optimiser then keeps the port
            # pointers in registers across rows); several stay apart, to keep compiling fast.
            inline = "alwaysinline" if len(plan.segments) == 1 else \
                "noinline optnone" if k in cold else "noinline"
            self.lines.append(f"define internal void @{prefix}seg{k}(ptr noalias %p, "
                              f"ptr noalias %s{context}) {inline} nounwind {{")
            self.lines.append("entry:")
            self.lines.extend("  " + line for line in body)
            self.lines += ["  ret void", "}", ""]
        self.lines += plan.functions  # the iterations of loops split over threads
        self.fills = self.fills or bool(plan.copies)
        for name, table in plan.tables:
            self._table(name, t, [literal(x, self.dtype) for x in table])
        for name, table in plan.indices:
            self._table(name, "i64", table)
        for k, _, table in plan.fills:
            self.fills = True
            if table is not None:
                self._table(f"@{prefix.replace('.', '_')}table{k}", t,
                            [literal(x, self.dtype) for x in table])
        return plan

    def _table(self, name: str, t: str, values: list) -> None:
        """A constant global array `name` of `t` values (their literals)."""
        listed = ", ".join(f"{t} {x}" for x in values)
        self.tables.append(f"{name} = private unnamed_addr constant [{len(values)} x {t}] "
                           f"[{listed}]")

    def _runner(self, prefix: str, plan: _Layout) -> None:
        """`@{prefix}run(ports, scratch)`: one iteration of a body, its segments in turn."""
        calls = [f"  call void @{prefix}seg{k}(ptr %p, ptr %s)"
                 for k in range(len(plan.segments))]
        # A body of one segment is inlined into its loop, where the optimiser can keep the
        # captures in registers and vectorise the iterations.
        inline = " alwaysinline" if len(plan.segments) == 1 else ""
        self.lines += [f"define internal void @{prefix}run(ptr noalias %p, ptr noalias %s)"
                       f"{inline} nounwind {{", "entry:", *calls, "  ret void", "}", ""]


class _Layout:
    """Where each node lives: segments, slots for values used by a later segment, and the
    port and element each input node reads."""

    def __init__(self, graph: Graph, adds: frozenset = frozenset()):
        self.port_of = {name: k for k, name in enumerate(graph.inputs)}  # input -> port
        self.source = {}  # input node -> (port, element)
        for i, node in enumerate(graph.nodes):
            if node.op == "input":
                self.source[i] = (self.port_of[node.attr[0]], node.attr[1])
        self.stores: dict[int, list] = {}  # node -> [(port, element)] of the outputs it feeds
        self.fills = []  # (port, elements, None for zeros or the table of constants)
        self.tables = []  # (global name, constants): streams of constants, read in place
        self.indices = []  # (global name, whole numbers): where gathered values lie
        self.spread: dict[int, int] = {}  # region split over threads -> its slices' stride
        self.functions: list[str] = []  # their functions' lines (llvm_spread)
        self.copies = []  # (port, first element, region node, first value, elements)
        self.strided = []  # (port, element, region, value, count, step, by, width)
        self.direct: dict[int, tuple[int, int]] = {}  # region -> (port, element): its rows
        first = len(graph.inputs)
        # Output ports whose values are added to what they hold (a body's sums, added up
        # over its loop's iterations where they lie): a +0.0 there is no instruction at all.
        self.adding = {first + k for k, name in enumerate(graph.outputs) if name in adds}
        # Per node: whether it is a constant, and its value (NaN otherwise), so that the block
        # fills of a port of a million elements are found by NumPy, not element by element.
        self._is_const = np.array([node.op == "const" for node in graph.nodes], dtype=bool)
        self._consts = np.array([node.attr if node.op == "const" else math.nan
                                 for node in graph.nodes], dtype=np.float64)
        self._parts = any(node.op == "part" for node in graph.nodes)
        for k, port in enumerate(graph.outputs.values()):
            if port.whole is not None:  # a region's values in a row: copied after its loop
                self.copies.append((first + k, 0, *port.whole, port.size))
                continue
            ids = np.asarray(port.ids, dtype=np.int64)
            zeros = self._zeros(ids) if first + k in self.adding else self._fill(first + k, ids)
            covered = zeros | self._copy(graph, first + k, port.ids)
            if self._parts and first + k not in self.adding:  # an adding port: a store each
                for copy in strided_copies(graph, port.ids, covered, COPY_BLOCK):
                    self.strided.append((first + k, *copy))
            for e in np.flatnonzero(~covered).tolist():
                self.stores.setdefault(port.ids[e], []).append((first + k, e))
        # Outputs that are inputs or constants are stored in the last segment.
        self.late = [i for i in self.stores
                     if i in self.source or graph.nodes[i].op == "const"]
        self.segments, at = self._segments(len(graph.nodes))
        self.slot = {}
        for i, node in enumerate(graph.nodes):
            for a in node.args:
                if at[a] != at[i] and a not in self.source and a not in self.slot \
                        and graph.nodes[a].op not in ("const", "region", "part", "array"):
                    self.slot[a] = len(self.slot)
        self.slots = max(len(self.slot), 1)
        self.scratch = self.slots  # slots, then each region's areas (place_region)
        self.areas: dict[int, dict] = {}
        self.powers: dict[int, int] = {}  # pow node -> its slot in the "@pw" port's values
        self.power_port = len(graph.inputs) + len(graph.outputs)

    def _segments(self, n: int) -> tuple[list, list]:
        """Segments of about SEGMENT instructions, and each node's segment: a node counts one,
        and one more for each output element it is stored into there. (A value a Jacobian
        holds at a hundred places is a hundred stores: O2's code generator takes time that
        grows faster than a function's stores, and 10,000 of them in a segment of 250 nodes
        took 30 s to compile, a few hundred milliseconds cut into segments.)"""
        weight = np.ones(max(n, 1), dtype=np.int64)
        late = set(self.late)
        for i, places in self.stores.items():
            if i not in late:
                weight[i] += len(places)
        begins = np.cumsum(weight) - weight
        _, at = np.unique(begins // SEGMENT, return_inverse=True)
        cuts = np.flatnonzero(np.diff(at)) + 1
        bounds = [0, *cuts.tolist(), max(n, 1)]
        return [(a, min(b, n)) for a, b in pairwise(bounds)], at.tolist()

    def place_region(self, i: int, region, body_scratch: int) -> None:
        """Areas of the scratch for region node i: its values (`buf`), its captures, the
        index as a real, one iteration's sums, each stream gathered when it is not a run of
        an input's or a region's elements (`gather`), and its body's own scratch."""
        area = {}
        for name, size in (("buf", region.size), ("cap", region.captures), ("index", 1),
                           ("sums", region.sums), ("next", region.carry),
                           ("body", body_scratch)):
            area[name] = self.scratch
            self.scratch += size
        area["body_size"] = body_scratch
        area["gather"] = []
        for j, (length, _, _) in enumerate(region.streams):
            area["gather"].append(self.scratch)
            self.scratch += length if region.source(j) < 0 else 0  # read where it lies
        self.areas[i] = area

    def write_in_place(self, graph: Graph) -> None:
        """A region whose stacked values all go to one output port, in order, and nowhere
        else (no node reads one, no loop streams them, no other port holds one) writes each
        iteration's row there (`direct`) instead of into its scratch for a copy after the
        loop: a gradient by an input read in place is then written once, not twice, and a
        pullback's inner loop adds its rows where its body's sums lie (k-means' winning
        centroid's cotangents, `llvm_loops.accumulates`)."""
        if not self.copies:
            return
        read = {copy[3] for copy in self.strided}
        args = {a for node in graph.nodes for a in node.args} | set(self.stores)
        copied = Counter(copy[2] for copy in self.copies)
        read.update(r for r, count in copied.items() if count > 1)
        for i, node in enumerate(graph.nodes):
            if node.op == "part" and node.attr >= graph.nodes[node.args[0]].attr.sums and \
                    i in args:  # a node or a store reads the value, not one copy alone
                read.add(node.args[0])
            elif node.op == "region":
                read.update(a for a in node.args if graph.nodes[a].op == "region")
        kept = []
        for copy in self.copies:
            k, e, r, start, count = copy
            region = graph.nodes[r].attr
            if r in read or r in self.direct or region.carry or region.maps == 0 or \
                    start != region.sums or count != region.n * region.maps:
                kept.append(copy)
            else:
                self.direct[r] = (k, e)
        self.copies = kept

    def _copy(self, graph: Graph, k: int, ids) -> np.ndarray:
        """Runs of output port `k` that are a region's values in order (a gradient with
        respect to the data a loop reads), copied as blocks after the loop has run (memcpy):
        a stream's cotangents are then a few instructions, not a store each."""
        covered = np.zeros(len(ids), dtype=bool)
        if not self._parts:
            return covered
        e = 0
        while e < len(ids):
            node = graph.nodes[ids[e]]
            if node.op != "part":
                e += 1
                continue
            r, start, m = node.args[0], node.attr, 1
            while e + m < len(ids):
                other = graph.nodes[ids[e + m]]
                if other.op != "part" or other.args[0] != r or other.attr != start + m:
                    break
                m += 1
            if m >= COPY_BLOCK:
                self.copies.append((k, e, r, start, m))
                covered[e:e + m] = True
            e += m
        return covered

    def _zeros(self, ids: np.ndarray) -> np.ndarray:
        """Which of the node ids `ids` are the constant +0.0 (not -0.0)."""
        values = self._consts[ids]
        return self._is_const[ids] & (values == 0) & ~np.signbit(values)

    def _fill(self, k: int, ids: np.ndarray) -> np.ndarray:
        """Add a block fill of output port `k` (node ids `ids`) when it pays; a mask of the
        elements it covers."""
        consts = self._is_const[ids]
        values = self._consts[ids]
        zeros = self._zeros(ids)  # +0.0 only: -0.0 is stored
        if consts.sum() - zeros.sum() >= TABLE_BLOCK:
            self.fills.append((k, len(ids), np.where(consts, values, 0.0).tolist()))
            return consts
        if zeros.sum() >= ZERO_BLOCK:
            self.fills.append((k, len(ids), None))
            return zeros
        return np.zeros(len(ids), dtype=bool)
