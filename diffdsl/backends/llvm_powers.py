"""Powers of the loop index by running products: in a loop's body, `a ** (i + b)` of a
value `a` the same in every iteration (computed from the captures alone, or from streams of
stride 0: an outer loop's element, `x[i] ** j` over j) and a whole b >= 0
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

An exponent may also step by k = 2, 4 or 8 an iteration, `a ** (k*i + b)`: a loop that runs k
iterations at once (llvm_lanes) has one such power where it had k. The factor is then a ** k,
squared up from a (within k - 1 roundings of it), and pow is called every FRESH / k
iterations: a product of up to FRESH / k such factors is still within FRESH roundings.
"""

from __future__ import annotations

from ..graph.ir import Graph

# pow is called every FRESH iterations, a product in between: at 64, llsq's gradient (128
# powers a point) spent 6 % of its time in pow(t, 64), which GradBench's C++ never calls.
FRESH = 128
LARGEST = 2**31  # the largest b taken: b + i exact in every iteration
PORT = "@pw"


STEPS = (1, 2, 4, 8)  # the steps of an exponent taken: a ** k squared up from a


def running_powers(body: Graph, t: str, still: frozenset = frozenset()) -> dict[int, int]:
    """The body's pow nodes that are taken as running products (module docstring), each
    with its exponent's step an iteration, in the order of the body. `still`: the stream
    ports the same in every iteration (`still_streams`)."""
    if t != "double":
        return {}
    nodes = body.nodes
    fixed, index = fixed_nodes(body, still)
    found = {}
    for i, node in enumerate(nodes):
        if node.op == "pow" and fixed[node.args[0]]:
            step = affine(nodes, node.args[1], index)
            if step is not None and step[1] >= 0:  # from pow's value at every edge
                found[i] = step[0]
    return found


def still_streams(region) -> frozenset:
    """The ports of `region`'s streams of stride 0, whose window is the same in every
    iteration: an outer loop's element read by an inner loop (`x[i] ** j` over j)."""
    return frozenset(f"@s{j}" for j, (_, stride, _) in enumerate(region.streams) if not stride)


def fixed_nodes(body: Graph, still: frozenset = frozenset()) -> tuple[list[bool], int | None]:
    """Per node of a loop's body, whether it is the same in every iteration (computed from
    the captures, the `still` streams and constants alone); and the index's node."""
    nodes = body.nodes
    fixed = [False] * len(nodes)
    index = None
    for i, node in enumerate(nodes):
        if node.op == "const" or (node.op == "input" and (node.attr[0] == "@c" or
                                                          node.attr[0] in still)):
            fixed[i] = True
        elif node.op == "input":
            index = i if node.attr == ("@i", 0) else index
        elif node.op not in ("region", "part"):
            fixed[i] = all(fixed[a] for a in node.args)
    return fixed, index


def affine(nodes, e: int, index: int | None) -> tuple[int, int] | None:
    """(k, b) where node e is k times the index plus b (`k*i + b`, `b + k*i`, `k*i - c`), k
    one of STEPS and b a whole constant of either sign, else None."""
    k = _times(nodes, e, index)
    if k is not None:
        return k, 0
    node = nodes[e]
    if node.op not in ("add", "sub"):
        return None
    for x, y in (node.args, node.args[::-1]) if node.op == "add" else (node.args,):
        k, b = _times(nodes, x, index), _whole(nodes[y])
        if k is not None and b is not None:
            return k, b if node.op == "add" else -b
    return None


def _times(nodes, e: int, index: int | None) -> int | None:
    """k where node e is k times the index, k one of STEPS, else None."""
    if e == index:
        return 1
    node = nodes[e]
    if node.op != "mul" or index not in node.args:
        return None
    k = _whole(nodes[node.args[1] if node.args[0] == index else node.args[0]])
    return k if k in STEPS else None


def _whole(node) -> int | None:
    # k i + b exact in every iteration (2**60 + i is 2**60: pow's exponent, not a product's)
    if node.op == "const" and abs(node.attr) <= LARGEST and float(node.attr).is_integer():
        return int(node.attr)
    return None



def power_state(name: str, powers: int, t: str) -> list[str]:
    """The "@pw" port's values at `name`, none made yet: each power's last value 0.0 and its
    count of products left 0 (an i64)."""
    out = [f"{name} = alloca {t}, i64 {2 * powers}"]
    for k in range(2 * powers):
        out += [f"{name}{k} = getelementptr inbounds {t}, ptr {name}, i64 {k}",
                f"store {'i64 0' if k % 2 else t + ' 0.0'}, ptr {name}{k}"]
    return out


def power_lines(i: int, base: str, state: str, taken: tuple[int, int], pow_text: str, t: str,
                block: list) -> list[str]:
    """Node i, `base ** (k*i + b)`, from the state at `state` (a pointer to the "@pw" port's
    values; `taken` is (slot, k): this power's are 2 * slot and the next): pow every
    FRESH / k iterations (its text `pow_text`, made for a result named `%v{i}.p`), the last
    power times base ** k between. `block` (the block being written) is left at the join."""
    slot, step = taken
    v = f"%v{i}"
    factor, squares = base, []
    while len(squares) < step.bit_length() - 1:  # base ** step, squared up
        squares.append(f"{v}.k{len(squares)} = fmul {t} {factor}, {factor}")
        factor = f"{v}.k{len(squares) - 1}"
    fresh, more, join = f"v{i}.fresh", f"v{i}.more", f"v{i}.join"
    out = [f"{v}.sp = getelementptr inbounds {t}, ptr {state}, i64 {2 * slot}",
           f"{v}.cp = getelementptr inbounds {t}, ptr {state}, i64 {2 * slot + 1}",
           f"{v}.last = load {t}, ptr {v}.sp", f"{v}.left = load i64, ptr {v}.cp",
           f"{v}.new = icmp sle i64 {v}.left, 0",
           f"br i1 {v}.new, label %{fresh}, label %{more}", f"{fresh}:", *pow_text.split("\n"),
           f"br label %{join}", f"{more}:", *squares, f"{v}.q = fmul {t} {v}.last, {factor}",
           f"br label %{join}", f"{join}:",
           f"{v} = phi {t} [ {v}.p, %{fresh} ], [ {v}.q, %{more} ]",
           f"{v}.l = sub i64 {v}.left, 1",
           f"{v}.nl = select i1 {v}.new, i64 {FRESH // step - 1}, i64 {v}.l",
           f"store {t} {v}, ptr {v}.sp", f"store i64 {v}.nl, ptr {v}.cp"]
    block[0] = join
    return out
