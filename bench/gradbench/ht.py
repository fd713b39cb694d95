"""Hand tracking's two functions as GradBench asks for them, from ht.dd: a program for one
correspondence, run over all c of them as a batch.

GradBench's Jacobian (tools/manual/ht.cpp, "complicated" inputs) has a row per error, 3 a
correspondence, and 28 columns: the derivatives by the correspondence's own two barycentric
coordinates, then by the 26 pose parameters. Each call gathers every correspondence's triangle
(its three vertices' rest positions and bone weights), computes the rows by diffdsl's batched
`jacobian` and lays them out so.
"""

from __future__ import annotations

import numpy as np


def rows_of(data: dict) -> dict:
    """The program's inputs, one row a correspondence; theta is shared by every row."""
    corners = data["triangles"][data["correspondences"]]
    return {"theta": data["theta"], "u": data["us"], "point": data["points"],
            "base": data["base_positions"][corners], "weights": data["weights"][corners]}


def jacobian(prog, data: dict) -> np.ndarray:
    """The (3c, 28) Jacobian: columns u0, u1, then theta's 26."""
    # Forward: 28 sweeps, each touching the few bones one parameter moves, where each of the 3
    # reverse sweeps goes back through every bone; and the tangents of the bones' transforms
    # depend on theta alone, which every row shares, so the batch computes them once. At
    # c = 12,800: forward 24 to 26 ms a call, reverse 75 to 86 (97 to 123 before the shared
    # part ran once).
    blocks = prog.jacobian(rows_of(data), of="err", wrt=["u", "theta"], mode="forward")
    return np.concatenate([blocks["u"], blocks["theta"]], axis=2).reshape(-1, 28)


def objective(prog, data: dict) -> np.ndarray:
    return prog.evaluate(rows_of(data))["err"].ravel()


def shown(jac: np.ndarray) -> np.ndarray:
    return jac.ravel()
