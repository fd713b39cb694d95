"""What a name means while lowering, and which known name a misspelled one meant.

A name is looked up in the local scope, then among the consts, then among the inputs (at the
top level only: a def sees its parameters, consts and other defs), then `pi` and `inf`. An
unknown name is an error that suggests the closest known name, or says why a name assigned
above is undefined here (only in one branch of a dynamic `if`, or only inside a `while` body).
"""

from __future__ import annotations

import difflib
import math
from collections import ChainMap

import numpy as np

from ...errors import TypeMismatchError, UnknownNameError
from ..builtins.table import BUILTINS
from .bindings import DERIVATIVES
from .regions import Irregular, Unread
from .rows import elements
from .while_loop import loop_value_error
from .wholes import Shaped


class FunctionScope(dict):
    """The local names of one function call: a marker type, since inputs are not visible."""


def lookup_value(lw, name: str, scope, span, whole: bool = False):
    """The value of `name` in `scope`; `lw` is the lowerer (its consts, inputs and defs). An
    input read in place, or an array expression kept by rows, is itself where `whole`, else
    its elements."""
    value = local(scope, name)
    if value is not ABSENT:
        if isinstance(value, Unread):  # read before the body of a scan assigns it
            raise Irregular(f"'{name}' is read before the loop's body assigns it")
        return elements(lw, value) if not whole and isinstance(value, Shaped) else value
    if "." in name:  # `label.steps`, read from the scope where the loop stands
        raise loop_value_error(lw, name, scope, span)
    if name in lw.consts:
        return lw.consts[name]
    if name in lw.input_values and at_top(scope):
        value = lw.input_values[name]
        return elements(lw, value) if not whole and isinstance(value, Shaped) else value
    if name == "pi":
        return np.pi
    if name == "inf":
        return math.inf
    if name in lw.functions or name in BUILTINS or name in DERIVATIVES:
        raise TypeMismatchError(f"'{name}' is a function; call it with arguments", span)
    if name in lw.input_values:
        raise UnknownNameError(
            f"unknown name '{name}' in a function", span,
            hint=f"functions see their parameters, consts and other defs; "
                 f"pass '{name}' in as an argument")
    raise UnknownNameError(f"unknown name '{name}'", span,
                           hint=lw.one_branch.get(name) or _label_hint(name, scope)
                           or _suggest(lw, name, scope))


ABSENT = object()  # what `local` finds where a name is not in the scope


def local(scope, name: str):
    """`scope[name]`, or ABSENT: what `in` then `[]` would find, in one walk of a ChainMap's
    maps (each of those walks them, `[]` by a raised KeyError per map; a tenth of lowering)."""
    while type(scope) is ChainMap:  # a comprehension's names chained onto its scope
        for inner in scope.maps[:-1]:
            value = local(inner, name)
            if value is not ABSENT:
                return value
        scope = scope.maps[-1]
    return scope.get(name, ABSENT)


def _label_hint(name: str, scope) -> str | None:
    if f"{name}.steps" in scope:
        return f"'{name}' names a while loop: read {name}.steps or {name}.converged"
    return None


def note_one_branch(lw, then_scope, else_scope, scope, span) -> None:
    """Remember the names a dynamic `if` assigned in only some of its branches (undefined
    after it), for the error where one is used: which `if`, and what to do."""
    for name in set(then_scope).symmetric_difference(else_scope):
        if name not in scope:
            lw.one_branch[name] = (f"'{name}' is assigned only in one branch of the `if` at "
                                   f"line {span.line}: assign it in both, or before the `if`")


def at_top(scope) -> bool:
    """Whether `scope` is the program's own, outside every def (comprehensions chain onto it)."""
    while isinstance(scope, ChainMap):
        scope = scope.maps[-1]
    return scope is not None and not isinstance(scope, FunctionScope)


def _suggest(lw, name: str, scope) -> str | None:
    known = {k for k in scope if "." not in k}  # not `label.steps`: not a name one writes
    known |= set(lw.consts) | set(lw.functions) | set(BUILTINS) | set(DERIVATIVES) | \
        {"pi", "inf"}
    if at_top(scope):
        known |= set(lw.input_values)
    return did_you_mean(name, known)


def suggest_function(lw, name: str) -> str | None:
    return did_you_mean(name, set(lw.functions) | set(BUILTINS) | set(DERIVATIVES))


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


def did_you_mean(name: str, known) -> str | None:
    close = close_names(name, known)
    return f"did you mean '{close[0]}'?" if close else None
