"""The built-in functions of the language, on lowering's values: `table` holds every
builtin (elementwise, reductions, shapes) and gathers `linalg` (det, inv, solve, cholesky, ...);
`common` has the argument checks and the scalar arithmetic that folds static operands.

May import: `language/values`, `graph/`, the shared modules.
"""
