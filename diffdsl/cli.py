"""The `diffdsl` command line (INTERFACE.md). Parses arguments, calls the API, prints."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from . import api
from .errors import DiffDSLError, InputError, UsageError

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3


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
        p.add_argument("file", metavar="FILE", help="the .dd program")
        p.add_argument("--inputs", metavar="SPEC", action="append", default=[], nargs="+",
                       help="NAME=VALUE (JSON, or a .npy/.json file), or a .json/.npz file "
                            "of several inputs; may repeat")
        p.add_argument("--json", action="store_true", help="machine-readable output")
        p.add_argument("--backend", default="auto", choices=api.BACKENDS)
        p.add_argument("--dtype", default="float64", choices=sorted(api.DTYPES))
        p.add_argument("--output", metavar="FILE.npz", help="write the results as arrays")
        p.add_argument("--no-cache", action="store_true", help="do not use the kernel cache")
        return p

    evaluating("eval", "Evaluate the outputs of a program.")
    return parser


def _version() -> str:
    from . import __version__
    return __version__


def main(argv: list[str] | None = None) -> int:
    try:
        return run(argv)
    except DiffDSLError as exc:
        print(str(exc), file=sys.stderr)
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


def run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command](args)


# inputs ------------------------------------------------------------------------------------
def read_specs(specs: list) -> dict:
    """`--inputs` values to a dict of name -> value (INTERFACE.md, SPEC)."""
    values: dict = {}
    for spec in _flatten(specs):
        if "=" in spec and not _is_file(spec):
            name, _, text = spec.partition("=")
            name = name.strip()
            if not name.isidentifier():
                raise InputError(f"bad input spec {spec!r}: expected NAME=VALUE")
            values[name] = read_value(text, name)
        elif _is_file(spec):
            values.update(_read_inputs_file(Path(spec)))
        else:
            raise InputError(f"bad input spec {spec!r}: expected NAME=VALUE or a .json/.npz "
                             "file of inputs", hint="e.g. --inputs A='[[1,2],[3,4]]'")
    return values


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


def read_value(text: str, name: str = "value"):
    """A VALUE: JSON text, or the path of a .npy or .json file holding one value."""
    path = Path(text)
    if text.endswith((".npy", ".json")) or _is_file(text):
        if not _is_file(text):
            raise InputError(f"{name}: no such file {text!r}")
        if path.suffix == ".npy":
            try:
                return np.load(path, allow_pickle=False)
            except (OSError, ValueError) as exc:
                raise InputError(f"{name}: cannot read {text}: {exc}") from None
        return _load_json(path.read_text(encoding="utf-8"), f"{name} ({text})")
    return _load_json(text, name)


def _load_json(text: str, where: str):
    try:
        value = json.loads(text, parse_constant=_json_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}: not a JSON number or list: {exc.msg} at column "
                         f"{exc.colno}", hint="write arrays as nested lists: '[[1, 2], [3, 4]]'"
                         ) from None
    return _decode_nonfinite(value)


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
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read {path}: {exc}") from None
    if path.suffix == ".json":
        value = _load_json(path.read_text(encoding="utf-8"), str(path))
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
        raise UsageError(f"--output must name a .npz file, got {path!r}")
    tmp = target.with_name(target.name + ".tmp.npz")
    try:
        np.savez(tmp, **{k: np.asarray(v) for k, v in arrays.items()})
        tmp.replace(target)  # atomic: an existing file is never left half-written
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None


# commands ----------------------------------------------------------------------------------
def _program(args) -> api.Program:
    return api.load(args.file, backend=args.backend, dtype=args.dtype)


def cmd_eval(args) -> int:
    prog = _program(args)
    outputs = prog.evaluate(read_specs(args.inputs))
    if args.output:
        write_npz(args.output, outputs)
    if args.json:
        print(json.dumps({"outputs": {k: to_json(v) for k, v in outputs.items()}}))
    else:
        print_labelled(list(outputs.items()))
    return EXIT_OK


COMMANDS = {"eval": cmd_eval}
