"""The built distributions work on their own: a fresh virtual environment, the package
installed from the sdist (then from the wheel), and the tests run from the unpacked sdist.

One test, because building and installing are the slow part: the sdist and the wheel built
from it by `python -m build`, one venv with the sdist installed and a gradient through its
entry point, then the wheel installed over it, the same gradient, and the examples' tests and
the entry pages' documented commands run against it from the unpacked sdist (the other pages'
commands run in the suite itself, against the same files).

The venv reads its dependencies from the environment running this test (a `.pth` file naming
its site-packages), not from a second download of them (torch and jax, 2 GB, were two minutes
of the test): that environment is a fresh one in CI, made by `pip install '.[test]'` from the
same pyproject.toml, so the dependencies are installed from what is declared there, and the
test checks that the installed package declares the same ones. `PYTHONSAFEPATH` keeps the
working folder off `sys.path` (in the test process and in every `python -m diffdsl` it
starts), so the installed package is what runs, and a file missing from a distribution cannot
be papered over by the source tree beside the tests.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import numpy as np
from packaging.requirements import Requirement

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the declared dependencies go unchecked there
    tomllib = None

ROOT = Path(__file__).resolve().parent.parent
# What the suite reads from the repository beside the package; each must be in the sdist.
NEEDED = ["LICENSE", "README.md", "pyproject.toml", "grammar/diffdsl.lark", "examples/det3.dd",
          "examples/loops", "docs/index.md", "tests/conftest.py", "tests/test_examples.py",
          "tests/test_docs.py", "bench/fuzz.py", ".ci/run"]
RUN_FROM_SDIST = ["tests/test_examples.py", "tests/test_docs.py"]
# Of the documentation's commands, the README's and the index's: the others' run in the suite.
ENTRY_PAGES = "not (sh_block or python_block) or README or index"
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
    select = ["-k", ENTRY_PAGES]
    if not SAFE_PATH:
        (tree / "diffdsl").rename(tmp_path / "source-package-moved-aside")
        select = ["-k", f"({ENTRY_PAGES}) and {READS_THE_SOURCE}"]

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], cwd=tmp_path)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "DIFFDSL_"))}
    env.update(NUMBA_ENABLE_CUDASIM="1", DIFFDSL_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONSAFEPATH="1")

    (inner,) = run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=tmp_path, env=env).stdout.split()
    outer = {sysconfig.get_paths()[k] for k in ("purelib", "platlib")}
    Path(inner, "dependencies-of-the-test-run.pth").write_text("".join(f"{p}\n" for p in outer))
    run([python, "-m", "pip", "install", "--quiet", "--no-deps", sdist], cwd=tmp_path, env=env)
    declared = run([python, "-c", "from importlib.metadata import requires; "
                    "print('\\n'.join(requires('diffdsl')))"], cwd=tree, env=env).stdout
    if tomllib is not None:
        with open(ROOT / "pyproject.toml", "rb") as f:
            project = tomllib.load(f)["project"]
        wanted = project["dependencies"] + [f"{r}; extra == \"{extra}\"" for extra, rs in
                                            project["optional-dependencies"].items() for r in rs]
        assert sorted(map(_plain, declared.splitlines())) == sorted(map(_plain, wanted))
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


def _plain(requirement: str) -> str:
    """A requirement as metadata writes it and as pyproject.toml has it, alike (the order of
    its bounds, its quotes)."""
    return str(Requirement(requirement))


def det3_grad(command: Path, tree: Path, env: dict) -> None:
    A = np.array([[2.0, 0.0, 1.0], [1.0, 3.0, 2.0], [1.0, 1.0, 4.0]])
    grad = run([command, "grad", "examples/det3.dd", "--json", "--inputs",
                f"A={json.dumps(A.tolist())}"], cwd=tree, env=env)
    result = json.loads(grad.stdout)
    assert np.isclose(result["value"], np.linalg.det(A))
    assert np.allclose(result["grad"]["A"], np.linalg.det(A) * np.linalg.inv(A).T)
