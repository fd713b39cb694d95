"""One diffdsl process for one size of one eval, started by run.py with an empty cache.

    python worker.py PROGRAM.dd INPUTS.npz SPEC_JSON OUT.npz

It loads the program, computes the derivative once (the first derivative: the parent times the
whole process up to the line 'ready'), saves the value and the derivative to OUT.npz, then
answers lines on stdin: a number N times N derivative calls and prints their mean in seconds;
'quit' ends it. An error (a limit, say) is printed as one JSON line and exit status 3.
"""

from __future__ import annotations

import json
import sys
import time


def main() -> None:
    import importlib

    import numpy as np

    import diffdsl

    program, inputs, spec, out = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4]
    values = dict(np.load(inputs))
    wrt = spec["wrt"]
    batch = spec["batch"] and importlib.import_module(spec["batch"])
    try:
        prog = diffdsl.load(program)

        def derivative():
            if batch:  # BA, HT: a program for one observation, run as a batch
                return batch.jacobian(prog, values)
            if spec["newton"] == "sparse":  # the Hessian by colouring, its diagonal taken
                grads = prog.grad(values, of=spec["of"], wrt=wrt)
                diag = prog.hessian(values, of=spec["of"], wrt=wrt, sparse=True).diagonal()
                return {k: grads[k] / diag.reshape(grads[k].shape) for k in wrt}
            if spec["newton"]:  # k-means' dir: a Newton step, gradient over Hessian diagonal,
                # both from one pass (as GradBench's C++ computes them)
                grads, diag = prog.grad_and_hessian_diagonal(values, of=spec["of"], wrt=wrt)
                return {k: grads[k] / diag[k] for k in wrt}
            return prog.grad(values, of=spec["of"], wrt=wrt)

        result = derivative()
    except Exception as exc:  # a limit, or anything else diffdsl refuses with
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}), flush=True)
        sys.exit(3)
    print(json.dumps({"ready": True, "nodes": len(prog.graph.nodes)}), flush=True)
    if batch:
        value, shown = batch.objective(prog, values), batch.shown(result)
    else:
        value = prog.evaluate(values)[spec["value_of"]]
        shown = np.concatenate([np.ravel(result[k]) for k in wrt])
    np.savez(out, value=np.ravel(value), derivative=np.ravel(shown))
    print(json.dumps({"saved": True}), flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            break
        calls = int(line)
        start = time.perf_counter()
        for _ in range(calls):
            derivative()
        print(json.dumps({"mean": (time.perf_counter() - start) / calls}), flush=True)


if __name__ == "__main__":
    main()
