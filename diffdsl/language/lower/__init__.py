"""Lowering: syntax tree to IR graph.

Arrays exist only here: an array value is a NumPy object array (static shape) whose elements
are static Python numbers or `Dyn` node references, so indexing and slicing follow NumPy
exactly. Loops and comprehensions unroll, calls inline, static conditions pick their branch,
and dynamic ones become select nodes. Calls are memoised on their arguments: a `def` is pure,
so a call seen before returns its earlier result without being expanded again; this is what
turns the n! expansion of the determinant by minors into about n·2ⁿ steps.

This module holds the state of one lowering (`_Lowerer`) and dispatches each syntax node to its
rule through dicts keyed by syntax class, built once below; the rules live by job:
    structure   where each statement may stand (declarations, `return`, `break if`)
    statements  declarations and statements
    exprs       expressions but calls
    calls       calls of defs (inlined, memoised), builtins, derivatives, generators
    indices     indices, slice bounds and loop ranges, which must be static
    names       what a name means, and suggestions for a misspelled one
    bindings    the bindings a derivative inside the program differentiates by, tagged
"""

from __future__ import annotations

from ... import deepstack
from ... import limits as limits_
from ...errors import AssignmentError, LimitError, Span, StaticValueError
from ...graph.hoist import hoisted
from ...graph.ir import Builder, Graph, Port
from .. import syntax as s
from ..values import Values
from .axes import keyword_call
from .bindings import NONE, differentiated_names, strip, tag
from .calls import RULES as CALL_RULES
from .calls import call_def
from .exprs import RULES as EXPRESSION_RULES
from .exprs import generate
from .indices import subscripts
from .names import close_names, lookup_value, note_one_branch
from .rows import elements
from .statements import RULES as STATEMENT_RULES
from .statements import TOP_LEVEL, whole_assign
from .structure import check_blocks, check_outputs, collect_defs
from .while_loop import lower_while
from .wholes import Shaped

__all__ = ["lower", "close_names"]  # close_names: the suggestions of its error messages

# Lowering recurses with the syntax tree (a 10,000-term sum is 10,000 levels deep) and with
# calls of defs (up to calls.RECURSION_LIMIT): it runs on a thread with room for both.
FRAMES = 400_000
STACK_BYTES = 512 * 1024 * 1024

# The rule of each syntax class, built once: expressions, and statements in any block; a
# statement of the top level goes to statements.TOP_LEVEL first (the declarations).
EXPRESSIONS = {**EXPRESSION_RULES, **CALL_RULES}
STATEMENTS = STATEMENT_RULES


def lower(program: s.Program, limits: limits_.Limits | None = None) -> Graph:
    """Lower a parsed program to its graph. Raises `DiffDSLError` subclasses on bad programs.

    `limits` bound the work (see limits.py); by default those in force in the calling thread.
    """
    limits = limits_.current() if limits is None else limits
    return deepstack.call(FRAMES, STACK_BYTES, _Lowerer(program, limits).run)


# Syntax classes that are parts of others, lowered by the function that lowers their parent.
PARTS = {
    s.Program: lower,
    s.CompFor: generate,
    s.CompIf: generate,
    s.Slice: subscripts,
    s.Break: lower_while,
    s.Keyword: keyword_call,
}


class _Lowerer:
    """The state of one lowering: the graph's builder, the value algebra over it, what the
    program has declared so far, and the memo of calls. Rules reach it as `lw`."""

    def __init__(self, program: s.Program, limits: limits_.Limits):
        self.program = program
        self.b = Builder(limits.nodes)
        self.v = Values(self.b, limits)
        self.inputs: dict[str, Port] = {}
        self.input_values: dict = {}
        self.consts: dict = {}
        self.functions: dict[str, s.Def] = {}
        self.outputs: dict[str, Port] = {}
        self.memo: dict = {}
        self.depth = 0
        self.written_out: set = set()  # short loops not kept (regions.py): (clause id, n)
        # What derivatives inside the program need (bindings.py): the names each function
        # differentiates by, those of the function being lowered, and each tag's value and ε.
        self.differentiated: dict = {None: NONE}
        self.wrt: frozenset = NONE
        self.tags: dict[int, int] = {}
        self.epsilon: dict[int, int] = {}
        self.tagged_statics: set[str] = set()  # names whose static value a tag made dynamic
        self.one_branch: dict[str, str] = {}  # name -> why it is undefined (names.py)

    def run(self) -> Graph:
        statements = self.program.statements
        self.functions = collect_defs(statements)
        check_outputs(statements)
        self.differentiated = differentiated_names(self.program, self.functions)
        self.wrt = self.differentiated[None]
        scope: dict = {}
        for st in statements:
            try:
                self.top_statement(st, scope)
            except LimitError as exc:  # the graph's node limit, found below the syntax
                raise exc.located(st.span) from None
        if not self.outputs:
            raise AssignmentError("the program has no output", _end_span(self.program),
                                  hint="add a line such as `output y = ...`")
        graph = self.b.graph(self.inputs, self._untagged_outputs())
        try:  # work a loop repeats in every iteration, done once before it (graph/hoist.py)
            return hoisted(graph)
        except LimitError:  # its rows listed would pass the node limit: kept as lowered
            return graph

    def _untagged_outputs(self) -> dict[str, Port]:
        """The outputs with every tag replaced by its value (bindings.strip)."""
        if not self.tags:
            return self.outputs
        ports = list(self.outputs.items())
        roots = [i for _, port in ports for i in port.roots()]  # a whole port: its node
        try:
            roots = strip(self.b, self.tags, roots)
        except LimitError as exc:
            raise exc.located(_end_span(self.program)) from None
        out, k = {}, 0
        for name, port in ports:
            if port.whole is None:
                out[name] = Port(port.shape, tuple(roots[k:k + port.size]), port.span)
                k += port.size
            else:  # kept whole on a loop's values (rows.output): the loop, untagged
                out[name] = Port(port.shape, (), port.span, (roots[k], port.whole[1]))
                k += 1
        return out

    def top_statement(self, st, scope: dict) -> None:
        """A declaration, or a statement whose blocks are checked first (where declarations,
        `return` and `break if` may stand)."""
        rule = TOP_LEVEL.get(type(st))
        if rule is not None:
            rule(self, st, scope)
        elif type(st) is s.Assign:
            self.statement(st, scope, whole_assign)
        else:
            check_blocks([st])
            self.statement(st, scope)

    def expr(self, e, scope):
        """The value of expression `e` in `scope`."""
        value = EXPRESSIONS[type(e)](self, e, scope)
        return elements(self, value) if isinstance(value, Shaped) else value

    def whole_expr(self, e, scope):
        """The value of `e`, where it is an input read in place or an array expression over
        one kept by rows (rows.py) that value itself, its elements not listed."""
        if type(e) is s.Name:
            return lookup_value(self, e.id, scope, e.span, whole=True)
        return EXPRESSIONS[type(e)](self, e, scope)

    def statement(self, st, scope, rule=None) -> None:
        """Run statement `st` on `scope`, which it changes in place (by `rule`, where given,
        instead of its own)."""
        try:
            (rule or STATEMENTS[type(st)])(self, st, scope)
        except LimitError as exc:  # placed at the innermost statement that met the limit
            raise exc.located(st.span) from None
        except StaticValueError as exc:
            if exc.hint is None:
                exc.hint = self._static_hint()
            raise

    def block(self, body, scope) -> None:
        for st in body:
            self.statement(st, scope)

    # Calls of defs and name lookups go through the lowerer, not straight to their modules:
    # while_loop and derivatives (below this module) reach them here, and every call of a def
    # passes through this one method.
    def call(self, fn: s.Def, args: list, e: s.Call):
        """The value of the def `fn` called on `args` (memoised)."""
        outer = self.wrt
        self.wrt = self.differentiated.get(fn.name, NONE)
        try:
            return call_def(self, fn, args, e)
        finally:
            self.wrt = outer

    def bound(self, name: str, value):
        """The value to bind to `name` in the function being lowered: tagged as a binding
        where a derivative of that function differentiates by the name (bindings.py)."""
        if name not in self.wrt:
            return value
        if self.v.is_static(value) and not isinstance(value, bool):
            self.tagged_statics.add(name)
        return tag(self, value)

    def note_one_branch(self, then_scope, else_scope, scope, span) -> None:
        note_one_branch(self, then_scope, else_scope, scope, span)

    def _static_hint(self) -> str | None:
        """Why a value may not be static where one is needed: a name that a derivative
        differentiates by is a variable from its binding on, even where bound to a number."""
        names = sorted(n for n in self.tagged_statics if n in self.wrt)
        if not names:
            return None
        return (f"'{names[0]}' is differentiated by grad(), jacobian() or hessian() here, so "
                "every value computed from it varies: none can be a shape, an index, a bound "
                "or a const")

    def lookup_value(self, name: str, scope, span):
        return lookup_value(self, name, scope, span)


def _end_span(program: s.Program) -> Span:
    lines = program.source.splitlines() or [""]
    return Span(program.filename, len(lines), 1, len(lines), len(lines[-1]) + 1, program.source)

