"""News for the people watching a ledger: a ticket opened, an action fell in doubt.

On PostgreSQL, triggers NOTIFY a channel of the ledger's own when either happens, in the writer's
own transaction, so a watcher hears of it as it commits. A notifying commit takes a lock shared
by the whole server (see ``_pg``); these triggers fire only on those two changes, both rare (each
needs a person), so an ordinary action never notifies. SQLite has nothing like it: there a
watcher polls.
"""

from __future__ import annotations

import contextlib
import json
import selectors
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, text

from call4agents.model.errors import LedgerError

from . import _pg
from .dialects import qualified, schema_of

_TICKET_TRIGGER = "c4a_approvals_live"
_DOUBT_TRIGGER = "c4a_effects_live"
_FUNCTION = "c4a_live_news"


def channel_for(schema: str | None) -> str:
    """The news channel of one ledger (not the waiters' channel: they listen for keys)."""
    return ("c4a_live_" + schema if schema else "c4a_live")[:63]


def drop_triggers(conn: Connection) -> None:
    conn.execute(
        text(f"DROP TRIGGER IF EXISTS {_TICKET_TRIGGER} ON {qualified(conn, 'c4a_approvals')}")
    )
    conn.execute(
        text(f"DROP TRIGGER IF EXISTS {_DOUBT_TRIGGER} ON {qualified(conn, 'c4a_effects')}")
    )
    conn.execute(text(f"DROP FUNCTION IF EXISTS {qualified(conn, _FUNCTION)}()"))


def create_triggers(conn: Connection) -> None:
    """The PostgreSQL triggers that announce a new ticket or a new in-doubt action (made afresh)."""
    drop_triggers(conn)
    channel = channel_for(schema_of(conn)).replace("'", "''")
    function = qualified(conn, _FUNCTION)
    # The payload names what happened and its id (a ticket id or an action key): short, and
    # never an argument, so nothing a page must not show travels on the channel.
    conn.execute(
        text(
            f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$\nBEGIN\n"
            f"  IF TG_TABLE_NAME = 'c4a_approvals' THEN\n"
            f"    PERFORM pg_notify('{channel}', json_build_object("
            f"'what', 'ticket', 'id', NEW.ticket)::text);\n"
            f"  ELSE\n"
            f"    PERFORM pg_notify('{channel}', json_build_object("
            f"'what', 'in_doubt', 'id', NEW.key)::text);\n"
            f"  END IF;\n  RETURN NULL;\nEND\n$$"
        )
    )
    conn.execute(
        text(
            f"CREATE TRIGGER {_TICKET_TRIGGER} AFTER INSERT ON {qualified(conn, 'c4a_approvals')} "
            f"FOR EACH ROW WHEN (NEW.state = 'pending') EXECUTE FUNCTION {function}()"
        )
    )
    conn.execute(
        text(
            f"CREATE TRIGGER {_DOUBT_TRIGGER} AFTER UPDATE OF state ON "
            f"{qualified(conn, 'c4a_effects')} FOR EACH ROW WHEN (NEW.state = 'in_doubt' AND "
            f"OLD.state IS DISTINCT FROM 'in_doubt') EXECUTE FUNCTION {function}()"
        )
    )


@dataclass(frozen=True)
class News:
    """One thing a watcher should look at: ``what`` is "ticket" or "in_doubt"; ``id`` the ticket
    id or the action key."""

    what: str
    id: str


class LiveFeed:
    """A listening connection of its own to one PostgreSQL ledger; ``close`` it when done."""

    def __init__(self, target: _pg.Target) -> None:
        import psycopg

        self._channel = channel_for(target.schema)
        try:
            self._conn: Any = psycopg.connect(**target.connect_kwargs, autocommit=True)
            self._conn.execute(f'LISTEN "{self._channel}"')
        except (psycopg.Error, OSError) as exc:
            raise LedgerError(f"could not listen for the ledger's news: {exc}") from exc

    def wait(self, timeout: float) -> list[News]:
        """The news that arrived within ``timeout`` seconds (an empty list if none). Raises
        LedgerError once the connection is lost: the caller then polls, or listens again."""
        import psycopg

        pgconn = self._conn.pgconn
        found: list[News] = []
        try:
            with selectors.DefaultSelector() as sel:
                sel.register(pgconn.socket, selectors.EVENT_READ)
                if sel.select(timeout):
                    pgconn.consume_input()  # raises once the server has closed the connection
            while (n := pgconn.notifies()) is not None:
                if n.relname.decode() == self._channel:
                    found.append(_news(n.extra.decode()))
        except (psycopg.Error, OSError, ValueError) as exc:
            raise LedgerError(
                f"lost the connection listening for the ledger's news: {exc}"
            ) from exc
        return found

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection must not raise
            self._conn.close()


def _news(payload: str) -> News:
    try:
        found = json.loads(payload)
        return News(str(found["what"]), str(found["id"]))
    except (ValueError, KeyError, TypeError):
        return News("unknown", "")  # still news: the watcher looks again


def listen(engine: Engine) -> LiveFeed | None:
    """A feed of the ledger's news on PostgreSQL; None on SQLite and behind a transaction pooler
    (watch by polling there)."""
    target = _pg.target_of(engine)
    return None if target is None or not target.listen else LiveFeed(target)
