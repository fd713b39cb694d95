"""Fit an exponential decay with scipy.optimize.least_squares and diffdsl's exact Jacobian.

    python examples/fit_decay.py
"""

from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

import diffdsl

prog = diffdsl.load(Path(__file__).with_name("decay_fit.dd"))
t = np.linspace(0.0, 4.0, 12)
true = np.array([2.5, 1.3, 0.4])
y = true[0] * np.exp(-true[1] * t) + true[2]  # exact data: the fit must recover `true`

o = prog.objective(wrt="p", p=[1.0, 0.5, 0.0], t=t, y=y)
fit = least_squares(o.residuals, o.x0, jac=o.jac)
print("a, k, c =", fit.x, "after", fit.nfev, "evaluations")
assert np.allclose(fit.x, true, rtol=1e-8), fit.x
