"""A region as C: a `for` loop in the segment that holds it, calling its body's function once
per iteration, as llvm_loops.py writes it in LLVM IR (the same scratch areas of the layout,
the same order of the sums; a scan's state where the LLVM loop keeps it).
"""

from __future__ import annotations

from ..graph.ir import Graph
from .llvm_loops import stream_run


def loop(graph: Graph, plan, i: int, value, t: str, prefix: str, zero: str) -> list[str]:
    """Region node i as statements: the body's ports are bound to the index, the captures,
    this iteration's window of each stream, the sums of one iteration, this iteration's row
    of the region's values (and a scan's state); the sums start at -0.0 (`zero`), which
    x + -0.0 leaves as it is, and add (or keep the min or max) in iteration order. Every
    value the loop reads is named (`value`) before the loop, at the segment's own level."""
    node = graph.nodes[i]
    region, area, r = node.attr, plan.areas[i], f"r{i}"
    names = list(region.body.inputs) + list(region.body.outputs)
    at = {name: k for k, name in enumerate(names)}
    out = [f"{t} *{r}_pp[{len(names)}];"]
    for k, a in enumerate(node.args[:region.captures]):
        out.append(f"s[{area['cap'] + k}] = {value(a)};")
    out += [f"{r}_pp[{at['@i']}] = s + {area['index']};",
            f"{r}_pp[{at['@c']}] = s + {area['cap']};",
            f"{r}_pp[{at['@sum']}] = s + {area['sums']};"]
    for e in range(region.sums):
        out.append(f"s[{area['buf'] + e}] = {zero};")
    bases, first = [], region.captures
    for j in range(len(region.streams)):
        ids = node.args[first:first + region.taken(j)]
        first += region.taken(j)
        run = stream_run(graph, plan, region, j, ids)
        if run is None:  # gathered into the scratch, element by element
            for m, a in enumerate(ids):
                out.append(f"s[{area['gather'][j] + m}] = {value(a)};")
            bases.append(f"s + {area['gather'][j]}")
        elif run[0] == "buf":
            bases.append(f"s + {run[1]}")
        else:
            bases.append(f"p[{run[0]}] + {run[1]}")
    if region.carry:  # a scan: the state lies in its final place, the next beside it
        first = area["buf"] + region.carry_value(0)
        start = node.args[len(node.args) - region.carry:]
        out += [f"s[{first + k}] = {value(a)};" for k, a in enumerate(start)]
        out += [f"{r}_pp[{at['@h']}] = s + {first};",
                f"{r}_pp[{at['@next']}] = s + {area['next']};"]
    out += [f"for (int64_t it = 0; it < {region.n}; ++it) {{",
            f"    s[{area['index']}] = ({t})it;"]
    for j, (_, stride, offset) in enumerate(region.streams):
        out.append(f"    {r}_pp[{at[f'@s{j}']}] = {bases[j]} + it * {stride} + {offset};")
    out += [f"    {r}_pp[{at['@map']}] = s + {area['buf'] + region.sums} + it * {region.maps};",
            f"    {prefix}b{i}_run({r}_pp, s + {area['body']});"]
    if region.carry:  # the body has read the whole state: the next takes its place
        out.append(f"    memcpy(s + {first}, s + {area['next']}, "
                   f"{region.carry} * sizeof({t}));")
    for e in range(region.sums):
        acc, term = f"s[{area['buf'] + e}]", f"s[{area['sums'] + e}]"
        kind = region.kind(e)
        if kind == "add":
            out.append(f"    {acc} = {acc} + {term};")
            continue
        # min or max: the earlier value on a tie (`<=`, `>=` as the op's row), and its winner
        winner = f"s[{area['buf'] + region.winner_value(e)}]"
        test = "<=" if kind == "min" else ">="
        out += [f"    if (it == 0 || !({acc} {test} {term})) {{",
                f"        {acc} = {term};", f"        {winner} = ({t})it;", "    }"]
    out.append("}")
    return out
