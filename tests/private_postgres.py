"""A PostgreSQL cluster of a test's own, made with ``initdb`` in a temporary folder, that the
test may SIGKILL and start again: the soak's nemesis kills it (``tests/nemesis.py``). The
machine's own cluster (port 5432, which the parallel passes share) is never touched.

``initdb`` and ``postgres`` refuse to run as root: under root both run as the ``postgres``
system user (Debian's package makes it), else as ``nobody``; under any other user, as that
user. The binaries are Debian's (``/usr/lib/postgresql/<version>/bin``, the newest) or the
ones on ``PATH``. Every process of the cluster works in its data folder (each child of the
postmaster is a session of its own, and a killed postmaster's children are the init process's):
a kill finds them all by that folder, so it reaches the backends too and
:meth:`PrivatePostgres.destroy` leaves no process behind.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg2
from support import free_port

__all__ = ["PrivatePostgres", "cluster_processes", "postgres_bin"]


def postgres_bin() -> Path | None:
    """The folder of ``initdb`` and ``postgres``: Debian's newest, else ``PATH``'s; None if
    neither has them."""
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_version)
    if debian:
        return Path(debian[-1]).parent
    found = shutil.which("initdb")
    return Path(found).parent if found else None


def _version(path: str) -> tuple[int, ...]:
    return tuple(int(p) for p in Path(path).parts[-3].split(".") if p.isdigit())


def _run_as() -> pwd.struct_passwd | None:
    """The user the cluster runs as under root (None: not root, run as ourselves)."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root and no 'postgres' or 'nobody' user to run PostgreSQL")


class PrivatePostgres:
    """One private cluster: ``initdb`` in :meth:`create`, then :meth:`start`, :meth:`kill`
    (SIGKILL, as the OOM killer or a crash would), :meth:`start` again (crash recovery) and
    :meth:`destroy` (every process killed, the folder removed; safe to call twice).

    Attributes:
        folder: the temporary folder (data in ``data/``, the unix socket and ``postgres.log``).
        port: its TCP port on 127.0.0.1 (a free one, never 5432's cluster).
        url: ``postgresql://postgres@127.0.0.1:<port>/postgres`` (trust authentication).
    """

    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.user = _run_as()
        self.folder = Path(tempfile.mkdtemp(prefix="gw-soak-pg-"))
        if self.user is not None:  # the cluster's user owns its folder (mkdtemp: mode 0700)
            os.chown(self.folder, self.user.pw_uid, self.user.pw_gid)
        self.port = free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.process: subprocess.Popen | None = None
        self.kills = 0

    def _spawn(self, args: list[str], **kwargs) -> subprocess.Popen:
        """``args`` run as the cluster's user, in a session of their own."""
        user = {}
        if self.user is not None:
            user = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", ""), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        return subprocess.Popen(
            args, cwd=self.folder, env=env, start_new_session=True, **user, **kwargs
        )

    def create(self) -> PrivatePostgres:
        """``initdb`` (superuser ``postgres``, trust authentication, no fsync: only processes
        die here, the machine's page cache survives them). Raises RuntimeError if it fails."""
        with open(self.folder / "initdb.log", "wb") as log:
            process = self._spawn(
                [str(self.bindir / "initdb"), "-D", "data", "-U", "postgres", "-A", "trust",
                 "-E", "UTF8", "--no-sync"],
                stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
            if process.wait(timeout=180) != 0:
                text = (self.folder / "initdb.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"initdb failed: {text}")
        return self

    def start(self, timeout: float = 60) -> None:
        """Start the postmaster (after a kill: its crash recovery) and wait until it answers.
        Raises RuntimeError if it exits or does not answer within ``timeout`` seconds."""
        log = open(self.folder / "postgres.log", "ab")  # noqa: SIM115 - the child keeps it
        self.process = self._spawn(
            [str(self.bindir / "postgres"), "-D", "data", "-p", str(self.port),
             "-k", str(self.folder), "-c", "listen_addresses=127.0.0.1",
             "-c", "fsync=off", "-c", "max_connections=200", "-c", "shared_buffers=16MB"],
            stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"postgres exited {self.process.returncode}: {self.log()}")
            try:
                psycopg2.connect(self.url, connect_timeout=2).close()
                return
            except psycopg2.OperationalError:
                time.sleep(0.2)
        raise RuntimeError(f"postgres did not answer within {timeout} s: {self.log()}")

    def kill(self) -> None:
        """SIGKILL the postmaster, then every process of the cluster left (the backends,
        which would otherwise finish their statements without it), and wait until none is
        left: the cluster died at once."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.kill()
        self.process.wait(timeout=10)
        self._kill_all()
        self.kills += 1

    def destroy(self) -> None:
        """Kill every process of the cluster and remove its folder (idempotent)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self._kill_all()
        shutil.rmtree(self.folder, ignore_errors=True)

    def _kill_all(self) -> None:
        """SIGKILL every live process of the cluster and wait until they are gone.
        Raises RuntimeError if one is still there after 10 s."""
        deadline = time.monotonic() + 10
        while pids := cluster_processes(self.folder / "data"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"postgres processes {pids} survived SIGKILL")
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)

    def log(self) -> str:
        return (self.folder / "postgres.log").read_text(errors="replace")[-2000:]


def cluster_processes(data: Path) -> list[int]:
    """The live (not zombie) processes working in the data folder ``data``: a cluster's
    postmaster and every child it started (Linux: ``/proc``; needs the right to read their
    ``cwd``: the same user, or root)."""
    data = data.resolve()
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if Path(os.readlink(proc / "cwd")) != data:
                continue
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:  # it ended meanwhile, or is not ours to read
            continue
        if state != "Z":
            found.append(int(proc.name))
    return found
