"""The builtin functions of the language (LANGUAGE.md, "Builtins").

Each entry takes the value algebra, the evaluated arguments and the call node (for spans),
and returns a value. Elementwise builtins map over arrays; the reductions take one array or,
through `GenCall`, a generator.
"""

from __future__ import annotations

import math

import numpy as np

from .errors import ArityError, ShapeError, StaticValueError, TypeMismatchError
from .ops import UNARY_BUILTINS
from .values import Dyn, describe, is_array


def _arity(call, args, *counts):
    if len(args) not in counts:
        want = " or ".join(str(c) for c in counts)
        plural = "" if counts == (1,) else "s"
        raise ArityError(f"{call.func}() takes {want} argument{plural}, got {len(args)}",
                         call.span)


def _unary(name):
    def fn(v, args, call):
        _arity(call, args, 1)
        return v.apply(name, args, call.span)
    return fn


def _binary(name):
    def fn(v, args, call):
        _arity(call, args, 2)
        return v.apply(name, args, call.span)
    return fn


def _reduction(name):
    def fn(v, args, call):
        if len(args) == 1:
            value = args[0]
            items = list(value.flat) if is_array(value) else [value]
            return v.reduce(name, items, call.span)
        if name in ("min", "max") and len(args) >= 2:
            return v.reduce(name, args, call.span)
        raise ArityError(f"{name}() takes 1 argument (an array or a generator)"
                         + (" or several scalars" if name in ("min", "max") else "")
                         + f", got {len(args)}", call.span)
    return fn


def _need_matrix(value, call, what="a matrix"):
    if not is_array(value) or value.ndim != 2:
        raise ShapeError(f"{call.func}() needs {what}, got {describe(value)}", call.span)


def _need_vector(value, call):
    if not is_array(value) or value.ndim != 1:
        raise ShapeError(f"{call.func}() needs a vector, got {describe(value)}", call.span)


def _static_int(value, call, k):
    if isinstance(value, Dyn):
        raise StaticValueError(f"argument {k + 1} of {call.func}() must be static",
                               call.args[k].span)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeMismatchError(f"argument {k + 1} of {call.func}() must be an integer, got "
                                f"{describe(value)}", call.args[k].span)
    return value


def _dot(v, args, call):
    _arity(call, args, 2)
    u, w = args
    _need_vector(u, call)
    _need_vector(w, call)
    if u.shape != w.shape:
        raise ShapeError(f"dot() needs vectors of one length, got {list(u.shape)} and "
                         f"{list(w.shape)}", call.span)
    return v.dot_flat(list(u), list(w), call.span)


def _transpose(v, args, call):
    _arity(call, args, 1)
    if not is_array(args[0]):
        raise ShapeError(f"transpose() needs an array, got {describe(args[0])}", call.span)
    return args[0].T.copy()


def _trace(v, args, call):
    _arity(call, args, 1)
    a = args[0]
    _need_matrix(a, call, "a square matrix")
    if a.shape[0] != a.shape[1]:
        raise ShapeError(f"trace() needs a square matrix, got shape {list(a.shape)}", call.span)
    return v.reduce("sum", [a[i, i] for i in range(a.shape[0])], call.span)


def _minor(v, args, call):
    _arity(call, args, 3)
    a = args[0]
    _need_matrix(a, call)
    i = _static_int(args[1], call, 1)
    j = _static_int(args[2], call, 2)
    rows, cols = a.shape
    for value, dim, k in ((i, rows, 1), (j, cols, 2)):
        if not -dim <= value < dim:
            from .errors import IndexRangeError
            raise IndexRangeError(f"minor() index {value} is out of range for size {dim}",
                                  call.args[k].span)
    if rows < 2 or cols < 2:
        raise ShapeError(f"minor() needs at least a 2x2 matrix, got shape {list(a.shape)}",
                         call.span)
    return np.delete(np.delete(a, i % rows, axis=0), j % cols, axis=1)


def _filled(fill):
    def fn(v, args, call):
        if not args:
            raise ArityError(f"{call.func}() takes at least 1 dimension", call.span)
        dims = [_static_int(a, call, k) for k, a in enumerate(args)]
        for k, d in enumerate(dims):
            if d < 0:
                raise ShapeError(f"{call.func}() dimensions cannot be negative, got {d}",
                                 call.args[k].span)
        v.check_rank(len(dims), call.span, f"{call.func}()")
        v.check_size(math.prod(dims), call.span, f"{call.func}()")
        out = np.empty(dims, dtype=object)
        out.fill(fill)
        return out
    return fn


def _eye(v, args, call):
    _arity(call, args, 1)
    n = _static_int(args[0], call, 0)
    if n < 0:
        raise ShapeError(f"eye() size cannot be negative, got {n}", call.args[0].span)
    v.check_size(n * n, call.span, "eye()")
    out = np.empty((n, n), dtype=object)
    out.fill(0.0)
    for i in range(n):
        out[i, i] = 1.0
    return out


def _dim(axis, what):
    def fn(v, args, call):
        _arity(call, args, 1)
        a = args[0]
        if not is_array(a) or a.ndim <= axis:
            raise ShapeError(f"{call.func}() needs {what}, got {describe(a)}", call.span)
        return int(a.shape[axis])
    return fn


def _size(v, args, call):
    _arity(call, args, 1)
    return int(args[0].size) if is_array(args[0]) else 1


BUILTINS = {name: _unary(name) for name in UNARY_BUILTINS}
BUILTINS.update({name: _binary(name) for name in ("atan2", "hypot", "pow")})
BUILTINS.update({name: _reduction(name) for name in ("sum", "prod", "min", "max")})
BUILTINS.update({
    "dot": _dot,
    "transpose": _transpose,
    "trace": _trace,
    "minor": _minor,
    "zeros": _filled(0.0),
    "ones": _filled(1.0),
    "eye": _eye,
    "len": _dim(0, "an array"),
    "rows": _dim(0, "an array"),
    "cols": _dim(1, "a matrix or an array of rank 2 or more"),
    "size": _size,
})
