"""Every command's --help ends with examples, and every example runs."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from diffdsl.cli import build_parser
from diffdsl.cli.examples import EXAMPLES

ROOT = Path(__file__).resolve().parent.parent


def test_every_command_has_examples():
    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(commands) == set(EXAMPLES)
    for name, parser in commands.items():
        assert 2 <= len(EXAMPLES[name]) <= 3
        text = parser.format_help()
        assert text.rstrip().endswith(EXAMPLES[name][-1]), name


@pytest.mark.parametrize("line", [line for lines in EXAMPLES.values() for line in lines])
def test_example_runs(line, tmp_path):
    args = shlex.split(line)
    assert args[0] == "diffdsl"
    env = dict(os.environ, DIFFDSL_CACHE_DIR=str(tmp_path))
    env.pop("DIFFDSL_BACKEND", None)
    done = subprocess.run([sys.executable, "-m", "diffdsl", *args[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
