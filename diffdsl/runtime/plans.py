"""Source-keyed plans: a program's graphs on disk, so a warm process skips parse, lowering
and autodiff (DESIGN.md, decision 5).

An entry is `ROOT/KEY/plan.json` in the kernel cache's folder, KEY the sha256 of diffdsl's own
code (every module and the grammar, so a changed lowering never meets an old plan), the limits
in force, the file name and the source text. It holds the program's graph and every derivative
graph asked of it, each with its key, so the kernels are found in the cache without printing
the graph again. The file's first line is the sha256 of its graphs' text (the rest), so a
truncated entry or one overwritten while a run reads it is found out; an entry that cannot
be read, does not check or does not decode is ignored and written afresh (once: the rewrite
repairs it).
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path

from .. import limits
from ..cache import PLAN_FILE, CacheUnavailable, KernelCache
from ..errors import Span
from ..graph.ir import Graph, Node, Port, verify
from ..graph.ops import OPS
from ..graph.region import Region

_code: list[str] = []


def code_fingerprint() -> str:
    """sha256 of diffdsl's modules and grammar, read once per process."""
    if not _code:
        package = Path(__file__).resolve().parent.parent  # diffdsl/, from diffdsl/runtime/
        digest = hashlib.sha256()
        files = sorted(package.rglob("*.py")) + sorted(package.rglob("*.lark"))
        grammar = package.parent / "grammar"
        if grammar.is_dir():  # a source checkout: the grammar stands beside the package
            files += sorted(grammar.glob("*.lark"))
        for path in files:
            digest.update(path.relative_to(package.parent).as_posix().encode())
            digest.update(path.read_bytes())
        _code.append(digest.hexdigest())
    return _code[0]


class PlanStore:
    """The plan entry of one source text; every method is a no-op when the cache is off."""

    def __init__(self, source: str, filename: str):
        self.source = source
        self.filename = filename
        # The limits in force are part of the key: whether a program compiles must not
        # depend on what the cache holds.
        text = f"{code_fingerprint()}\n{limits.current()!r}\n{filename}\n{source}"
        self.store = KernelCache()
        self.key = hashlib.sha256(text.encode()).hexdigest()
        self.path = self.store.root / self.key / PLAN_FILE
        self.entry = self._read()
        self._texts: dict[str, str] = {}  # each graph's JSON text, printed once
        # Threads deriving different graphs of one program add them here at the same time:
        # the entry is not printed while another thread changes it.
        self._lock = threading.Lock()

    def _read(self) -> dict:
        """The entry's graphs, or none when any part of the file is damaged: its first line
        is the sha256 of the rest, the graphs' JSON text as it was written."""
        try:  # checked as bytes: a large entry is not decoded and encoded again to hash it
            digest, _, body = self.path.read_bytes().partition(b"\n")
            if digest == hashlib.sha256(body).hexdigest().encode() and \
                    self.store.owns(self.path.parent):
                graphs = json.loads(body)
                if isinstance(graphs, dict):
                    return {"graphs": graphs}
        except (OSError, ValueError, KeyError, TypeError):
            pass
        return {"graphs": {}}

    def graph(self, request: str) -> Graph | None:
        """The graph stored for `request` ("program", or a derivative's request), or None."""
        data = self.entry["graphs"].get(request)
        if data is None:
            return None
        try:
            return decode(data, self.source)
        except (KeyError, TypeError, ValueError, IndexError):
            self.entry = {"graphs": {}}  # damaged: forget all of it, it will be rewritten
            self._texts = {}
            return None

    def remember(self, request: str, graph: Graph) -> None:
        """Add `graph` under `request` and write the entry (atomically). Each graph is
        printed once and the entry's text joins them: a derivative of a million elements is
        not printed again for each later one."""
        encoded = encode(graph)
        with self._lock:
            graphs = self.entry["graphs"]
            graphs[request] = encoded
            texts = self._texts
            texts.pop(request, None)  # printed afresh, should it be there
            for name in graphs.keys() - texts.keys():
                texts[name] = json.dumps(graphs[name], separators=(",", ":"))
            body = "{" + ",".join(f"{json.dumps(name)}:{texts[name]}" for name in graphs) + "}"
            text = f"{hashlib.sha256(body.encode()).hexdigest()}\n{body}"
            try:
                self.store.store_file(self.key, PLAN_FILE, text)
            except CacheUnavailable:
                pass  # a plan only saves time: without a writable cache the program still runs


def encode(graph: Graph) -> dict:
    nodes = []
    for node in graph.nodes:
        if node.op == "const":
            nodes.append(["const", float(node.attr).hex()])
        elif node.op in ("input", "array"):
            nodes.append([node.op, node.attr[0], node.attr[1]])
        elif node.op == "region":  # a loop kept as a loop: its body goes along, whole
            r = node.attr
            nodes.append(["region", {"n": r.n, "captures": r.captures,
                                     "streams": [list(x) for x in r.streams],
                                     "combine": list(r.combine), "carry": r.carry,
                                     "whole": list(r.whole),
                                     "body": encode(r.body)}, *node.args])
        elif node.op == "part":
            nodes.append(["part", node.args[0], node.attr])
        else:
            nodes.append([node.op, *node.args])
    return {"key": graph.key(), "nodes": nodes,
            "inputs": {n: _port(p) for n, p in graph.inputs.items()},
            "outputs": {n: _port(p) for n, p in graph.outputs.items()}}


def decode(data: dict, source: str) -> Graph:
    nodes = []
    for item in data["nodes"]:
        op = item[0]
        if op == "const":
            nodes.append(Node("const", (), float.fromhex(item[1])))
        elif op in ("input", "array"):
            nodes.append(Node(op, (), (str(item[1]), int(item[2]))))
        elif op == "region":
            r = item[1]
            region = Region(int(r["n"]), decode(r["body"], source), int(r["captures"]),
                            tuple((int(a), int(b), int(c)) for a, b, c in r["streams"]),
                            tuple(str(k) for k in r.get("combine", ())),
                            int(r.get("carry", 0)),
                            tuple(int(k) for k in r.get("whole", ())))
            nodes.append(Node("region", tuple(int(a) for a in item[2:]), region))
        elif op == "part" and len(item) == 3:
            nodes.append(Node("part", (int(item[1]),), int(item[2])))
        elif op in OPS and len(item) == OPS[op].arity + 1:
            nodes.append(Node(op, tuple(int(a) for a in item[1:])))
        else:
            raise ValueError(f"not a node: {item!r}")
    # A damaged entry fails here (ir.GraphError is a ValueError), not in a backend.
    return verify(Graph(tuple(nodes),
                        {n: _unport(p, source) for n, p in data["inputs"].items()},
                        {n: _unport(p, source) for n, p in data["outputs"].items()},
                        known_key=data["key"]))


def _port(port: Port) -> list:
    s = port.span
    span = None if s is None else [s.filename, s.line, s.column, s.end_line, s.end_column]
    whole = None if port.whole is None else list(port.whole)
    return [list(port.shape), list(port.ids), span, whole]


def _unport(data: list, source: str) -> Port:
    shape, ids, span, whole = data
    return Port(tuple(shape), tuple(ids), None if span is None else Span(*span, source=source),
                None if whole is None else (int(whole[0]), int(whole[1])))
