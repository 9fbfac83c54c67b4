"""Who holds a lease, and whether that holder is a process on this machine that is gone.

A lease names its owner as ``host/boot/pid/start``. When a resumed process meets a lease held by a
process of the same machine, boot and pid namespace, it need not wait for the lease to expire: if
that pid is not running, or runs a different program that reused the pid (its start time
differs), the owner is dead and the action is in doubt at once.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from functools import cache


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


@cache
def _boot_id() -> str:
    """The boot and the pid namespace this process sees pids in, or "-" where either is unknown.

    Linux gives every boot a random id; elsewhere we cannot tell boots apart, so a "dead" verdict
    is never given and leases simply expire. Containers on one machine share the boot id (and,
    with the host's network or UTS namespace, its host name) but each has its own pids: a pid is
    only comparable inside the same pid namespace, so the namespace is part of the identity.
    """
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = os.readlink("/proc/self/ns/pid")  # e.g. "pid:[4026531836]"
    except OSError:
        return "-"
    digits = "".join(c for c in namespace if c.isdigit())
    return f"{boot[:8]}.{digits}" if boot and digits else "-"


def _start_ticks(pid: int) -> str | None:
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'.
    fields = stat[stat.rfind(")") + 2 :].split()
    if len(fields) <= 19 or fields[0] in ("Z", "X"):
        return None  # a zombie has finished running, even before its parent reaps it
    return fields[19]


@dataclass(frozen=True)
class Owner:
    host: str
    boot: str
    pid: int
    start: str

    def __str__(self) -> str:
        return f"{self.host}/{self.boot}/{self.pid}/{self.start}"

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        parts = text.split("/")
        if len(parts) != 4 or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3])


_me: tuple[int, Owner, str] | None = None  # pid, identity, identity as a lease names it


def me() -> Owner:
    """This process's identity; recomputed after a fork, where the pid changes."""
    return _mine()[1]


def me_text() -> str:
    """``str(me())``, made once per process: every claim names its owner."""
    return _mine()[2]


def _mine() -> tuple[int, Owner, str]:
    global _me
    pid = os.getpid()
    if _me is None or _me[0] != pid:
        owner = Owner(socket.gethostname(), _boot_id(), pid, _start_ticks(pid) or "-")
        _me = (pid, owner, str(owner))
    return _me


def is_dead_local(owner_text: str | None) -> bool:
    """True only when we can prove the owner was a process of this machine and boot that is gone."""
    if not owner_text:
        return False
    owner = Owner.parse(owner_text)
    mine = me()
    if owner is None or owner.host != mine.host or owner.boot != mine.boot or owner.boot == "-":
        return False
    if owner.pid == mine.pid:
        return owner.start != mine.start
    start = _start_ticks(owner.pid)
    # No such pid, or the pid was reused by a process that started at another time.
    return start is None or (owner.start != "-" and start != owner.start)


def describe(owner_text: str | None) -> str:
    owner = Owner.parse(owner_text or "")
    return owner.describe() if owner else (owner_text or "unknown")
