"""A diffdsl program as a JAX function: jit, vmap, grad, jacfwd, jacrev, any order (`function`).

    import diffdsl, diffdsl.jax
    f = diffdsl.jax.function(diffdsl.load("examples/rosenbrock.dd"))
    jax.jit(jax.grad(f))(jnp.ones(4))

Every call binds one JAX primitive, `diffdsl_call`, whose parameter is an `Op`
(runtime/bridge.py: a graph called by position, one flat output). The primitive has the
four rules JAX asks of one:

- evaluation: outside `jit` the kernel is called on the arrays directly; under `jit` on the
  CPU as an XLA foreign function (runtime/xla_call.py: a typed-FFI handler around the
  kernel's machine code, no Python and no GIL a call, as fast as jitted jax.numpy on small
  programs: bench/bridges.py), elsewhere through `jax.pure_callback`, which is also taken
  for tape kernels and for batches big enough for the engine's threads (`ROUTE =
  "callback"` takes it always);
- forward mode: the tangent is the primitive again, on the Op's jvp (the tangents as inputs);
- transposition: a jvp Op is linear in its tangents, and its transpose is the primitive on the
  parent's vjp, so reverse mode is forward mode transposed, as for JAX's own primitives;
- batching (`vmap`): the mapped axis becomes a leading batch dimension, which the kernels run
  as rows.

So second and higher derivatives in any mix of modes are compiled kernels of derivative graphs.
Why not `jax.custom_vjp`: it refuses forward mode (`jacfwd`). Why not `jax.custom_jvp` over
a callback: reverse mode must transpose the tangent rule, and a callback has no transpose.
Why not `jax.custom_derivatives.linear_call`: it is not differentiable in its residuals, so
the second derivative fails. JAX is imported here only: `import diffdsl` never loads it.

Only the inputs in `wrt` are differentiated by: a tangent or cotangent of another input is
taken as zero (those inputs are treated as constants).
"""

from __future__ import annotations

import ctypes
import hashlib
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from .errors import UsageError
from .runtime import xla_call
from .runtime.bridge import Op, arrange, program_op
from .runtime.engine import resolve_backend

__all__ = ["function"]

call_p = Primitive("diffdsl_call")
ROUTE = "ffi"  # how `jit` calls a kernel on the CPU: "callback", or "ffi" (see above)
# (graph, dtype, steps, rows) -> (target name, library, function pointer, kernel), or (None,)
# where the kernel takes the callback. All four live as long as the process: XLA may call the
# handler from any executable compiled with it, after the program that made it is gone, and
# the kernel's code is unloaded with the kernel.
_targets: dict = {}
_CALL = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)


def _dtype(xs) -> np.dtype:
    return np.dtype(xs[0].dtype) if xs else np.dtype(np.float64)


def _abstract(*xs, op: Op):
    return ShapedArray(op.out_shape([x.shape for x in xs]), _dtype(xs))


def _eager(*xs, op: Op):
    """Outside `jit`: the kernel on the arrays' host buffers (views, no copy on the CPU)."""
    out = op([np.asarray(x) for x in xs], _dtype(xs).name)
    return jnp.asarray(out)


def _host(*xs, op: Op):
    """Under `jit`: a callback into the kernel."""
    shape = jax.ShapeDtypeStruct(op.out_shape([x.shape for x in xs]), _dtype(xs))
    dtype = _dtype(xs).name
    return jax.pure_callback(lambda *arrays: op([np.asarray(a) for a in arrays], dtype),
                             shape, *xs)


def _lowered(*xs, op: Op):
    """Under `jit` on the CPU: the kernel as a custom call where it can be, else `_host`."""
    shapes = [x.shape for x in xs]
    name = _target(op, shapes, _dtype(xs).name) if ROUTE == "ffi" else None
    if name is None:
        return _host(*xs, op=op)
    out = jax.ShapeDtypeStruct(op.out_shape(shapes), _dtype(xs))
    return jax.ffi.ffi_call(name, out)(*xs)


def _target(op: Op, shapes: list, dtype: str):
    """The custom call's registered name for this layout, made once; None for the callback:
    a backend other than the CPU's, a tape kernel, or a batch that the engine would share
    among threads (`cpu.PARALLEL_WORK`)."""
    from .backends import cpu
    if resolve_backend(op.prog.backend) not in ("cpu", "auto"):
        return None
    batch = op.batch(shapes)
    rows = math.prod(batch)
    if rows == 0 or (rows > 1 and rows * len(op.graph.nodes) >= cpu.PARALLEL_WORK):
        return None
    steps = [math.prod(declared) if len(shape) > len(declared) else 0
             for shape, declared in zip(shapes, op.shapes, strict=True)] + [op.size]
    key = (op.graph, dtype, tuple(steps), rows)
    found = _targets.get(key)
    if found is None:
        kernel = op.prog.kernel(op.graph, dtype)
        made = xla_call.entry(kernel, steps, rows)
        found = (None,)
        if made is not None:
            library, address = made
            # named by what it computes: a persistent compilation cache's executable, loaded
            # by another process, finds the same handler under the same name
            name = "diffdsl_" + hashlib.sha256(repr((op.graph.key(), key[1:])).encode()
                                               ).hexdigest()[:40]
            pointer = _CALL(address)
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(pointer), platform="cpu")
            found = (name, library, pointer, kernel)
        _targets[key] = found
    return found[0]


def _jvp(primals, tangents, *, op: Op):
    out = call_p.bind(*primals, op=op)
    which = tuple(k for k, t in enumerate(tangents)
                  if type(t) is not ad.Zero and op.active[k])
    if not which:
        return out, jnp.zeros(out.shape, out.dtype)
    ts = [_like(tangents[k], primals[k]) for k in which]
    return out, call_p.bind(*primals, *ts, op=op.jvp(which))


def _like(tangent, primal):
    """A tangent in its primal's dtype (JAX's float0 never reaches here: inputs are floats)."""
    return tangent if tangent.dtype == primal.dtype else tangent.astype(primal.dtype)


def _transpose(ct, *args, op: Op):
    """The transpose of a jvp Op in its tangents: the parent's vjp of the cotangent."""
    if op.origin is None or op.origin[1] != "jvp":
        raise UsageError(f"{op.request} is not linear in any of its inputs")
    parent, _, which = op.origin
    n = len(parent.shapes)
    primals, tangents = args[:n], args[n:]
    if any(ad.is_undefined_primal(x) for x in primals):
        raise UsageError(f"{op.request} is not linear in the program's inputs")
    cts = [None] * len(args)
    lin = [j for j, t in enumerate(tangents) if ad.is_undefined_primal(t)]
    if type(ct) is ad.Zero or not lin:
        return cts
    sub = tuple(which[j] for j in lin)
    flat = call_p.bind(*primals, ct, op=parent.vjp(sub))
    shapes = [x.shape for x in primals]  # a tangent may be batched where its input is not
    for j in lin:
        shapes[which[j]] = tangents[j].aval.shape
    for j, piece in zip(lin, parent.cotangents(sub, flat, shapes), strict=True):
        cts[n + j] = piece
    return cts


def _batch(args, dims, *, op: Op):
    """vmap: the mapped axis first, in front of any batch the arguments have already."""
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    moved = [a if d is None else jnp.moveaxis(a, d, 0)
             for a, d in zip(args, dims, strict=True)]
    batch = op.batch([a.shape[1:] if d is not None else a.shape
                      for a, d in zip(moved, dims, strict=True)])
    xs = []
    for a, d, declared in zip(moved, dims, op.shapes, strict=True):
        if d is not None or a.ndim > len(declared):  # mapped, or batched already: both
            target = (size, *batch, *declared)
            if d is None:
                a = jnp.broadcast_to(a, target)
            elif a.shape != target:
                a = jnp.broadcast_to(a.reshape((size,) + (1,) * len(batch) + declared),
                                     target)
        xs.append(a)
    return call_p.bind(*xs, op=op), 0


call_p.def_impl(_eager)
call_p.def_abstract_eval(_abstract)
mlir.register_lowering(call_p, mlir.lower_fun(_host, multiple_results=False))
mlir.register_lowering(call_p, mlir.lower_fun(_lowered, multiple_results=False), platform="cpu")
ad.primitive_jvps[call_p] = _jvp
ad.primitive_transposes[call_p] = _transpose
batching.primitive_batchers[call_p] = _batch


def function(prog, of: str | None = None, wrt=None):
    """Output `of` of `prog` (its only output by default) as a JAX function of its inputs,
    by keyword or positionally in the order of `prog.inputs`, differentiable to any order
    in both modes, under `jit` and `vmap`.

    Leading dimensions beyond an input's declared shape are a batch, as for `prog(...)`. The
    inputs are converted to one dtype: float32 when every floating input is float32, else
    float64 (which needs `jax.config.update("jax_enable_x64", True)`; without it JAX makes
    every array float32, and float32 kernels run).
    """
    op = program_op(prog, of, wrt)
    names = list(prog.graph.inputs)
    shape = op.shape

    def diffdsl_function(*args, **kwargs):
        xs = [jnp.asarray(v) for v in arrange(names, args, kwargs, prog.filename)]
        floats = [x.dtype for x in xs if jnp.issubdtype(x.dtype, jnp.floating)]
        dtype = jnp.float32 if floats and all(d == jnp.float32 for d in floats) \
            else jnp.float64
        xs = [x.astype(dtype) for x in xs]
        op.batch([x.shape for x in xs])  # the shapes checked, naming the inputs
        out = call_p.bind(*xs, op=op)
        return out.reshape(tuple(out.shape[:-1]) + shape)

    diffdsl_function.__name__ = diffdsl_function.__qualname__ = f"diffdsl_{op.request}"
    diffdsl_function.op = op
    return diffdsl_function
