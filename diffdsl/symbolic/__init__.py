"""Formulas: graphs as SymPy expressions, and the checks that use them.

`export` writes a graph as SymPy (`atoms` its constants and input symbols, `ops` each op),
`formulas` prints them (plain, CSE, LaTeX), `oracle` takes SymPy's derivatives beside ours,
`check` compares every derivative with SymPy and finite differences at points `domains`
draws, and `report` words a check for people.

May import: `graph/`, `backends/` (the numpy interpreter as the reference for values), the
shared modules, SymPy.
"""
