"""The command line's arguments: the parser of every command and its options (INTERFACE.md),
and what they say once parsed (`--limit`, `--wrt`, a .dd file given after `--inputs`)."""

from __future__ import annotations

import argparse

from .. import api, limits
from ..errors import UsageError
from .examples import epilog


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so every usage error exits 2 our way."""

    def error(self, message):
        raise UsageError(message, hint=f"see '{self.prog} --help'")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="diffdsl", description="Exact derivatives of .dd programs.")
    parser.add_argument("--version", action="version", version=f"diffdsl {version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    commands.required = True

    def evaluating(name, help_text):
        p = commands.add_parser(name, help=help_text, description=help_text)
        # Optional here, so that `grad --inputs a=2 file.dd` (where --inputs swallowed the
        # file) can be mended by `file_after_options` rather than refused by argparse.
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
        if name == "hessian":
            p.add_argument("--diagonal", action="store_true",
                           help="only the second derivatives d2f/dx_k^2, an array of each "
                                "input's shape: a forward sweep per colour of the Hessian's "
                                "pattern")
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
                            "sympy.diff and central finite differences; exit 1 on a mismatch, "
                            "4 when some derivative could be compared nowhere.")
    p.add_argument("file", metavar="FILE", nargs="?", help="the .dd program")
    p.add_argument("--points", type=int, metavar="N",
                   help="random points for numeric comparisons (default 3)")
    p.add_argument("--domain", metavar="NAME=LO:HI", action="append", default=[],
                   help="draw input NAME's elements from [LO, HI) (default: a range inside "
                        "the domains of the program's functions); may repeat")
    p.add_argument("--inputs", metavar="SPEC", action="append", default=[], nargs="+",
                   help="check at these points instead of random ones: every input, spelled "
                        "as for eval (a batch is a point a row)")
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

    _export(commands)

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


def _export(commands) -> None:
    from ..export import KINDS
    text = ("Write the value and the derivatives asked for as C99 source (libm only), as a "
            "shared library of the compiled kernels, or as LLVM IR, with a header that "
            "documents them (docs/export.md).")
    p = commands.add_parser("export", help="Write derivatives as C, a shared library or "
                            "LLVM IR.", description=text)
    p.add_argument("file", metavar="FILE", help="the .dd program")
    for kind in KINDS:
        p.add_argument(f"--{kind.replace('_', '-')}", dest=kind, action="store_true",
                       help=f"export the {kind.replace('_', ' ')} too (NAME_{kind})")
    _of_wrt(p)
    p.add_argument("--c", metavar="OUTDIR", help="write OUTDIR/NAME.h and OUTDIR/NAME.c")
    p.add_argument("--shared", metavar="LIBRARY", help="link libNAME.so (.dylib, .dll: "
                   "added where the name has no suffix) and write NAME.h beside it")
    p.add_argument("--llvm", metavar="OUTDIR", help="write the LLVM IR of each function "
                   "(OUTDIR/NAME_value.ll, ...), NAME.h and NAME_api.c")
    p.add_argument("--name", metavar="NAME", help="the functions' prefix, a C identifier "
                   "(default: the file's name)")
    p.add_argument("--dtype", default="float64", choices=sorted(api.DTYPES))
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-cache", action="store_true", help="do not use the kernel cache")
    _limit_option(p)


def _tangents(p) -> None:
    p.add_argument("--tangents", metavar="SPEC", action="append", nargs="+", required=True,
                   help="tangents of the inputs, spelled as --inputs; missing ones are zero")


def _limit_option(p) -> None:
    p.add_argument("--limit", metavar="NAME=N", action="append", default=[],
                   help=f"raise a limit on the work of compiling ({', '.join(limits.NAMES)}); "
                        "may repeat")


def limits_of(args) -> dict:
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


def wrt_of(args):
    if not getattr(args, "wrt", None):
        return None
    return [w.strip() for w in args.wrt.split(",") if w.strip()]


def version() -> str:
    from ..version import __version__
    return __version__


def file_after_options(args) -> None:
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
