"""Lowering's dispatch tables cover the syntax tree, and the big-stack helper (deepstack.py)
runs deep work, hands back results and errors, and leaves the recursion limit as it found it,
also when several deep calls overlap."""

from __future__ import annotations

import dataclasses
import sys
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from diffdsl import deepstack
from diffdsl.language import lower, syntax
from diffdsl.language.lower.statements import TOP_LEVEL


def syntax_classes(module) -> set[type]:
    return {obj for obj in vars(module).values()
            if isinstance(obj, type) and obj.__module__ == module.__name__
            and dataclasses.is_dataclass(obj)}


def without_rule(module) -> set[type]:
    ruled = set(lower.EXPRESSIONS) | set(lower.STATEMENTS) | set(TOP_LEVEL) | set(lower.PARTS)
    return syntax_classes(module) - ruled


def test_every_syntax_class_has_a_rule():
    assert {syntax.Num, syntax.While, syntax.Program} <= syntax_classes(syntax)
    assert without_rule(syntax) == set()


def test_a_syntax_class_without_a_rule_is_found(monkeypatch):
    """The check above can fail: a node class added to syntax.py and to no table is reported."""
    @syntax.node
    class Lambda:
        span: object

    Lambda.__module__ = syntax.__name__
    monkeypatch.setattr(syntax, "Lambda", Lambda, raising=False)
    assert without_rule(syntax) == {Lambda}


def test_rules_are_functions_and_roles_do_not_overlap():
    tables = (lower.EXPRESSIONS, lower.STATEMENTS, TOP_LEVEL, lower.PARTS)
    assert all(callable(rule) for table in tables for rule in table.values())
    assert not set(lower.EXPRESSIONS) & (set(lower.STATEMENTS) | set(TOP_LEVEL))
    assert not set(lower.PARTS) & (set(lower.EXPRESSIONS) | set(lower.STATEMENTS) |
                                   set(TOP_LEVEL))


def test_lowerer_dispatches_by_table_not_by_name():
    """No method is looked up from a class name (`"e_" + type(e).__name__`)."""
    assert not [name for name in vars(lower._Lowerer) if name.startswith("e_")]


# --- deepstack ---------------------------------------------------------------------------------

STACK = 64 * 1024 * 1024


def depth_of(n: int) -> int:
    return 0 if n == 0 else 1 + depth_of(n - 1)


def test_deep_recursion_runs_and_returns():
    n = 20_000  # far past Python's default limit of 1000 frames
    assert deepstack.call(n + 1000, STACK, depth_of, n) == n


def test_keyword_arguments_all_go_to_the_function():
    def echo(*args, **kwargs):
        return args, kwargs

    assert deepstack.call(5000, STACK, echo, 1, frames=2, stack_bytes=3) == \
        ((1,), {"frames": 2, "stack_bytes": 3})


def test_the_functions_error_is_raised_in_the_caller():
    error = KeyError("boom")

    def fail():
        raise error

    before = sys.getrecursionlimit()
    with pytest.raises(KeyError) as info:
        deepstack.call(50_000, STACK, fail)
    assert info.value is error
    assert sys.getrecursionlimit() == before


@settings(max_examples=20, deadline=None)
@given(frames=st.integers(100, 200_000), fails=st.booleans())
def test_the_limit_is_raised_inside_and_restored_after(frames, fails):
    before = sys.getrecursionlimit()

    def work():
        seen = sys.getrecursionlimit()
        if fails:
            raise ValueError(seen)
        return seen

    try:
        seen = deepstack.call(frames, STACK, work)
    except ValueError as exc:
        seen = exc.args[0]
    assert seen == max(before, frames)
    assert sys.getrecursionlimit() == before


def test_overlapping_calls_keep_the_largest_limit_until_the_last_ends():
    """Two deep calls at once (threads of a Dask worker): when the one that asked for the
    larger limit ends first, the other keeps its own; the caller's comes back at the end."""
    before = sys.getrecursionlimit()
    big_inside, small_inside, big_done = threading.Event(), threading.Event(), threading.Event()
    seen: dict = {}

    def big():
        big_inside.set()
        small_inside.wait(timeout=30)
        seen["big"] = sys.getrecursionlimit()

    def small():
        small_inside.set()
        big_done.wait(timeout=30)
        seen["small_after_big"] = sys.getrecursionlimit()
        return depth_of(before + 5000)  # deeper than the caller's limit allows

    def run_big():
        deepstack.call(before + 90_000, STACK, big)
        big_done.set()

    other = threading.Thread(target=run_big)
    other.start()
    big_inside.wait(timeout=30)  # the big call raised the limit first
    result = deepstack.call(before + 10_000, STACK, small)
    other.join()
    assert result == before + 5000
    assert seen["big"] >= before + 90_000
    assert seen["small_after_big"] >= before + 10_000
    assert sys.getrecursionlimit() == before
