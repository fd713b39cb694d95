"""Names and numbers are ASCII (LANGUAGE.md), and two common slips get messages that say what
to do: a misspelt statement keyword, and a line that starts with an operator (issues 10, 11)."""

from __future__ import annotations

import pytest

import diffdsl
from diffdsl.errors import DDSyntaxError
from diffdsl.language.parse import parse

# Unicode digits that Python's `\d` and int() accept: Arabic-Indic, Devanagari, fullwidth,
# Bengali, superscript-free mathematical digits.
DIGITS = ["٣", "३", "３", "৩", "𝟑", "1٣", "٣.5", "2.٣"]


@pytest.mark.parametrize("digit", DIGITS)
def test_non_ascii_digits_are_not_numbers(digit):
    with pytest.raises(DDSyntaxError) as err:
        parse(f"input x\noutput y = x * {digit}\n")
    assert err.value.span.line == 2 and "ASCII" in str(err.value)


@pytest.mark.parametrize("name", ["xé", "π", "ｘ", "x٣"])
def test_non_ascii_names_are_not_names(name):
    with pytest.raises(DDSyntaxError) as err:
        parse(f"input {name}\noutput y = 1\n")
    assert err.value.span.line == 1


def test_ascii_numbers_still_read():
    prog = diffdsl.compile("input x\noutput y = x * 3 + 2.5e1 - .5\n", backend="numpy",
                           cache=False)
    assert prog(x=2.0) == 30.5


@pytest.mark.parametrize("typo, word", [
    ("inptu x", "input"), ("inpt x", "input"), ("outptu y = 1", "output"),
    ("ouput y = 1", "output"), ("cosnt c = 1", "const"), ("fro i in range(3):", "for"),
    ("dfe f(a) = a", "def"), ("retrun 1", "return")])
def test_a_misspelt_keyword_says_which_was_meant(typo, word):
    with pytest.raises(DDSyntaxError) as err:
        parse(f"input z\n{typo}\n  z = 1\noutput w = z\n")
    text = str(err.value)
    assert f"did you mean `{word}`?" in text
    assert err.value.span.line == 2 and err.value.span.column == 1


def test_a_name_far_from_any_keyword_gets_the_plain_message():
    with pytest.raises(DDSyntaxError) as err:
        parse("input x\nbanana x\n")
    assert "did you mean" not in str(err.value)


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**", "^", "and", "or", "<", "==", "@"])
def test_a_line_starting_with_an_operator_says_how_to_continue(op):
    with pytest.raises(DDSyntaxError) as err:
        parse(f"input x\ny = x\n    {op} 2\noutput z = y\n")
    text = str(err.value)
    assert err.value.span.line == 3 and err.value.span.column == 5
    assert f"end the line before with '{op}'" in text and "parentheses" in text


def test_both_ways_of_continuing_work():
    for source in ("input x\ny = x +\n    2\noutput z = y\n",
                   "input x\ny = (x\n    + 2)\noutput z = y\n"):
        assert diffdsl.compile(source, backend="numpy", cache=False)(x=1.0) == 3.0
