"""Powers of the loop index by running products: in a loop's body, `a ** (i + b)` of a
value `a` the same in every iteration (computed from the captures alone) and a whole b >= 0
is the previous iteration's power times `a`, where pow is called only every `FRESH`
iterations (llsq's `t(i) ** j` over the coefficients j: a product per term, as GradBench's
C++ computes it, where pow took 5 times as long).

A product of up to `FRESH` factors is within that many roundings of pow's result (a relative
2.8e-14 in double precision); a run starts from pow itself, so the error does not grow with
the trip count. Where the exponent is 0 or more, the product is pow's value at every edge
too: 0 ** 0 = 1 then 0, an infinite or NaN base, the sign of a negative base or of -0.0.
Only double-precision kernels do so (single precision's roundings are too coarse).

The loop (`llvm_loops.loop`) gives the body one more port, "@pw", of two values per power:
the last power and how many products remain before pow is called again (0 at the start).
That count is an integer (an i64 in the value's slot): counted down as a double, its
subtract and select were a chain of about 4 cycles an iteration, longer than the product's
own, and llsq's loops ran 1.5 times as long as with the integer.
"""

from __future__ import annotations

from ..graph.ir import Graph

# pow is called every FRESH iterations, a product in between: at 64, llsq's gradient (128
# powers a point) spent 6 % of its time in pow(t, 64), which GradBench's C++ never calls.
FRESH = 128
LARGEST = 2**31  # the largest b taken: b + i exact in every iteration
PORT = "@pw"


def running_powers(body: Graph, t: str) -> list[int]:
    """The body's pow nodes that are taken as running products (module docstring)."""
    if t != "double":
        return []
    nodes = body.nodes
    fixed = [False] * len(nodes)  # the same value in every iteration
    index = None
    for i, node in enumerate(nodes):
        if node.op == "const" or (node.op == "input" and node.attr[0] == "@c"):
            fixed[i] = True
        elif node.op == "input":
            index = i if node.attr == ("@i", 0) else index
        elif node.op not in ("region", "part"):
            fixed[i] = all(fixed[a] for a in node.args)
    found = []
    for i, node in enumerate(nodes):
        if node.op == "pow" and fixed[node.args[0]] and \
                _shift(nodes, node.args[1], index) is not None:
            found.append(i)
    return found


def _shift(nodes, e: int, index: int | None) -> int | None:
    """b where node e is the index plus a whole constant b >= 0, else None."""
    if e == index:
        return 0
    node = nodes[e]
    if node.op != "add" or index not in node.args:
        return None
    other = nodes[node.args[1] if node.args[0] == index else node.args[0]]
    # b + i exact in every iteration (2**60 + i is 2**60: pow's exponent, not a product's)
    if other.op == "const" and 0 <= other.attr <= LARGEST and float(other.attr).is_integer():
        return int(other.attr)
    return None



def power_state(name: str, powers: int, t: str) -> list[str]:
    """The "@pw" port's values at `name`, none made yet: each power's last value 0.0 and its
    count of products left 0 (an i64)."""
    out = [f"{name} = alloca {t}, i64 {2 * powers}"]
    for k in range(2 * powers):
        out += [f"{name}{k} = getelementptr inbounds {t}, ptr {name}, i64 {k}",
                f"store {'i64 0' if k % 2 else t + ' 0.0'}, ptr {name}{k}"]
    return out


def power_lines(i: int, base: str, state: str, slot: int, pow_text: str, t: str,
                block: list) -> list[str]:
    """Node i, `base ** (i + b)`, from the state at `state` (a pointer to the "@pw" port's
    values; this power's are 2 * slot and the next): pow every FRESH iterations (its text
    `pow_text`, made for a result named `%v{i}.p`), the last power times the base between.
    `block` (the block being written) is left at the join."""
    v = f"%v{i}"
    fresh, more, join = f"v{i}.fresh", f"v{i}.more", f"v{i}.join"
    out = [f"{v}.sp = getelementptr inbounds {t}, ptr {state}, i64 {2 * slot}",
           f"{v}.cp = getelementptr inbounds {t}, ptr {state}, i64 {2 * slot + 1}",
           f"{v}.last = load {t}, ptr {v}.sp", f"{v}.left = load i64, ptr {v}.cp",
           f"{v}.new = icmp sle i64 {v}.left, 0",
           f"br i1 {v}.new, label %{fresh}, label %{more}", f"{fresh}:", *pow_text.split("\n"),
           f"br label %{join}", f"{more}:", f"{v}.q = fmul {t} {v}.last, {base}",
           f"br label %{join}", f"{join}:",
           f"{v} = phi {t} [ {v}.p, %{fresh} ], [ {v}.q, %{more} ]",
           f"{v}.l = sub i64 {v}.left, 1",
           f"{v}.nl = select i1 {v}.new, i64 {FRESH - 1}, i64 {v}.l",
           f"store {t} {v}, ptr {v}.sp", f"store i64 {v}.nl, ptr {v}.cp"]
    block[0] = join
    return out
