"""The runtime: a compiled program called on data.

`engine` picks a backend and keeps the kernels; `plans` keeps a program's graphs on disk by
its source text; `inputs` checks values against a graph's inputs; `calls` shapes a derivative
call's inputs and results; `chunked` runs on Dask arrays, `sparse` builds sparse Jacobians
and Hessians by colouring, `objective` makes a program a SciPy objective.

May import: `backends/`, `graph/`, the shared modules. Not `language/` or `symbolic/`: the
API hands the runtime graphs.
"""
