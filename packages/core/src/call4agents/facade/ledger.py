"""The ledger users open (:class:`Ledger`), and the one effects use by default (``init``).

The engine works with a :class:`~call4agents.engine.ledger_core.LedgerCore`; this class adds what
the run controls above the engine do with a run: undo it, say how it ended, hand it off.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from call4agents.controls import telemetry
from call4agents.controls.undo import undo_run
from call4agents.engine import default as _engine
from call4agents.engine.default import use_default
from call4agents.engine.endings import handoff, run_endings, run_status
from call4agents.engine.ledger_core import LedgerCore

if TYPE_CHECKING:
    from call4agents.controls.undo import UndoReport
    from call4agents.engine.endings import Handoff, RunStatus
    from call4agents.engine.undos import UndoFn


class Ledger(LedgerCore):
    """A once-only ledger over SQLite (embedded default) or PostgreSQL (shared by many workers).

    Args:
        url: ``sqlite:///path.db`` (default ``sqlite:///.c4a/ledger.db`` or ``$CALL4AGENTS_URL``)
            or ``postgresql+psycopg://user:pass@host/db``.
        durability: ``"power"`` (default) commits survive power loss; ``"process"`` survive a
            crash of the process only, and are faster.
        schema: PostgreSQL schema to keep the tables in, to share a database with other apps.
        secret: key for signing approvals and hiding redacted values; default
            ``$CALL4AGENTS_SECRET``, else a file ``secret`` beside an SQLite ledger.
        lease: seconds a running tool holds its action before others may judge it in doubt; it
            is renewed while the tool runs, so this bounds how long a dead worker blocks others.
        wait: seconds a second caller waits for a live worker's result before EffectInProgress.
        max_result_bytes: results larger than this are not stored (ResultNotStored).
        max_args_bytes: a call whose arguments take more than this as canonical JSON is refused
            before anything is written or run (ConfigurationError).
        allow_network_fs: open an SQLite ledger on NFS/SMB anyway (only one machine may use it).
        approval_for: side-effect classes that need a person's yes unless a tool says otherwise,
            e.g. ``("irreversible",)``.
        approval_ttl: seconds an approval ticket stays open (a tool may set its own).
        previous_secrets: ``(secret, until_epoch_seconds)`` pairs still accepted for approvals
            signed before a rotation; also ``$CALL4AGENTS_PREVIOUS_SECRET`` with
            ``$CALL4AGENTS_PREVIOUS_SECRET_UNTIL`` (ISO date-time).
        pooler: the connection pooler between the ledger and PostgreSQL: ``"transaction"``
            (PgBouncer's ``pool_mode=transaction``, Supabase's and Neon's pooled endpoints, RDS
            Proxy: no prepared statements, no LISTEN, nothing set for longer than a
            transaction), ``"session"`` or ``"none"``; default the URL's ``c4a_pooler``, else
            none. A pooler in statement mode is refused.
        open_retry: seconds to keep trying while no read-write PostgreSQL server answers
            (down, restarting, a failover under way, only a standby reachable), then one error.
        connect_args: PostgreSQL: psycopg's and libpq's settings for every connection (e.g.
            ``{"sslrootcert": ..., "application_name": ...}``), over the ledger's defaults.
        engine: PostgreSQL: your own SQLAlchemy engine (``postgresql+psycopg://``), given
            instead of ``url``; the ledger uses its pool and connect arguments as they are.
        require_sync_standby: PostgreSQL: refuse to open unless a synchronous standby confirms
            the primary's commits (``synchronous_standby_names``), so that a failover keeps
            every result returned; needs ``durability="power"``.
    """

    def undo(self, run_id: str, *, undos: dict[str, UndoFn] | None = None) -> UndoReport:
        """Reverse the run's succeeded actions newest first, each undo once-only.

        Uses each tool's ``undo=`` registered in this process, or ``undos`` by tool name. Every
        action not reversed is in the report with why; the run is marked undone or partly undone.
        """
        return undo_run(self, run_id, undos=undos)

    def run_status(self, run_id: str) -> RunStatus | None:
        """How a run ended if a run control ended it (escalated, undone, partly undone)."""
        return run_status(self, run_id)

    def endings(self, status: str | None = None, *, limit: int = 100) -> list[RunStatus]:
        """Runs a run control ended (escalated, undone, partly undone), latest first."""
        return run_endings(self, status, limit=limit)

    def handoff(self, run_id: str) -> Handoff | None:
        """The hand-off of an escalated run, with its actions as they stand now."""
        return handoff(self, run_id)


def init(
    url: str | Ledger | None = None,
    *,
    otel: bool | None = None,
    otel_record_args: bool = False,
    **settings: Any,
) -> Ledger:
    """Open the ledger effects use by default: ``sqlite:///.c4a/ledger.db`` or ``$CALL4AGENTS_URL``.

    Takes the settings of :class:`Ledger`, or an open ``Ledger``. Calling it again replaces the
    default ledger. ``otel``: OpenTelemetry spans and metrics on (True), off (False), or on when
    it is installed (None); ``otel_record_args=True`` also puts arguments and results on spans.
    """
    if otel is not None or otel_record_args:
        telemetry.configure(otel, record_args=otel_record_args)
    ledger = url if isinstance(url, Ledger) else Ledger(url, **settings)
    use_default(ledger)
    return ledger


def default_ledger() -> Ledger:
    """The ledger ``init`` opened; a ConfigurationError if none is open."""
    return cast(Ledger, _engine.default_ledger())
