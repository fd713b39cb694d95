"""A compiled kernel as an XLA foreign function on the CPU: a few lines of LLVM IR around it.

XLA's typed FFI calls a handler `XLA_FFI_Error *f(XLA_FFI_CallFrame *frame)`; the frame holds
the argument and result buffers (xla/ffi/api/c_api.h, shipped in jaxlib's include folder). A
kernel's entry is `diffdsl_rows(ptr ports, ptr steps, i64 begin, i64 end, ptr scratch)`
(backends/llvm.py). `entry(kernel, steps, rows)` writes the handler between them for one
batch layout, the steps (elements a row: 0 for an input shared by every row) and the row
count baked in as constants, its scratch on its own stack, so that XLA's threads may call it
at once. It answers XLA's metadata query (the FFI version it was written for, no traits), as
the C++ helpers of ffi.h do, and runs the kernel at every other call (registered for the
execute stage only). It is compiled and loaded like a kernel (backends/native.py) and lives as
long as the returned `Library`. bench/bridges.py measures it against `jax.pure_callback`.
"""

from __future__ import annotations

import ctypes

from ..backends import native

# Scratch larger than this is not put on a thread's stack: such kernels take the callback.
MAX_STACK_SCRATCH = 256 * 2**10

# c_api.h on x86-64 and AArch64 (LP64): the byte offsets read or written below.
FRAME_EXTENSION = 8  # XLA_FFI_CallFrame.extension_start
FRAME_ARGS = 72  # .args.args: XLA_FFI_Buffer *[]
FRAME_RETS = 112  # .rets.rets
EXTENSION_TYPE = 8  # XLA_FFI_Extension_Base.type (1: the metadata extension)
EXTENSION_METADATA = 24  # XLA_FFI_Metadata_Extension.metadata
BUFFER_DATA = 24  # XLA_FFI_Buffer.data
API_VERSION = (0, 1)  # the FFI version whose layout this is (c_api.h keeps it since 0.1)


def rows_address(kernel) -> int | None:
    """The address of a CPU kernel's `diffdsl_rows`, or None for a tape kernel."""
    rows = getattr(kernel, "_rows", None)
    if rows is None or kernel.tape is not None:
        return None
    return ctypes.cast(rows, ctypes.c_void_p).value


def _at(base: str, offset: int, name: str) -> str:
    return f"  %{name} = getelementptr inbounds i8, ptr %{base}, i64 {offset}"


def handler_ir(address: int, steps: list[int], rows: int, scratch_bytes: int) -> str:
    """The IR of `diffdsl_ffi(frame)`: the buffers' data into the ports `diffdsl_rows` reads
    (inputs, then the output), or the metadata XLA asks for."""
    n_in = len(steps) - 1
    major, minor = API_VERSION
    lines = [f"@steps = private constant [{len(steps)} x i64] "
             f"[{', '.join(f'i64 {s}' for s in steps)}]",
             "define ptr @diffdsl_ffi(ptr %frame) {", "entry:",
             _at("frame", FRAME_EXTENSION, "ext.a"), "  %ext = load ptr, ptr %ext.a",
             "  %has = icmp ne ptr %ext, null", "  br i1 %has, label %ask, label %run",
             "ask:", _at("ext", EXTENSION_TYPE, "type.a"), "  %type = load i32, ptr %type.a",
             "  %meta = icmp eq i32 %type, 1", "  br i1 %meta, label %answer, label %run",
             "answer:", _at("ext", EXTENSION_METADATA, "md.a"), "  %md = load ptr, ptr %md.a",
             # XLA_FFI_Metadata: api_version {struct_size 24, extension_start, major, minor}
             # at 8, traits at 32, state_type_id at 40
             _at("md", 8, "v.size"), "  store i64 24, ptr %v.size",
             _at("md", 16, "v.ext"), "  store ptr null, ptr %v.ext",
             _at("md", 24, "v.major"), f"  store i32 {major}, ptr %v.major",
             _at("md", 28, "v.minor"), f"  store i32 {minor}, ptr %v.minor",
             _at("md", 32, "traits"), "  store i32 0, ptr %traits",
             _at("md", 40, "state"), "  store i64 0, ptr %state",
             "  ret ptr null",
             "run:", f"  %ports = alloca [{n_in + 1} x ptr], align 8",
             _at("frame", FRAME_ARGS, "args.a"), "  %args = load ptr, ptr %args.a",
             _at("frame", FRAME_RETS, "rets.a"), "  %rets = load ptr, ptr %rets.a"]
    for k in range(n_in + 1):
        table, j = ("args", k) if k < n_in else ("rets", 0)
        lines += [f"  %b{k}.a = getelementptr inbounds ptr, ptr %{table}, i64 {j}",
                  f"  %b{k} = load ptr, ptr %b{k}.a", _at(f"b{k}", BUFFER_DATA, f"d{k}.a"),
                  f"  %d{k} = load ptr, ptr %d{k}.a",
                  f"  %p{k} = getelementptr inbounds ptr, ptr %ports, i64 {k}",
                  f"  store ptr %d{k}, ptr %p{k}"]
    lines += [f"  %scratch = alloca i8, i64 {max(scratch_bytes, 16)}, align 64",
              f"  %rows = inttoptr i64 {address} to ptr",
              f"  call void %rows(ptr %ports, ptr @steps, i64 0, i64 {rows}, ptr %scratch)",
              "  ret ptr null", "}"]
    return "\n".join(lines) + "\n"


def entry(kernel, steps: list[int], rows: int):
    """`(library, address)` of the FFI handler for `kernel` over `rows` rows with `steps`;
    None where the kernel has no machine-code entry or too much scratch for a stack."""
    address = rows_address(kernel)
    scratch = max(kernel.slots, 1) * kernel.dtype.itemsize
    if address is None or scratch > MAX_STACK_SCRATCH:
        return None
    library = native.Library(native.compile_ir(handler_ir(address, steps, rows, scratch), 10),
                             ("diffdsl_ffi",))
    return library, library.address("diffdsl_ffi")
