"""Progress bars: shown on a terminal (a real pty, and a stand-in stream), silent in pipes and
with --quiet or `diffdsl.set_quiet`; big batches run in chunks that give the same results."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import diffdsl
from diffdsl import cli, progress
from diffdsl.backends import cpu

pytest.importorskip("tqdm")  # bars come from the `progress` extra

ROOT = Path(__file__).resolve().parent.parent
DET3 = str(ROOT / "examples" / "det3.dd")
A3 = "A=[[2,0,1],[1,3,2],[1,1,1]]"
# Commands run with the delay of a bar set to 0, so that short work shows one too.
RUN_CLI = ("import sys; from diffdsl import cli, progress; progress.DELAY_S = 0; "
           "sys.exit(cli.main(sys.argv[1:]))")


class Terminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def terminal(monkeypatch):
    """A function that makes stderr a terminal stand-in with bars shown at once; called in
    the test itself, as pytest installs its own stderr after the fixtures are set up."""
    def install() -> Terminal:
        stream = Terminal()
        monkeypatch.setattr(sys, "stderr", stream)
        monkeypatch.setattr(progress, "DELAY_S", 0)
        monkeypatch.setattr(progress, "_quiet", False)
        return stream
    return install


def test_a_bar_counts_the_chunks_of_a_big_batch_on_a_terminal(terminal, monkeypatch):
    stream = terminal()
    prog = diffdsl.load(DET3, backend="cpu")
    nodes = len(prog.derivative("grad").nodes)
    monkeypatch.setattr(cpu, "CHUNK_WORK", 7 * nodes)  # 7 rows a chunk
    prog.grad(A=np.random.default_rng(0).random((50, 3, 3)))
    text = stream.getvalue()
    assert "evaluating 50 rows:   0%" in text and " 0/50 " in text


def test_building_a_kernel_and_checking_show_bars_on_a_terminal(terminal):
    stream = terminal()
    prog = diffdsl.load(DET3, backend="cpu", cache=False)
    prog.grad(A=np.eye(3))
    nodes = len(prog.derivative("grad", value=False).nodes)  # grad compiles the gradient alone
    assert f"compiling {nodes} nodes: 0/2" in stream.getvalue()
    assert cli.main(["check", str(ROOT / "examples" / "det2.dd")]) == 0
    assert "checking derivatives:   0%" in stream.getvalue() and " 0/4 " in stream.getvalue()


def test_work_shorter_than_the_delay_leaves_nothing_on_the_terminal(terminal, monkeypatch):
    stream = terminal()
    monkeypatch.setattr(progress, "DELAY_S", 1.0)
    prog = diffdsl.load(DET3, backend="cpu", cache=False)
    prog.grad(A=np.eye(3))  # builds a kernel: a bar with named steps, in milliseconds
    assert cli.main(["check", str(ROOT / "examples" / "det2.dd")]) == 0
    assert stream.getvalue() == ""


def test_quiet_and_set_quiet_silence_the_bars(terminal, capsys):
    stream = terminal()
    assert cli.main(["check", str(ROOT / "examples" / "det2.dd"), "--quiet"]) == 0
    assert stream.getvalue() == ""
    assert not progress._quiet  # --quiet lasts for its command only
    diffdsl.set_quiet(True)
    try:
        with progress.bar(3, "work") as shown:
            shown.update(3)
    finally:
        diffdsl.set_quiet(False)
    assert stream.getvalue() == ""


def test_a_long_step_is_redrawn_while_it_runs(terminal, monkeypatch):
    """No update for a while (one long LLVM call): the ticker still draws the bar, and the
    line is cleared when the bar closes."""
    stream = terminal()
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    with progress.bar(2, "compiling", unit="step", rate=False) as shown:
        shown.set_postfix_str("machine code")
        time.sleep(0.3)
        drawn = stream.getvalue()
    assert "compiling: 0/2" in drawn and "machine code" in drawn
    assert drawn.count("\r") >= 2  # drawn more than once with no update
    assert stream.getvalue().endswith("\r") and len(stream.getvalue()) > len(drawn)


def _run_on(stderr, *args) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    return subprocess.Popen([sys.executable, "-c", RUN_CLI, *args], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=stderr)


COMMANDS = [("check", str(ROOT / "examples" / "det2.dd")),
            ("grad", DET3, "--inputs", A3, "--backend", "cpu", "--no-cache")]
SHOWN = {"check": "checking derivatives", "grad": "compiling"}


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
def test_silent_in_a_pipe(args):
    done = _run_on(subprocess.PIPE, *args)
    _, err = done.communicate(timeout=120)
    assert done.returncode == 0 and err == b""


@pytest.mark.skipif(sys.platform == "win32", reason="pseudo-terminals are POSIX")
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("quiet", [False, True], ids=["bar", "quiet"])
def test_on_a_real_terminal(args, quiet):
    import fcntl
    import struct
    import termios
    main, child = os.openpty()
    # A terminal 100 columns wide (tqdm draws nothing on one of width 0, a bare pty's).
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    done = _run_on(child, *args, *(["--quiet"] if quiet else []))
    os.close(child)
    seen = b""
    while True:
        try:
            chunk = os.read(main, 4096)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    os.close(main)
    assert done.wait(timeout=120) == 0
    assert (SHOWN[args[0]].encode() in seen) is not quiet, seen


@pytest.mark.parametrize("tape", [False, True], ids=["machine code", "tape"])
@pytest.mark.parametrize("threads", [1, 3])
def test_chunks_give_the_interpreters_results(tape, threads, monkeypatch):
    """A batch run in chunks of 7 rows (a shared input, uneven slices and chunks, threads)
    equals the numpy interpreter, and the chunks cover every row exactly once."""
    path = ROOT / "examples" / "matrix.dd"
    ref = diffdsl.load(path, backend="numpy")
    rng = np.random.default_rng(5)
    inputs = {"A": rng.uniform(0.5, 1.5, (50, 3, 3)), "v": rng.uniform(0.5, 1.5, 3)}
    if tape:
        monkeypatch.setattr(cpu, "TAPE_THRESHOLD", 0)
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 0 if threads > 1 else 10**18)
    monkeypatch.setenv(cpu.THREADS_ENV, str(threads))
    prog = diffdsl.load(path, backend="cpu")
    seen = []
    chunks = cpu._chunks

    def spy_chunks(rows, nodes):  # the tape's chunks
        for span in chunks(rows, nodes):
            seen.append(span)
            yield span

    monkeypatch.setattr(cpu, "_chunks", spy_chunks)
    for of in ref.outputs:
        graph = prog.derivative("jacobian", of)
        kernel = prog.kernel(graph)
        if not tape:  # the machine code's chunks: each call of its row loop
            rows = kernel._rows
            kernel._rows = lambda p, s, begin, end, w, rows=rows: (
                seen.append((begin, end)), rows(p, s, begin, end, w))
        monkeypatch.setattr(cpu, "CHUNK_WORK", 7 * len(graph.nodes))  # 7 rows a chunk
        seen.clear()
        got, want = prog.jacobian(inputs, of=of), ref.jacobian(inputs, of=of)
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=1e-12, atol=1e-13)
        seen.sort()
        assert [b for b, _ in seen] == [0] + [e for _, e in seen[:-1]] and seen[-1][1] == 50
        assert max(e - b for b, e in seen) == 7


def test_an_interrupt_between_chunks_stops_the_batch_and_leaves_the_kernel_usable(monkeypatch):
    """Ctrl-C arrives between two chunks (here: raised by the bar's first update): it reaches
    the caller, and the same kernel then evaluates the next batch right."""
    import contextlib

    class Interrupting:
        def update(self, n=1):
            raise KeyboardInterrupt

    prog = diffdsl.load(DET3, backend="cpu", cache=False)
    prog.grad(A=np.eye(3))  # the kernel is built before the bars are replaced
    ref = diffdsl.load(DET3, backend="numpy")
    monkeypatch.setattr(progress, "bar", lambda *a, **k: contextlib.nullcontext(Interrupting()))
    monkeypatch.setattr(cpu, "PARALLEL_WORK", 0)
    monkeypatch.setenv(cpu.THREADS_ENV, "3")
    batch = np.random.default_rng(1).uniform(0.5, 1.5, (50, 3, 3))
    monkeypatch.setattr(cpu, "CHUNK_WORK", 7 * len(prog.derivative("grad").nodes))
    with pytest.raises(KeyboardInterrupt):
        prog.grad(A=batch)
    monkeypatch.setattr(cpu, "CHUNK_WORK", 10**18)
    np.testing.assert_allclose(prog.grad(A=batch)["A"], ref.grad(A=batch)["A"], rtol=1e-12)
