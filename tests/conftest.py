"""Test defaults: the reference interpreter unless a test names a backend, and a private
kernel cache, so a test run neither depends on nor fills the user's cache."""

import atexit
import os
import shutil
import tempfile

# The CUDA tests run on Numba's simulator where no GPU is (CI never has one). numba.cuda
# reads this once, when first imported, so it is set before any test module loads.
os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
os.environ.setdefault("DIFFDSL_BACKEND", "numpy")
# Every graph a builder freezes (lowered, derived) is checked by `ir.verify`.
os.environ.setdefault("DIFFDSL_VERIFY", "1")
if "DIFFDSL_CACHE_DIR" not in os.environ:
    # Each test process makes its own and removes it when it ends: a run leaves nothing
    # behind (kernels of a whole run are ~130 MB; a machine that runs CI often fills up).
    os.environ["DIFFDSL_CACHE_DIR"] = tempfile.mkdtemp(prefix="diffdsl-test-cache-")
    atexit.register(shutil.rmtree, os.environ["DIFFDSL_CACHE_DIR"], ignore_errors=True)


def pytest_configure(config):
    # pytest (8.4 on) collects garbage five times as a session ends, to report exceptions
    # raised in finalizers: with a whole run's programs in memory that took about 10 s a
    # process, at the end of the run. Once reports those of what the run left.
    from _pytest import unraisableexception

    key = getattr(unraisableexception, "gc_collect_iterations_key", None)
    if key is not None:
        config.stash[key] = 1
