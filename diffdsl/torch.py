"""A diffdsl program as a PyTorch function that autograd differentiates (`function`).

    import diffdsl, diffdsl.torch
    f = diffdsl.torch.function(diffdsl.load("examples/rosenbrock.dd"))
    loss = f(x=torch.randn(4, dtype=torch.float64, requires_grad=True))
    loss.backward()

Under torch.compile a call is one custom operator, `torch.ops.diffdsl.call(key, xs)`,
registered with `torch.library.custom_op`: `key` names an `Op` (runtime/bridge.py: a graph
called by position, one flat output; the key is its `path`, the same in every process) and
`xs` are its inputs. torch.compile sees one opaque operator with a fake (shape-only)
implementation, so it compiles without graph breaks. Outside torch.compile the same Op runs
as an `autograd.Function`, a third of the operator's cost a call. Either backward applies the
Op's vjp, whose backward applies the vjp of that, and so on: gradients of any order run
compiled kernels. PyTorch is imported here only: `import diffdsl` never loads it.

CPU tensors reach the kernels as NumPy views (no copy when contiguous and of the kernel's
dtype) and the results come back as tensors over NumPy's arrays; CUDA tensors go to the
CUDA backend (`backend="auto"` sends device arrays there), the results stay on the GPU.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from .errors import UsageError
from .runtime.bridge import Op, arrange, program_op

__all__ = ["function"]

# The operator takes an Op by its `path`, a str that means the same in every process: a graph
# that torch.compile loads from its cache on disk names the derivative Ops of an earlier
# process, which are made again here from the program's Op (`Op.derived_by`).
_programs: dict[str, Op] = {}  # the path of each program's Op -> that Op
_ops: dict[str, Op] = {}  # every Op called so far, by path
_lock = threading.Lock()


def key_of(op: Op) -> str:
    """The operator's key for `op`: its path, remembered so that `op_of` finds it."""
    if op.origin is None:
        with _lock:
            _programs.setdefault(op.path, op)
    _ops.setdefault(op.path, op)
    return op.path


def op_of(key: str) -> Op:
    """The Op that `key` names, made from its program's Op where it is new to this process."""
    found = _ops.get(key)
    if found is None:
        top, _, steps = key.partition("|")
        program = _programs.get(top)
        if program is None:
            raise UsageError("a diffdsl operator names a program that no "
                             "diffdsl.torch.function of this process was made for",
                             hint="call diffdsl.torch.function(prog) before running a "
                                  "compiled graph that uses it")
        found = _ops.setdefault(key, program.derived_by(steps))
    return found


def _run(key: str, xs) -> torch.Tensor:
    """The Op that `key` names on tensors `xs`: its output, `batch + (size,)`."""
    op = op_of(key)
    dtype = xs[0].dtype if xs else torch.float64
    if any(x.is_cuda for x in xs):
        out = op(list(xs), _dtype_name(dtype))  # the engine takes CUDA arrays in place
        return torch.as_tensor(out, device=next(x.device for x in xs if x.is_cuda))
    out = op([x.detach().numpy() for x in xs], _dtype_name(dtype))
    return torch.from_numpy(np.asarray(out))


@torch.library.custom_op("diffdsl::call", mutates_args=())
def call(key: str, xs: list[torch.Tensor]) -> torch.Tensor:
    """The Op that `key` names on tensors `xs`: its output, `batch + (size,)`."""
    return _run(key, xs)


@call.register_fake
def _(key, xs):
    op = op_of(key)
    dtype = xs[0].dtype if xs else torch.float64
    device = xs[0].device if xs else None
    return torch.empty(op.out_shape([tuple(x.shape) for x in xs]), dtype=dtype, device=device)


def apply(key: str, xs: list) -> torch.Tensor:
    """The Op on `xs`, differentiable: the custom operator while torch.compile traces, else an
    `autograd.Function`, which does the same with a third of the operator's cost a call
    (bench/bridges.py)."""
    if torch.compiler.is_compiling():
        return call(key, list(xs))
    return _Eager.apply(key, *xs)


def _cotangents(key: str, xs, need, grad, via) -> list:
    """The backward of both: the Op's vjp by `via` (differentiable in turn), split. The
    operator's backward stays the operator: torch.compile and AOT tracing run it on tensor
    subclasses, which have no NumPy view."""
    op = op_of(key)
    which = tuple(k for k, wanted in enumerate(need) if wanted and op.active[k])
    grads = [None] * len(xs)
    if which:
        flat = via(key_of(op.vjp(which)), [*xs, grad.contiguous()])
        shapes = [tuple(x.shape) for x in xs]
        for k, piece in zip(which, op.cotangents(which, flat, shapes), strict=True):
            grads[k] = piece
    return grads


def _setup(ctx, inputs, output):
    key, xs = inputs
    ctx.key = key
    ctx.need = tuple(bool(x.requires_grad) for x in xs)
    ctx.save_for_backward(*xs)


def _backward(ctx, grad):
    return None, _cotangents(ctx.key, ctx.saved_tensors, ctx.need, grad, call)


call.register_autograd(_backward, setup_context=_setup)


class _Eager(torch.autograd.Function):
    @staticmethod
    def forward(ctx, key, *xs):
        ctx.key = key
        ctx.save_for_backward(*xs)
        return _run(key, xs)

    @staticmethod
    def backward(ctx, grad):
        return None, *_cotangents(ctx.key, ctx.saved_tensors, ctx.needs_input_grad[1:], grad,
                                  apply)


def function(prog, of: str | None = None, wrt=None):
    """Output `of` of `prog` (its only output by default) as a function of tensors that
    autograd differentiates through the compiled kernels, to any order.

    Call it with the inputs by keyword or positionally in the order of `prog.inputs`; numbers
    and arrays are taken as tensors. Leading dimensions beyond an input's declared shape are a
    batch (the output gets them in front), as for `prog(...)`. The inputs are converted to
    one dtype: float32 when every floating input is float32, else float64; the gradients
    come back in each input's own dtype. Only the inputs in `wrt` (all by default) are
    differentiated by; the others get no gradient, as if detached.
    """
    op = program_op(prog, of, wrt)
    key = key_of(op)
    names = list(prog.graph.inputs)
    shape = op.shape

    def diffdsl_function(*args, **kwargs):
        xs = _tensors(arrange(names, args, kwargs, prog.filename))
        op.batch([tuple(x.shape) for x in xs])  # the shapes checked, naming the inputs
        out = apply(key, xs)
        return out.reshape(tuple(out.shape[:-1]) + shape)

    diffdsl_function.__name__ = diffdsl_function.__qualname__ = f"diffdsl_{op.request}"
    diffdsl_function.op = op
    return diffdsl_function


def _tensors(values: list) -> list:
    """Tensors of one dtype (float32 if every floating one is, else float64) on one device."""
    tensors = [v if isinstance(v, torch.Tensor) else torch.as_tensor(np.asarray(v))
               for v in values]
    floats = [t.dtype for t in tensors if t.is_floating_point()]
    dtype = torch.float32 if floats and all(d == torch.float32 for d in floats) \
        else torch.float64
    device = next((t.device for t in tensors if t.is_cuda), None)
    return [t.to(dtype=dtype, device=device) if device is not None else t.to(dtype)
            for t in tensors]


def _dtype_name(dtype) -> str:
    return "float32" if dtype == torch.float32 else "float64"
