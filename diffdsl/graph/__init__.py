"""The graph: the IR every stage below the language shares, and what is done to it.

`ir` holds the hash-consed SSA graph and its builder, `ops` the table with one row per op
(arity, pullback, tangent rule, names for NumPy, SymPy and LLVM), `rewrites` the builder's
identities, `autodiff` the graph-to-graph transforms (vjp, jvp, grad, jacobian, hessian),
`sparsity` and `colouring` the patterns of derivatives and their compressed graphs, `dot`
Graphviz text, `special` and `ufuncs` the ops that need a helper.

May import: the shared modules at the top of the package (errors, limits, ...) and the
standard library; numpy only where a module says why. Nothing from another stage.
"""
