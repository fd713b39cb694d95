"""The language: `.dd` text to an IR graph.

`syntax` is the tree, `parse` reads the text with Lark (grammar/diffdsl.lark), `lower/`
turns the tree into a graph (its rules by job, `while`, `grad` inside programs), `values`
and `static` are the arrays and static numbers lowering works on, `builtins/` the table of
built-in functions.

May import: `graph/`, the shared modules at the top, Lark (in `parse` only), numpy.
"""
