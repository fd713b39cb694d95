"""The commands of the command line: each reads its arguments, calls the API (`api.Program`,
`api.cache_info`...) and prints what it gives through the report modules; it returns the exit
status (INTERFACE.md)."""

from __future__ import annotations

import numpy as np

from .. import api
from .. import export as exporting
from ..errors import UsageError
from . import files as cli_files
from .args import wrt_of
from .output import print_json, print_labelled, write_graph, write_npz
from .results import cache_text, derivative_items, json_tree, sparse_json, sparse_lines, to_json
from .specs import domains, read_specs, read_value

EXIT_OK, EXIT_MISMATCH = 0, 1
EXIT_UNCHECKED = 4  # `check` compared nothing for some derivative: not a pass (docs/cli.md)


def _program(args) -> api.Program:
    return api.load(args.file, backend=args.backend, dtype=args.dtype,
                    cache=not args.no_cache)


def cmd_eval(args) -> int:
    prog = _program(args)
    if cli_files.wants_files(args):  # .npy or Zarr output: chunk by chunk
        return cli_files.run(args, prog, "eval", None, read_specs(args.inputs, lazy=True))
    outputs = prog.evaluate(read_specs(args.inputs))
    if args.output is not None:  # an empty name is an error there, not ignored
        write_npz(args.output, outputs)
    if args.json:
        print_json({"outputs": {k: to_json(v) for k, v in outputs.items()}})
    else:
        print_labelled(list(outputs.items()))
    return EXIT_OK


def cmd_derivative(args) -> int:
    """grad, jacobian, hessian, vjp, jvp and hvp: the value and the derivative in one
    evaluation."""
    kind = args.command
    if getattr(args, "diagonal", False):
        if args.sparse:
            raise UsageError("hessian takes --diagonal or --sparse, not both")
        kind = "hessian_diagonal"
    prog = _program(args)
    of = prog.output_name(args.of)
    if getattr(args, "sparse", False):
        return cmd_sparse(args, prog, of)
    extra = {} if kind == "jvp" else {"wrt": wrt_of(args)}
    files = cli_files.wants_files(args)  # .npy or Zarr output: chunk by chunk
    if kind in ("jvp", "hvp"):
        extra["tangents"] = read_specs(args.tangents, lazy=files)
    if kind == "vjp":
        extra["seed"] = read_value(args.seed, "--seed", lazy=files)
    if files:
        return cli_files.run(args, prog, kind, of, read_specs(args.inputs, lazy=True), **extra)
    value, result = prog.value_and(kind, read_specs(args.inputs), of=of, **extra)
    items = derivative_items(kind, of, result)
    if args.output is not None:  # an empty name is an error there, not ignored
        write_npz(args.output, {"value": value, **{key: r for _, key, r in items}})
    if args.json:
        print_json({"of": of, "value": to_json(value), kind: json_tree(result)})
    else:
        print_labelled([(of, value)] + [(label, r) for label, _, r in items])
    return EXIT_OK


def cmd_sparse(args, prog, of) -> int:
    """jacobian or hessian --sparse: the CSR parts `data`, `indices`, `indptr` and `shape`
    (a batch stacks `data`: the structure is the same for every row). Alone in `--output` with
    `value` and `format`, they are what `scipy.sparse.load_npz` reads (for one point)."""
    kind = args.command
    value, result = prog.value_and(kind, read_specs(args.inputs), of=of, wrt=wrt_of(args),
                                   sparse=True)
    names = list(dict.fromkeys(wrt_of(args) or prog.inputs))
    pattern = prog.sparsity(of=of, wrt=names, hessian=kind == "hessian")
    batch = np.shape(value)[:np.ndim(value) - len(prog.outputs[of])]
    matrices = list(_flat(result))
    data = np.array([m.data for m in matrices]).reshape(batch + (pattern.nnz,))
    if args.output is not None:
        write_npz(args.output, {"value": value, "data": data, "indices": pattern.indices,
                                "indptr": pattern.indptr, "shape": np.array(pattern.shape),
                                "format": np.array("csr")})
    if args.json:
        print_json({"of": of, "value": to_json(value), kind: sparse_json(pattern, names, data)})
        return EXIT_OK
    print_labelled([(of, value)])
    for line in sparse_lines(kind, of, names, batch, matrices):
        print(line)
    return EXIT_OK


def _flat(result):
    """The matrices of a sparse result: one, or nested lists of them (a batch), in order."""
    if isinstance(result, list):
        for item in result:
            yield from _flat(item)
    else:
        yield result


def cmd_diff(args) -> int:
    from ..symbolic import formulas as report_formulas
    prog = api.load(args.file)
    of = prog.output_name(args.of)
    jac = prog.derivative("jacobian", of, wrt_of(args))
    if report_formulas.keeps_loops(jac):  # loops as loops: --limit unroll=N writes them out
        if args.json:
            derivs = prog.symbolic_jacobian(of=of, wrt=wrt_of(args), simplify=args.simplify)
            print_json({"of": of, "derivatives": report_formulas.derivatives_json(derivs)})
        else:
            print(report_formulas.format_loops(jac, of, prog.outputs[of], latex=args.latex,
                                               cse=args.cse, simplify=args.simplify))
        return EXIT_OK
    jac = prog.derivative("jacobian", of, wrt_of(args), written_out=True)
    if args.json or not args.cse:  # JSON writes every element out in full
        report_formulas.refuse_to_print(jac, of)
    elif report_formulas.needs_graph_cse(jac):
        print(report_formulas.format_graph_cse(jac, of, prog.outputs[of], latex=args.latex,
                                               simplify=args.simplify))
        return EXIT_OK
    derivs = prog.symbolic_jacobian(of=of, wrt=wrt_of(args), simplify=args.simplify)
    if args.json:
        print_json({"of": of, "derivatives": report_formulas.derivatives_json(derivs)})
    else:
        print(report_formulas.format_derivatives(derivs, of, latex=args.latex, cse=args.cse,
                                                 out_shape=prog.outputs[of]))
    return EXIT_OK


def cmd_check(args) -> int:
    """Exit 0 when every derivative was compared and agreed, 1 on a mismatch, 4 when some
    derivative was compared nowhere (a check that could not fail is no pass)."""
    from ..symbolic import report
    if args.points is not None and args.points < 1:
        raise UsageError("--points must be at least 1")
    prog = api.load(args.file)
    if args.inputs:
        for option, given in (("--points", args.points is not None), ("--domain", args.domain)):
            if given:
                raise UsageError(f"{option} says how to draw random points, but --inputs "
                                 "gives the points", hint="give one or the other")
        result = prog.check(points=read_specs(args.inputs))
    else:
        result = prog.check(points=3 if args.points is None else args.points,
                            domain=domains(args.domain, prog))
    if args.json:
        print_json(result)
    else:
        print(report.format_check(result, result.ranges))
    if result["status"] == "unchecked":
        return EXIT_UNCHECKED
    return EXIT_OK if result["ok"] else EXIT_MISMATCH


def cmd_graph(args) -> int:
    write_graph(args.out, api.load(args.file).to_dot(of=args.of, grad=args.grad))
    return EXIT_OK


def cmd_export(args) -> int:
    """The files written, one a line (or as JSON)."""
    prog = api.load(args.file, dtype=args.dtype, cache=not args.no_cache)
    kinds = [kind for kind in exporting.KINDS if getattr(args, kind)]
    written = exporting.export(prog, c=args.c, shared=args.shared, llvm=args.llvm,
                               kinds=kinds, of=args.of, wrt=wrt_of(args), name=args.name)
    if args.json:
        print_json({"files": [str(path) for path in written]})
    else:
        for path in written:
            print(path)
    return EXIT_OK


def cmd_cache(args) -> int:
    info = api.cache_clear() if args.action == "clear" else api.cache_info()
    if args.json:
        print_json(info)
    else:
        print(cache_text(info))
    return EXIT_OK


COMMANDS = {
    "cache": cmd_cache,
    "graph": cmd_graph,
    "eval": cmd_eval, "grad": cmd_derivative, "jacobian": cmd_derivative,
    "hessian": cmd_derivative, "vjp": cmd_derivative, "jvp": cmd_derivative,
    "hvp": cmd_derivative, "diff": cmd_diff, "check": cmd_check, "export": cmd_export,
}
