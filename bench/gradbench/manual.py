"""GradBench's hand-written C++ (its "manual" tool, tools/manual/*.cpp), built from a GradBench
checkout as GradBench builds it (cpp/common.mk: -std=c++17 -O3 -march=native, one thread) and
run through its own main (cpp/gradbench/main.hpp): a JSON input with `min_runs`, the output
and one time per evaluation back on stdout.

The sources are read from a GradBench work tree or a git directory holding one (its HEAD is
extracted); its headers include nlohmann's json.hpp (Debian: `apt-get install
nlohmann-json3-dev`), found on `--json-include`.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
from pathlib import Path

DEFAULT_SOURCE = os.environ.get("GRADBENCH_DIR", "/work/.mirror/gradbench+gradbench/repo")
DEFAULT_JSON = "/usr/include/nlohmann"
FLAGS = ["-std=c++17", "-O3", "-march=native", "-Wall", "-Wno-unknown-pragmas"]


def checkout(source: str) -> tuple[Path, str]:
    """A folder holding GradBench's cpp/ and tools/manual/, and the commit it is (or '')."""
    path = Path(source)
    if (path / "tools" / "manual").is_dir():
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"],
                              capture_output=True, text=True)
        return path, done.stdout.strip()
    commit = subprocess.run(["git", "--git-dir", str(path), "rev-parse", "HEAD"],
                            capture_output=True, text=True, check=True).stdout.strip()
    target = Path(tempfile.gettempdir()) / f"gradbench-{commit[:12]}"
    if not (target / "tools" / "manual").is_dir():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "--git-dir", str(path), "archive", "HEAD", "cpp",
                                  "tools/manual"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target, commit


class Manual:
    """The built tools of one checkout, one binary an eval, compiled once and kept."""

    def __init__(self, source: str = DEFAULT_SOURCE, json_include: str = DEFAULT_JSON,
                 cxx: str = "g++"):
        self.root, self.commit = checkout(source)
        self.json_include, self.cxx = json_include, cxx
        if not (Path(json_include) / "json.hpp").is_file():
            raise SystemExit(f"no json.hpp in {json_include}: install nlohmann-json3-dev or "
                             "pass --json-include")
        self.bins: dict[str, Path] = {}

    def binary(self, name: str) -> Path:
        if name in self.bins:
            return self.bins[name]
        src = self.root / "tools" / "manual" / f"{name}.cpp"
        command = [self.cxx, *FLAGS, f"-I{self.root / 'cpp'}", f"-I{self.json_include}"]
        key = hashlib.sha256((" ".join(command) + src.read_text()).encode()).hexdigest()[:16]
        out = Path(tempfile.gettempdir()) / "diffdsl-gradbench-bin" / f"{name}-{key}"
        if not out.exists():
            out.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run([*command, "-o", str(out), str(src), "-lm"], check=True)
        self.bins[name] = out
        return out

    def run(self, name: str, function: str, input_file: Path) -> tuple[object, list]:
        """The output of `function` and the seconds each evaluation took, for an input file
        written by `write_input`."""
        done = subprocess.run([str(self.binary(name)), str(input_file), function],
                              capture_output=True, text=True, check=True)
        lines = done.stdout.splitlines()
        times = [json.loads(line)["nanoseconds"] / 1e9 for line in lines[1:]
                 if '"evaluate"' in line]
        return json.loads(lines[0]), times


def write_input(path: Path, payload: dict, runs: int) -> Path:
    """The C++ tool's input file: the eval's input and how many times to evaluate."""
    path.write_text(json.dumps(payload | {"min_runs": runs, "min_seconds": 0}))
    return path
