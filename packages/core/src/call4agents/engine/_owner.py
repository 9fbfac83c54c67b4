"""Who holds a lease, and whether that holder is a process on this machine that is gone.

A lease names its owner as ``host/boot/pid/start/claim``: the process and which of its claims.
When a process meets a lease held by a process of the same machine, boot and pid namespace, the
lease's clock is not what decides:

- that pid is not running, or runs a different program that reused the pid (its start time
  differs): the owner is dead and the action is in doubt at once;
- it is running (busy, stuck or stopped with SIGSTOP): it may still act, so it is never judged
  gone, however long ago its lease lapsed; only an owner on another machine (or in another pid
  namespace) is judged by its lease;
- it is this process: the claim number says whether one of our own threads still runs it. A
  claim whose answer was lost (the intent committed, the connection dropped before it said so)
  is kept here, so a retry of ours can prove the intent is its own and that nothing ran; until
  one does, its lease decides, since nothing renews it.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any, Protocol


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
    claim: str = ""  # which claim of the process; "" in leases written before claims were named

    def __str__(self) -> str:
        base = f"{self.host}/{self.boot}/{self.pid}/{self.start}"
        return f"{base}/{self.claim}" if self.claim else base

    def describe(self) -> str:
        return f"pid {self.pid} on {self.host}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        parts = text.split("/")
        if len(parts) not in (4, 5) or not parts[2].isdigit():
            return None
        return cls(parts[0], parts[1], int(parts[2]), parts[3], *parts[4:])


_me: tuple[int, Owner, str] | None = None  # pid, identity, identity as a lease names it
_numbers = itertools.count(1)
_running: set[str] = set()  # owner texts of this process's claims whose tool may be running
# owner text -> key, of claims whose answer was lost (a key may have several: each retry that
# cannot reach the database is one more, and any of them may be the one that committed)
_unanswered: dict[str, str] = {}
_UNANSWERED_KEPT = 1000
_lock = threading.Lock()


def me() -> Owner:
    """This process's identity; recomputed after a fork, where the pid changes."""
    return _mine()[1]


def _mine() -> tuple[int, Owner, str]:
    global _me
    pid = os.getpid()
    if _me is None or _me[0] != pid:
        owner = Owner(socket.gethostname(), _boot_id(), pid, _start_ticks(pid) or "-")
        _me = (pid, owner, str(owner))
        # A forked child runs none of its parent's claims and must never adopt one of them.
        _running.clear()
        _unanswered.clear()
    return _me


def claim_owner() -> str:
    """The owner text for one new claim, counted as running until ``finished``."""
    text = f"{_mine()[2]}/{next(_numbers)}"
    _running.add(text)
    return text


def finished(owner_text: str) -> None:
    """The claim's tool is not running (it ended, or the claim did not win)."""
    _running.discard(owner_text)


def unanswered(key: str, owner_text: str) -> None:
    """The claim's answer was lost: its intent may be in the ledger, and nothing ran."""
    with _lock:
        _running.discard(owner_text)
        _unanswered[owner_text] = key
        if len(_unanswered) > _UNANSWERED_KEPT:
            _unanswered.pop(next(iter(_unanswered)))


def adopt(key: str, owner_text: str | None) -> bool:
    """True once, for the one caller that may run the intent ``owner_text`` wrote for ``key``:
    it is a claim of ours whose answer was lost, so its tool never started."""
    with _lock:
        if owner_text is None or _unanswered.get(owner_text) != key:
            return False
        del _unanswered[owner_text]
        _running.add(owner_text)
        return True


def _ours(owner: Owner, text: str) -> str:
    """What became of a claim of this process: "running" (a thread of ours runs its tool, or a
    lease written before claims were named, which cannot be told apart), "unanswered" (its
    answer was lost: nothing ran, a retry may adopt it, and until then its lease decides, as
    for a worker elsewhere), or "gone" (no thread of ours runs it)."""
    if not owner.claim:
        return "running"
    with _lock:
        if text in _running:
            return "running"
        return "unanswered" if text in _unanswered else "gone"


def _same_machine(owner: Owner | None, mine: Owner) -> bool:
    return (
        owner is not None
        and owner.host == mine.host
        and owner.boot == mine.boot
        and owner.boot != "-"
    )


def is_dead_local(owner_text: str | None) -> bool:
    """True only when we can prove the owner was a process of this machine and boot that is gone."""
    if not owner_text:
        return False
    owner = Owner.parse(owner_text)
    mine = me()
    if owner is None or not _same_machine(owner, mine):
        return False
    if owner.pid == mine.pid:
        return owner.start != mine.start or _ours(owner, owner_text) == "gone"
    start = _start_ticks(owner.pid)
    # No such pid, or the pid was reused by a process that started at another time.
    return start is None or (owner.start != "-" and start != owner.start)


def is_alive_local(owner_text: str | None) -> bool:
    """True when we can prove the owner is a process of this machine that still runs (stopped
    or not): it may yet act, so its lapsed lease must not make the action in doubt."""
    if not owner_text:
        return False
    owner, mine = Owner.parse(owner_text), me()
    if owner is None or not _same_machine(owner, mine) or is_dead_local(owner_text):
        return False
    return owner.pid != mine.pid or _ours(owner, owner_text) == "running"


def gone_note(owner_text: str | None) -> str:
    """Why an action whose owner ``is_dead_local`` is in doubt."""
    owner = Owner.parse(owner_text or "")
    if owner is not None and owner.pid == me().pid and owner.start == me().start:
        return f"its worker ({owner.describe()}) stopped running it without recording an outcome"
    return f"its worker ({describe(owner_text)}) died while running it"


def describe(owner_text: str | None) -> str:
    owner = Owner.parse(owner_text or "")
    return owner.describe() if owner else (owner_text or "unknown")


class Mark(Protocol):
    """``Store.mark_in_doubt``'s shape: move a started attempt to in doubt, True if it moved."""

    def __call__(
        self, key: str, attempt: int, note: str, *, only_if_expired: bool, owner: str | None = None
    ) -> bool: ...


def judge(key: str, attempt: int, owner: str | None, lapsed: bool, mark: Mark) -> bool | None:
    """Judge one started action (its key, attempt, owner, and whether its lease lapsed by the
    database clock): mark it in doubt if its local owner died, or if its lease lapsed while its
    owner is not a live process of this machine. None if it stands, else whether it moved."""
    if is_dead_local(owner):
        return mark(key, attempt, gone_note(owner), only_if_expired=False, owner=owner)
    if lapsed and not is_alive_local(owner):
        # A live process of this machine (busy, stuck or stopped) may still act.
        note = "its lease expired with no result"
        return mark(key, attempt, note, only_if_expired=True, owner=owner)
    return None


def sweep(started: Iterable[tuple[str, int, str | None, Any]], mark: Mark) -> int:
    """``judge`` each started action; returns how many moved to in doubt."""
    return sum(bool(judge(*row, mark=mark)) for row in started)
