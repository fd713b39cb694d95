"""A graph as Graphviz DOT text, for `diffdsl graph`."""

from __future__ import annotations

from .ir import Graph
from .loops import expand
from .ops import OPS


def to_dot(graph: Graph, title: str = "diffdsl") -> str:
    graph = expand(graph)  # a drawing shows loops written out
    lines = [f'digraph "{_escape(title)}" {{', "  rankdir=BT;",
             '  node [shape=box, fontname="monospace", fontsize=10];']
    for i, node in enumerate(graph.nodes):
        if node.op == "input":
            name, k = node.attr
            port = graph.inputs.get(name)
            index = _index(k, port.shape) if port is not None else str(k)
            label, style = f"{name}{index}", ', style=filled, fillcolor="#dbeafe"'
        elif node.op == "const":
            label, style = repr(float(node.attr)), ", shape=plaintext"
        else:
            label, style = OPS[node.op].symbol, ", shape=ellipse"
        lines.append(f'  n{i} [label="{_escape(label)}"{style}];')
        for a in node.args:
            lines.append(f"  n{a} -> n{i};")
    for name, port in graph.outputs.items():
        for k, i in enumerate(port.ids):
            out = f"out_{_ident(name)}_{k}"
            lines.append(f'  {out} [label="{_escape(name + _index(k, port.shape))}", '
                         'shape=box, style=filled, fillcolor="#dcfce7"];')
            lines.append(f"  n{i} -> {out};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _index(k: int, shape: tuple) -> str:
    if not shape:
        return ""
    idx = []
    for dim in reversed(shape):
        idx.append(k % dim)
        k //= dim
    return "[" + ", ".join(str(i) for i in reversed(idx)) + "]"


def _ident(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"')
