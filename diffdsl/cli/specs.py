"""The command line's values: `--inputs` and `--tangents` SPECs, `--seed`, `--domain` (INTERFACE.md,
SPEC): JSON text, or `.npy`, `.json`, `.npz` files and Zarr stores holding values by name."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from .. import datafiles
from ..errors import InputError, UsageError

# An input array has at most 64 dimensions (NumPy's limit): 32 declared and a batch.
MAX_INPUT_DEPTH = 64
# Suffixes that name a file: such a VALUE or SPEC that is not there is a missing file, not JSON.
FILE_SUFFIXES = (".npy", ".npz", ".json", ".zarr", ".csv", ".txt")
ARRAY_HINT = "write arrays as nested lists: '[[1, 2], [3, 4]]'"
OBJECT_HINT = 'a file of inputs holds one JSON object: {"A": [[1, 2], [3, 4]], "s": 2.5}'


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
        elif _names_a_file(spec):
            raise InputError(f"no such file {spec!r}", hint="--inputs takes NAME=VALUE or "
                             "a .json/.npz file of inputs")
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


def _names_a_file(text: str) -> bool:
    """Whether `text`, which is no file, is meant as one (not JSON text): a file's suffix, or
    a folder in it."""
    text = text.strip()
    if not text or text[0] in "[{\"-+.0123456789" or text.lower() in ("nan", "inf", "infinity"):
        return False
    return text.lower().endswith(FILE_SUFFIXES) or "/" in text or os.sep in text


def read_value(text: str, name: str = "value", lazy: bool = False):
    """A VALUE: JSON text, or the path of a .npy or .json file holding one value, or of a
    Zarr array (`STORE.zarr` or `STORE.zarr:ARRAY`)."""
    path = Path(text)
    if datafiles.is_zarr(text):
        source = datafiles.open_zarr(text, name)
        return source if lazy else source.read()
    if not _is_file(text):
        if _names_a_file(text):
            raise InputError(f"{name}: no such file {text!r}")
        return _load_json(text, name)
    if path.suffix == ".npy":
        if lazy:
            return datafiles.NpySource(path, name)
        datafiles.check_magic(path, ".npy", name)
        try:
            return np.load(path, allow_pickle=False)
        except Exception as exc:  # numpy raises many kinds for a damaged file
            raise InputError(f"{name}: cannot read {text} as a .npy array: {exc}") from None
    if path.suffix != ".json":
        raise InputError(f"{name}: a value file must be .npy or .json, got {text!r}",
                         hint="an .npz file holds several inputs: pass it as --inputs FILE")
    return _load_json(_read_text(path), f"{name} ({text})", file=True)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None


def _load_json(text: str, where: str, file: bool = False, hint: str = ARRAY_HINT):
    """A JSON value from `text` (the contents of a file with `file`); an error says where the
    text stops being JSON, by line and column in a file, and when it ends too soon."""
    try:
        # Integers are read as reals, as every input is one: 10**400 is inf, like 1e400, and a
        # 5000-digit integer needs no conversion Python refuses (past 4300 digits).
        value = json.loads(text, parse_constant=_json_constant, parse_int=float)
    except json.JSONDecodeError as exc:
        line, column = exc.lineno, exc.colno
        short = text.strip() and not text[exc.pos:].strip()  # nothing left to read
        if short:  # where the text ends: its last character
            body = text.rstrip()
            line, column = body.count("\n") + 1, len(body) - body.rfind("\n") - 1
        at = f"line {line}, column {column}" if file else f"column {column}"
        if short:
            problem = f"the {'file' if file else 'text'} ends at {at}, before its JSON does" + \
                (" (is it cut short?)" if file else "")
        else:
            problem = f"{exc.msg} at {at}"
        what = "not valid JSON" if file else "not a JSON number or list"
        raise InputError(f"{where}: {what}: {problem}", hint=hint) from None
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
        datafiles.check_magic(path, ".npz")
        try:
            with np.load(path, allow_pickle=False) as data:
                return {name: data[name] for name in data.files}
        except Exception as exc:  # zipfile, OS and value errors for a damaged file
            raise InputError(f"cannot read {path} as an .npz file: {exc}") from None
    if path.suffix == ".json":
        value = _load_json(_read_text(path), str(path), file=True, hint=OBJECT_HINT)
        if not isinstance(value, dict):
            raise InputError(f"{path}: expected a JSON object of name -> value",
                             hint=OBJECT_HINT)
        return {k: _decode_nonfinite(v) for k, v in value.items()}
    raise InputError(f"{path}: input files must be .json or .npz")


def domains(specs: list, prog) -> dict:
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
