"""diffdsl.torch: a program as a PyTorch function, checked by PyTorch's own oracles.

gradcheck and gradgradcheck compare the kernels' first and second derivatives (the backward of
the backward: the vjp of the vjp graph) with finite differences on every example's outputs of
one element; values and gradients are compared with torch's own operations where torch has
them (det, logsumexp); torch.compile(fullgraph=True) must trace the operator without a graph
break, forward and backward.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch", reason="torch is not installed (the 'torch' extra)")

from bridge_points import (  # noqa: E402
    CASES,
    EXAMPLES,
    POINTS,
    one_element_outputs,
    program,
    quadratic_form_gradients,
)

import diffdsl  # noqa: E402
import diffdsl.torch as dt  # noqa: E402
from diffdsl.errors import InputError, UsageError  # noqa: E402

F64 = torch.float64


def tensors(values: dict, wrt=None) -> list:
    return [torch.tensor(np.asarray(v), dtype=F64, requires_grad=wrt is None or name in wrt)
            for name, v in values.items()]


def test_the_table_names_every_one_element_output():
    data = {(f"data/{name}.dd", of) for name, of in (
        ("kmeans", "cost"), ("gmm", "loglik"), ("mlp", "loss"), ("gmm_arrays", "loglik"),
        ("mlp_arrays", "loss"))}
    assert set(one_element_outputs()) == set(CASES) | data


@pytest.mark.parametrize("name,of", CASES)
def test_gradcheck_and_gradgradcheck(name, of):
    f = dt.function(program(name), of=of)
    xs = tensors(POINTS[name][0])
    assert torch.autograd.gradcheck(f, xs)
    assert torch.autograd.gradgradcheck(f, xs)


def data_inputs(name: str):
    """The GradBench-style examples' inputs, and the few differentiated by: finite differences
    over thousands of data elements would take minutes."""
    rng = np.random.default_rng(1)
    if name == "kmeans":
        return {"P": rng.normal(size=(1000, 8)), "C": rng.normal(size=(10, 8))}, ["C"]
    if name == "gmm":
        return {"X": rng.normal(size=(1000, 4)), "alpha": rng.normal(size=5),
                "mu": rng.normal(size=(5, 4)), "q": 0.1 * rng.normal(size=(5, 4))}, ["alpha"]
    return {"X": rng.normal(size=(256, 32)), "Y": rng.normal(size=256),
            "W1": 0.2 * rng.normal(size=(32, 32)), "b1": 0.1 * rng.normal(size=32),
            "w2": 0.2 * rng.normal(size=32), "b2": np.float64(0.1)}, ["w2", "b2"]


@pytest.mark.parametrize("name", ["kmeans", "gmm", "mlp"])
def test_data_examples(name):
    values, wrt = data_inputs(name)
    f = dt.function(diffdsl.load(EXAMPLES / "data" / f"{name}.dd", backend="cpu"), wrt=wrt)
    xs = tensors(values, wrt)
    assert torch.autograd.gradcheck(f, xs)
    assert torch.autograd.gradgradcheck(f, xs)


def test_against_torch_det_with_a_batch_and_a_shared_input():
    """gauss.dd's value, gradient and second derivatives beside torch's own Cholesky,
    with x batched and S, mu shared by every row (their gradients summed over the rows)."""
    def reference(S, x, mu):
        L = torch.linalg.cholesky(torch.tril(S) + torch.tril(S, -1).T)  # reads S's lower part
        z = torch.linalg.solve_triangular(L, (x - mu).unsqueeze(-1), upper=False)[..., 0]
        n = S.shape[-1]
        return -0.5 * (z * z).sum(-1) - torch.log(torch.diagonal(L)).sum() \
            - n / 2 * np.log(2 * np.pi)

    rng = np.random.default_rng(3)
    S = torch.tensor([[2.0, 0.5, 0.1], [0.5, 1.5, 0.2], [0.1, 0.2, 1.0]], dtype=F64)
    x = torch.tensor(rng.normal(size=(4, 3)), dtype=F64)
    mu = torch.tensor(rng.normal(size=3), dtype=F64)
    f = dt.function(program("gauss.dd"))
    ours, theirs = [], []
    for fn, out in ((f, ours), (reference, theirs)):
        args = [t.clone().requires_grad_() for t in (S, x, mu)]
        value = fn(*args)
        grads = torch.autograd.grad(value.sum(), args, create_graph=True)
        second = torch.autograd.grad(grads[1].sum() + grads[2].square().sum(), args)
        out += [value, *grads, *second]
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_positional_keyword_float32_and_wrt():
    prog = program("matrix.dd")
    f = dt.function(prog, of="q", wrt=["v"])
    A = torch.eye(3, dtype=torch.float32) * 2
    v = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    q = f(A, v=v)
    assert q.dtype == torch.float32 and q.shape == ()
    assert q.item() == pytest.approx(2 * 14)
    q.backward()
    torch.testing.assert_close(v.grad, 4 * v.detach())  # d(v'Av)/dv = 2 A v
    A.requires_grad_()
    (g,) = torch.autograd.grad(f(A, v), [A], allow_unused=True)
    assert g is None  # A is outside wrt: no gradient, as if detached
    # an int input and a float64 one give float64
    assert f(np.eye(3, dtype=np.int64), torch.ones(3, dtype=F64)).dtype == F64


def test_vector_output_and_batch():
    f = dt.function(program("special.dd"), of="f")
    x = torch.tensor(np.random.default_rng(5).uniform(0.5, 1.5, (2, 3)), dtype=F64,
                     requires_grad=True)
    y = torch.tensor([0.1, -0.2, 0.3], dtype=F64, requires_grad=True)
    assert f(x, y).shape == (2, 3)
    want = program("special.dd")(x=x.detach().numpy(), y=y.detach().numpy())["f"]
    np.testing.assert_allclose(f(x, y).detach().numpy(), want, rtol=1e-14)
    assert torch.autograd.gradcheck(f, (x, y))
    assert torch.autograd.gradgradcheck(f, (x, y))


def test_bad_calls_are_usage_errors():
    f = dt.function(program("gauss.dd"))
    with pytest.raises(UsageError, match="missing value for mu"):
        f(torch.eye(3), torch.ones(3))
    with pytest.raises(UsageError, match="'sigma' is not an input"):
        f(torch.eye(3), torch.ones(3), sigma=1.0)
    with pytest.raises(UsageError, match="given twice"):
        f(torch.eye(3), torch.ones(3), torch.ones(3), x=1.0)
    with pytest.raises(InputError, match="input 'S' is declared with shape"):
        f(torch.eye(2), torch.ones(3), torch.ones(3))
    with pytest.raises(UsageError, match="pick one with of="):
        dt.function(program("matrix.dd"))


# examples/bridges/torch_layer.py's model, its loss compiled with fullgraph=True (a graph
# break would raise): the compiled gradients beside eager mode's, then a short training run.
COMPILED = """
import importlib.util, sys, torch
spec = importlib.util.spec_from_file_location("torch_layer", sys.argv[1])
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)
torch.manual_seed(1)
model = example.Model()
loss = example.compiled_loss(model)
points, target = torch.rand(16, 2, dtype=torch.float64), torch.rand(16, dtype=torch.float64)
params = list(model.parameters())
compiled = torch.autograd.grad(loss(points, target), params)
eager = torch.autograd.grad(((model(points) - target) ** 2).mean(), params)
for a, b in zip(compiled, eager, strict=True):
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
first, last = example.main(steps=40, model=model, loss_fn=loss)
print("losses", first, last)
"""


def test_torch_compile_trains_and_its_cached_graphs_find_their_operators(tmp_path):
    """A model with a .dd layer compiled whole (fullgraph=True) gives eager mode's gradients
    and trains, in two processes one after the other. The second loads the compiled graphs
    from torch.compile's cache on disk without tracing the backward, so the derivative
    operators it names must be found from their keys (paths that mean the same in every
    process), not from numbers given out in the order of tracing."""
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"),
               DIFFDSL_CACHE_DIR=str(tmp_path / "diffdsl"))
    for _ in range(2):
        run = subprocess.run([sys.executable, "-c", COMPILED,
                              str(EXAMPLES / "bridges" / "torch_layer.py")],
                             capture_output=True, text=True, env=env, timeout=300, check=False)
        assert run.returncode == 0, run.stderr[-3000:]
        first, last = map(float, run.stdout.split("losses")[1].split())
        assert last < first / 2
    with pytest.raises(UsageError, match="no diffdsl.torch.function"):
        dt.op_of("0123 cpu f x|vjp:0")


@settings(max_examples=20, deadline=None)
@given(batch=st.lists(st.integers(1, 3), max_size=2), a_batched=st.booleans(),
       v_batched=st.booleans(), seed=st.integers(0, 2**16))
def test_batches_and_shared_inputs_against_the_closed_form(batch, a_batched, v_batched, seed):
    """q = v'Av (matrix.dd) over any batch, each input batched or shared: the gradients of
    the rows' sum are v v' and (A + A')v per row, summed over the rows for a shared input."""
    rng = np.random.default_rng(seed)
    batch = tuple(batch)
    A = rng.normal(size=(batch if a_batched else ()) + (3, 3))
    v = rng.normal(size=(batch if v_batched else ()) + (3,))
    f = dt.function(program("matrix.dd"), of="q")
    At, vt = (torch.tensor(a, requires_grad=True) for a in (A, v))
    q = f(At, vt)
    rows = batch if (a_batched or v_batched) and batch else ()
    assert q.shape == rows
    q.sum().backward()
    dA, dv = quadratic_form_gradients(A, v, rows)
    np.testing.assert_allclose(At.grad.numpy(), dA, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(vt.grad.numpy(), dv, rtol=1e-12, atol=1e-12)


def test_the_custom_operator_itself():
    """The operator torch.compile sees, called eagerly: torch.library.opcheck (its schema, fake
    implementation and autograd registration), then gradcheck and gradgradcheck through it
    (its backward applies the operator again on the vjp)."""
    f = dt.function(program("gauss.dd"))
    key = dt.key_of(f.op)
    S = torch.tensor(POINTS["gauss.dd"][0]["S"], requires_grad=True)
    x = torch.tensor(np.random.default_rng(4).normal(size=(2, 3)), requires_grad=True)
    mu = torch.zeros(3, dtype=F64, requires_grad=True)
    torch.library.opcheck(torch.ops.diffdsl.call.default, (key, [S, x, mu]))

    def through_the_operator(S, x, mu):
        return torch.ops.diffdsl.call(key, [S, x, mu])

    assert torch.autograd.gradcheck(through_the_operator, (S, x, mu))
    assert torch.autograd.gradgradcheck(through_the_operator, (S, x, mu))
