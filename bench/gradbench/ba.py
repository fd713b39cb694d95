"""Bundle adjustment's two functions as GradBench asks for them, from ba.dd: a program for one
observation, run over all p observations as a batch.

GradBench's Jacobian is a sparse matrix in its own row-compressed form (cpp/gradbench/evals/
ba.hpp, SparseMat): 2p rows of reprojection errors, 15 entries each (the observation's camera's
11 parameters, its point's 3 and its weight), then p rows of weight errors, one entry each.
Each call gathers the observations' cameras and points, computes the blocks by diffdsl's
batched `jacobian` and assembles the three arrays, as GradBench's C++ does in each call.
"""

from __future__ import annotations

import numpy as np

CAMERA = 11


def rows_of(data: dict) -> dict:
    """The program's inputs, one row an observation: its camera, its point, weight, feature."""
    obs = data["obs"]
    return {"cam": data["cams"][obs[:, 0]], "X": data["X"][obs[:, 1]], "w": data["w"],
            "feat": data["feats"]}


def jacobian(prog, data: dict) -> dict:
    """GradBench's SparseMat: `rows` (3p + 1 offsets), `cols` and `vals` (31p entries)."""
    batch = rows_of(data)
    blocks = prog.jacobian(batch, of="err", wrt=["cam", "X", "w"])
    w_d = prog.grad(batch, of="w_err", wrt=["w"])["w"]
    obs = data["obs"]
    p, n, m = len(obs), len(data["cams"]), len(data["X"])
    width = CAMERA + 3 + 1  # one row's entries: the camera's 11, the point's 3, the weight
    vals, cols = np.empty(2 * width * p + p), np.empty(2 * width * p + p, dtype=np.int32)
    np.concatenate([blocks["cam"], blocks["X"], blocks["w"][:, :, None]], axis=2,
                   out=vals[:-p].reshape(p, 2, width))
    vals[-p:] = w_d
    where, obs = cols[:-p].reshape(p, 2, width), obs.astype(np.int32)
    where[:, 0, :CAMERA] = CAMERA * obs[:, :1] + np.arange(CAMERA, dtype=np.int32)
    where[:, 0, CAMERA:-1] = CAMERA * n + 3 * obs[:, 1:] + np.arange(3, dtype=np.int32)
    where[:, 0, -1] = CAMERA * n + 3 * m + np.arange(p, dtype=np.int32)
    where[:, 1] = where[:, 0]  # the second row has the first's columns
    cols[-p:] = where[:, 0, -1]
    offsets = np.concatenate([np.arange(0, 2 * width * p + 1, width, dtype=np.int32),
                              2 * width * p + np.arange(1, p + 1, dtype=np.int32)])
    return {"rows": offsets, "cols": cols, "vals": vals}


def shown(sparse: dict) -> np.ndarray:
    """What GradBench's output keeps of each array, its first 30 entries and its last, one
    array after another: rows, cols, vals."""
    return np.concatenate([np.concatenate([sparse[key][:30], sparse[key][-1:]])
                           for key in ("rows", "cols", "vals")])


def objective(prog, data: dict) -> np.ndarray:
    """What GradBench's output keeps of the objective: the first observation's two errors and
    the first weight error (every observation is the same copy), and the two counts."""
    out = prog.evaluate(rows_of(data))
    return np.array([*out["err"][0], len(out["err"]), out["w_err"][0], len(out["w_err"])])
