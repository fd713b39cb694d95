"""The built distributions work on their own: a fresh virtual environment, the package
installed from the sdist (then from the wheel), and the tests run from the unpacked sdist.

One test, because building and installing are the slow part (about a minute and a half): the
sdist and the wheel built from it by `python -m build`, one venv with `sdist[test]` and a
gradient through its entry point, then the wheel installed over it, the same gradient, and
the examples and the documentation's examples run against it from the unpacked sdist.
`PYTHONSAFEPATH` keeps the working folder off `sys.path` (in the test process and in every
`python -m diffdsl` it starts), so the installed package is what runs, and a file missing from
a distribution cannot be papered over by the source tree beside the tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# What the suite reads from the repository beside the package; each must be in the sdist.
NEEDED = ["LICENSE", "README.md", "pyproject.toml", "grammar/diffdsl.lark", "examples/det3.dd",
          "examples/loops", "docs/index.md", "tests/conftest.py", "tests/test_examples.py",
          "tests/test_docs.py", "bench/fuzz.py", ".ci/run"]
RUN_FROM_SDIST = ["tests/test_examples.py", "tests/test_docs.py"]
# Python 3.10 has no PYTHONSAFEPATH: there the source package is moved aside instead, and the
# tests that compare the docs with the source tree (they read diffdsl/) are left out.
SAFE_PATH = sys.version_info >= (3, 11)
READS_THE_SOURCE = "not layout and not named_files and not missing_file"


def run(args, cwd, env=None, timeout=600):
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, f"{args}\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
    return done


def test_sdist_and_wheel_install_and_pass_the_tests(tmp_path):
    # Build from a copy, so the build leaves nothing (build/, *.egg-info) in the working tree.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
        ".ruff_cache", ".benchmarks", ".venv"))
    dist = tmp_path / "dist"
    run([sys.executable, "-m", "build", "--outdir", dist], cwd=src)  # the wheel from the sdist
    (sdist,), (wheel,) = dist.glob("*.tar.gz"), dist.glob("*.whl")

    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path / "unpacked", filter="data")
    (tree,) = (tmp_path / "unpacked").iterdir()
    missing = [name for name in NEEDED if not (tree / name).exists()]
    assert not missing, f"the sdist lacks {missing}"
    licences = [n for n in zipfile.ZipFile(wheel).namelist() if n.endswith("/LICENSE")]
    assert licences, "the wheel carries no LICENSE"
    select = []
    if not SAFE_PATH:
        (tree / "diffdsl").rename(tmp_path / "source-package-moved-aside")
        select = ["-k", READS_THE_SOURCE]

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DIFFDSL_"))}
    env.update(NUMBA_ENABLE_CUDASIM="1", DIFFDSL_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONSAFEPATH="1")

    run([python, "-m", "pip", "install", "--quiet", f"{sdist}[test]"], cwd=tmp_path, env=env)
    where = run([python, "-c", "import diffdsl; print(diffdsl.__file__)"], cwd=tree, env=env)
    assert Path(where.stdout.strip()).is_relative_to(venv), where.stdout
    command = venv / ("Scripts" if os.name == "nt" else "bin") / "diffdsl"  # the entry point
    det3_grad(command, tree, env)

    # The wheel over it: same dependencies, so only the package itself is replaced. The tests
    # run once, against the wheel (what pip installs from an index); the package built from
    # the sdist is the same files, checked above by a gradient through its entry point.
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall", wheel],
        cwd=tmp_path, env=env)
    det3_grad(command, tree, env)
    run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *select, *RUN_FROM_SDIST],
        cwd=tree, env=env)


def det3_grad(command: Path, tree: Path, env: dict) -> None:
    A = np.array([[2.0, 0.0, 1.0], [1.0, 3.0, 2.0], [1.0, 1.0, 4.0]])
    grad = run([command, "grad", "examples/det3.dd", "--json", "--inputs",
                f"A={json.dumps(A.tolist())}"], cwd=tree, env=env)
    result = json.loads(grad.stdout)
    assert np.isclose(result["value"], np.linalg.det(A))
    assert np.allclose(result["grad"]["A"], np.linalg.det(A) * np.linalg.inv(A).T)
