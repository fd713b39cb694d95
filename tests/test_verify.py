"""The IR's checks and identity: `ir.verify` refuses a malformed graph with the node at fault,
before any backend compiles it (not deep in LLVM), and a `Graph` is hashed and compared by its
key, so caches find equal graphs whichever object holds them."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import diffdsl
from diffdsl.backends import cuda, llvm
from diffdsl.backends import numpy as reference
from diffdsl.graph import autodiff
from diffdsl.graph.ir import VERIFY_ENV, Builder, Graph, GraphError, Node, Port, verify

SOURCE = "input x[2]\noutput y = sin(x[0]) * x[1] + x[0]\n"


def _good() -> Graph:
    """x0, x1 = inputs; 2 = sin x0; 3 = mul 2 x1; 4 = add 0 3 (the nodes of SOURCE)."""
    graph = diffdsl.compile(SOURCE, cache=False).graph
    assert [n.op for n in graph.nodes] == ["input", "input", "sin", "mul", "add"]
    return graph


def _with_node(graph: Graph, i: int, node: Node) -> Graph:
    nodes = list(graph.nodes)
    nodes[i] = node
    return Graph(tuple(nodes), graph.inputs, graph.outputs)


def _with_port(graph: Graph, kind: str, name: str, port: Port) -> Graph:
    ports = dict(getattr(graph, kind), **{name: port})
    return dataclasses.replace(graph, **{kind: ports}, known_key=None)


MALFORMED = {
    "unknown op": (lambda g: _with_node(g, 2, Node("sine", (0,))),
                   r"node 2 \(sine \[0\]\): 'sine' is not an op of the table"),
    "arity": (lambda g: _with_node(g, 3, Node("mul", (2,))),
              r"node 3 \(mul \[2\]\): mul takes 2 arguments, the node has 1"),
    "forward reference": (lambda g: _with_node(g, 2, Node("sin", (3,))),
                          r"node 2 \(sin \[3\]\): argument 3 is not an earlier node"),
    "self reference": (lambda g: _with_node(g, 3, Node("mul", (3, 1))),
                       r"argument 3 is not an earlier node"),
    "negative argument": (lambda g: _with_node(g, 3, Node("mul", (-1, 1))),
                          r"argument -1 is not an earlier node"),
    "constant not a float": (lambda g: _with_node(g, 2, Node("const", (), "0.5")),
                             r"a constant is a float, not '0.5'"),
    "attribute on an op": (lambda g: _with_node(g, 2, Node("sin", (0,), 1.0)),
                           r"sin has no attribute"),
    "repeated node": (lambda g: _with_node(g, 3, Node("sin", (0,))),
                      r"node 3 \(sin \[0\]\): it repeats node 2"),
    "repeated commutative node": (
        lambda g: Graph(g.nodes + (Node("add", (3, 0)),), g.inputs, g.outputs),
        r"node 5 \(add \[3, 0\]\): it repeats node 4"),
    "input outside its port": (lambda g: _with_node(g, 1, Node("input", (), ("z", 0))),
                               r"node 1 \(input \[\]\): it is not element 0 of an input port"),
    "port element not an input": (
        lambda g: _with_port(g, "inputs", "w", Port((1,), (2,))),
        r"element 0 of input 'w' is node 2, which is not input w\[0\]"),
    "port size": (lambda g: _with_port(g, "outputs", "y", Port((2,), (4,))),
                  r"output 'y' of shape \[2\] has 1 node ids, not 2"),
    "port out of range": (lambda g: _with_port(g, "outputs", "y", Port((), (9,))),
                          r"output 'y' names node 9, and the graph has nodes 0 to 4"),
    "shape not a tuple": (lambda g: _with_port(g, "outputs", "y", Port([1], (4,))),
                          r"output 'y' has shape \[1\], not a tuple"),
}


def test_a_lowered_graph_and_its_derivatives_verify():
    graph = _good()
    assert verify(graph) is graph
    for derived in (autodiff.grad(graph), autodiff.hessian(autodiff.grad(graph), of="value"),
                    autodiff.jvp(graph), autodiff.vjp(graph)):
        assert verify(derived) is derived


def test_a_graph_is_checked_once_and_a_new_one_afresh(monkeypatch):
    """The same object verified again is not walked again (its ports are not read); a graph
    made from it, good or malformed, is checked."""
    from diffdsl.graph import verify as module
    graph = diffdsl.compile(SOURCE + "output z = x[0] * 3\n", cache=False).graph
    verify(graph)
    ports = []
    monkeypatch.setattr(module, "_check_port", lambda *args: ports.append(args[1]))
    assert verify(graph) is graph and ports == []
    copy = Graph(graph.nodes, graph.inputs, graph.outputs)
    assert verify(copy) is copy and sorted(ports) == ["x", "y", "z"]
    with pytest.raises(GraphError, match="is not an earlier node"):
        verify(_with_node(copy, 2, Node("sin", (3,))))


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_graphs_are_refused_with_the_fault(case):
    make, message = MALFORMED[case]
    with pytest.raises(GraphError, match="malformed graph: .*" + message):
        verify(make(_good()))


@pytest.mark.parametrize("case", ["forward reference", "unknown op", "repeated node",
                                  "port out of range"])
@pytest.mark.parametrize("where", ["cpu", "cpu-tape", "cuda-module", "numpy"])
def test_backends_refuse_a_malformed_graph_before_compiling(case, where, monkeypatch):
    """The LLVM emitter, the tape and the CUDA module refuse it at their entry; the numpy
    interpreter too where graphs are verified (its evaluations are a hot path otherwise)."""
    graph = MALFORMED[case][0](_good())
    x = np.array([0.5, 2.0])
    with pytest.raises(GraphError, match="malformed graph"):
        if where == "cuda-module":
            cuda.module_source(graph, "float64", "K", "test")
        elif where == "numpy":
            monkeypatch.setenv(VERIFY_ENV, "1")
            reference.evaluate(graph, {"x": x})
        else:
            if where == "cpu-tape":
                monkeypatch.setattr("diffdsl.backends.cpu.TAPE_THRESHOLD", 0)
            diffdsl.Program(graph, cache=False)(x=x, backend="cpu")


def test_the_emitter_is_never_reached(monkeypatch):
    graph = MALFORMED["forward reference"][0](_good())
    monkeypatch.setattr(llvm, "_Layout", lambda g: pytest.fail("the emitter ran"))
    with pytest.raises(GraphError):
        llvm.emit(graph, "float64", 0)


def test_a_pass_that_forgets_an_input_port_fails_when_it_freezes(monkeypatch):
    b = Builder()
    x = b.input("x", 0)
    t = b.input("@t:x", 0)  # a tangent input the pass forgot to declare
    out = b.mul(x, t)
    monkeypatch.setenv(VERIFY_ENV, "1")
    with pytest.raises(GraphError, match="not element 0 of an input port '@t:x'"):
        b.graph({"x": Port((), (x,))}, {"y": Port((), (out,))})
    monkeypatch.setenv(VERIFY_ENV, "0")  # unchecked, as outside the tests: the graph is made
    assert len(b.graph({"x": Port((), (x,))}, {"y": Port((), (out,))}).nodes) == 3


# graphs as keys ------------------------------------------------------------------------------

def test_equal_graphs_are_one_key():
    first = diffdsl.compile(SOURCE, cache=False).graph
    second = diffdsl.compile(SOURCE, cache=False).graph
    assert first is not second
    assert first == second and hash(first) == hash(second)
    assert {first: "kernel"}[second] == "kernel"
    other = diffdsl.compile(SOURCE.replace("sin", "cos"), cache=False).graph
    assert other != first and {first: 1}.get(other) is None
    renamed = dataclasses.replace(first, outputs={"z": first.outputs["y"]}, known_key=None)
    assert renamed != first  # port names are part of the key
    assert first != "not a graph" and first != first.key()


def test_an_equal_graph_finds_the_kernel_already_compiled():
    prog = diffdsl.compile(SOURCE, backend="cpu", cache=False)
    kernel = prog.kernel(prog.graph)
    built = prog.stats.kernels_built
    again = diffdsl.compile(SOURCE, cache=False).graph  # another object, the same graph
    assert prog.kernel(again) is kernel
    assert prog.stats.kernels_built == built
    assert prog.engine.compiled_plan(again, "float64") is prog.engine.compiled_plan(
        prog.graph, "float64")
