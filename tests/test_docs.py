"""Every example in docs/ runs, so the documentation cannot go stale.

- ```python blocks run in order, one namespace per page, from the repository root;
- ```sh blocks: each line is a `diffdsl ...` command, run as `python -m diffdsl ...`; it must
  exit 0, or the status an `<!-- exit N -->` comment right above the block gives;
- ```dd blocks are complete programs and must compile (partial snippets are ```text);
- every relative link between pages and in the README resolves (anchors included), and every
  file of the repository a page names exists;
- the builtins table, the command list, the layout and the table of equivalents match the code;
- the README stays the newcomer's page: short, its test command the one CI runs.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

import pytest

import diffdsl
from diffdsl.api import Program
from diffdsl.cli import build_parser
from diffdsl.language.builtins.table import BUILTINS
from diffdsl.language.lower.derivatives import DERIVATIVES

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
# The README's examples run too; its install-and-test block is marked `<!-- not run -->`.
EXAMPLE_PAGES = PAGES + [ROOT / "README.md"]
EXIT_MARK = re.compile(r"<!--\s*exit\s+(\d+)\s*-->")
NOT_RUN = re.compile(r"<!--\s*not run\b.*-->")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


class Block(NamedTuple):
    page: Path
    lang: str
    line: int  # of the opening fence, 1-based, for messages
    code: str
    exit_status: int


def read_blocks(page: Path) -> list[Block]:
    """The fenced blocks of a page, with the exit status a preceding comment asks for."""
    blocks, lines = [], page.read_text(encoding="utf-8").splitlines()
    k = 0
    while k < len(lines):
        if not lines[k].startswith("```"):
            k += 1
            continue
        start, lang = k, lines[k][3:].strip()
        end = next(j for j in range(k + 1, len(lines)) if lines[j].startswith("```"))
        before = _previous_text(lines, start).strip()
        mark = EXIT_MARK.fullmatch(before)
        if not NOT_RUN.fullmatch(before):
            blocks.append(Block(page, lang, start + 1, "\n".join(lines[start + 1:end]) + "\n",
                                int(mark.group(1)) if mark else 0))
        k = end + 1
    return blocks


def _previous_text(lines: list[str], k: int) -> str:
    """The last non-blank line before line k (the place for an `<!-- exit N -->` mark)."""
    return next((line for line in reversed(lines[:k]) if line.strip()), "")


def blocks_of(lang: str) -> list[Block]:
    return [b for page in EXAMPLE_PAGES for b in read_blocks(page) if b.lang == lang]


def block_id(block: Block) -> str:
    return f"{block.page.name}:{block.line}"


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    # One cache for every example: warm after the first, which keeps the file fast, and
    # never the user's own cache.
    return tmp_path_factory.mktemp("docs-cache")


@pytest.fixture(scope="session")
def scratch_dir(tmp_path_factory) -> Path:
    # The examples' `tempfile.mkdtemp()` folders (a Zarr store, exported C): under pytest's
    # own temporary folder, which it prunes, not left in /tmp by every run.
    return tmp_path_factory.mktemp("docs-tmp")


@pytest.fixture
def as_a_user(cache_dir, scratch_dir, monkeypatch):
    """The environment a reader has: the repository root, `auto` meaning what it says."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_dir))
    monkeypatch.setenv("DIFFDSL_CACHE_DIR", str(cache_dir))
    # conftest.py sets DIFFDSL_BACKEND=numpy for the suite; the docs show the default.
    monkeypatch.delenv("DIFFDSL_BACKEND", raising=False)
    return dict(os.environ)


# python --------------------------------------------------------------------------------------
_namespaces: dict[Path, tuple[dict, list]] = {}  # page -> (namespace, blocks already run)


def run_python_through(block: Block) -> None:
    """Run the page's python blocks up to this one, each once, in the page's namespace:
    later blocks use names that earlier ones define, also when a test is selected alone."""
    namespace, done = _namespaces.setdefault(block.page, ({"__name__": "__docs__"}, []))
    page_blocks = [b for b in read_blocks(block.page) if b.lang == "python"]
    for earlier in page_blocks[:page_blocks.index(block) + 1]:
        if earlier in done:
            continue
        done.append(earlier)  # before running: a failing block fails once, not again below
        exec(compile(earlier.code, block_id(earlier), "exec"), namespace)


@pytest.mark.parametrize("block", blocks_of("python"), ids=block_id)
def test_python_block(block, as_a_user):
    run_python_through(block)


# sh ------------------------------------------------------------------------------------------
def commands(block: Block) -> list[list[str]]:
    """The argument lists of a sh block; every line must be a diffdsl command."""
    out = []
    for line in block.code.splitlines():
        args = shlex.split(line, comments=True)
        if args[:2] == ["pip", "install"] and "&&" in args:
            args = args[args.index("&&") + 1:]  # the README's install-and-run line
        if not args:
            continue
        assert args[0] == "diffdsl", f"{block_id(block)}: not a diffdsl command: {line}"
        out.append(args[1:])
    return out


@pytest.mark.parametrize("block", blocks_of("sh"), ids=block_id)
def test_sh_block(block, as_a_user):
    for args in commands(block):
        done = subprocess.run([sys.executable, "-m", "diffdsl", *args], cwd=ROOT,
                              env=as_a_user, capture_output=True, text=True, timeout=120)
        shown = f"diffdsl {shlex.join(args)}\n{done.stdout}{done.stderr}"
        assert done.returncode == block.exit_status, shown
        assert "Traceback" not in done.stderr, shown


# dd ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("block", blocks_of("dd"), ids=block_id)
def test_dd_block_compiles(block, as_a_user):
    prog = diffdsl.compile(block.code, filename=block_id(block))
    assert prog.outputs


# links ---------------------------------------------------------------------------------------
def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces as hyphens."""
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # a '#' in code is no heading
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*$", text, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def relative_links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    for target in relative_links(page):
        path, _, anchor = target.partition("#")
        goal = (page.parent / path).resolve() if path else page
        assert goal.is_file(), f"{page.name}: broken link {target}"
        if anchor and goal.suffix == ".md":
            assert anchor in anchors(goal), f"{page.name}: no heading for {target}"


def test_index_links_every_page():
    linked = {t.partition("#")[0] for t in relative_links(DOCS / "index.md")}
    assert {p.name for p in PAGES if p.name != "index.md"} <= linked
    assert "../README.md" in linked


# the docs against the code -------------------------------------------------------------------
def section(page: Path, title: str) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end >= 0 else len(text)]


def test_builtins_table_is_the_builtins():
    """The table lists exactly the builtins the code has: one missing or one extra fails."""
    rows = [line for line in section(DOCS / "language.md", "Builtins").splitlines()
            if line.startswith("|") and not line.startswith("|---")][1:]  # past the header
    names = set()
    for row in rows:
        cells = row.strip("|").split("|")
        names |= set(re.findall(r"`([a-z_][a-z0-9_]*)", cells[1]))
    assert names == set(BUILTINS) | set(DERIVATIVES) | {"pi"}


def test_every_command_is_documented():
    subparsers = next(a for a in build_parser()._actions if a.dest == "command")
    headings = re.findall(r"^### (.+)$", (DOCS / "cli.md").read_text(), flags=re.M)
    documented = {word for heading in headings for word in heading.split()}  # "vjp and jvp"
    assert set(subparsers.choices) <= documented


# files named in the text --------------------------------------------------------------------
# A path into the repository (`examples/det3.dd`, `bench/fuzz.py`, or a module as
# `graph/ops.py` under diffdsl/), anywhere on a page, code included; and no upper-case page
# name that is not there (the README once sent readers to a LANGUAGE.md it did not have).
REPO_PATH = re.compile(r"(?<![\w/.$~%-])((?:bench|tests|examples|diffdsl|grammar|docs|\.ci|graph|"
                       r"language|backends|symbolic|runtime|cli)/[\w./-]*)")
UPPER_PAGE = re.compile(r"(?<![\w/])([A-Z][A-Z_]+\.md)\b")


def named_files(text: str) -> list[str]:
    return [m.rstrip("./") for m in REPO_PATH.findall(text)] + UPPER_PAGE.findall(text)


def exists_in_repository(path: str) -> bool:
    return any(c.exists() for base in (ROOT, ROOT / "diffdsl")
               for c in (base / path, base / f"{path}.py"))


@pytest.mark.parametrize("page", EXAMPLE_PAGES, ids=lambda p: p.name)
def test_named_files_exist(page):
    missing = [path for path in named_files(page.read_text(encoding="utf-8"))
               if not exists_in_repository(path)]
    assert not missing, f"{page.name} names files the repository lacks: {missing}"


def test_a_missing_file_is_caught():
    text = ("see LANGUAGE.md and `bench/nothing.py`, `examples/det3.dd`, `graph/ops.py`, "
            "`runtime/engine`, ~/.cache/diffdsl/x and bench/RESULTS.md")
    missing = [p for p in named_files(text) if not exists_in_repository(p)]
    assert missing == ["bench/nothing.py", "LANGUAGE.md"]


# the README ----------------------------------------------------------------------------------
README = ROOT / "README.md"


def test_readme_is_a_newcomers_page():
    """At most about 200 lines; says when not to use diffdsl against the tools a newcomer
    knows; links every page of docs/."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    when = section(README, "When to use it, and when not")
    for tool in ("JAX", "PyTorch", "CasADi", "SymPy"):
        assert f"| {tool} |" in when, tool
    assert "**Do not use it**" in when
    linked = {t.partition("#")[0] for t in relative_links(README)}
    assert {f"docs/{p.name}" for p in PAGES} <= linked


def _command_words(line: str) -> tuple[list[str], list[str]]:
    """(what is installed, the test command) of `pip install X && ENV=1 python -m pytest ...`,
    without the spellings that do not change what runs (`python -m pip`, quiet, no cache)."""
    install, _, test = line.partition("&&")
    cosmetic = {"python", "-m", "pip", "install", "--quiet", "-p", "no:cacheprovider"}
    return ([w for w in shlex.split(install) if w not in cosmetic],
            [w for w in shlex.split(test) if w not in cosmetic])


def test_readme_test_command_is_what_ci_runs():
    """.ci/run runs the README's install-and-test line in a fresh venv: the two stay in step."""
    (block,) = [b for b in re.findall(r"<!-- not run[^>]*-->\n```sh\n(.*?)```",
                                      README.read_text(encoding="utf-8"), flags=re.S)]
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines()
          if "pytest" in line and not line.startswith("#")]
    assert len(ci) == 1
    assert _command_words(block.strip()) == _command_words(ci[0])
    assert _command_words(block.strip())[0] == [".[test]"]


# the internals page: its layout is the package's ---------------------------------------------
def test_layout_names_the_package_folders_and_their_modules():
    rows = [line.strip("|").split("|") for line in
            section(DOCS / "internals.md", "Layout").splitlines()
            if line.startswith("| `")]
    folders = {re.match(r"\s*`([\w/]+)/`", cells[0]).group(1) for cells in rows}
    package = ROOT / "diffdsl"
    on_disk = {"diffdsl"} | {str(d.parent.relative_to(package)).replace(os.sep, "/")
                             for d in package.rglob("__init__.py") if d.parent != package}
    assert folders == on_disk
    for cells in rows:
        folder = re.match(r"\s*`([\w/]+)/`", cells[0]).group(1)
        base = package if folder == "diffdsl" else package / folder
        listed = re.sub(r"\([^)]*\)", "", cells[1]).strip()  # not the (notes) after a name
        names = re.findall(r"(?:^|, |; )`(\w+)`", listed)
        assert names, cells
        missing = [n for n in names if not (base / f"{n}.py").is_file()]
        assert not missing, f"docs/internals.md names {folder}/{missing}, which do not exist"


# coming from JAX: the table of equivalents ----------------------------------------------------
def test_equivalents_name_what_diffdsl_has():
    rows = [line.strip("|").split("|") for line in
            section(DOCS / "coming-from.md", "Equivalents").splitlines()
            if line.startswith("|") and not line.startswith("|---")][1:]  # past the header
    assert len(rows) > 20
    for theirs, ours in rows:
        for method in re.findall(r"\bprog\.(\w+)", ours):
            assert hasattr(Program, method), f"Program has no {method}: {ours}"
        for name in re.findall(r"\bdiffdsl\.(\w+)", ours):
            assert hasattr(diffdsl, name), f"diffdsl has no {name}: {ours}"
        if re.search(r"jnp\.|jax\.(nn|scipy)", theirs):  # a function: ours are builtins
            for name in re.findall(r"`([a-z_]\w*)`", ours):
                assert name in BUILTINS, f"{name} is not a builtin: {ours}"


# the performance page: every table says how it was measured ----------------------------------
def test_every_performance_table_has_its_command_and_load():
    text = (DOCS / "performance.md").read_text(encoding="utf-8")
    for part in text.split("\n## ")[1:]:
        if not re.search(r"^\|---", part, flags=re.M):
            continue
        title, flat = part.splitlines()[0], " ".join(part.split())  # lines wrap anywhere
        scripts = re.findall(r"python (bench/\w+\.py)", flat)
        assert scripts, f"performance.md, {title}: no command"
        assert all((ROOT / s).is_file() for s in scripts), scripts
        assert "load average" in flat, f"performance.md, {title}: no load"
        assert "cores" in flat, f"performance.md, {title}: no machine"
