"""Arrays on disk read and written in pieces of rows: `.npy` files and Zarr stores.

A `Source` is an input value that can be read whole or a range of rows at a time (`part`);
`NpySource` maps only the rows it reads, so pages read do not stay in the process, and
`ZarrSource` reads Zarr chunks. The writers put rows into an output made beforehand, from any
process, so chunks may be written by Dask workers. Sources and writers pickle small: a path,
never the data of a file.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .errors import InputError, UsageError

ZARR_MARKERS = ("zarr.json", ".zgroup", ".zarray")
# How NumPy's files begin: `.npy` its magic string, `.npz` a zip archive's (or an empty one's).
MAGIC = {".npy": (b"\x93NUMPY",), ".npz": (b"PK\x03\x04", b"PK\x05\x06")}


def check_magic(path, kind: str, name: str | None = None) -> None:
    """Refuse a file named `.npy` (`kind`) or `.npz` that is not one, before NumPy reads it:
    NumPy would take it for a pickle and say so ("This file contains pickled data")."""
    prefix = f"{name}: " if name else ""
    try:
        with open(path, "rb") as f:
            head = f.read(512)
    except OSError as exc:
        raise InputError(f"{prefix}cannot read {path}: {exc.strerror or exc}") from None
    if head.startswith(MAGIC[kind]):
        return
    if not head:
        what = "it is empty"
    elif b"\x00" not in head:  # no binary data: text, most likely
        what = "it holds text"
    else:
        what = f"it does not begin as NumPy's {kind} files do"
    article = "an" if kind == ".npz" else "a"
    save = "numpy.savez" if kind == ".npz" else "numpy.save"
    raise InputError(f"{prefix}{path} is not {article} {kind} file: {what}",
                     hint=f"write it with {save}, or give the numbers as JSON (a .json file, "
                          "or text such as '[[1, 2], [3, 4]]')")


class Source:
    """An input read in pieces; `batched` is set once the declared shape is known."""

    batched = False

    def part(self, start, stop):
        """Rows start..stop of a batched input (start None: all of it), or the whole value."""
        if not self.batched or start is None:
            return self.read()
        return self.rows(start, stop)


class NpySource(Source):
    """A `.npy` file, memory-mapped a range of rows at a time (the map is dropped with the
    piece, so the pages read do not stay in this process)."""

    def __init__(self, path: Path, name: str):
        check_magic(path, ".npy", name)
        try:
            whole = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as exc:  # numpy raises many kinds for a damaged file
            raise InputError(f"{name}: cannot read {path} as a .npy array: {exc}") from None
        self.path = str(Path(path).resolve())  # workers may run in another folder
        self.shape, self.dtype = whole.shape, whole.dtype
        self.offset = getattr(whole, "offset", None)  # None: numpy read it (an empty array)
        self.c_order = whole.flags.c_contiguous

    def read(self) -> np.ndarray:
        return np.load(self.path, allow_pickle=False)

    def rows(self, start: int, stop: int) -> np.ndarray:
        if self.offset is None or not self.c_order or stop <= start:
            return np.array(np.load(self.path, mmap_mode="r")[start:stop])
        row = self.dtype.itemsize * math.prod(self.shape[1:])
        return np.asarray(np.memmap(self.path, self.dtype, "r", self.offset + start * row,
                                    (stop - start,) + self.shape[1:]))


class ZarrSource(Source):
    """An array in a Zarr store, `STORE.zarr` or `STORE.zarr:PATH/IN/STORE`."""

    def __init__(self, store: str, path: str | None, name: str, node=None):
        self.store, self.path = str(Path(store).resolve()), path
        self._array = node if node is not None else _open_zarr_array(store, path, name)
        self.shape, self.dtype = self._array.shape, np.dtype(self._array.dtype)

    def __getstate__(self):  # a worker opens the store itself
        return {**self.__dict__, "_array": None}

    def _opened(self):
        if self._array is None:
            self._array = _open_zarr_array(self.store, self.path, "input")
        return self._array

    def read(self) -> np.ndarray:
        return np.asarray(self._opened()[...])

    def rows(self, start: int, stop: int) -> np.ndarray:
        return np.asarray(self._opened()[start:stop])


class InMemory(Source):
    """A value read whole (JSON, `.json`, `.npz`)."""

    def __init__(self, value):
        self.value = value
        try:
            self.shape = np.shape(value)
        except ValueError:  # a ragged list: not batched; the evaluation explains
            self.shape = ()

    def read(self):
        return self.value

    def rows(self, start: int, stop: int):
        return np.asarray(self.value)[start:stop]


def is_zarr(text: str) -> bool:
    """Whether an input VALUE names a Zarr store: `X.zarr`, `X.zarr:ARRAY`, or a folder
    holding Zarr metadata."""
    if ".zarr:" in text or text.rstrip("/\\").endswith(".zarr"):
        return True
    return is_zarr_folder(Path(text))


def open_zarr(text: str, name: str) -> ZarrSource:
    """The Zarr array a VALUE names (`STORE.zarr` or `STORE.zarr:ARRAY`), not read yet."""
    store, sep, path = text.partition(".zarr:")
    if sep:
        store += ".zarr"
    return ZarrSource(store, path or None, name)


def zarr_inputs(text: str) -> dict:
    """A Zarr group given as a FILE of inputs: its arrays by name, not read yet."""
    group = _zarr_node(text, None, text)
    if not hasattr(group, "arrays"):
        raise InputError(f"{text} is one Zarr array; give it as NAME={text}")
    return {key: ZarrSource(text, key, key, node=array) for key, array in group.arrays()}


def _open_zarr_array(store: str, path, name: str):
    node = _zarr_node(store, path, name)
    if hasattr(node, "arrays"):  # a group
        found = ", ".join(key for key, _ in node.arrays()) or "none"
        raise InputError(f"{name}: {store} is a Zarr group; name one of its arrays as "
                         f"{store}:ARRAY", hint=f"its arrays: {found}")
    return node


def _zarr_node(store: str, path, name: str):
    zarr = zarr_module()
    if not Path(store).is_dir():
        raise InputError(f"{name}: no Zarr store at {store!r}")
    try:
        node = zarr.open(store=store, mode="r")
        return node if path is None else node[path]
    except KeyError:
        raise InputError(f"{name}: no array {path!r} in {store}") from None
    except Exception as exc:  # zarr raises many kinds for what it cannot read
        raise InputError(f"{name}: cannot read {store} as Zarr: {exc}") from None


def zarr_module():
    try:
        import zarr
    except ImportError:
        raise UsageError("Zarr files need the zarr package",
                         hint="pip install 'diffdsl[dask]'") from None
    return zarr


def is_zarr_folder(path: Path) -> bool:
    try:
        return path.is_dir() and any((path / marker).is_file() for marker in ZARR_MARKERS)
    except OSError:  # JSON text too long to be a path, say
        return False


class NpyWriter:
    """Rows written at their offset in a `.npy` file made beforehand (any process may)."""

    def __init__(self, path: Path, shape: tuple, dtype):
        self.path, self.shape, self.dtype = str(path), shape, np.dtype(dtype)
        header = {"descr": np.lib.format.dtype_to_descr(self.dtype), "fortran_order": False,
                  "shape": shape}
        with open(path, "wb") as f:
            np.lib.format.write_array_header_1_0(f, header)
            self.offset = f.tell()
            f.truncate(self.offset + self.dtype.itemsize * math.prod(shape))
        self.row = self.dtype.itemsize * math.prod(shape[1:])

    def write(self, start, block: np.ndarray) -> None:
        data = np.ascontiguousarray(block, dtype=self.dtype)
        with open(self.path, "r+b") as f:
            f.seek(self.offset + (start or 0) * self.row)
            # Python's write, not `tofile`: a full disk is then ENOSPC with its message, where
            # `tofile` says only "N requested and 0 written".
            f.write(data.reshape(-1).view(np.uint8))


class ZarrWriter:
    """Rows written into one array of a Zarr group, in chunks of the rows a task writes."""

    def __init__(self, store: Path, key: str, shape: tuple, dtype, rows: int | None):
        self.store, self.key = str(store), key
        chunks = shape if rows is None else (rows,) + shape[1:]  # None: no batch, one chunk
        zarr_module().open_array(store=self.store, path=key, mode="w", shape=shape,
                                 chunks=chunks, dtype=np.dtype(dtype))

    def write(self, start, block: np.ndarray) -> None:
        array = zarr_module().open_array(store=self.store, path=self.key, mode="r+")
        if start is None:
            array[...] = block
        else:
            array[start:start + len(block)] = block


