"""The `diffdsl` command line (INTERFACE.md). Parses arguments, calls the API, prints."""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import warnings
from pathlib import Path

import numpy as np

from . import api, cli_files, datafiles, limits, progress
from .cli_examples import epilog
from .errors import DiffDSLError, InputError, UsageError

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
# The status of a process ended by SIGPIPE (128 + 13), what `cat big | head` leaves for `cat`.
EXIT_PIPE_CLOSED = 141
# An input array has at most 64 dimensions (NumPy's limit): 32 declared and a batch.
MAX_INPUT_DEPTH = 64


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so every usage error exits 2 our way."""

    def error(self, message):
        raise UsageError(message, hint=f"see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="diffdsl", description="Exact derivatives of .dd programs.")
    parser.add_argument("--version", action="version", version=f"diffdsl {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def evaluating(name, help_text):
        p = commands.add_parser(name, help=help_text, description=help_text)
        # Optional here, so that `grad --inputs a=2 file.dd` (where --inputs swallowed the
        # file) can be mended by `_file_after_options` rather than refused by argparse.
        p.add_argument("file", metavar="FILE", nargs="?", help="the .dd program")
        p.add_argument("--inputs", metavar="SPEC", action="append", default=[], nargs="+",
                       help="NAME=VALUE (JSON, or a .npy/.json file), or a .json/.npz file "
                            "of several inputs; may repeat")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--backend", default="auto", choices=api.BACKENDS)
        p.add_argument("--dtype", default="float64", choices=sorted(api.DTYPES))
        p.add_argument("--output", metavar="FILE", help="write the results as arrays: "
                       "FILE.npz, or computed chunk by chunk into FILE.npy (one array) or a "
                       "FILE.zarr folder")
        p.add_argument("--chunk", metavar="ROWS", type=int, help="batch rows a chunk for "
                       ".npy/.zarr output (default: about 64 MB of inputs and results)")
        p.add_argument("--scheduler", metavar="ADDRESS", help="run the chunks on the Dask "
                       "cluster at ADDRESS (tcp://host:port)")
        p.add_argument("--no-cache", action="store_true", help="do not use the kernel cache")
        _limit_option(p)
        return p

    evaluating("eval", "Evaluate the outputs of a program.")
    for name, text in (("grad", "Value and gradient of a one-element output."),
                       ("jacobian", "Jacobian of an output: shape output + input."),
                       ("hessian", "Hessian of a one-element output (forward over reverse).")):
        p = evaluating(name, text)
        _of_wrt(p)
        if name != "grad":
            p.add_argument("--sparse", action="store_true",
                           help="a sparse matrix over the flattened output (hessian: inputs) "
                                "and the --wrt inputs' elements, by graph colouring; --output "
                                "and --json give its CSR parts")
    p = evaluating("vjp", "Seed times the Jacobian (reverse mode; PyTorch's grad_output).")
    _of_wrt(p)
    p.add_argument("--seed", required=True, metavar="VALUE|FILE",
                   help="a value of the output's shape: JSON, or a .npy/.json file")
    p = evaluating("jvp", "The Jacobian times tangents of the inputs (forward mode).")
    p.add_argument("--of", metavar="NAME", help="the output (needed when there are several)")
    _tangents(p)
    p = evaluating("hvp", "The Hessian of a one-element output times tangents of the inputs "
                   "(forward over reverse), without forming the Hessian.")
    _of_wrt(p)
    _tangents(p)

    p = commands.add_parser("diff", help="Print derivatives as formulas.",
                            description="Print derivatives as formulas (SymPy syntax).")
    p.add_argument("file", metavar="FILE")
    _of_wrt(p)
    p.add_argument("--latex", action="store_true", help="LaTeX instead of plain text")
    p.add_argument("--cse", action="store_true", help="shared subexpressions as assignments")
    p.add_argument("--simplify", action="store_true",
                   help="simplify each derivative with SymPy first (can be slow)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _limit_option(p)

    p = commands.add_parser("check", help="Check derivatives against SymPy and finite "
                            "differences.", description="Check every derivative against "
                            "sympy.diff and central finite differences; exit 1 on a mismatch.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--points", type=int, default=3, metavar="N",
                   help="random points for numeric comparisons (default 3)")
    p.add_argument("--domain", metavar="NAME=LO:HI", action="append", default=[],
                   help="draw input NAME's elements from [LO, HI) (default: a range inside "
                        "the domains of the program's functions); may repeat")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    _limit_option(p)

    p = commands.add_parser("graph", help="Draw the graph of a program or its gradient.",
                            description="Write the graph as Graphviz DOT (to stdout or "
                            "OUT.dot), or render OUT.svg / OUT.png with Graphviz's `dot`.")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--of", metavar="NAME", help="only this output")
    p.add_argument("--grad", action="store_true", help="the gradient graph of the output")
    p.add_argument("-o", dest="out", metavar="OUT.dot|OUT.svg|OUT.png")
    _limit_option(p)

    p = commands.add_parser("cache", help="Show or clear the kernel cache.",
                            description="The folder of compiled kernels (DIFFDSL_CACHE_DIR "
                            "overrides where it is).")
    p.add_argument("action", choices=("info", "clear"))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    for name, sub in commands.choices.items():  # --quiet everywhere; --help ends in examples
        sub.add_argument("--quiet", action="store_true",
                         help="no progress bar (one shows on a terminal for work over a second)")
        sub.epilog = epilog(name)
        sub.formatter_class = argparse.RawDescriptionHelpFormatter
    return parser


def _tangents(p) -> None:
    p.add_argument("--tangents", metavar="SPEC", action="append", nargs="+", required=True,
                   help="tangents of the inputs, spelled as --inputs; missing ones are zero")


def _limit_option(p) -> None:
    p.add_argument("--limit", metavar="NAME=N", action="append", default=[],
                   help=f"raise a limit on the work of compiling ({', '.join(limits.NAMES)}); "
                        "may repeat")


def _limits(args) -> dict:
    """`--limit NAME=N` options as keywords of `limits.using`."""
    changes = {}
    for item in getattr(args, "limit", []):
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in limits.NAMES:
            raise UsageError(f"bad --limit {item!r}: expected NAME=N",
                             hint=f"the limits are: {', '.join(limits.NAMES)}")
        changes[name] = limits.parse_value(name, value.strip(), f"--limit {name}")
    return changes


def _of_wrt(p) -> None:
    p.add_argument("--of", metavar="NAME", help="the output (needed when there are several)")
    p.add_argument("--wrt", metavar="NAME[,NAME...]", help="inputs to differentiate by "
                   "(default: all)")


def _wrt(args):
    if not getattr(args, "wrt", None):
        return None
    return [w.strip() for w in args.wrt.split(",") if w.strip()]


def _version() -> str:
    from .version import __version__
    return __version__


# Errors are worded for Python (argument names); on the command line they name the flags.
_CLI_WORDS = [(re.compile(r"\bof=NAME\b"), "--of NAME"),
              (re.compile(r"\bas NAME=VALUE\b"), "with --inputs NAME=VALUE"),
              (re.compile(r"limits=\{'(\w+)': N\}"), r"--limit \1=N")]


def cli_wording(text: str) -> str:
    for pattern, words in _CLI_WORDS:
        text = pattern.sub(words, text)
    return text


def main(argv: list[str] | None = None) -> int:
    try:
        status = run(argv)
        sys.stdout.flush()  # a reader that went away shows here, inside the handlers below
        return status
    except BrokenPipeError:
        return _reader_gone()
    except DiffDSLError as exc:
        print(cli_wording(str(exc)), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("diffdsl: interrupted", file=sys.stderr)
        return 130
    except MemoryError:
        print("diffdsl: error: out of memory", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # a bug in diffdsl: say so plainly rather than dump a traceback
        print(f"diffdsl: internal error: {type(exc).__name__}: {exc}\n"
              "    please report this with the .dd file and the command", file=sys.stderr)
        return EXIT_INTERNAL


def _reader_gone() -> int:
    """stdout's reader went away (`diffdsl eval ... | head`): stop quietly, as a Unix tool
    ended by SIGPIPE does. stdout goes to /dev/null so that Python's flush at exit is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind stdout: nothing to flush
        pass
    return EXIT_PIPE_CLOSED


def _file_after_options(args) -> None:
    """The .dd file given after an option that takes several values (`--inputs a=2 f.dd`):
    the last value of that option, when it names a .dd file, is the program."""
    if getattr(args, "file", "") is not None:
        return
    for option in ("inputs", "tangents"):
        groups = getattr(args, option, None) or []
        if groups and groups[-1] and str(groups[-1][-1]).endswith(".dd"):
            args.file = groups[-1].pop()
            return
    raise UsageError("the .dd FILE is missing", hint="give it first: diffdsl "
                     f"{args.command} FILE --inputs ...")


def run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    _file_after_options(args)
    with warnings.catch_warnings(), limits.using(**_limits(args)), \
            progress.quiet_if(args.quiet):
        warnings.showwarning = _plain_warning
        return COMMANDS[args.command](args)


def _plain_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """One `diffdsl: warning: ...` line, not Python's format with our source path."""
    print(f"diffdsl: warning: {message}", file=sys.stderr)


# inputs ------------------------------------------------------------------------------------
def read_specs(specs: list, lazy: bool = False) -> dict:
    """`--inputs` values to a dict of name -> value (INTERFACE.md, SPEC); `lazy`: .npy and
    Zarr arrays as `datafiles` sources, read a chunk at a time."""
    values: dict = {}
    for spec in _flatten(specs):
        if "=" in spec and not _is_file(spec):
            name, _, text = spec.partition("=")
            name = name.strip()
            if not name.isidentifier():
                raise InputError(f"bad input spec {spec!r}: expected NAME=VALUE")
            _add(values, {name: read_value(text, name, lazy)}, spec)
        elif datafiles.is_zarr(spec):
            _add(values, {k: v if lazy else v.read()
                          for k, v in datafiles.zarr_inputs(spec).items()}, spec)
        elif _is_file(spec):
            _add(values, _read_inputs_file(Path(spec)), spec)
        else:
            raise InputError(f"bad input spec {spec!r}: expected NAME=VALUE or a .json/.npz "
                             "file of inputs", hint="e.g. --inputs A='[[1,2],[3,4]]'")
    return values


def _add(values: dict, new: dict, spec: str) -> None:
    """Add values from one SPEC; a name given twice is a mistake, not a silent override."""
    for name in new:
        if name in values:
            raise UsageError(f"'{name}' is given twice (again in {spec!r})",
                             hint="give each input once")
    values.update(new)


def _flatten(specs: list) -> list:
    out = []
    for item in specs:
        out.extend(item if isinstance(item, list) else [item])
    return out


def _is_file(text: str) -> bool:
    try:
        return Path(text).is_file()
    except OSError:
        return False


def read_value(text: str, name: str = "value", lazy: bool = False):
    """A VALUE: JSON text, or the path of a .npy or .json file holding one value, or of a
    Zarr array (`STORE.zarr` or `STORE.zarr:ARRAY`)."""
    path = Path(text)
    if datafiles.is_zarr(text):
        source = datafiles.open_zarr(text, name)
        return source if lazy else source.read()
    if not (text.endswith((".npy", ".json")) or _is_file(text)):
        return _load_json(text, name)
    if not _is_file(text):
        raise InputError(f"{name}: no such file {text!r}")
    if path.suffix == ".npy":
        if lazy:
            return datafiles.NpySource(path, name)
        try:
            return np.load(path, allow_pickle=False)
        except Exception as exc:  # numpy raises many kinds for a damaged file
            raise InputError(f"{name}: cannot read {text} as a .npy array: {exc}") from None
    if path.suffix != ".json":
        raise InputError(f"{name}: a value file must be .npy or .json, got {text!r}",
                         hint="an .npz file holds several inputs: pass it as --inputs FILE")
    return _load_json(_read_text(path), f"{name} ({text})")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load_json(text: str, where: str):
    try:
        # Integers are read as reals, as every input is one: 10**400 is inf, like 1e400, and a
        # 5000-digit integer needs no conversion Python refuses (past 4300 digits).
        value = json.loads(text, parse_constant=_json_constant, parse_int=float)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not a JSON number or list: {exc.msg} at column "
                         f"{exc.colno}", hint="write arrays as nested lists: '[[1, 2], [3, 4]]'"
                         ) from None
    except RecursionError:  # the decoder recurses once per level of nesting
        raise _too_deep(where, "more than a thousand") from None
    depth = _nesting(value)
    if depth > MAX_INPUT_DEPTH:
        raise _too_deep(where, f"{depth:,}")
    return _decode_nonfinite(value)


def _too_deep(where: str, depth: str) -> InputError:
    return InputError(f"{where}: lists nested {depth} deep; an input array has at most "
                      f"{MAX_INPUT_DEPTH} dimensions")


def _nesting(value) -> int:
    """How deep lists (and objects) nest in a decoded JSON value, found without recursion."""
    deepest = 0
    stack = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            stack.extend((v, depth) for v in item.values())
    return deepest


def _json_constant(word: str) -> float:
    return {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}[word]


def _decode_nonfinite(value):
    if isinstance(value, list):
        return [_decode_nonfinite(v) for v in value]
    if isinstance(value, str) and value.lower() in ("nan", "inf", "-inf", "+inf"):
        return float(value)
    return value


def _read_inputs_file(path: Path) -> dict:
    if path.suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as data:
                return {name: data[name] for name in data.files}
        except Exception as exc:  # zipfile, OS and value errors for a damaged file
            raise InputError(f"cannot read {path} as an .npz file: {exc}") from None
    if path.suffix == ".json":
        value = _load_json(_read_text(path), str(path))
        if not isinstance(value, dict):
            raise InputError(f"{path}: expected a JSON object of name -> value")
        return {k: _decode_nonfinite(v) for k, v in value.items()}
    raise InputError(f"{path}: input files must be .json or .npz")


# output ------------------------------------------------------------------------------------
def to_json(value):
    """Nested lists of numbers; non-finite numbers as the strings "nan", "inf", "-inf"."""
    arr = np.asarray(value, dtype=np.float64)
    if arr.ndim == 0:
        return _number(float(arr))
    return [to_json(v) for v in arr]


def _number(x: float):
    if x != x:
        return "nan"
    if x in (float("inf"), float("-inf")):
        return "inf" if x > 0 else "-inf"
    return x


def format_value(value) -> str:
    arr = np.asarray(value)
    if arr.ndim == 0:
        return repr(float(arr))
    return np.array2string(arr, precision=10, max_line_width=100, separator=", ")


def print_labelled(items: list[tuple[str, object]]) -> None:
    for label, value in items:
        text = format_value(value)
        if "\n" in text:
            print(f"{label} =")
            print("    " + text.replace("\n", "\n    "))
        else:
            print(f"{label} = {text}")


def write_npz(path: str, arrays: dict) -> None:
    target = Path(path)
    if target.suffix != ".npz":
        raise UsageError(f"--output must name a .npz file, a .npy file or a .zarr folder, "
                         f"got {path!r}")
    from .cache import atomic_path
    try:
        # atomic: an existing file is never left half-written, nor another file touched
        with atomic_path(target) as tmp:
            np.savez(tmp, **{k: np.asarray(v) for k, v in arrays.items()})
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


# commands ----------------------------------------------------------------------------------
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
        print(json.dumps({"outputs": {k: to_json(v) for k, v in outputs.items()}}))
    else:
        print_labelled(list(outputs.items()))
    return EXIT_OK


def autodiff_output(prog, of):
    from .autodiff import pick_output
    return pick_output(prog.graph, of)


def cmd_derivative(args) -> int:
    """grad, jacobian, hessian, vjp, jvp and hvp: the value and the derivative in one
    evaluation."""
    kind = args.command
    prog = _program(args)
    of = autodiff_output(prog, args.of)
    if getattr(args, "sparse", False):
        return cmd_sparse(args, prog, of)
    extra = {} if kind == "jvp" else {"wrt": _wrt(args)}
    files = cli_files.wants_files(args)  # .npy or Zarr output: chunk by chunk
    if kind in ("jvp", "hvp"):
        extra["tangents"] = read_specs(args.tangents, lazy=files)
    if kind == "vjp":
        extra["seed"] = read_value(args.seed, "--seed", lazy=files)
    if files:
        return cli_files.run(args, prog, kind, of, read_specs(args.inputs, lazy=True), **extra)
    value, result = prog.value_and(kind, read_specs(args.inputs), of=of, **extra)
    if kind == "hessian":
        labelled = {(f"\u2202\u00b2{of}/\u2202{a}\u2202{b}", f"hessian.{a}.{b}"): h
                    for a, row in result.items() for b, h in row.items()}
    elif kind == "jvp":
        labelled = {(f"jvp {of}", "jvp"): result}
    else:
        word = {"vjp": "vjp ", "hvp": f"hvp {of} "}.get(kind, "\u2202" + of + "/\u2202")
        labelled = {(f"{word}{name}", f"{kind}.{name}"): r for name, r in result.items()}
    if args.output is not None:  # an empty name is an error there, not ignored
        arrays = {"value": value}
        arrays.update({key: r for (_, key), r in labelled.items()})
        write_npz(args.output, arrays)
    if args.json:
        print(json.dumps({"of": of, "value": to_json(value), kind: _json_tree(result)}))
    else:
        print_labelled([(of, value)] + [(label, r) for (label, _), r in labelled.items()])
    return EXIT_OK


def cmd_sparse(args, prog, of) -> int:
    """jacobian or hessian --sparse: the CSR parts `data`, `indices`, `indptr` and `shape`
    (a batch stacks `data`: the structure is the same for every row). Alone in `--output` with
    `value` and `format`, they are what `scipy.sparse.load_npz` reads (for one point)."""
    kind = args.command
    value, result = prog.value_and(kind, read_specs(args.inputs), of=of, wrt=_wrt(args),
                                   sparse=True)
    names = list(dict.fromkeys(_wrt(args) or prog.inputs))
    pattern = prog.sparsity(of=of, wrt=names, hessian=kind == "hessian")
    batch = np.shape(value)[:np.ndim(value) - len(prog.outputs[of])]
    matrices = list(_flat(result))
    data = np.array([m.data for m in matrices]).reshape(batch + (pattern.nnz,))
    parts = {"data": data, "indices": pattern.indices, "indptr": pattern.indptr,
             "shape": np.array(pattern.shape)}
    if args.output is not None:
        write_npz(args.output, {"value": value, **parts, "format": np.array("csr")})
    if args.json:
        print(json.dumps({"of": of, "value": to_json(value), kind: {
            "wrt": names, "shape": list(pattern.shape), "indptr": pattern.indptr.tolist(),
            "indices": pattern.indices.tolist(), "data": to_json(data)}}))
        return EXIT_OK
    print_labelled([(of, value)])
    wrt = names[0] if len(names) == 1 else f"({', '.join(names)})"
    label = (f"\u2202\u00b2{of}/\u2202{wrt}\u00b2" if kind == "hessian"
             else f"\u2202{of}/\u2202{wrt}")
    for index, m in zip(np.ndindex(*batch), matrices, strict=True):
        where = f"[{', '.join(map(str, index))}]" if batch else ""
        print(f"{label}{where}: sparse {m.shape[0]}x{m.shape[1]}, {m.nnz} stored")
        coo = m.tocoo()
        for i, j, v in zip(coo.row, coo.col, coo.data, strict=True):
            print(f"    ({i}, {j})  {format_value(v)}")
    return EXIT_OK


def _flat(result):
    """The matrices of a sparse result: one, or nested lists of them (a batch), in order."""
    if isinstance(result, list):
        for item in result:
            yield from _flat(item)
    else:
        yield result


def _json_tree(table):
    if isinstance(table, dict):
        return {k: _json_tree(v) for k, v in table.items()}
    return to_json(table)


def cmd_diff(args) -> int:
    from . import symbolic
    prog = api.load(args.file)
    of = autodiff_output(prog, args.of)
    if args.json or not args.cse:  # JSON writes every element out in full
        symbolic.refuse_to_print(prog.derivative("jacobian", of, _wrt(args)), of)
    derivs = prog.symbolic_jacobian(of=of, wrt=_wrt(args))
    if args.simplify:
        import sympy
        derivs = {name: (d.applyfunc(sympy.simplify) if hasattr(d, "applyfunc")
                         else sympy.simplify(d)) for name, d in derivs.items()}
    if args.json:
        print(json.dumps({"of": of, "derivatives": symbolic.derivatives_json(derivs)}))
    else:
        print(symbolic.format_derivatives(derivs, of, latex=args.latex, cse=args.cse,
                                          out_shape=prog.outputs[of]))
    return EXIT_OK


def cmd_check(args) -> int:
    from . import check, domains
    if args.points < 1:
        raise UsageError("--points must be at least 1")
    prog = api.load(args.file)
    given = _domains(args.domain, prog)
    report = check.check(prog.graph, points=args.points, domain=given)
    if args.json:
        print(json.dumps(report))
    else:
        print(check.format_check(report, domains.sampling_ranges(prog.graph, given)))
    return EXIT_OK if report["ok"] else EXIT_MISMATCH


def _domains(specs: list, prog) -> dict:
    """`--domain NAME=LO:HI` options as {name: (lo, hi)}, checked."""
    out = {}
    for spec in specs:
        name, sep, rng = spec.partition("=")
        lo, colon, hi = rng.partition(":")
        try:
            bounds = (float(lo), float(hi)) if sep and colon else None
        except ValueError:
            bounds = None
        if bounds is None or not bounds[0] < bounds[1] or not all(map(np.isfinite, bounds)):
            raise UsageError(f"bad --domain {spec!r}: expected NAME=LO:HI with LO < HI",
                             hint="e.g. --domain x=0.1:2")
        if name not in prog.inputs:
            raise UsageError(f"--domain names '{name}', which is not an input",
                             hint=f"the inputs are: {', '.join(prog.inputs)}")
        out[name] = bounds
    return out


def cmd_graph(args) -> int:
    import shutil
    import subprocess

    from .autodiff import grad, pick_output
    from .dot import to_dot
    from .ir import prune
    prog = api.load(args.file)
    graph = prog.graph
    if args.grad:
        graph = grad(graph, args.of)
    elif args.of is not None:
        of = pick_output(graph, args.of)
        graph = prune(graph.nodes, graph.inputs, {of: graph.outputs[of]})
    text = to_dot(graph, Path(args.file).name)
    if not args.out:
        sys.stdout.write(text)
        return EXIT_OK
    target = Path(args.out)
    if target.suffix == ".dot":
        _write_text_atomic(target, text)
        return EXIT_OK
    if target.suffix not in (".svg", ".png"):
        raise UsageError(f"-o must end in .dot, .svg or .png, got {args.out!r}")
    dot = shutil.which("dot")
    if dot is None:
        raise UsageError("rendering .svg or .png needs Graphviz's `dot` program",
                         hint="install graphviz, or write DOT text with -o OUT.dot")
    from .cache import atomic_path
    try:
        with atomic_path(target) as tmp:
            done = subprocess.run([dot, f"-T{target.suffix[1:]}", "-o", str(tmp)], input=text,
                                  text=True, capture_output=True)
            if done.returncode != 0:
                raise UsageError(f"Graphviz failed: {done.stderr.strip()}")
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None
    return EXIT_OK


def _write_text_atomic(target: Path, text: str) -> None:
    from .cache import write_atomic
    try:
        write_atomic(target, text)
    except OSError as exc:
        raise UsageError(f"cannot write {target}: {exc.strerror or exc}") from None


def cmd_cache(args) -> int:
    from .cache import KernelCache
    store = KernelCache()
    if args.action == "clear":
        removed = store.clear()
        info = {"path": str(store.root), "removed": removed}
        print(json.dumps(info) if args.json else f"removed {removed} kernels from {store.root}")
        return EXIT_OK
    info = store.info()
    if args.json:
        print(json.dumps(info))
    else:
        print(f"kernel cache: {info['path']}\nentries: {info['entries']}\n"
              f"size: {info['bytes'] / 1e6:.1f} MB")
    return EXIT_OK


COMMANDS = {
    "cache": cmd_cache,
    "graph": cmd_graph,
    "eval": cmd_eval, "grad": cmd_derivative, "jacobian": cmd_derivative,
    "hessian": cmd_derivative, "vjp": cmd_derivative, "jvp": cmd_derivative,
    "hvp": cmd_derivative, "diff": cmd_diff, "check": cmd_check,
}
