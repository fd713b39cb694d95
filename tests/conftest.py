"""Test defaults: the reference interpreter unless a test names a backend, and a private
kernel cache, so a test run neither depends on nor fills the user's cache."""

import os
import tempfile

os.environ.setdefault("DIFFDSL_BACKEND", "numpy")
os.environ.setdefault("DIFFDSL_CACHE_DIR", tempfile.mkdtemp(prefix="diffdsl-test-cache-"))
