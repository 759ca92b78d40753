"""System calls made to fail, or to kill, at an exact call, with ``strace``'s injection
(``-e inject=SYSCALL:error=ERRNO:when=K`` or ``signal=KILL``): the fault tests' way to reach a
point no signal from outside can time. Its counts are per thread. Where strace is absent or may
not trace (a machine with only Python, a container without ptrace), those tests skip."""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest


def strace_works() -> str:
    """Why ``strace`` cannot inject here ("" when it can)."""
    if shutil.which("strace") is None:
        return "strace is not installed (.ci/run installs it)"
    probe = subprocess.run(
        ["strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=rename", "true"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return f"strace cannot trace here: {probe.stderr.strip()[:200]}"
    return ""


def require_strace() -> None:
    why = strace_works()
    if why:
        pytest.skip(why)


class Injection:
    """strace attached to every thread of process ``pid``, with ``-e inject=RULE`` for each rule,
    until :meth:`stop` or the end of the ``with`` block."""

    def __init__(self, pid: int, *rules: str) -> None:
        injects = [arg for rule in rules for arg in ("-e", f"inject={rule}")]
        self._strace: subprocess.Popen[bytes] | None = subprocess.Popen(
            ["strace", "-f", "-qq", "-o", "/dev/null", *injects, "-p", str(pid)],
            stderr=subprocess.PIPE,
        )
        time.sleep(1)  # attached to every thread

    def stop(self) -> None:
        if self._strace is not None:
            self._strace.kill()
            self._strace.wait(timeout=30)
            self._strace = None

    def __enter__(self) -> Injection:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()
