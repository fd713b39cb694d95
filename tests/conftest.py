"""Test defaults: the reference interpreter unless a test names a backend, and a private
kernel cache, so a test run neither depends on nor fills the user's cache."""

import os
import tempfile

# The CUDA tests run on Numba's simulator where no GPU is (CI never has one). numba.cuda
# reads this once, when first imported, so it is set before any test module loads.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("DIFFDSL_BACKEND", "numpy")
# Every graph a builder freezes (lowered, derived) is checked by `ir.verify`.
os.environ.setdefault("DIFFDSL_VERIFY", "1")
os.environ.setdefault("DIFFDSL_CACHE_DIR", tempfile.mkdtemp(prefix="diffdsl-test-cache-"))
