"""The ledger: one database of actions, opened once per process and shared by every effect."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import os
import secrets as _secrets
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from call4agents.engine import _owner, approvals
from call4agents.engine.approvals import ApprovalRequest, Signer, request_of
from call4agents.engine.records import EffectRecord, RunSummary, record_of, with_waiting_runs
from call4agents.model import platform
from call4agents.model.codec import encode_result
from call4agents.model.errors import ConfigurationError, LedgerError
from call4agents.model.kinds import KINDS
from call4agents.storage import _db, _files, audit_rows, diagnose, reads, run_rows, urls
from call4agents.storage import approval_rows as tickets
from call4agents.storage._db import cannot_open, outage, outage_error, refuse_read_only
from call4agents.storage.approval_rows import SORTS, WaitingFilter
from call4agents.storage.migrations import CURRENT, current_version, migrate, refuse_unknown
from call4agents.storage.reads import DoubtFilter
from call4agents.storage.store import Store
from call4agents.storage.tally import DedupCounter

if TYPE_CHECKING:
    from call4agents.engine.action import Action
    from call4agents.storage.news import LiveFeed

_L = TypeVar("_L", bound="LedgerCore")
_CACHE_LIMIT = 50_000
# A resumed run's recorded results read in one go: at most this many, none larger than this.
_RECALL_ROWS = 1_000
_RECALL_BYTES = 64 * 1024


@dataclass(frozen=True)
class GcReport:
    pruned: int  # succeeded actions whose payload was removed, a tombstone kept
    deleted: int  # failed actions removed (they had not acted, so nothing to remember)
    kept_open: int  # started or in-doubt actions older than the cut, never touched


class Heartbeat:
    """One daemon thread per ledger that renews the leases of the tools running in this process.

    A claim starts with a full lease, so a lease is renewed only once a third of it has passed:
    short tool calls never cost a renewal, and the thread stays parked between calls instead of
    being started for each one.
    """

    _IDLE_EXIT = 60.0  # seconds with nothing held before the thread ends

    def __init__(self, ledger: LedgerCore) -> None:
        self._ledger = weakref.ref(ledger)
        # key -> (attempt, ttl, renewed at, the claim's owner text)
        self._held: dict[str, tuple[int, float, float, str]] = {}
        self._lost: set[str] = set()
        self._new_locks()
        self._thread: threading.Thread | None = None  # cleared by the thread as it ends
        self._wake_at = float("inf")  # when the thread next looks (monotonic clock)

    def _new_locks(self) -> None:
        # A plain lock for the tool calls' hold and release (on every action: ``with`` on a
        # Lock costs no Python frame, on a Condition it does); the thread waits on it.
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)

    def hold(self, key: str, attempt: int, ttl: float, owner: str) -> None:
        with self._lock:
            now = time.monotonic()
            self._held[key] = (attempt, ttl, now, owner)
            self._lost.discard(key)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="call4agents-heartbeat", daemon=True
                )
                self._thread.start()
            elif now + ttl / 3 < self._wake_at:
                self._wake.notify()  # due before the thread would next look

    def release(self, key: str) -> bool:
        """Stop renewing; True if the lease was lost while the tool ran."""
        with self._lock:
            self._held.pop(key, None)
            lost = key in self._lost
            self._lost.discard(key)
            return lost

    def reset_after_fork(self) -> None:
        self._held.clear()
        self._lost.clear()
        self._thread = None
        self._new_locks()
        self._wake_at = float("inf")

    def _run(self) -> None:
        try:
            self._loop()
        finally:  # an unforeseen end too: the next hold starts a new thread
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None

    def _loop(self) -> None:
        idle_since = time.monotonic()
        while True:
            with self._lock:
                if not self._held:
                    if time.monotonic() - idle_since > self._IDLE_EXIT:
                        self._thread = None  # in the same hold of the lock as the decision
                        return
                    self._wake_at = float("inf")
                    self._wake.wait(timeout=self._IDLE_EXIT / 4)
                    continue
                # Look again the moment the first lease is a third through: its renewal then
                # has the other two thirds to land in, however slow a commit is meanwhile.
                self._wake_at = min(at + ttl / 3 for _, ttl, at, _ in self._held.values())
                self._wake.wait(timeout=max(0.0, self._wake_at - time.monotonic()))
                now = time.monotonic()
                due = {k: (a, t, o) for k, (a, t, at, o) in self._held.items() if now - at >= t / 3}
                idle_since = now
            if due and not self._renew(due, now):
                return

    def _renew(self, due: dict[str, tuple[int, float, str]], now: float) -> bool:
        ledger = self._ledger()
        if ledger is None:
            return False
        for ttl in {t for _, t, _ in due.values()}:
            batch = [(k, a, o) for k, (a, t, o) in due.items() if t == ttl]
            try:
                lost = ledger.store.renew(batch, ttl)
            except LedgerError:
                continue  # the database is away; the next beat tries again
            with self._lock:
                self._lost.update(lost)
                for key, attempt, owner in batch:
                    if self._held.get(key, (None,))[0] == attempt:
                        self._held[key] = (attempt, ttl, now, owner)
        return True


class Recent(OrderedDict[str, str]):
    """The finished results this process has seen, by action key (``get`` serves a repeat without
    a database round trip: a succeeded action is final), and what it learnt of each run: whether
    it is being resumed (its repeats are near) or past its replay point (its claims are new).

    Oldest first: a full dict would drop its first key by scanning past every slot emptied
    before it (tens of microseconds an action, once full); this pops in O(1).
    """

    def __init__(self, store: Store) -> None:
        super().__init__()
        self._store = store
        self._repeats_read: dict[str, int] = {}  # repeats met in the database, per run
        self._writing: set[str] = set()  # runs whose last claim here wrote a new intent

    def remember(self, key: str, result_json: str) -> None:
        if len(self) >= _CACHE_LIMIT:
            with contextlib.suppress(KeyError):  # emptied by another thread meanwhile
                self.popitem(last=False)
        self[key] = result_json

    def recall_run(self, run_id: str) -> None:
        """Called for each repeat met in the database. At the second, ``run_id`` is being
        resumed (a replayed agent loop): read its other recorded results in one query, so the
        repeats that follow are served from memory instead of one round trip each. A lone
        retry pays nothing extra."""
        self._writing.discard(run_id)
        seen = self._repeats_read.get(run_id, 0) + 1
        if seen > 2:
            return
        if len(self._repeats_read) >= _CACHE_LIMIT:
            self._repeats_read.clear()
        self._repeats_read[run_id] = seen
        if seen < 2:
            return
        # Only a shortcut: the repeat in hand has its result either way.
        with contextlib.suppress(LedgerError):
            for key, result in reads.recorded_results(
                self._store, run_id, rows=_RECALL_ROWS, max_bytes=_RECALL_BYTES
            ):
                self.remember(key, result)

    def likely_repeat(self, run_id: str) -> bool:
        """Whether a claim in ``run_id`` should look for a recorded result before trying an
        insert. Yes, unless this process's last claim in the run wrote a new intent: a run met
        here for the first time may be a resume, while a run past its replay point meets new
        actions. Either way the answer is the same; only the cost differs."""
        return run_id not in self._writing

    def wrote_intent(self, run_id: str) -> None:
        if len(self._writing) >= _CACHE_LIMIT:
            self._writing.clear()
        self._writing.add(run_id)

    def forget(self) -> None:
        """As in a process that never saw these results or runs."""
        self.clear()
        self._repeats_read.clear()
        self._writing.clear()


_ledgers: weakref.WeakSet[LedgerCore] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # A child must not reuse its parent's pooled connections or heartbeat (SQLAlchemy's pooling
    # docs, "Using Connection Pools with Multiprocessing or os.fork()").
    for ledger in list(_ledgers):
        ledger.engine.dispose(close=False)
        ledger.heartbeat.reset_after_fork()


platform.at_fork(after_in_child=_after_fork_in_child)


def _refuse_without_sync_standby(engine: _db.Engine, url: str) -> None:
    """``require_sync_standby=True``: open only where a commit is acknowledged once a standby
    has it, so that a failover keeps every result the ledger returned."""
    if engine.dialect.name != "postgresql":
        raise ConfigurationError("require_sync_standby applies to PostgreSQL ledgers only")
    found = diagnose.replication(engine)
    synchronous = any(state in ("sync", "quorum") for _, state in found.standbys)
    if not synchronous or found.synchronous_commit in ("off", "local"):
        raise LedgerError(
            f"require_sync_standby=True, but no standby of {url} confirms its commits "
            f"(standbys: {len(found.standbys)}, synchronous_standby_names="
            f"{found.synchronous_standby_names!r}, synchronous_commit="
            f"{found.synchronous_commit}): set synchronous_standby_names (e.g. 'ANY 1 (*)') "
            "with synchronous_commit=on on the primary, or drop the setting"
        )


class LedgerCore:
    """The ledger as the engine and the controls use it: its store, settings, secret and the
    results this process has seen; reading, settling and forgetting actions. Users open a
    :class:`call4agents.Ledger`, which adds the run controls."""

    def __init__(
        self,
        url: str | None = None,
        *,
        durability: _db.Durability = "power",
        schema: str | None = None,
        secret: str | bytes | None = None,
        lease: float = 30.0,
        wait: float = 10.0,
        busy_timeout: float = 30.0,
        max_result_bytes: int = 1 << 20,
        max_args_bytes: int = 1 << 20,
        allow_network_fs: bool | None = None,
        auto_migrate: bool = True,
        approval_for: Sequence[str] = (),
        approval_ttl: float = 24 * 3600.0,
        previous_secrets: Sequence[tuple[str | bytes, float]] = (),
        pooler: str | None = None,
        open_retry: float = 30.0,
        connect_args: Mapping[str, Any] | None = None,
        engine: _db.Engine | None = None,
        require_sync_standby: bool = False,
    ) -> None:
        if lease <= 0 or wait < 0 or not open_retry >= 0:
            raise ConfigurationError("lease must be > 0 seconds, wait and open_retry >= 0 seconds")
        self._url = urls.engine_url(engine, url)
        if require_sync_standby and durability == "process":
            raise ConfigurationError(
                "require_sync_standby=True needs durability='power': at 'process' a commit is "
                "acknowledged before any standby (or the server's own disk) has it"
            )
        self._require_sync = require_sync_standby
        self.engine = _db.make_engine(
            self._url,
            durability=durability,
            schema=schema,
            busy_timeout=busy_timeout,
            allow_network_fs=allow_network_fs,
            pooler=pooler,
            connect_args=connect_args,
            engine=engine,
        )
        self.schema = schema
        self.durability = durability
        self.lease = lease
        self.wait = wait
        self.max_result_bytes = max_result_bytes
        self.max_args_bytes = max_args_bytes
        self.store = Store(self.engine)
        self.approval_for = tuple(approval_for)
        self.approval_ttl = approval_ttl
        self._previous = [(_bytes(k), until) for k, until in previous_secrets] + _env_previous()
        self._secret_given = secret.encode() if isinstance(secret, str) else secret
        self._secret: bytes | None = None
        self._salt: bytes | None = None
        self.recent = Recent(self.store)  # the results this process has seen
        self.dedup = DedupCounter(self.store)
        self.heartbeat = Heartbeat(self)
        self._open(auto_migrate, open_retry)
        _ledgers.add(self)

    def _open(self, auto_migrate: bool, retry: float) -> None:
        """Open (and migrate) the ledger; while no read-write server answers (an outage, a
        failover under way), try again for up to ``retry`` seconds, then raise one error."""
        deadline, pause = time.monotonic() + retry, 0.25
        while True:
            try:
                self._open_once(auto_migrate)
                return
            except LedgerError:
                self.engine.dispose()
                raise
            except Exception as exc:
                why = outage(exc)
                if why is not None and time.monotonic() + pause < deadline:
                    time.sleep(pause)
                    pause = min(pause * 2, 5.0)
                    continue
                self.engine.dispose()
                refused = _db.statement_mode_refusal(exc)
                if refused is not None:
                    raise refused from exc
                if why is not None:
                    raise outage_error(why, self.url, exc, retry) from exc
                raise cannot_open(self.url, exc) from exc

    def _open_once(self, auto_migrate: bool) -> None:
        refuse_read_only(self.engine)
        if self._require_sync:
            _refuse_without_sync_standby(self.engine, self.url)
        if auto_migrate:
            migrate(self.engine, schema=self.schema)
        else:
            with self.engine.connect() as conn:
                version = current_version(conn, self.schema)
            refuse_unknown(version)
            if version == 0:
                raise LedgerError(
                    f"there is no Call4Agents ledger at {self.url}"
                    + (f" (schema {self.schema})" if self.schema else "")
                    + ": check the URL, or create one with `call4agents migrate`"
                )
            if version < CURRENT:
                raise LedgerError(
                    f"the ledger is at schema version {version}, this version needs {CURRENT}:"
                    " run `call4agents migrate`"
                )
        # Read now, not at the first redacted call: that may be on an event loop's thread.
        found = reads.key_salt(self.store)
        self._salt = found.encode() if found is not None else None

    @property
    def url(self) -> str:
        """The ledger URL with any password masked."""
        return urls.safe_url(self._url)

    @property
    def dialect(self) -> str:
        return self.store.dialect

    def close(self) -> None:
        # The counts are a health figure; closing must not fail over them.
        with contextlib.suppress(LedgerError):
            self.dedup.flush()
        self.store.close()
        self.engine.dispose()

    def __enter__(self: _L) -> _L:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Ledger({self.url!r}, durability={self.durability!r})"

    # -- secret ---------------------------------------------------------------------------------

    def secret_source(self) -> str | None:
        """Where the secret would come from, without creating anything; None if nowhere."""
        if self._secret_given:
            return "given to Ledger(secret=...)"
        if os.environ.get("CALL4AGENTS_SECRET"):
            return "CALL4AGENTS_SECRET"
        if os.environ.get("CALL4AGENTS_SECRET_FILE"):
            return "CALL4AGENTS_SECRET_FILE"
        if self._url.get_backend_name() == "sqlite":
            path = Path(self._url.database or "").expanduser().parent / "secret"
            return f"{path} ({'exists' if path.exists() else 'made on first use'})"
        return None

    @property
    def secret(self) -> bytes:
        if self._secret is None:
            self._secret = self._secret_given or _load_secret(self._url)
        return self._secret

    def signer(self) -> Signer:
        return Signer(self.secret, self._previous)

    def digest(self, data: bytes) -> str:
        """HMAC-SHA256 with the ledger's fixed salt: stands in for a redacted value in keys."""
        if self._salt is None:
            raise LedgerError("the ledger has no key salt: run `call4agents migrate`")
        return hmac.new(self._salt, data, hashlib.sha256).hexdigest()

    # -- reading --------------------------------------------------------------------------------

    def effects(self, run_id: str | None = None, *, limit: int | None = None) -> list[EffectRecord]:
        """A run's actions in the order they were first attempted (all runs if no id is given)."""
        return [record_of(r) for r in reads.actions(self.store, run_id, limit)]

    def find(self, key: str) -> EffectRecord | None:
        """One action by its full key, or None if it was never attempted."""
        found = reads.action(self.store, key)
        return record_of(found) if found is not None else None

    def effect(self, key: str) -> EffectRecord:
        """One action by its key or a unique prefix of it (at least 6 characters)."""
        if len(key) == 64:
            record = self.find(key)
            if record is None:
                raise LedgerError(f"no action with key {key!r} in {self.url}")
            return record
        if len(key) < 6:
            raise ConfigurationError("give at least 6 characters of the action key")
        found = reads.actions_by_prefix(self.store, key, 2)
        if not found:
            raise LedgerError(f"no action with key {key!r} in {self.url}")
        if len(found) > 1:
            raise LedgerError(f"key prefix {key!r} matches several actions: give more characters")
        return record_of(found[0])

    def in_doubt(self) -> list[EffectRecord]:
        """Every action in doubt, after judging lapsed leases and dead local owners."""
        self.sweep()
        return [record_of(r) for r in reads.in_doubt(self.store)]

    def in_doubt_page(
        self,
        where: DoubtFilter | None = None,
        *,
        after: str | None = None,
        limit: int = 25,
    ) -> tuple[list[EffectRecord], int]:
        """A page of the actions in doubt, those in doubt longest first, filtered by ``where``
        (a :class:`DoubtFilter`), and how many it selects in all. ``after``: the key of the last
        action of the page before, for the next one. Lapsed leases are judged first, as
        :meth:`in_doubt` does."""
        where = where or DoubtFilter()
        if where.older_than is not None and not where.older_than >= 0:
            raise ConfigurationError("older_than is seconds in doubt: 0 or more")
        self.sweep()
        found = reads.in_doubt_page(self.store, where, after=after, limit=limit)
        return [record_of(r) for r in found], reads.in_doubt_total(self.store, where)

    def sweep(self) -> int:
        """Mark in doubt every started action whose local owner died, or whose lease lapsed
        while its owner is not a live process of this machine."""
        return _owner.sweep(reads.started(self.store), self.store.mark_in_doubt)

    def runs(
        self,
        *,
        limit: int = 100,
        tool: str | None = None,
        search: str | None = None,
        active_within: float | None = None,
        before: RunSummary | tuple[float, str] | None = None,
        waiting: bool = False,
    ) -> list[RunSummary]:
        """The most recently active runs, newest first; ``tool`` keeps the runs that called that
        tool, ``search`` those whose run id contains the text, ``active_within`` (seconds) those
        with an action updated that recently. Each run's counts cover all of its actions.
        ``before``: the last run of the page before (or its ``(last_at, run_id)``), for the
        next page; runs active at the same moment are ordered by run id, descending.
        ``waiting=True`` adds the runs whose only record is a ticket waiting for a person (an
        agent stopped at its first tool call), from the newest ``limit`` such tickets."""
        if isinstance(before, RunSummary):
            before = (before.last_at, before.run_id)
        # By the database clock; the scan stops at it rather than filtering on it, so it reads
        # the index on updated_at in order and nothing older.
        cutoff = None if active_within is None else self.store.now() - active_within
        found = reads.latest_runs(
            self.store, limit=limit, tool=tool, search=search, cutoff=cutoff, before=before
        )
        runs = [RunSummary(*(r[0], *(int(x or 0) for x in r[1:6]), r[6], r[7])) for r in found]
        if not waiting:
            return runs
        newest = WaitingFilter(tool=tool, run_id=search, sort="newest")
        asked = tickets.waiting_page(self.store, newest, after=None, limit=limit)
        return with_waiting_runs(runs, asked, full=len(runs) == limit, cutoff=cutoff, before=before)

    # -- settling -------------------------------------------------------------------------------

    def resolve(
        self,
        key: str,
        *,
        happened: bool,
        result: Any = None,
        by: str,
        note: str = "",
    ) -> EffectRecord:
        """Record what a person (or a reconciler) found out about an in-doubt action.

        ``happened=True`` records it as succeeded with ``result``: repeats return that result.
        ``happened=False`` records that it did not act: the next call runs it as a new attempt.
        """
        if not by or not by.strip():
            raise ConfigurationError("resolve needs by=: who found this out (a name or a system)")
        record = self.effect(key)
        if record.state == "started":
            self.sweep()
            record = self.effect(record.key)
        if record.state not in ("in_doubt", "started"):
            raise LedgerError(
                f"{record.tool} in run {record.run_id!r} is {record.state}, not in doubt: "
                "there is nothing to resolve"
            )
        if record.state == "started" and _owner.is_alive_local(record.owner):
            raise LedgerError(
                f"{record.tool} in run {record.run_id!r} is held by a process of this machine "
                f"that is still alive, perhaps stopped ({_owner.describe(record.owner)}): it may "
                "yet act, so let it finish, or end that process, then resolve"
            )
        encoded = encode_result(result, max_bytes=self.max_result_bytes) if happened else None
        what = "happened" if happened else "did not happen"
        text = f"resolved by {by}: {what}" + (f" ({note})" if note else "")
        settled = self.store.resolve(
            record.key, happened=happened, result=encoded, by=by, note=text, reason=note
        )
        if not settled:
            raise LedgerError(
                f"{record.tool} in run {record.run_id!r} is still being run by a live worker "
                f"({_owner.describe(record.owner)}); wait for it, or for its lease to expire"
            )
        return self.effect(record.key)

    # -- approvals ------------------------------------------------------------------------------

    def approve(
        self, ticket: str, *, by: str, reason: str | None = None, only_if_pending: bool = False
    ) -> ApprovalRequest:
        """A person's yes to the exact call a ticket shows; spent by one execution.

        ``only_if_pending=True`` leaves a ticket already answered as it is and returns it (its
        ``state`` and ``decided_by`` say who answered): the first of two people stands.
        """
        return approvals.decide(
            self, ticket, approve=True, by=by, reason=reason, only_if_pending=only_if_pending
        )

    def deny(
        self, ticket: str, *, by: str, reason: str | None = None, only_if_pending: bool = False
    ) -> ApprovalRequest:
        """A person's no; it wins over an earlier yes that was not yet used (unless
        ``only_if_pending``, as for ``approve``)."""
        return approvals.decide(
            self, ticket, approve=False, by=by, reason=reason, only_if_pending=only_if_pending
        )

    def waiting(self, *, limit: int = 100, newest_first: bool = False) -> list[ApprovalRequest]:
        """Tickets waiting for a person now (pending, not expired), oldest first (or newest)."""
        every = WaitingFilter(sort="newest" if newest_first else "oldest")
        found = tickets.waiting_page(self.store, every, after=None, limit=limit)
        return [request_of(r) for r in found]

    def listen(self) -> LiveFeed | None:
        """A feed of new tickets and new in-doubt actions as they commit (PostgreSQL LISTEN);
        None on SQLite, where a watcher polls. Close the feed when done."""
        from call4agents.storage.news import listen

        return listen(self.engine)

    def waiting_page(
        self,
        where: WaitingFilter | None = None,
        *,
        after: str | None = None,
        limit: int = 25,
    ) -> tuple[list[ApprovalRequest], int]:
        """A page of the tickets waiting for a person, filtered and sorted by ``where`` (a
        :class:`WaitingFilter`), and how many wait that it selects. ``after``: the last ticket
        of the page before, for the next one."""
        where = where or WaitingFilter()
        if where.sort not in SORTS:
            raise ConfigurationError(f"unknown sort {where.sort!r}: pick one of {', '.join(SORTS)}")
        if where.kind is not None and where.kind not in KINDS:
            raise ConfigurationError(f"unknown kind {where.kind!r}: pick one of {', '.join(KINDS)}")
        if where.older_than is not None and not where.older_than >= 0:
            raise ConfigurationError("older_than is seconds waited: 0 or more")
        found = tickets.waiting_page(self.store, where, after=after, limit=limit)
        return [request_of(r) for r in found], tickets.waiting_total(self.store, where)

    def waiting_by_run(self, run_ids: Sequence[str]) -> dict[str, int]:
        """How many tickets wait for a person (pending, not expired) in each of these runs."""
        return tickets.waiting_counts(self.store, run_ids) if run_ids else {}

    def approval(self, ticket: str) -> ApprovalRequest | None:
        """One approval ticket by its id, in whatever state it is; None if there is none."""
        row = tickets.one(self.store, ticket)
        return request_of(row) if row is not None else None

    def approve_action(
        self, action: Action, *, by: str, reason: str | None = None
    ) -> ApprovalRequest | None:
        """A yes to exactly this prepared call (e.g. arguments a person edited)."""
        return approvals.request(self, action, approve=True, by=by, reason=reason)

    def deny_action(
        self, action: Action, *, by: str, reason: str | None = None
    ) -> ApprovalRequest | None:
        return approvals.request(self, action, approve=False, by=by, reason=reason)

    def request_approval(self, action: Action) -> ApprovalRequest | None:
        """The open ticket for exactly this call (made if needed), or the "no" it got (state
        ``denied``); None if the action ran."""
        return approvals.request(self, action)

    def approvals(
        self, run_id: str | None = None, *, state: str | None = None, key: str | None = None
    ) -> list[ApprovalRequest]:
        """Approval tickets, oldest first; ``state="pending"`` for those waiting on a person."""
        found = tickets.listed(self.store, run_id=run_id, state=state, key=key)
        return [request_of(r) for r in found]

    def audit(
        self,
        *,
        by: str | None = None,
        action: str | None = None,
        run_id: str | None = None,
        tool: str | None = None,
        since: float | None = None,
        before: int | None = None,
        limit: int = 100,
    ) -> list[audit_rows.AuditEntry]:
        """Every decision and settlement, newest first: who said yes or no to which ticket, who
        settled which in-doubt action and how, with the reason or note. Kept whatever happens to
        the ticket or action afterwards, and by ``gc``. Newest first by time (ties by id).
        ``action``: ``approved``, ``denied``, ``happened`` or ``did_not_happen``; ``since``:
        epoch seconds; ``before``: the id of the last entry of a page, for the next one (an id
        no entry has raises ``ConfigurationError``)."""
        if action is not None and action not in audit_rows.ACTIONS:
            raise ConfigurationError(
                f"unknown audit action {action!r}: pick one of {', '.join(audit_rows.ACTIONS)}"
            )
        return audit_rows.entries(
            self.store,
            actor=by,
            action=action,
            run_id=run_id,
            tool=tool,
            since=since,
            before=before,
            limit=limit,
        )

    # -- forgetting -----------------------------------------------------------------------------

    def delete_run(self, run_id: str) -> int:
        """Remove a run's records (e.g. with its checkpoints); refused while any is open."""
        open_, deleted = reads.delete_run(self.store, run_id, run_rows.forget)
        if open_:
            raise LedgerError(
                f"run {run_id!r} has {open_} action(s) running or in doubt: settle them "
                "(`call4agents doubt`, `call4agents resolve`) before deleting the run"
            )
        return deleted

    # -- retention ------------------------------------------------------------------------------

    def gc(self, older_than: float | timedelta, *, batch: int = 1000) -> GcReport:
        """Drop the payload of finished actions last touched before ``older_than`` ago.

        Succeeded actions keep a tombstone (their key and state) so a resumed run never runs them
        again; failed ones are deleted, since they did not act. Started and in-doubt actions are
        never touched. Works in batches of ``batch`` rows, one short transaction each.
        """
        seconds = older_than.total_seconds() if isinstance(older_than, timedelta) else older_than
        if seconds < 0:
            raise ConfigurationError("older_than must not be negative")
        cutoff = self.store.now() - seconds
        return GcReport(*reads.gc(self.store, cutoff, batch, run_rows.forget))


def _load_secret(url: Any) -> bytes:
    env = os.environ.get("CALL4AGENTS_SECRET")
    if env:
        return env.encode()
    path_text = os.environ.get("CALL4AGENTS_SECRET_FILE")
    if path_text:
        return _read_named_secret(Path(path_text))
    if url.get_backend_name() == "sqlite":
        return _read_or_create_secret(Path(url.database).expanduser().parent / "secret")
    raise ConfigurationError(
        "this ledger needs a secret to sign approvals and none is set: give "
        "every worker the same value in CALL4AGENTS_SECRET (or a file in CALL4AGENTS_SECRET_FILE)"
    )


def _read_or_create_secret(path: Path) -> bytes:
    """The secret kept beside an SQLite ledger: made on first use, then only if still private."""
    _files.create_private(path, _secrets.token_hex(32).encode())
    _files.check_private(path, what="secret file", may_be_read=False)
    return _read_secret(path)


def _read_named_secret(path: Path) -> bytes:
    """$CALL4AGENTS_SECRET_FILE: the operator's file (a mounted secret may be a link)."""
    try:
        info = path.stat()
    except OSError as exc:
        raise ConfigurationError(
            f"cannot read CALL4AGENTS_SECRET_FILE={path}: {exc.strerror}"
        ) from exc
    me = platform.user_id()  # None on Windows: no owner or mode bits to check there
    if me is not None and (info.st_uid not in (me, 0) or info.st_mode & 0o022):
        raise LedgerError(
            f"refusing CALL4AGENTS_SECRET_FILE={path}: it must belong to this process's user or to "
            "root and be writable by its owner alone, or another user could choose the key that "
            f"signs approvals (chmod 600 {path})"
        )
    return _read_secret(path)


def _read_secret(path: Path) -> bytes:
    value = path.read_text(encoding="ascii").strip()
    if len(value) < 32:
        raise LedgerError(f"the secret file {path} is too short; remove it to make a new one")
    return value.encode()


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _env_previous() -> list[tuple[bytes, float]]:
    old = os.environ.get("CALL4AGENTS_PREVIOUS_SECRET")
    until = os.environ.get("CALL4AGENTS_PREVIOUS_SECRET_UNTIL")
    if not old:
        return []
    if not until:
        raise ConfigurationError(
            "CALL4AGENTS_PREVIOUS_SECRET needs CALL4AGENTS_PREVIOUS_SECRET_UNTIL (an ISO date-time "
            "with a time zone) saying until when approvals signed with it stay valid"
        )
    try:
        moment = datetime.fromisoformat(until)
    except ValueError as exc:
        raise ConfigurationError(f"CALL4AGENTS_PREVIOUS_SECRET_UNTIL={until!r} is not ISO") from exc
    if moment.tzinfo is None:
        raise ConfigurationError(
            "CALL4AGENTS_PREVIOUS_SECRET_UNTIL needs a time zone (e.g. +00:00)"
        )
    return [(old.encode(), moment.timestamp())]
