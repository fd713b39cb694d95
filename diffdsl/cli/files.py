"""Batches larger than memory on the command line: chunked inputs, `.npy` and Zarr outputs.

`--output OUT.npy` (a command with one result array) or `--output OUT.zarr` (or a folder: a
Zarr group with one array per result, named as the keys of `.npz` output: `value`, `grad.A`,
...) computes the batch a chunk of rows at a time along its first axis. Inputs given as
`NAME=FILE.npy` are memory-mapped and `NAME=STORE.zarr[:ARRAY]` read from Zarr, one chunk's
rows at a time, so memory follows `--chunk`, not the size of the data. `--scheduler ADDRESS`
runs the chunks as tasks on a Dask cluster: the program travels as its source (a `Program`
pickles so), each worker compiles it once, and the workers must see the files at the same paths.

Outputs are made under temporary names beside the target and renamed over it when every chunk
is written, so a failed run leaves no partial result, and no file but the one `--output` names
is replaced (an existing folder only when it is a Zarr store).
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import api, progress
from ..datafiles import InMemory, NpyWriter, Source, ZarrWriter, is_zarr_folder, zarr_module
from ..errors import DiffDSLError, InputError, UsageError
from ..files import atomic_path
from .output import print_json, writing
from .results import derivative_items, written_json, written_text

# Bytes of inputs and results held for one chunk, for the default --chunk.
CHUNK_BYTES = 64 * 2**20


def wants_files(args) -> bool:
    """Whether `--output` asks for chunked files (.npy, or a .zarr/folder for Zarr)."""
    if _output_format(args.output) is not None:
        return True
    if args.chunk is not None or args.scheduler is not None:
        raise UsageError("--chunk and --scheduler write the results to files",
                         hint="add --output OUT.zarr (or OUT.npy for a single array)")
    return False


def _output_format(output) -> str | None:
    if not output:
        return None
    if output.endswith(".npy"):
        return "npy"
    if output.rstrip("/\\").endswith(".zarr") or output.endswith(("/", os.sep)) or \
            Path(output).is_dir():
        return "zarr"
    return None


@dataclass
class Job:
    """What a chunk needs, in a form that travels to Dask workers (`program` as its source;
    `output` is the file or folder `--output` names, for messages)."""

    program: api.Program
    output: str
    kind: str
    of: str | None
    wrt: list | None
    inputs: dict
    tangents: dict | None
    seed: Source | None
    writers: dict


def run(args, prog: api.Program, kind: str, of, inputs: dict, wrt=None, tangents=None,
        seed=None) -> int:
    """`--output` to chunked files: evaluate `kind` ("eval" or a derivative) a chunk at a
    time and write every result array; print what was written."""
    fmt = _output_format(args.output)
    target = Path(args.output)
    _check_target(target, fmt)
    if args.chunk is not None and args.chunk < 1:
        raise UsageError("--chunk must be at least 1 row")
    job = Job(prog, args.output, kind, of, wrt,
              {n: _source(v, prog.inputs.get(n)) for n, v in inputs.items()},
              None if tangents is None else
              {n: _source(v, prog.inputs.get(n)) for n, v in tangents.items()},
              None if seed is None else _source(seed, prog.outputs.get(of)), {})
    sources = list(job.inputs.values()) + list((job.tangents or {}).values()) + \
        ([job.seed] if job.seed is not None else [])
    total = _batch_rows(job, sources)
    probe = evaluate(prog, job, *((0, min(total, 1)) if total is not None else (None, None)))
    if fmt == "npy" and len(probe) != 1:
        raise UsageError(f"--output {args.output}: a .npy file holds one array, but "
                         f"{kind} gives {len(probe)}: {', '.join(probe)}",
                         hint=f"name a Zarr folder instead: --output {target.stem}.zarr")
    rows = None if total is None else args.chunk or _default_rows(sources, probe, prog.dtype)
    shapes = {key: ((total,) + a.shape[1:] if total is not None else a.shape, a.dtype)
              for key, a in probe.items()}
    with _atomic_output(target, fmt) as tmp:  # renamed over the target once complete
        with writing(args.output):  # the file made at its full size, or Zarr's metadata
            if fmt == "npy":
                (key, (shape, dtype)), = shapes.items()
                job.writers = {key: NpyWriter(tmp, shape, dtype)}
            else:
                zarr_module().open_group(store=str(tmp), mode="w")
                job.writers = {key: ZarrWriter(tmp, key, shape, dtype, rows)
                               for key, (shape, dtype) in shapes.items()}
        if total is None:  # no batch: the probe was the whole evaluation
            _write(job, None, probe)
        else:
            ranges = [(a, min(a + rows, total)) for a in range(0, total, rows)]
            with progress.bar(total, f"{kind} {Path(args.file).name}", unit="rows") as bar:
                if args.scheduler is None:
                    for start, stop in ranges:
                        _write(job, start, evaluate(prog, job, start, stop))
                        bar.update(stop - start)
                else:
                    _on_cluster(args.scheduler, job, ranges, bar)
    _report(args, shapes)
    return 0


def evaluate(prog, job: Job, start, stop) -> dict:
    """The result arrays of rows start..stop (None: everything), keyed as in `.npz` output."""
    inputs = {n: s.part(start, stop) for n, s in job.inputs.items()}
    if job.kind == "eval":
        return {k: np.asarray(v) for k, v in prog.evaluate(inputs).items()}
    extra = {} if job.kind == "jvp" else {"wrt": job.wrt}
    if job.tangents is not None:
        extra["tangents"] = {n: s.part(start, stop) for n, s in job.tangents.items()}
    if job.seed is not None:
        extra["seed"] = job.seed.part(start, stop)
    value, result = prog.value_and(job.kind, inputs, of=job.of, **extra)
    arrays = {"value": value}
    arrays.update({key: r for _, key, r in derivative_items(job.kind, job.of, result)})
    return {k: np.asarray(v) for k, v in arrays.items()}


def _write(job: Job, start: int, arrays: dict) -> None:
    for key, writer in job.writers.items():
        try:
            writer.write(start, arrays[key])
        except OSError as exc:  # a full disk, say: the user's to fix, not a bug of diffdsl
            raise UsageError(f"cannot write {job.output} ({key}): {exc.strerror or exc}"
                             ) from None


def _chunk_on_worker(start: int, stop: int, job: Job) -> tuple:
    """One chunk as a Dask task: the job's program was compiled once in this worker process,
    where the job was unpickled. Threads of the worker that run its first chunks at once
    build each graph and kernel once: the program sees to that."""
    arrays = evaluate(job.program, job, start, stop)
    _write(job, start, arrays)
    return start, stop


def _on_cluster(address: str, job: Job, ranges: list, bar) -> None:
    try:
        from distributed import Client, as_completed
        from distributed.scheduler import KilledWorker
    except ImportError:
        raise UsageError("--scheduler needs Dask's distributed package",
                         hint="pip install 'diffdsl[dask]'") from None
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError, ValueError) as exc:
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    with client:
        shared = client.scatter(job, broadcast=True)  # sent once to each worker
        futures = client.map(_chunk_on_worker, [a for a, _ in ranges], [b for _, b in ranges],
                             job=shared, pure=False)
        for future in as_completed(futures):
            try:
                start, stop = future.result()
            except DiffDSLError:
                raise
            except (KilledWorker, OSError) as exc:
                raise UsageError(f"the Dask cluster at {address} failed: {exc}") from None
            bar.update(stop - start)


def _source(value, declared) -> Source:
    """A Source for a value from `--inputs`; batched when it has more axes than declared."""
    source = value if isinstance(value, Source) else InMemory(value)
    source.batched = declared is not None and len(source.shape) > len(declared)
    return source


def _batch_rows(job: Job, sources: list) -> int | None:
    """The length of the batch's first axis (None: no batch); every batched value must
    agree on it, checked here before anything is read (the rest is checked per chunk)."""
    lengths = {s.shape[0] for s in sources if s.batched}
    if len(lengths) > 1:
        raise InputError(f"batch shapes do not agree: the batched inputs have "
                         f"{', '.join(map(str, sorted(lengths)))} rows",
                         hint="every batched input needs the same leading dimensions")
    return lengths.pop() if lengths else None


def _default_rows(sources: list, probe: dict, dtype: str) -> int:
    """Rows a chunk so that its inputs and results take about CHUNK_BYTES."""
    itemsize = np.dtype(dtype).itemsize
    per_row = sum(itemsize * math.prod(s.shape[1:]) for s in sources if s.batched)
    per_row += sum(a[:1].nbytes for a in probe.values())
    return max(1, CHUNK_BYTES // max(per_row, 1))


def _check_target(target: Path, fmt: str) -> None:
    """Refuse, before any work, an output that would replace something not ours to replace."""
    if not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: no folder {target.parent}")
    if fmt == "npy" and target.is_dir():
        raise UsageError(f"--output {target} is a folder, not a .npy file")
    if fmt == "zarr" and target.exists() and not is_zarr_folder(target):
        what = "folder that is not a Zarr store" if target.is_dir() else "file"
        raise UsageError(f"--output {target} is a {what}: refusing to replace it",
                         hint="name a new folder, or a Zarr store to replace")


class _atomic_output:
    """A temporary file or folder beside `target`, renamed over it when the block succeeds
    and removed when it fails."""

    def __init__(self, target: Path, fmt: str):
        self.target, self.fmt = target, fmt

    def __enter__(self) -> Path:
        try:
            if self.fmt == "npy":
                self._file = atomic_path(self.target)
                return self._file.__enter__()
            self.tmp = Path(tempfile.mkdtemp(dir=self.target.parent,
                                             prefix=f".{self.target.name}."))
            return self.tmp
        except OSError as exc:
            raise UsageError(f"cannot write {self.target}: {exc.strerror or exc}") from None

    def __exit__(self, kind, exc, tb) -> bool:
        try:
            return self._finish(kind, exc, tb)
        except OSError as error:
            raise UsageError(f"cannot write {self.target}: {error.strerror or error}") from None

    def _finish(self, kind, exc, tb) -> bool:
        if self.fmt == "npy":
            return bool(self._file.__exit__(kind, exc, tb))
        if exc is not None:
            shutil.rmtree(self.tmp, ignore_errors=True)
            return False
        old = None
        if self.target.exists():  # a Zarr store (checked): moved aside, then removed
            old = Path(tempfile.mkdtemp(dir=self.target.parent, prefix=f".{self.target.name}."))
            os.rmdir(old)
            os.rename(self.target, old)
        try:
            os.rename(self.tmp, self.target)
        except OSError:
            if old is not None:
                os.rename(old, self.target)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return False


def _report(args, shapes: dict) -> None:
    if args.json:
        print_json(written_json(args.output, shapes))
    else:
        print(written_text(args.output, shapes))
