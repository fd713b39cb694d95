"""Exported functions, built and called: the C source compiled by the system's compiler at -O2
(-O0 past `BIG_SOURCE` bytes: GCC's -O2 took 17 to 19 s each on the 0.5 to 2.7 MB sources of
the MLP and Fiedler examples, half the suite's C, -O1 10 s on the largest, -O0 6.6 s; under
C99 no level contracts a multiply and an add, so each computes the same numbers), the shared
library of the engine's object code, both loaded through ctypes and compared with the API
(`Program.evaluate`, `value_and`) on the same inputs (tests/test_export*.py)."""

from __future__ import annotations

import ctypes
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from diffdsl.export import export

CC = ["cc", "-O2", "-std=c99", "-shared", "-fPIC"]
BIG_SOURCE = 400_000
RTOL = 1e-12


def compile_commands(folder: Path, name: str) -> list[str]:
    """The command that makes lib{name}_c.so of exported C in `folder`."""
    source = folder / f"{name}.c"
    cc = CC if source.stat().st_size <= BIG_SOURCE else ["cc", "-O0", *CC[2:]]
    return [*cc, "-o", str(folder / f"lib{name}_c.so"), str(source), "-lm"]


def compile_all(commands: list[list[str]], jobs: int = 2) -> None:
    """Run the compile commands, `jobs` at a time; each must succeed."""
    with ThreadPoolExecutor(jobs) as pool:
        for done in pool.map(lambda c: subprocess.run(c, capture_output=True, text=True),
                             commands):
            assert done.returncode == 0, f"{' '.join(done.args)}:\n{done.stderr}"


def draw(prog, kind: str, wrt, rows: int, seed: int) -> tuple[dict, dict]:
    """Inputs in [0.5, 1.5) for `rows` rows, and the extra inputs of `kind` (a vjp's seed, a
    jvp's or hvp's tangents) as the API takes them."""
    rng = np.random.default_rng(seed)
    inputs = {n: rng.uniform(0.5, 1.5, (rows,) + s) for n, s in prog.inputs.items()}
    names = list(prog.inputs) if wrt is None else list(wrt)
    extra = {}
    if kind in ("jvp", "hvp"):
        extra["tangents"] = {n: rng.normal(size=(rows,) + prog.inputs[n]) for n in names}
    return inputs, extra


def api_ports(prog, kind: str, inputs: dict, extra: dict, of, wrt,
              dtype: str = "float64") -> tuple[dict, dict]:
    """(extra input ports by graph name, outputs by graph name), from the API alone."""
    if kind == "value":
        return {}, prog.evaluate(inputs, backend="cpu", dtype=dtype)
    if kind == "vjp":
        out = prog.outputs[prog.output_name(of)]
        first = next(iter(inputs.values()))
        extra = {"seed": np.random.default_rng(7).normal(size=(len(first),) + out)}
    value, result = prog.value_and(kind, inputs, of=of, wrt=wrt, backend="cpu", dtype=dtype,
                                   **extra)
    ports = {"value": value}
    if kind == "jvp":
        ports["jvp"] = result
    elif kind == "hessian":
        ports.update({f"d:{a}:{b}": h for a, row in result.items() for b, h in row.items()})
    else:
        ports.update({f"d:{a}": d for a, d in result.items()})
    given = {}
    if kind == "vjp":
        given["@seed"] = extra["seed"]
    for name, t in extra.get("tangents", {}).items():
        given[f"@t:{name}"] = t
    return given, ports


def call(lib, fn: str, graph, arrays: dict, rows: int, dtype: str = "float64") -> dict:
    """`fn_batch` of library `lib` on `arrays` (by graph port name): its outputs by name."""
    batch = getattr(lib, f"{fn}_batch")
    batch.restype = ctypes.c_int
    ins = [np.ascontiguousarray(arrays[n], dtype=dtype).reshape(rows, p.size)
           for n, p in graph.inputs.items()]
    outs = {n: np.full((rows,) + p.shape, np.nan, dtype=dtype)
            for n, p in graph.outputs.items()}
    batch.argtypes = [ctypes.c_int64] + [ctypes.c_void_p] * (len(ins) + len(outs))
    assert batch(rows, *[a.ctypes.data for a in ins],
                 *[o.ctypes.data for o in outs.values()]) == 0
    return outs


def compare(lib, prog, name: str, kind: str, of=None, wrt=None, rows: int = 2,
            seed: int = 0, dtype: str = "float64", rtol: float = RTOL) -> None:
    """Function `{name}_{kind}` of `lib` against the API on `rows` random rows, to `rtol`."""
    graph = prog.graph if kind == "value" else prog.derivative(kind, of, wrt)
    inputs, extra = draw(prog, kind, wrt, rows, seed)
    inputs = {n: v.astype(dtype) for n, v in inputs.items()}  # both sides see these numbers
    given, expected = api_ports(prog, kind, inputs, extra, of, wrt, dtype)
    got = call(lib, f"{name}_{kind}", graph, {**inputs, **given}, rows, dtype)
    assert set(got) == set(expected), (set(got), set(expected))
    for port, value in expected.items():
        np.testing.assert_allclose(got[port], np.reshape(value, got[port].shape), rtol=rtol,
                                   atol=0, equal_nan=True, err_msg=f"{name}_{kind} {port}")


def export_both(prog, folder: Path, name: str, kinds, of=None, wrt=None,
                dtype: str = "float64") -> list[str]:
    """Export C and a shared library of `prog` into `folder`; the C's compile command."""
    export(prog, c=folder, shared=folder / f"lib{name}_so", kinds=kinds, of=of, wrt=wrt,
           name=name, dtype=dtype)
    return compile_commands(folder, name)


def load(folder: Path, name: str) -> tuple:
    """(the compiled C, the shared library) of `export_both`, loaded."""
    return (ctypes.CDLL(str(folder / f"lib{name}_c.so")),
            ctypes.CDLL(str(folder / f"lib{name}_so.so")))
