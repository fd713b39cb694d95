"""Lowering: syntax tree to IR graph.

Arrays exist only here: an array value is a NumPy object array (static shape) whose elements
are static Python numbers or `Dyn` node references, so indexing and slicing follow NumPy
exactly. Loops and comprehensions unroll, calls inline, static conditions pick their branch,
and dynamic ones become select nodes. Calls are memoised on their arguments: a `def` is pure,
so a call seen before returns its earlier result without being expanded again; this is what
turns the n! expansion of the determinant by minors into about n·2ⁿ steps.
"""

from __future__ import annotations

import difflib
import math
import sys
import threading
from collections import ChainMap

import numpy as np

from . import limits as limits_
from . import syntax as s
from .builtins import BUILTINS, GENERATOR_BUILTINS, reduce_items
from .errors import (
    AssignmentError,
    LimitError,
    ShapeError,
    StaticValueError,
    TypeMismatchError,
    UnknownNameError,
)
from .inner_derivs import DERIVATIVES, lower_derivative
from .ir import Builder, Graph, Port
from .values import (
    Dyn,
    Values,
    describe,
    is_array,
    memo_key,
)
from .while_loop import lower_while

RECURSION_LIMIT = 1000


def lower(program: s.Program, limits: limits_.Limits | None = None) -> Graph:
    """Lower a parsed program to its graph. Raises `DiffDSLError` subclasses on bad programs.

    `limits` bound the work (see limits.py); by default those in force in the calling thread.
    """
    limits = limits_.current() if limits is None else limits
    return run_deep(_Lowerer(program, limits).run)


def run_deep(fn, *args):
    """Run `fn` on a thread with a large stack, so deep programs do not hit Python's limits.

    Lowering walks the syntax tree recursively; a 10,000-term sum or a recursion 1,000 calls
    deep needs far more frames than the default limit allows.
    """
    result: list = []
    error: list = []

    def target():
        try:
            result.append(fn(*args))
        except BaseException as exc:  # handed to the calling thread below
            error.append(exc)

    old_limit = sys.getrecursionlimit()
    old_size = threading.stack_size()
    sys.setrecursionlimit(max(old_limit, 400_000))
    threading.stack_size(512 * 1024 * 1024)
    try:
        thread = threading.Thread(target=target, name="diffdsl-lower")
        thread.start()
    finally:
        threading.stack_size(old_size)
    thread.join()
    sys.setrecursionlimit(old_limit)
    if error:
        raise error[0]
    return result[0]


class _Function:
    def __init__(self, node: s.Def):
        self.node = node
        self.name = node.name
        self.params = node.params


class _Lowerer:
    def __init__(self, program: s.Program, limits: limits_.Limits):
        self.program = program
        self.b = Builder(limits.nodes)
        self.v = Values(self.b, limits)
        self.inputs: dict[str, Port] = {}
        self.input_values: dict = {}
        self.consts: dict = {}
        self.functions: dict[str, _Function] = {}
        self.outputs: dict[str, Port] = {}
        self.output_spans: dict = {}
        self.memo: dict = {}
        self.depth = 0
        self.call_stack: list[str] = []

    # program -------------------------------------------------------------------------------
    def run(self) -> Graph:
        statements = self.program.statements
        for st in statements:
            if isinstance(st, s.Def):
                if st.name in self.functions:
                    raise AssignmentError(f"function '{st.name}' is defined twice", st.span)
                for k, param in enumerate(st.params):
                    if param in st.params[:k]:
                        raise AssignmentError(f"def '{st.name}' has two parameters named "
                                              f"'{param}'", st.span)
                self._check_body(st)
                self.functions[st.name] = _Function(st)
        scope: dict = {}
        unnamed = [st for st in statements if isinstance(st, s.Output) and st.name is None
                   and not isinstance(st.value, s.Name)]
        outputs = [st for st in statements if isinstance(st, s.Output)]
        if unnamed and len(outputs) > 1:
            raise AssignmentError(
                "an output without a name is allowed only when the file has one output",
                unnamed[0].span, hint="name it: `output NAME = ...`")
        for st in statements:
            self.top_statement(st, scope)
        if not self.outputs:
            raise AssignmentError("the program has no output", _end_span(self.program),
                                  hint="add a line such as `output y = ...`")
        return self.b.graph(self.inputs, self.outputs)

    def _check_body(self, d: s.Def) -> None:
        for i, st in enumerate(d.body):
            if isinstance(st, s.Return) and i != len(d.body) - 1:
                raise AssignmentError("`return` must be the last statement of a def", st.span)
        if d.result is None and not (d.body and isinstance(d.body[-1], s.Return)):
            raise AssignmentError(f"def '{d.name}' must end with `return EXPR`", d.span)
        self._check_blocks(d.body)
        for st in d.body:
            if isinstance(st, (s.InputDecl, s.ConstDecl, s.Def, s.Output)):
                self._check_nested([st], "a def")

    def _check_nested(self, body, where: str) -> None:
        """Declarations and `return` belong at the top level and at the end of a def."""
        for st in body:
            if isinstance(st, (s.InputDecl, s.ConstDecl, s.Def, s.Output)):
                word = {s.InputDecl: "input", s.ConstDecl: "const", s.Def: "def",
                        s.Output: "output"}[type(st)]
                raise AssignmentError(f"`{word}` is allowed only at the top level, not in {where}",
                                      st.span)
            if isinstance(st, s.Return):
                raise AssignmentError("`return` must be the last statement of a def, "
                                      "not inside a block", st.span)
        self._check_blocks(body)

    def _check_blocks(self, body) -> None:
        for st in body:
            if isinstance(st, s.For):
                self._check_nested(st.body, "a loop")
            elif isinstance(st, s.While):  # `break if` belongs directly in its body
                self._check_nested([x for x in st.body if not isinstance(x, s.Break)], "a loop")
            elif isinstance(st, s.Break):
                raise AssignmentError("`break if` is allowed only directly in the body of a "
                                      "while loop", st.span)
            elif isinstance(st, s.If):
                for _, b in st.branches:
                    self._check_nested(b, "an if block")
                if st.orelse:
                    self._check_nested(st.orelse, "an if block")

    def top_statement(self, st, scope: dict) -> None:
        try:
            self._top_statement(st, scope)
        except LimitError as exc:  # the graph's node limit, found below the syntax
            raise exc.located(st.span) from None

    def _top_statement(self, st, scope: dict) -> None:
        if isinstance(st, s.InputDecl):
            self.declare_input(st, scope)
        elif isinstance(st, s.ConstDecl):
            self.declare_const(st, scope)
        elif isinstance(st, s.Def):
            return
        elif isinstance(st, s.Output):
            self.declare_output(st, scope)
        elif isinstance(st, s.Return):
            raise AssignmentError("`return` is allowed only at the end of a def", st.span)
        else:
            self._check_blocks([st])
            self.statement(st, scope)

    def _taken(self, name: str, span) -> None:
        if name in self.inputs or name in self.consts:
            kind = "an input" if name in self.inputs else "a const"
            raise AssignmentError(f"'{name}' is already declared as {kind}", span)

    def declare_input(self, st: s.InputDecl, scope: dict) -> None:
        self._taken(st.name, st.span)
        if st.name in scope:
            raise AssignmentError(f"'{st.name}' is already a local name", st.span)
        dims = []
        for d in st.dims:
            value = self.expr(d, scope)
            if isinstance(value, bool) or not isinstance(value, int):
                self._need_static_int(value, d.span, "a dimension of an input")
            if value < 1:
                raise ShapeError(f"input dimensions must be at least 1, got {value}", d.span)
            dims.append(value)
        shape = tuple(dims)
        size = math.prod(shape)
        self.v.check_rank(len(shape), st.span, f"input '{st.name}'")
        self.v.check_size(size, st.span, f"input '{st.name}'")
        ids = tuple(self.b.input(st.name, k) for k in range(size))
        self.inputs[st.name] = Port(shape, ids, st.span)
        if shape:
            arr = np.empty(size, dtype=object)
            for k, i in enumerate(ids):
                arr[k] = self.v.dyn(i)
            value = arr.reshape(shape)
        else:
            value = self.v.dyn(ids[0])
        self.input_values[st.name] = value

    def declare_const(self, st: s.ConstDecl, scope: dict) -> None:
        self._taken(st.name, st.span)
        if st.name in scope:
            raise AssignmentError(f"'{st.name}' is already a local name", st.span)
        value = self.expr(st.value, scope)
        if not self.v.is_static(value):
            raise StaticValueError(
                f"const '{st.name}' must be static, but its value depends on an input",
                st.value.span, hint="use a plain assignment `name = ...` for dynamic values")
        self.consts[st.name] = value

    def declare_output(self, st: s.Output, scope: dict) -> None:
        if st.name is not None:
            name = st.name
        elif isinstance(st.value, s.Name):
            name = st.value.id
        else:
            name = "out"
        if name in self.outputs:
            raise AssignmentError(f"output '{name}' is declared twice", st.span)
        value = self.expr(st.value, scope)
        if is_array(value):
            shape = value.shape
            ids = tuple(self.v.node(x, st.value.span) for x in value.flat)
        else:
            shape = ()
            ids = (self.v.node(value, st.value.span),)
        self.outputs[name] = Port(tuple(shape), ids, st.span)

    # statements ----------------------------------------------------------------------------
    def block(self, body, scope: dict) -> None:
        for st in body:
            self.statement(st, scope)

    def statement(self, st, scope: dict) -> None:
        try:
            self._statement(st, scope)
        except LimitError as exc:  # placed at the innermost statement that met the limit
            raise exc.located(st.span) from None

    def _statement(self, st, scope: dict) -> None:
        if isinstance(st, s.Assign):
            self.assign(st.name, self.expr(st.value, scope), scope, st.span)
        elif isinstance(st, s.AugAssign):
            self.aug_assign(st, scope)
        elif isinstance(st, s.IndexAssign):
            new = self.expr(st.value, scope)
            self.assign(st.name, self.v.setitem(self.lookup_value(st.name, scope, st.span),
                                                self.subscripts(st.subscripts, scope), new,
                                                st.span), scope, st.span)
        elif isinstance(st, s.For):
            for item in self.iterate(st.iter, scope):
                self.assign(st.name, item, scope, st.span)
                self.block(st.body, scope)
        elif isinstance(st, s.If):
            self.if_statement(list(st.branches), st.orelse, scope)
        elif isinstance(st, s.While):
            lower_while(self, st, scope)
        elif isinstance(st, s.Return):
            raise AssignmentError("`return` must be the last statement of a def", st.span)
        else:  # pragma: no cover - the grammar has no other statement
            raise TypeError(f"unknown statement {type(st).__name__}")

    def assign(self, name: str, value, scope: dict, span) -> None:
        self._taken(name, span)
        scope[name] = value

    def aug_assign(self, st: s.AugAssign, scope: dict) -> None:
        old = self.lookup_value(st.name, scope, st.span)
        rhs = self.expr(st.value, scope)
        if st.subscripts is None:
            self.assign(st.name, self.v.arith(st.op, old, rhs, st.span), scope, st.span)
            return
        index = self.subscripts(st.subscripts, scope)
        current = self.v.getitem(old, index, st.span)
        new = self.v.arith(st.op, current, rhs, st.span)
        self.assign(st.name, self.v.setitem(old, index, new, st.span), scope, st.span)

    def if_statement(self, branches: list, orelse, scope: dict) -> None:
        if not branches:
            if orelse:
                self.block(orelse, scope)
            return
        test_node, body = branches[0]
        test = self.v.condition(self.expr(test_node, scope), test_node.span)
        if not isinstance(test, Dyn):
            if test:
                self.block(body, scope)
            else:
                self.if_statement(branches[1:], orelse, scope)
            return
        then_scope = type(scope)(scope)
        self.block(body, then_scope)
        else_scope = type(scope)(scope)
        self.if_statement(branches[1:], orelse, else_scope)
        for name in list(then_scope):
            if name not in else_scope:
                continue  # first defined in only some branches: undefined after the if
            a, b = then_scope[name], else_scope[name]
            if a is b:
                scope[name] = a
                continue
            scope[name] = self.v.merge(test, a, b, name, test_node.span)

    # names ---------------------------------------------------------------------------------
    def lookup_value(self, name: str, scope, span):
        if name in scope:
            return scope[name]
        if name in self.consts:
            return self.consts[name]
        if name in self.input_values and self._at_top(scope):
            return self.input_values[name]
        if name == "pi":
            return np.pi
        if name == "inf":
            return math.inf
        if name in self.functions or name in BUILTINS or name in DERIVATIVES:
            raise TypeMismatchError(f"'{name}' is a function; call it with arguments", span)
        if name in self.input_values:
            raise UnknownNameError(
                f"unknown name '{name}' in a function", span,
                hint=f"functions see their parameters, consts and other defs; "
                     f"pass '{name}' in as an argument")
        raise UnknownNameError(f"unknown name '{name}'", span, hint=self._suggest(name, scope))

    def _at_top(self, scope) -> bool:
        while isinstance(scope, ChainMap):
            scope = scope.maps[-1]
        return scope is not None and not isinstance(scope, _FunctionScope)

    def _suggest(self, name: str, scope) -> str | None:
        known = set(scope) | set(self.consts) | set(self.functions) | set(BUILTINS) | \
            set(DERIVATIVES) | {"pi", "inf"}
        if self._at_top(scope):
            known |= set(self.input_values)
        return _did_you_mean(name, known)

    # expressions ---------------------------------------------------------------------------
    def expr(self, e, scope):
        method = getattr(self, "e_" + type(e).__name__)
        return method(e, scope)

    def e_Num(self, e: s.Num, scope):
        return e.value

    def e_Name(self, e: s.Name, scope):
        return self.lookup_value(e.id, scope, e.span)

    def e_BinOp(self, e: s.BinOp, scope):
        left = self.expr(e.left, scope)
        right = self.expr(e.right, scope)
        if e.op == "@":
            return self.v.matmul(left, right, e.span)
        if e.op in ("//", "%"):
            return self.v.int_op(e.op, left, right, e.span)
        return self.v.arith(e.op, left, right, e.span)

    def e_UnaryOp(self, e: s.UnaryOp, scope):
        value = self.expr(e.operand, scope)
        return value if e.op == "+" else self.v.negate(value, e.span)

    def e_Compare(self, e: s.Compare, scope):
        return self.v.compare(e.op, self.expr(e.left, scope), self.expr(e.right, scope), e.span)

    def e_BoolOp(self, e: s.BoolOp, scope):
        left = self.v.condition(self.expr(e.left, scope), e.left.span)
        if not isinstance(left, Dyn):
            # Static short-circuit, as in Python: the other side may not even be valid.
            if (e.op == "and") != bool(left):
                return bool(left)
            return self.v.condition(self.expr(e.right, scope), e.right.span)
        right = self.v.condition(self.expr(e.right, scope), e.right.span)
        return self.v.logic(e.op, left, right)

    def e_Not(self, e: s.Not, scope):
        value = self.v.condition(self.expr(e.operand, scope), e.operand.span)
        if isinstance(value, Dyn):
            return self.v.dyn(self.b.op("not", value.id))
        return not value

    def e_Cond(self, e: s.Cond, scope):
        test = self.v.condition(self.expr(e.test, scope), e.test.span)
        if not isinstance(test, Dyn):
            return self.expr(e.then if test else e.orelse, scope)
        a = self.expr(e.then, scope)
        b = self.expr(e.orelse, scope)
        return self.v.merge(test, a, b, None, e.span)

    def e_ArrayLit(self, e: s.ArrayLit, scope):
        return self.v.stack([self.expr(x, scope) for x in e.elts], e.span)

    def e_Comprehension(self, e: s.Comprehension, scope):
        items = []
        self.generate(e.elt, e.clauses, 0, scope, items, e.span)
        return self.v.stack(items, e.span)

    def generate(self, elt, clauses, k: int, scope, out: list, array=None) -> None:
        """Append the elements of a generator to `out`; `array`: the span of a comprehension,
        whose length is checked against the elements limit as it grows."""
        if k == len(clauses):
            if array is not None:
                self.v.check_size(len(out) + 1, array, "this comprehension")
            out.append(self.expr(elt, scope))
            return
        clause = clauses[k]
        if isinstance(clause, s.CompIf):
            test = self.v.condition(self.expr(clause.test, scope), clause.test.span)
            if isinstance(test, Dyn):
                raise StaticValueError(
                    "a comprehension filter must be static, but this one depends on an input",
                    clause.test.span, hint="use `if c then a else b` inside the element")
            if test:
                self.generate(elt, clauses, k + 1, scope, out, array)
            return
        for item in self.iterate(clause.iter, scope):
            self.generate(elt, clauses, k + 1, ChainMap({clause.name: item}, scope), out, array)

    def iterate(self, e, scope) -> list:
        """The values a loop or a generator clause takes, each a step charged before the list
        is made: `range(10**9)` is refused at once, not after filling memory."""
        if isinstance(e, s.Call) and e.func == "range" and "range" not in self.functions:
            bounds = [self.expr(a, scope) for a in e.args]
            values = self.v.range(bounds, e)
            self.v.budget.charge(_range_length(values), e.span, "this loop")
            return list(values)
        value = self.expr(e, scope)
        if is_array(value):
            self.v.budget.charge(len(value), e.span, "this loop")
            return list(value)
        raise TypeMismatchError(f"can only loop over range(...) or an array, not {describe(value)}",
                                e.span)

    def e_Index(self, e: s.Index, scope):
        value = self.expr(e.value, scope)
        return self.v.getitem(value, self.subscripts(e.subscripts, scope), e.span)

    def subscripts(self, subs, scope) -> list:
        out = []
        for sub in subs:
            if isinstance(sub, s.Slice):
                parts = []
                for part in (sub.start, sub.stop, sub.step):
                    if part is None:
                        parts.append(None)
                        continue
                    value = self.expr(part, scope)
                    self._need_static_int(value, part.span, "a slice bound")
                    parts.append(value)
                if parts[2] == 0:
                    raise ShapeError("slice step cannot be zero", sub.span)
                out.append((slice(*parts), sub.span))
            else:
                value = self.expr(sub, scope)
                if is_array(value):
                    if not all(isinstance(x, int) and not isinstance(x, bool)
                               for x in value.flat):
                        raise StaticValueError("an index array must hold static integers",
                                               sub.span)
                else:
                    self._need_static_int(value, sub.span, "an index")
                out.append((value, sub.span))
        return out

    def _need_static_int(self, value, span, what: str) -> None:
        if isinstance(value, Dyn) or (is_array(value) and not self.v.is_static(value)):
            raise StaticValueError(f"{what} must be static, but this one depends on an input",
                                   span)
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeMismatchError(f"{what} must be an integer, got {describe(value)}", span)

    # calls ---------------------------------------------------------------------------------
    def e_Call(self, e: s.Call, scope):
        if e.func in self.functions:
            args = [self.expr(a, scope) for a in e.args]
            return self.call(self.functions[e.func], args, e)
        if e.func in scope or e.func in self.consts:
            raise TypeMismatchError(f"'{e.func}' is a value, not a function", e.func_span)
        if e.func in DERIVATIVES:
            return lower_derivative(self, e, scope)
        builtin = BUILTINS.get(e.func)
        if e.func == "range":
            raise TypeMismatchError("range(...) gives the values of a loop; use it after `in` in "
                                    "a for loop or a comprehension", e.func_span)
        if builtin is None:
            raise UnknownNameError(f"unknown function '{e.func}'", e.func_span,
                                   hint=self._suggest_function(e.func))
        args = [self.expr(a, scope) for a in e.args]
        return builtin(self.v, args, e)

    def e_GenCall(self, e: s.GenCall, scope):
        if e.func in self.functions:
            raise TypeMismatchError(f"'{e.func}' is a def; a generator argument works only with "
                                    f"{', '.join(GENERATOR_BUILTINS)}", e.func_span)
        if e.func not in GENERATOR_BUILTINS:
            raise TypeMismatchError(f"'{e.func}' does not take a generator; only "
                                    f"{', '.join(GENERATOR_BUILTINS[:-1])} and "
                                    f"{GENERATOR_BUILTINS[-1]} do", e.func_span)
        items: list = []
        self.generate(e.elt, e.clauses, 0, scope, items)
        return reduce_items(self.v, e.func, items, e.span)

    def _suggest_function(self, name: str) -> str | None:
        return _did_you_mean(name, set(self.functions) | set(BUILTINS) | set(DERIVATIVES))

    def call(self, fn: _Function, args: list, e: s.Call):
        if len(args) != len(fn.params):
            from .errors import ArityError
            raise ArityError(
                f"{fn.name}() takes {len(fn.params)} argument{'s' * (len(fn.params) != 1)}, "
                f"got {len(args)}", e.span)
        key = (fn.name, tuple(memo_key(a) for a in args))
        found = self.memo.get(key)
        if found is not None:
            return found
        self.v.budget.charge(1, e.span, f"this call of '{fn.name}'")
        if self.depth >= RECURSION_LIMIT:
            from .errors import RecursionLimitError
            raise RecursionLimitError(
                f"recursion of '{fn.name}' is deeper than {RECURSION_LIMIT} calls", e.span,
                hint="recursion must end on static conditions such as shapes or const values; "
                     "a condition that depends on an input never stops it")
        self.depth += 1
        try:
            local = _FunctionScope(zip(fn.params, args, strict=True))
            node = fn.node
            for st in node.body:
                if isinstance(st, s.Return):
                    result = self.expr(st.value, local)
                    break
                self.statement(st, local)
            else:
                result = self.expr(node.result, local)
        finally:
            self.depth -= 1
        self.memo[key] = result
        return result


def spelling_distance(a: str, b: str) -> int:
    """Edits between two names (insert, delete, replace, or swap two neighbours), ignoring case."""
    a, b = a.lower(), b.lower()
    prev2, prev = None, list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[len(b)]


def close_names(name: str, known) -> list[str]:
    """Known names close in spelling to `name`, closest first: at most one edit for names of up
    to 4 letters, two up to 8, three beyond, and always fewer edits than `name` has letters (so
    `softmax` is not `max`, nor `inv` `sin`)."""
    allowed = min(1 if len(name) <= 4 else 2 if len(name) <= 8 else 3, len(name) - 1)
    scored = []
    for other in known:
        if other == name or abs(len(other) - len(name)) > allowed:
            continue
        d = spelling_distance(name, other)
        if d <= allowed:
            ratio = difflib.SequenceMatcher(None, name, other).ratio()
            scored.append((d, -ratio, other))
    return [other for _, _, other in sorted(scored)]


def _did_you_mean(name: str, known) -> str | None:
    close = close_names(name, known)
    return f"did you mean '{close[0]}'?" if close else None


def _range_length(r: range) -> int:
    """len(r), also past sys.maxsize (where len() raises OverflowError)."""
    if r.step > 0:
        return max(0, (r.stop - r.start + r.step - 1) // r.step)
    return max(0, (r.start - r.stop - r.step - 1) // -r.step)


class _FunctionScope(dict):
    """The local names of one function call: a marker type, since inputs are not visible."""


def _end_span(program: s.Program):
    from .errors import Span
    lines = program.source.splitlines() or [""]
    return Span(program.filename, len(lines), 1, len(lines), len(lines[-1]) + 1, program.source)
