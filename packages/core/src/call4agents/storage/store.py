"""The storage contract: a few small primitives over one SQLAlchemy engine.

Each primitive is one short transaction and states the race it closes. Every state change that
could collide with another worker is a conditional UPDATE fenced by ``attempt``, so a worker that
lost its lease can never overwrite what happened after it.

    claim        intent durable before the tool runs (INSERT ... ON CONFLICT DO NOTHING)
    finish       result or failure of *this* attempt; a fenced-off late result becomes evidence
    mark_in_doubt  a started attempt whose owner died or whose lease lapsed
    take_over    an in-doubt action re-sent (retry_in_doubt) or declared not to have happened
    resolve      a person's or a reconciler's answer to an in-doubt action
    renew        the heartbeat that keeps a long call's lease alive
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, fields
from functools import cache, cached_property
from typing import Any, Literal, NamedTuple

from sqlalchemy import (
    ClauseElement,
    Connection,
    Engine,
    Executable,
    Float,
    Integer,
    Select,
    and_,
    bindparam,
    case,
    func,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.sql.elements import ColumnElement

from call4agents.model.errors import Call4AgentsError, LedgerError

from . import _pg, audit_rows
from ._db import SYNC_OFF, database_failed
from ._kept import Kept, Transaction
from .dialects import dialect_of, schema_of
from .sqlite_tx import reading
from .tables import effects, fixed, open_states


@cache
def _sqlite_named() -> Any:
    """SQLite's dialect with named parameters (:key), which sqlite3 takes as a dict, as psycopg
    takes PostgreSQL's %(key)s: the form an action's statements are compiled to (see Store).
    Made on first use, so a PostgreSQL ledger never loads SQLite's dialect."""
    from sqlalchemy.dialects import sqlite

    return sqlite.dialect(paramstyle="named")


def _held(key: str, attempt: int, owner: str) -> ColumnElement[bool]:
    """The action's row while ``owner`` still holds ``attempt`` of it, started."""
    return and_(
        effects.c.key == key,
        effects.c.attempt == attempt,
        effects.c.state == "started",
        effects.c.owner == owner,
    )


Conn = Connection  # a transaction the caller holds (``Store.tx()``, ``Store.read()``, a gate's)


def clock(conn: Conn) -> float:
    """The database's clock now, read on ``conn`` (inside its transaction, where it has one)."""
    return float(conn.execute(select(dialect_of(conn.dialect.name).now())).scalar_one())


class StoredArgs(NamedTuple):
    args: str  # the display JSON, redacted values masked ("{}" once pruned)
    digest: str | None  # Action.args_digest of the attempt that ran; None once pruned
    pruned: bool


@dataclass(frozen=True)
class Row:
    """One effect row as the engine needs it."""

    key: str
    run_id: str
    tool: str
    kind: str
    state: str
    attempt: int
    owner: str | None
    lease_expires_at: float | None
    result: str | None
    error: str | None
    note: str | None
    pruned_at: float | None
    now: float  # the database clock when the row was read

    @property
    def lease_live(self) -> bool:
        return self.lease_expires_at is not None and self.lease_expires_at > self.now


_ROW_FIELDS = tuple(f.name for f in fields(Row))  # the order of _ROW_COLUMNS, then now
_new = object.__new__


def row_of(values: Sequence[Any]) -> Row:
    """``Row(*values)`` for a row read in column order. A frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``; every claim that finds a row builds one, so its
    fields go into the instance dict at once (the same object, still frozen afterwards)."""
    row = _new(Row)
    row.__dict__.update(zip(_ROW_FIELDS, values))  # noqa: B905 - the columns are the fields
    return row


class Claim(NamedTuple):
    """What ``claim`` found: run it now, an existing row to act on, a refusal, or try again.
    (A named tuple: one is made on every action, at a third of a frozen dataclass's cost.)"""

    outcome: Literal["run", "existing", "refused", "again"]
    attempt: int
    row: Row | None = None
    refusal: Call4AgentsError | None = None


# Asked inside the claim transaction before a new attempt starts; returns a refusal or None.
Gate = Callable[[Connection, int], "Call4AgentsError | None"]


class _Retry(Exception):  # internal control flow: roll back the claim and try again
    pass


_ROW_COLUMNS = (
    effects.c.key,
    effects.c.run_id,
    effects.c.tool,
    effects.c.kind,
    effects.c.state,
    effects.c.attempt,
    effects.c.owner,
    effects.c.lease_expires_at,
    effects.c.result,
    effects.c.error,
    effects.c.note,
    effects.c.pruned_at,
)
# row_of pairs the columns read (then the clock) with Row's fields by position.
assert (*(c.name for c in _ROW_COLUMNS), "now") == _ROW_FIELDS, "Row and _ROW_COLUMNS differ"


class Store:
    # Seconds an outcome keeps being retried while the database is away (restart, failover).
    finish_retry: float = 30.0

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name
        self._sql = dialect_of(self.dialect)
        self._now = self._sql.now()
        self._schema = schema_of(engine)
        target = _pg.target_of(engine)
        # Behind a pooler, durability="process" cannot be a startup option: a statement in
        # autocommit (its own transaction) then turns synchronous commit off itself.
        self._sync_off = target is not None and target.sync_off
        # Every statement an action runs is written once below and compiled once per ledger
        # into its driver's text (the cached properties after close()), at its first use: a
        # command that only reads never compiles them. Running one then costs no compiling
        # and no parameter processing. They run on connections kept checked out of the
        # engine's pool (see _kept): on PostgreSQL in autocommit, each one statement and one
        # round trip; on SQLite inside BEGIN IMMEDIATE, as every write transaction of the
        # engine.
        self._statements: dict[Hashable, str] = {}  # see statement()
        if self._sql.wakes:
            self._writes = self._reads = Kept(engine, autocommit=True)
        else:
            self._writes, self._reads = Kept(engine), Kept(engine, reads=True)

    def close(self) -> None:
        self._writes.close()
        self._reads.close()
        _pg.stop_listening(self.engine)

    @cached_property
    def _select_row(self) -> Select[Any]:
        return select(*_ROW_COLUMNS, self._now.label("now")).where(effects.c.key == bindparam("k"))

    @cached_property
    def _insert_sql(self) -> str:
        return self._driver_sql(self._insert_intent())

    @cached_property
    def _row_sql(self) -> str:
        return self._driver_sql(self._select_row)

    @cached_property
    def _row_locked_sql(self) -> str:
        return self._driver_sql(self._sql.locked(self._select_row))

    @cached_property
    def _result_sql(self) -> str:
        return self._driver_sql(
            # What a repeat needs of a finished action: its result, nothing else to load.
            select(effects.c.result).where(
                effects.c.key == bindparam("k"),
                effects.c.state == fixed("succeeded"),
                effects.c.pruned_at.is_(None),
                effects.c.result.is_not(None),
            )
        )

    @cached_property
    def _finish_sql(self) -> str:
        return self._driver_sql(self._finish_stmt())

    def _driver_sql(self, stmt: ClauseElement) -> str:
        """``stmt`` as its driver's text, with named parameters (given as a dict)."""
        dialect = _sqlite_named() if self.dialect == "sqlite" else self.engine.dialect
        if self._schema is None:
            return str(stmt.compile(dialect=dialect))
        translate = {None: self._schema}
        compiled = stmt.compile(
            dialect=dialect, schema_translate_map=translate, render_schema_translate=True
        )
        return str(compiled)

    def _insert_intent(self) -> Any:
        """The intent: ``started``, attempt 1, unless the action exists (rowcount 0)."""
        given = ("key", "run_id", "tool", "kind", "args", "args_digest", "owner")
        stmt = (
            self._sql.insert(effects)
            .values(
                {
                    **{name: bindparam(name) for name in given},
                    "state": fixed("started"),
                    "attempt": literal_column("1"),
                    "lease_expires_at": self._now + bindparam("ttl", type_=Float),
                    "created_at": self._now,
                    "updated_at": self._now,
                }
            )
            .on_conflict_do_nothing(index_elements=["key"])
            .inline()  # no RETURNING of the new row's seq: nothing reads it
        )
        # Behind a pooler with durability="process": RETURNING runs before the statement's own
        # commit, for the row it wrote, so SYNC_OFF there still sets how that commit is made.
        return stmt.returning(literal_column(SYNC_OFF)) if self._sync_off else stmt

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def tx(self) -> Iterator[Connection]:
        """One write transaction (BEGIN IMMEDIATE on SQLite), database faults as LedgerError."""
        with db_faults(), self.engine.begin() as conn:
            yield conn

    @contextmanager
    def read(self) -> Iterator[Connection]:
        """A connection for reads, database faults as LedgerError."""
        with db_faults(), self.engine.connect().execution_options(c4a_read=True) as conn:
            reading(conn)
            yield conn

    def rows(self, stmt: Executable) -> list[Any]:
        """Every row ``stmt`` reads, in one read (``read``)."""
        with self.read() as conn:
            return list(conn.execute(stmt).all())

    def dicts(self, stmt: Executable) -> list[dict[str, Any]]:
        """Every row ``stmt`` reads, each a dict of its columns, in one read."""
        return [dict(row._mapping) for row in self.rows(stmt)]

    def scalar(self, stmt: Executable) -> Any:
        """The first column of the first row ``stmt`` reads (None if none), in one read."""
        with self.read() as conn:
            return conn.execute(stmt).scalar()

    def statement(self, name: Hashable, build: Callable[[], ClauseElement]) -> str:
        """The driver's text of the statement ``build()`` writes, compiled once per ledger and
        kept under ``name``: run with ``conn.exec_driver_sql(text, params)``, it costs no
        compiling and no parameter processing, as an action's statements (the cached
        properties below ``close``)."""
        found = self._statements.get(name)
        if found is None:
            found = self._statements[name] = self._driver_sql(build())
        return found

    def one_write(self) -> Transaction:
        """A connection for one write statement, kept as an action's are (see ``_kept``), so no
        pool checkout: on PostgreSQL the statement is its own transaction (autocommit), on
        SQLite it runs inside BEGIN IMMEDIATE. Several statements that must commit together
        need ``tx()``."""
        return Transaction(self._writes)

    def one_read(self) -> Transaction:
        """A connection for one read statement, kept as an action's are (see ``one_write``)."""
        return Transaction(self._reads)

    def _row(self, conn: Connection, key: str, *, lock: bool = False) -> Row | None:
        sql = self._row_locked_sql if lock else self._row_sql
        found = conn.exec_driver_sql(sql, {"k": key}).first()
        return row_of(found) if found is not None else None

    # -- primitives ---------------------------------------------------------------------------

    def claim(
        self,
        *,
        key: str,
        run_id: str,
        tool: str,
        kind: str,
        args: str,
        owner: str,
        ttl: float,
        args_digest: str | None = None,
        gate: Gate | None = None,
    ) -> Claim:
        """Write the intent (``started``, attempt 1) unless the action exists.

        Closes: two workers starting the same action at once. The unique key makes exactly one
        INSERT win; the loser reads the winner's row. A ``failed`` row is taken as a new attempt
        by an UPDATE fenced by the attempt it read, so two retries cannot both run it.
        ``gate`` (approvals, limits) is asked inside one transaction before a new attempt.
        """
        params = {
            "key": key,
            "run_id": run_id,
            "tool": tool,
            "kind": kind,
            "args": args,
            "args_digest": args_digest,
            "owner": owner,
            "ttl": ttl,
        }
        if gate is None:
            with Transaction(self._writes) as conn:
                return self._claim_ungated(conn, params)
        try:
            with self.tx() as conn:
                return self._claim_gated(conn, params, gate)
        except _Retry:
            return Claim("again", 0)

    def _claim_ungated(self, conn: Connection, params: dict[str, Any]) -> Claim:
        """The intent insert, then (if it met a row) the row. SQLite: under the write lock of
        one transaction. PostgreSQL: each a statement in autocommit, so the common case is one
        round trip with no row to read back (the insert waits for a conflicting row to commit,
        so the read finds it; one removed between the two is inserted again)."""
        while True:
            if conn.exec_driver_sql(self._insert_sql, params).rowcount == 1:
                return Claim("run", 1)
            row = self._row(conn, params["key"])
            if row is None:
                continue  # removed meanwhile: insert again
            if row.state != "failed":
                return Claim("existing", row.attempt, row)
            attempt = row.attempt + 1
            if self._restart(conn, params, row.attempt, attempt, from_state="failed"):
                return Claim("run", attempt)
            # Another worker restarted it first (PostgreSQL; SQLite holds the lock): look again.

    def _claim_gated(self, conn: Connection, params: dict[str, Any], gate: Gate) -> Claim:
        key = params["key"]
        row = self._row(conn, key, lock=True)
        if row is not None and row.state != "failed":
            return Claim("existing", row.attempt, row)  # a repeat needs no new yes
        attempt = 1 if row is None else row.attempt + 1
        refusal = gate(conn, attempt)
        if refusal is not None:
            if row is None and self._row(conn, key) is not None:
                # PostgreSQL: another worker inserted the action (spending the yes) after our
                # read; a repeat needs no yes, so roll back any ticket the gate opened and look.
                raise _Retry
            return Claim("refused", attempt, refusal=refusal)
        if row is not None:
            self._restart(conn, params, row.attempt, attempt, from_state="failed")
            return Claim("run", attempt)
        if conn.exec_driver_sql(self._insert_sql, params).rowcount != 1:
            # Another worker inserted it meanwhile (PostgreSQL): undo what the gate spent.
            raise _Retry
        return Claim("run", 1)

    def _restart(
        self, conn: Connection, params: dict[str, Any], seen: int, attempt: int, *, from_state: str
    ) -> bool:
        """Start ``attempt`` of an action that ended ``from_state`` at attempt ``seen``.

        The row takes the new attempt's arguments: under a ``key=`` of the caller's, a retry may
        carry other ones, and the record (and a later key-reuse check) must show what ran."""
        key = params["key"]
        done = conn.execute(
            update(effects)
            .where(effects.c.key == key, effects.c.attempt == seen, effects.c.state == from_state)
            .values(
                state="started",
                attempt=attempt,
                args=params["args"],
                args_digest=params["args_digest"],
                error=None,  # the old attempt's error must not be read as this one's
                note=None,
                resolved_by=None,
                owner=params["owner"],
                lease_expires_at=self._now + params["ttl"],
                updated_at=self._now,
            )
        )
        return done.rowcount == 1

    def recorded(self, key: str) -> str | None:
        """The action's recorded result if it has succeeded, from one plain read: what a likely
        repeat asks before it claims. An insert attempt costs the server far more than a read,
        and a succeeded row is final (no rule moves an action out of it), so finding one
        settles the call with no write at all. None when there is none to give (not succeeded,
        pruned, not stored): the claim then decides."""
        with Transaction(self._reads) as conn:
            found = conn.exec_driver_sql(self._result_sql, {"k": key}).first()
        return None if found is None else str(found[0])

    def stored_args(self, key: str) -> StoredArgs | None:
        """What the ledger keeps of the action's arguments, in one read (None: no such action)."""
        stmt = select(effects.c.args, effects.c.args_digest, effects.c.pruned_at)
        found = self.rows(stmt.where(effects.c.key == key))
        return next((StoredArgs(args, digest, at is not None) for args, digest, at in found), None)

    def get(self, key: str) -> Row | None:
        with Transaction(self._reads) as conn:
            return self._row(conn, key)

    def finish(
        self,
        key: str,
        attempt: int,
        *,
        state: Literal["succeeded", "failed", "in_doubt"],
        result: str | None = None,
        error: str | None = None,
        note: str | None = None,
    ) -> bool:
        """Record how attempt ``attempt`` ended. False when the attempt was fenced off.

        Closes: a late result overwriting a newer truth. Only the attempt that is still current
        may write, and only while the action is open (started, or in doubt because its lease
        lapsed: a late result settles that doubt, since it is what really happened). Anything
        else (a person resolved it, or a retry took over) keeps the late outcome as evidence.

        The outcome is the one thing that cannot be had again, so a database fault is retried
        for ``finish_retry`` seconds. A try that committed but lost its acknowledgement is
        recognised by the next try as this attempt's own write, not as a late result.
        """
        params = {"k": key, "a": attempt, "st": state, "res": result, "err": error, "nt": note}
        if self._sql.wakes:
            params["lock_id"] = _pg.lock_id(self._schema, key)
        deadline = time.monotonic() + self.finish_retry
        pause = 0.05
        while True:
            try:
                # SQLite: the outcome and, if it matched nothing, a closer look, in one write
                # transaction. PostgreSQL: the outcome alone in autocommit (one round trip),
                # then, if it matched nothing, the outcome again and the closer look in a
                # transaction of its own.
                with Transaction(self._writes) as conn:
                    if conn.exec_driver_sql(self._finish_sql, params).rowcount == 1:
                        return True
                    if not self._sql.wakes:
                        return self._unmatched(conn, params)
                with self.tx() as conn:
                    if conn.exec_driver_sql(self._finish_sql, params).rowcount == 1:
                        return True
                    return self._unmatched(conn, params)
            except LedgerError as exc:
                if not self.transient(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 1.0)

    def _unmatched(self, conn: Connection, params: dict[str, Any]) -> bool:
        """Why the outcome matched no open row: this attempt's own earlier try whose
        acknowledgement was lost (True), or a late result, kept as evidence (False)."""
        key, attempt, state = params["k"], params["a"], params["st"]
        result, error = params["res"], params["err"]
        found = conn.execute(
            select(
                effects.c.state,
                effects.c.attempt,
                effects.c.result,
                effects.c.error,
                effects.c.resolved_by,
                effects.c.evidence,
                self._now.label("now"),
            ).where(effects.c.key == key)
        ).first()
        if found is None:
            return False
        if (found.state, found.attempt, found.result, found.error, found.resolved_by) == (
            state,
            attempt,
            result,
            error,
            None,
        ):
            return True  # our own earlier try, whose acknowledgement the connection lost
        late = {"attempt": attempt, "state": state, "result": result, "error": error}
        self._add_evidence(conn, key, found.evidence, {**late, "at": found.now})
        if state == "succeeded":
            self._reopen_contradiction(conn, key)
        return False

    def _finish_stmt(self) -> Any:
        """The UPDATE that records an outcome; on PostgreSQL it also wakes whoever waits."""
        stmt = (
            update(effects)
            .where(
                effects.c.key == bindparam("k"),
                effects.c.attempt == bindparam("a"),
                open_states(),
            )
            .values(
                state=bindparam("st"),
                result=bindparam("res"),
                error=bindparam("err"),
                note=bindparam("nt"),
                owner=null(),
                lease_expires_at=null(),
                updated_at=self._now,
            )
        )
        if not self._sql.wakes:
            return stmt
        # Still one round trip: RETURNING runs only for the row the UPDATE matched, before
        # the statement's own commit (so SYNC_OFF there still sets how it commits).
        extra: list[ColumnElement[Any]] = [literal_column(SYNC_OFF)] if self._sync_off else []
        return stmt.returning(self._wake_waiters(), *extra)

    def _wake_waiters(self) -> ColumnElement[int]:
        """NOTIFY the key (bind ``k``), only if a waiter holds its lock (``lock_id``); see _pg."""
        quiet = func.pg_try_advisory_xact_lock(
            literal_column(str(_pg.LOCK_CLASS)), bindparam("lock_id", type_=Integer)
        )
        channel = fixed(_pg.channel_for(self._schema))
        notify = func.pg_notify(channel, bindparam("k"))
        sent: Select[Any] = select(literal_column("1")).select_from(notify)
        return case((quiet, literal_column("0")), else_=sent.scalar_subquery())

    def _announce(self, conn: Connection, key: str) -> None:
        """Wake whoever waits for ``key`` once this transaction commits (PostgreSQL)."""
        if self._sql.wakes:
            lock = _pg.lock_id(self._schema, key)
            conn.execute(select(self._wake_waiters()), {"k": key, "lock_id": lock})

    def transient(self, exc: LedgerError) -> bool:
        """A fault that may pass: the connection or the server went away, a lock was busy."""
        cause = exc.__cause__
        if isinstance(cause, PoolTimeout):
            return True
        if not isinstance(cause, DBAPIError):
            return False
        return self._sql.transient(cause)

    def watch(self, key: str, *, listen: bool = True) -> AbstractContextManager[_pg.Watch]:
        """Interest in ``key`` while waiting for it; on PostgreSQL its outcome wakes the wait."""
        return _pg.watch(self.engine, key, listen=listen)

    def _add_evidence(
        self, conn: Connection, key: str, evidence: str | None, late: dict[str, Any]
    ) -> None:
        items: list[Any] = json.loads(evidence) if evidence else []
        items.append(late)
        conn.execute(update(effects).where(effects.c.key == key).values(evidence=json.dumps(items)))

    def _reopen_contradiction(self, conn: Connection, key: str) -> None:
        # It was settled as "did not happen" and nothing ran since, yet a late success arrived:
        # running it again now would likely be a duplicate, so it goes back to in doubt.
        conn.execute(
            update(effects)
            .where(
                effects.c.key == key,
                effects.c.state == "failed",
                effects.c.resolved_by.is_not(None),
            )
            .values(
                state="in_doubt",
                note="a late success arrived after it was resolved as not happened: check the "
                "evidence and resolve again",
                updated_at=self._now,
            )
        )

    def mark_in_doubt(
        self,
        key: str,
        attempt: int,
        note: str,
        *,
        only_if_expired: bool,
        owner: str | None = None,
    ) -> bool:
        """Move a started attempt to in doubt: its owner died, its lease lapsed.

        Closes: two workers both judging one lapsed lease; the attempt and the database clock
        are checked in the UPDATE itself, so a lease renewed in between is left alone. With
        ``owner``, the owner judged too: a lost claim's intent adopted meanwhile by a retry of
        its process keeps its attempt under a new owner, which was not judged.
        """
        conds = [effects.c.key == key, effects.c.attempt == attempt, effects.c.state == "started"]
        if owner is not None:
            conds.append(effects.c.owner == owner)
        if only_if_expired:
            conds.append(effects.c.lease_expires_at <= self._now)
        with self.tx() as conn:
            done = conn.execute(
                update(effects)
                .where(and_(*conds))
                .values(state="in_doubt", note=note, owner=None, updated_at=self._now)
            )
            if done.rowcount != 1:
                return False
            self._announce(conn, key)
            return True

    def take_over(
        self, key: str, seen_attempt: int, owner: str, ttl: float, *, args: str, args_digest: str
    ) -> int | Literal[False] | None:
        """Start a new attempt of an in-doubt action; None if someone else moved it first, False
        if it was written with other arguments (a ``key=`` shared by different calls): re-sending
        other arguments under the attempt that may have happened is never a retry of it.

        Closes: two retries of one in-doubt action both starting it again. The row is read under
        its lock (the write transaction on SQLite) and the attempt seen must still be current."""
        with self.tx() as conn:
            found = conn.execute(
                self._sql.locked(
                    select(effects.c.state, effects.c.attempt, effects.c.args_digest).where(
                        effects.c.key == key
                    )
                )
            ).first()
            if found is None or (found.state, found.attempt) != ("in_doubt", seen_attempt):
                return None  # moved on meanwhile: the caller looks again
            if found.args_digest is not None and found.args_digest != args_digest:
                return False
            params = dict(key=key, owner=owner, ttl=ttl, args=args, args_digest=args_digest)
            attempt = seen_attempt + 1
            if self._restart(conn, params, seen_attempt, attempt, from_state="in_doubt"):
                return attempt
            return None

    def resolve(
        self,
        key: str,
        *,
        happened: bool,
        result: str | None,
        by: str,
        note: str,
        reason: str | None = None,
        expect_attempt: int | None = None,
    ) -> bool:
        """Settle an open action: ``succeeded`` with ``result`` if it happened, else ``failed``;
        the audit keeps who, how and ``reason`` (the note as given; ``note`` by default).

        A ``failed`` action runs again as a new attempt when it is next called, which is what
        "it did not happen" means. Refuses (False) unless the action is in doubt, or started with
        a lapsed lease: a live worker's action is never settled under its feet.

        Closes: a person settling an action a worker still runs, or one another person or a
        reconciler settled meanwhile; the state, the lease and (``expect_attempt``) the attempt
        are checked in the UPDATE itself.
        """
        live = and_(effects.c.state == "started", effects.c.lease_expires_at > self._now)
        conds = [effects.c.key == key, open_states(), ~live]
        if expect_attempt is not None:
            conds.append(effects.c.attempt == expect_attempt)
        with self.tx() as conn:
            done = conn.execute(
                update(effects)
                .where(and_(*conds))
                .values(
                    state="succeeded" if happened else "failed",
                    result=result if happened else None,
                    error=None if happened else "DidNotHappen: " + note,
                    note=note,
                    resolved_by=by,
                    owner=None,
                    lease_expires_at=None,
                    updated_at=self._now,
                )
                .returning(effects.c.run_id, effects.c.tool, effects.c.attempt)
            ).first()
            if done is None:
                return False
            # In the same transaction: a settlement that committed is always in the audit,
            # whatever the action's row says after its next attempt.
            audit_rows.write(
                conn,
                actor=by,
                action="happened" if happened else "did_not_happen",
                run_id=done.run_id,
                tool=done.tool,
                key=key,
                attempt=done.attempt,
                reason=note if reason is None else (reason or None),
            )
            self._announce(conn, key)
            return True

    def adopt(self, key: str, attempt: int, owner: str, new_owner: str, ttl: float) -> bool:
        """Hand a started attempt from ``owner`` to ``new_owner`` with a fresh lease: a claim
        whose answer was lost, taken up by a retry of the process that made it.

        Closes: adopting an action that moved on meanwhile (judged in doubt, taken over); the
        attempt, state and owner are checked in the UPDATE itself."""
        with self.tx() as conn:
            done = conn.execute(
                update(effects)
                .where(_held(key, attempt, owner))
                .values(owner=new_owner, lease_expires_at=self._now + ttl, updated_at=self._now)
            )
            return done.rowcount == 1

    def renew(self, leases: Sequence[tuple[str, int, str]], ttl: float) -> list[str]:
        """Push out the leases (key, attempt, owner) this process still holds; returns the keys
        it no longer holds.

        Closes: renewing a lease another worker took over after it lapsed; the attempt and owner
        are checked in the UPDATE itself, so a lost lease stays lost and its holder is told."""
        lost: list[str] = []
        with self.tx() as conn:
            for key, attempt, owner in leases:
                done = conn.execute(
                    update(effects)
                    .where(_held(key, attempt, owner))
                    .values(lease_expires_at=self._now + ttl)
                )
                if done.rowcount != 1:
                    lost.append(key)
        return lost

    def now(self) -> float:
        return float(self.scalar(select(self._now)))


@contextmanager
def db_faults() -> Iterator[None]:
    """Database faults (a dropped connection, a full pool) as one-line LedgerErrors. (An
    action's own transactions turn them so in ``_kept.Transaction``.)"""
    try:
        yield
    except (DBAPIError, PoolTimeout) as exc:
        raise database_failed(exc) from exc
