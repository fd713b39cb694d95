"""Backends: graphs run on data, siblings behind one small interface.

`numpy` is the reference interpreter, vectorised over a batch; `llvm` prints a graph as LLVM
IR and `native` compiles it with llvmlite; `cpu` calls those kernels on rows and threads;
`tape` runs graphs too big to hold as code; `cuda` and `cuda_tape` run on an NVIDIA GPU (or
Numba's simulator, with `cudasim`'s IEEE math); `emit` and `numba_text` write Numba's source.

May import: `graph/`, the shared modules (the kernel cache, progress bars); llvmlite and
Numba only inside the modules that need them, so `import diffdsl` stays light.
"""
