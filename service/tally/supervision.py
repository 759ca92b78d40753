"""Process supervision of ``tally serve``: a worker never outlives its server, and a second server
never shares a port.

granian runs the app in worker processes whose parent is the ``tally serve`` process. If that
parent is killed (``kill -9``, the OOM killer) a worker would be re-parented and keep serving,
holding the port and the embedded engine's lock, so a restart fails. :func:`exit_with_parent`
runs in each worker when the app is built: on Linux the kernel sends the worker SIGKILL when its
parent dies (``PR_SET_PDEATHSIG``), and everywhere a watchdog thread does the same on seeing the
parent change. Nothing acknowledged is lost by that: an event is acknowledged only once stored.

granian binds its listening socket with ``SO_REUSEPORT``, so a second server on a taken port would
start and share the traffic. :func:`port_is_free` binds without it first. That check alone left
seconds open (the schema step runs between it and granian's bind): two servers started together
on one port both passed it, both listened, and the kernel split the connections between them
(two data folders answering as one address). :func:`claim_port` closes that window: each server
first takes a name for its address that one process at a time can hold, an abstract Unix socket
on Linux (scoped, as the port is, to the network namespace, and dropped by the kernel when the
process and the workers that inherit it are gone).

The embedded ClickHouse engine allows one process per folder: a second ``tally serve`` on it failed
deep in the engine ("the schema could not be applied"). :func:`hold_lock` takes an exclusive
``flock`` on a lock file next to the engine's folder, before the engine is opened, and holds it for
the life of the server, so that the second one can say plainly who holds it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger("tally")

# Set by `tally serve` to its own PID before granian spawns the workers (they inherit it).
PARENT_ENV = "TALLY_SERVE_PID"
_PR_SET_PDEATHSIG = 1
WATCH_INTERVAL_SECONDS = 0.5


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _set_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def exit_with_parent(environ: dict[str, str] | None = None) -> bool:
    """In a worker of ``tally serve``: die with the server. Returns whether it applies (the
    variable :data:`PARENT_ENV` names this process's parent)."""
    env = os.environ if environ is None else environ
    try:
        parent = int(env.get(PARENT_ENV, ""))
    except ValueError:
        return False
    if parent != os.getppid() and parent != os.getpid():
        # The parent is already gone (re-parented before we got here), or this is not a worker.
        if not process_alive(parent):
            _die()
        return False
    if parent == os.getpid():
        return False  # the server process itself (a single-process run): nothing to watch
    _set_pdeathsig()
    # The kernel's signal covers Linux; the watchdog covers the rest and the moment between
    # fork and prctl (the parent may have died before prctl ran).
    if os.getppid() != parent:
        _die()
    thread = threading.Thread(target=_watch, args=(parent,), name="tally-parent-watch", daemon=True)
    thread.start()
    return True


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch(parent: int) -> None:
    stop = threading.Event()
    while not stop.wait(WATCH_INTERVAL_SECONDS):
        if os.getppid() != parent:
            log.error("the tally serve process (PID %d) is gone: this worker exits", parent)
            _die()


# How `tally serve` says its port is taken (tests and benchmarks retry another port on it).
PORT_TAKEN = "is already in use (another `tally serve`?)"
# The claims this process holds (see claim_port), open until it exits.
_claims: list[socket.socket] = []


def claim_port(host: str, port: int) -> bool:
    """Claim ``host:port`` for this process's server until it exits. False when another
    ``tally serve`` holds the claim (it is starting, or serving, there); True once held, and
    where there are no abstract sockets (not Linux), which leaves :func:`port_is_free` alone."""
    if not sys.platform.startswith("linux") or port == 0:
        return True
    claim = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        claim.bind(f"\0tally-serve {host} {port}")
    except OSError as exc:
        claim.close()
        if exc.errno == errno.EADDRINUSE:
            return False
        log.warning("the port could not be claimed (%s); checked by binding alone", exc)
        return True
    _claims.append(claim)
    return True


def port_is_free(host: str, port: int) -> bool:
    """Whether ``host:port`` can be bound by a socket without ``SO_REUSEPORT`` (``SO_REUSEADDR``
    set, as servers do, so connections of a previous run in TIME_WAIT do not count)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return True  # granian will report the address itself
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as exc:
                if exc.errno == errno.EADDRINUSE:
                    return False
                raise
    return True


# Lock files this process holds until it exits (the kernel drops a flock with its descriptor).
_held: list[int] = []


def hold_lock(path: Path, orphan_grace: float = 10.0) -> int | None:
    """Take an exclusive lock on ``path`` (created if needed) for the rest of this process's life
    and write this process's PID in it. Returns None once held; else the PID written by the
    process that holds it (0 if it cannot be read). A lock whose writer has died is still held
    by its workers until they exit, which they do at once (:func:`exit_with_parent`): that is
    waited for, up to ``orphan_grace`` seconds, so that a restart right after a ``kill -9``
    starts."""
    deadline = time.monotonic() + orphan_grace
    while True:
        holder = _try_lock(path)
        if holder is None:
            return None
        if (holder and process_alive(holder)) or time.monotonic() >= deadline:
            return holder
        time.sleep(0.1)


def _try_lock(path: Path) -> int | None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = int(os.read(fd, 32).decode().strip() or 0)
        except (OSError, ValueError):
            holder = 0
        os.close(fd)
        return holder
    os.ftruncate(fd, 0)
    os.write(fd, f"{os.getpid()}\n".encode())
    _held.append(fd)
    return None
