"""Machine code from LLVM IR text, through llvmlite: compile, load, call (DESIGN.md, decision 5).

Compiling turns the emitter's text into object code for this CPU; loading links object code
(fresh, or read from the disk cache) into one process-wide ORC JIT as a library of its own,
which is unloaded when its `Library` is dropped, so programs no longer referenced give their
memory back (all but about 20 KB a library: the JIT keeps each library's name and symbol
table). Neither step imports Numba.

Small graphs run a short optimisation pipeline and the O2 code generator (inlining the row
into the row loop, folding address arithmetic). Big ones skip the pipeline and generate code
at O0 (fast instruction selection and register allocation): measured on det gradients of
5,000 to 64,000 nodes, that compiles at 2.5 to 3 us a node instead of 50 to 100, and the code
runs 1.1 to 1.25 times as long (bench/engine.py, README).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import sys
import threading
import zlib

import llvmlite
import llvmlite.binding as llvm

from diffdsl.backends import llvm_vector

# Graphs up to this many nodes get the optimisation passes and O2 code generation.
OPTIMIZE_NODES = 2000
# Graphs with loops, up to this many nodes of their bodies (`cpu.code_size`), get LLVM's O3
# pipeline and O2 code generation: a body runs once an iteration, so the time it saves a
# call is paid back within seconds of calls where compiling costs 0.1 to 0.2 ms a node
# (GradBench's GMM gradient at d = 10, k = 100, 8,060 nodes: 18.2 -> 10.6 ms a call for
# 1.8 s more compiling; d = 2, k = 50: 0.93 -> 0.39 ms for 0.3 s; bench/gradbench).
OPTIMIZE_LOOP_NODES = 8192
# A kernel whose loops LLVM's unroller writes out into a basic block of more instructions than
# this is optimised again without unrolling: O2's code generator takes time that grows faster
# than a block's length (a loop nest of 21 nodes unrolled into a block of 37,000 instructions
# took 45 s to compile, 2 s without unrolling). The kernels of GradBench's evals keep blocks of
# at most 1,100 instructions, and stay as they were.
UNROLLED_BLOCK = 8192
# In a graph with loops, code outside them of more nodes than the first and at most the second
# may be left unoptimised and uncounted (backends/llvm_cold.py, cpu.code_size).
STRAIGHT = (OPTIMIZE_NODES, OPTIMIZE_LOOP_NODES)

# What the code may call: libm's functions (directly or through the intrinsics that lower to
# them), float and double versions.
_LIBM = ("sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2 expm1 "
         "log log2 log10 log1p pow sqrt cbrt erf hypot floor ceil fabs trunc round fmod "
         "fmin fmax").split()
_LIBC = ("memcpy", "memset", "memmove")
# glibc's vector math (libmvec): its ISA letters, the CPU feature each needs, and the lanes
# of a double and of a float vector in it.
_MVEC_ISAS = (("b", "sse4.1", 2, 4), ("d", "avx2", 4, 8), ("e", "avx512f", 8, 16))
_NOT_LIBM_CALLS = ("floor", "ceil", "fabs", "trunc", "round", "fmod", "fmin", "fmax", "sqrt")

_lock = threading.Lock()
_state: dict = {}
_names = itertools.count()


def _machine():
    """The target machine for this CPU and the process's JIT, made once."""
    with _lock:
        if not _state:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            # A sum over a loop's iterations may be vectorised only in its own order (each
            # lane's terms added in turn): the loop then gives the same sum as written out,
            # and its exp or log run four lanes at a time.
            llvm.set_option("diffdsl", "-force-ordered-reductions=true")
            target = llvm.Target.from_default_triple()
            machines = [target.create_target_machine(
                cpu=llvm.get_host_cpu_name(), features=llvm.get_host_cpu_features().flatten(),
                opt=opt, reloc="pic", codemodel="jitdefault") for opt in (0, 2)]
            _state["tm"] = machines
            _state["jit"] = llvm.create_lljit_compiler(machines[1])
            _state["symbols"], _state["vectors"] = _runtime_symbols()
            names = sorted(v[1] for found in _state["vectors"].values() for v in found)
            # "lanes": kernels compiled when the calls left over were libm's are not reused.
            _state["vector_id"] = f"{zlib.crc32(' '.join(['lanes'] + names).encode()):08x}"
        return _state["tm"], _state["jit"]


def target_id() -> str:
    """What object code depends on besides the graph: for cache keys."""
    _machine()
    return (f"{llvm.get_process_triple()} {llvm.get_host_cpu_name()} "
            f"{llvm.get_host_cpu_features().flatten()} llvmlite {llvmlite.__version__} "
            f"vector math {_state['vector_id']}")


def vector_math() -> dict[str, tuple[tuple[str, str, int], ...]]:
    """libm name -> (ISA letter, symbol, lanes) of each vector version of it in the process's
    libmvec that this CPU runs (llvm_vector.widen); empty without glibc's libmvec."""
    _machine()
    return _state["vectors"]


def _runtime_symbols() -> tuple[dict[str, int], dict]:
    libs = []
    if sys.platform == "win32":
        libs.append(ctypes.CDLL("ucrtbase"))
    else:
        found = ctypes.util.find_library("m")
        if found:
            libs.append(ctypes.CDLL(found))
        libs.append(ctypes.CDLL(None))
    # The single-point entry is a CPython builtin: it returns None, with a new reference.
    symbols = {"_Py_NoneStruct": id(None),
               "Py_IncRef": ctypes.cast(ctypes.pythonapi.Py_IncRef, ctypes.c_void_p).value}
    for name in [n + s for n in _LIBM for s in ("", "f")] + list(_LIBC):
        for lib in libs:
            fn = getattr(lib, name, None)
            if fn is not None:
                symbols[name] = ctypes.cast(fn, ctypes.c_void_p).value
                break
    vectors = {}
    mvec = _load("mvec") if sys.platform.startswith("linux") else None
    features = llvm.get_host_cpu_features()
    for base, suffix in itertools.product(_LIBM, ("", "f")):
        name = base + suffix
        if mvec is None or name not in symbols or base in _NOT_LIBM_CALLS:
            continue
        found = []
        for isa, feature, double_lanes, float_lanes in _MVEC_ISAS:
            lanes = float_lanes if suffix else double_lanes
            arity = "vv" if base in ("pow", "atan2", "hypot") else "v"
            symbol = f"_ZGV{isa}N{lanes}{arity}_{name}"
            fn = getattr(mvec, symbol, None)
            if features.get(feature) and fn is not None:
                symbols[symbol] = ctypes.cast(fn, ctypes.c_void_p).value
                found.append((isa, symbol, lanes))
        if found:
            vectors[name] = llvm_vector.one_version(found)
    return symbols, vectors


def _bind_lanes(tm, jit) -> None:
    """Binds each `diffdsl_vm_NAME` a kernel calls to lane 0 of NAME's vector version
    (`llvm_vector.lanes`): every call then gives an element the value a widened lane gives
    it. Compiled once a process, by the first kernel that calls one (20 to 40 ms; at O0, as
    each function is a broadcast and a call)."""
    module, _context = _parsed(llvm_vector.lanes(_state["vectors"]), tm)
    names = [f"diffdsl_lane_{name}" for name in _state["vectors"]]
    lanes = _link(jit, tm.emit_object(module), names)
    # A new table, not an update of the one that links in other threads are reading.
    _state["symbols"] = {**_state["symbols"], **{
        f"diffdsl_vm_{name}": lanes[f"diffdsl_lane_{name}"] for name in _state["vectors"]}}
    _state["lanes"] = lanes


def _link(jit, obj: bytes, exports):
    builder = llvm.JITLibraryBuilder().add_object_img(obj)
    for name, address in _state["symbols"].items():
        builder.import_symbol(name, address)
    for name in exports:
        builder.export_symbol(name)
    return builder.link(jit, f"diffdsl{next(_names)}")


def _load(name: str):
    found = ctypes.util.find_library(name)
    try:
        return ctypes.CDLL(found) if found else None
    except OSError:
        return None


def compile_ir(text: str, nodes: int, loops: bool = False) -> bytes:
    """Object code for the module `text` of a graph of `nodes` nodes; `loops`: it has loops
    over data (regions), worth the loop optimisations and the vectoriser."""
    (fast, optimizing), _ = _machine()
    small = nodes <= (OPTIMIZE_LOOP_NODES if loops else OPTIMIZE_NODES)
    tm = optimizing if small else fast
    module, _context = _parsed(text, tm)
    module.verify()
    if small and loops:
        _optimize_loops(module, tm)
        if _biggest_block(module) > UNROLLED_BLOCK:
            module, _context = _parsed(text, tm)
            _optimize_loops(module, tm, unroll=False)
    elif small:
        _optimize(module, tm)
    return tm.emit_object(module)


def _parsed(text: str, tm):
    """The module of `text` for `tm`'s target, and its context: one of its own, dropped with
    the module (the global one keeps every constant and type ever parsed, about 100 KB a
    kernel, never freed). The caller keeps the context while it uses the module."""
    context = llvm.create_context()
    module = llvm.parse_assembly(text, context=context)
    module.triple = tm.triple
    module.data_layout = str(tm.target_data)
    return module, context


def _optimize(module, tm) -> None:
    """A short pipeline of our own: inline the segment into the entries, promote the port
    array to registers, combine and simplify. (llvmlite's ready-made O2 pipeline keeps about
    90 KB a run that it never frees; this one runs within 7 % of its speed on det3.)"""
    pto = llvm.create_pipeline_tuning_options(speed_level=2)
    pb = llvm.create_pass_builder(tm, pto)
    mpm = llvm.create_new_module_pass_manager()
    mpm.add_always_inliner_pass()
    mpm.add_sroa_pass()
    mpm.add_instruction_combine_pass()
    mpm.add_simplify_cfg_pass()
    mpm.add_new_gvn_pass()
    mpm.add_instruction_combine_pass()
    mpm.run(module, pb)


def _biggest_block(module) -> int:
    """The most instructions in one basic block of `module` (0 where the module has fewer
    lines than UNROLLED_BLOCK: it cannot hold such a block, and is not scanned)."""
    text = str(module)
    if text.count("\n") <= UNROLLED_BLOCK:
        return 0
    most = run = 0
    for line in text.splitlines():
        if line.startswith("  "):
            run += 1
        else:  # a label, a definition's first or last line, a declaration
            most, run = max(most, run), 0
    return max(most, run)


def _optimize_loops(module, tm, unroll: bool = True) -> None:
    """LLVM's own O3 pipeline, for code with loops: it hoists what a loop does not change out
    of it, and vectorises the iterations (with the vector math of llvm_vector.py). Each run
    keeps about 90 KB that llvmlite never frees (measured: 100 kernels, 10 MB; the short
    pipeline keeps 28 KB a kernel), paid only by kernels with loops."""
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = unroll
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


class _MethodDef(ctypes.Structure):
    _fields_ = [("ml_name", ctypes.c_void_p), ("ml_meth", ctypes.c_void_p),
                ("ml_flags", ctypes.c_int), ("ml_doc", ctypes.c_void_p)]


_METH_FASTCALL = 0x0080
_new_builtin = ctypes.pythonapi.PyCFunction_NewEx
_new_builtin.restype = ctypes.py_object
_new_builtin.argtypes = [ctypes.POINTER(_MethodDef), ctypes.py_object, ctypes.py_object]


class Library:
    """Object code linked into the JIT; `address(name)` is valid while this object lives."""

    def __init__(self, obj: bytes, exports: tuple[str, ...]):
        (fast, _), jit = _machine()
        if "lanes" not in _state and b"diffdsl_vm_" in obj:
            with _lock:
                if "lanes" not in _state:
                    _bind_lanes(fast, jit)
        self._tracker = _link(jit, obj, exports)

    def address(self, name: str) -> int:
        return self._tracker[name]

    def builtin(self, name: str):
        """The exported function `name`, written as a METH_FASTCALL builtin, as a Python
        callable; it keeps this library loaded while it lives."""
        # CPython reads the builtin's method table until the builtin is freed (its dealloc
        # reads the flags). When a dropped program, or every program at exit, is cyclic
        # garbage, the collector clears the objects of the cycle in no order we control: it
        # may empty this library's attributes before it frees the builtin, so a table kept
        # there was freed first, and exit died in the collector (issue 23: exit 139). The
        # table and its name therefore live in a bytearray held by the builtin's own `self`,
        # a tuple: the collector clears neither (no tp_clear), so the table is freed only
        # after the builtin is.
        text = name.encode() + b"\0"
        table = bytearray(ctypes.sizeof(_MethodDef) + len(text))
        method = _MethodDef.from_buffer(table)
        name_at = ctypes.addressof(method) + ctypes.sizeof(_MethodDef)
        ctypes.memmove(name_at, text, len(text))
        method.ml_name, method.ml_meth = name_at, self.address(name)
        method.ml_flags = _METH_FASTCALL
        return _new_builtin(ctypes.byref(method), (table, self), None)  # `self`: loaded
