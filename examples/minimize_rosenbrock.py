"""Minimise the Rosenbrock function with scipy.optimize.minimize, Newton-CG style: diffdsl
gives the gradient and Hessian-vector products (forward over reverse), no Hessian formed.

    python examples/minimize_rosenbrock.py
"""

from pathlib import Path

import numpy as np
from scipy.optimize import minimize

import diffdsl

prog = diffdsl.load(Path(__file__).with_name("rosenbrock.dd"))
o = prog.objective(wrt="x", x=[-1.2, 1.0, -1.2, 1.0])
result = minimize(o.fun, o.x0, jac=o.jac, hessp=o.hessp, method="trust-ncg")
print("minimum at", result.x, "f =", result.fun, "after", result.nit, "iterations")
assert result.success and np.allclose(result.x, 1.0, atol=1e-4), result
