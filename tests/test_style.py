"""ruff over the whole repository (DESIGN.md: mechanical checks, no blanket ignores)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def test_ruff_is_clean():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is part of the test extra: pip install '.[test]'")
    done = subprocess.run([ruff, "check", "--output-format", "concise", "diffdsl", "tests",
                           "bench"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_blanket_noqa():
    """A noqa comment must name the rule it silences (and say why), never silence all."""
    found = [f"{p.relative_to(ROOT)}:{n}" for folder in ("diffdsl", "tests", "bench")
             for p in sorted((ROOT / folder).rglob("*.py"))
             for n, line in enumerate(p.read_text().splitlines(), 1)
             if "# noqa" in line and "# noqa:" not in line]
    assert not found, f"blanket ignores: {found}"
