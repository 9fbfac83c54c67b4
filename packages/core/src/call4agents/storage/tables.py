"""Every table of the ledger, in one ``MetaData``: both dialects' DDL comes from here.

Times are seconds since the epoch as floats, always taken from the database's clock (see
``dialects.Dialect.now``), so that one clock judges every lease however far apart the workers'
clocks are.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    and_,
    literal_column,
)
from sqlalchemy.sql.elements import ColumnElement

metadata = MetaData()

# SQLite only makes INTEGER PRIMARY KEY an alias of the rowid (and so auto-incrementing).
_Id = BigInteger().with_variant(Integer(), "sqlite")
# Counter names sort by bytes on PostgreSQL, as SQLite's do (schema version 11), whatever the
# database's collation: a language's (an ICU or glibc en_US, say) passes over punctuation, and
# schema versions 10 to 15 read names by prefix as a range of their index.
_ByteName = Text().with_variant(Text(collation="C"), "postgresql")


def fixed(text: str) -> ColumnElement[str]:
    """``text`` written into a statement as an SQL string, not sent as a parameter: the statement
    stays one text for every call, and SQLite matches it to a partial index (see open_states).
    Only for the code's own constants: ``text`` is not escaped."""
    return literal_column(f"'{text}'", String)


schema_version = Table(
    "c4a_schema",
    metadata,
    Column("version", Integer, nullable=False),
)

# One row per logical action. `key` is the action identity (a hash of run, tool and canonical
# arguments, or of what `key=` returned); `seq` orders a run's actions for `show`.
effects = Table(
    "c4a_effects",
    metadata,
    Column("seq", _Id, primary_key=True, autoincrement=True),
    Column("key", String(64), nullable=False, unique=True),
    Column("run_id", Text, nullable=False),
    Column("tool", Text, nullable=False),
    Column("kind", String(16), nullable=False),
    # started | succeeded | failed | in_doubt
    Column("state", String(16), nullable=False),
    Column("attempt", Integer, nullable=False),
    Column("owner", Text),
    Column("lease_expires_at", Float),
    Column("args", Text, nullable=False),  # canonical display JSON, redacted values masked
    Column("result", Text),  # codec JSON of the result (succeeded)
    Column("error", Text),  # "Type: message" of the last failure or doubt, secrets scrubbed
    Column("note", Text),  # why the state is what it is: "lease expired", "resolved by ann: ..."
    Column("resolved_by", Text),
    # Late results of fenced-off attempts, kept as evidence (JSON list), never applied.
    Column("evidence", Text),
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
    Column("pruned_at", Float),
    # SHA-256 of the arguments' key material (redacted values as their HMACs), so a caller's own
    # key reused with other arguments is seen even where they differ only in a redacted value.
    # NULL once pruned by gc.
    Column("args_digest", String(64)),
)

Index("c4a_effects_run", effects.c.run_id, effects.c.seq)
# Only open actions are indexed here, so `doubt` and lease sweeps stay fast at any ledger size.
Index("c4a_effects_open", effects.c.state, effects.c.updated_at)
Index("c4a_effects_updated", effects.c.updated_at)
# The in-doubt queue, those in doubt longest first and paged by keyset (schema version 15): the
# index gives the order, so a page deep in the queue costs what the first does.
Index("c4a_effects_doubt", effects.c.updated_at, effects.c.seq)


def partial_conditions(dialect: str) -> None:
    """Give the partial indexes their ``WHERE`` for ``dialect`` (``conn.dialect.name``): called
    before any DDL that creates them. Written as ``sqlite_where=``/``postgresql_where=`` on the
    indexes above, SQLAlchemy would import both dialects to check the names when this module
    loads, some 35 ms of every command's start-up, for DDL that only `migrate` sends. Each is
    the condition queries write (``open_states``, ``in_doubt_only``), so they always match."""
    partial = {"c4a_effects_open": open_states(), "c4a_effects_doubt": in_doubt_only()}
    for index in effects.indexes:
        where = partial.get(str(index.name))
        if where is not None:
            index.dialect_kwargs[f"{dialect}_where"] = where


def open_states() -> ColumnElement[bool]:
    """``state IN ('started', 'in_doubt')``, spelled so that SQLite uses ``c4a_effects_open``.

    SQLite uses a partial index only when the query repeats the index's own condition with the
    same literal values (a bound parameter does not count): without it every `doubt` and lease
    sweep read the whole table.
    """
    return effects.c.state.in_([fixed(s) for s in ("started", "in_doubt")])


def in_doubt_only() -> ColumnElement[bool]:
    """``state = 'in_doubt'`` with the literal ``c4a_effects_doubt`` names: SQLite uses a
    partial index only when the query repeats its condition as written (see open_states)."""
    return effects.c.state == fixed("in_doubt")


def in_open_state(state: str) -> ColumnElement[bool]:
    """``state = <state>`` for an open state, using ``c4a_effects_open`` (see open_states)."""
    return and_(open_states(), effects.c.state == state)


# Settings a ledger keeps for its whole life (schema version 2), such as the salt that hides
# redacted argument values inside action keys: unlike the secret it is never rotated, because a
# changed salt would change those keys and make finished actions look new.
meta = Table(
    "c4a_meta",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)

# Approval tickets (schema version 2). One row is one decision and its spending: see approvals.py
# for why deleting or restoring a row can never grant anything.
approvals = Table(
    "c4a_approvals",
    metadata,
    Column("ticket", String(40), primary_key=True),
    Column("key", String(64), nullable=False),  # the action key the yes is bound to
    Column("for_attempt", Integer, nullable=False),  # the one attempt this yes may start
    Column("run_id", Text, nullable=False),
    Column("tool", Text, nullable=False),
    Column("args", Text, nullable=False),  # exactly what will run, redacted values masked
    # pending | approved | denied | spent
    Column("state", String(16), nullable=False),
    Column("requested_at", Float, nullable=False),
    Column("expires_at", Float, nullable=False),
    Column("decided_by", Text),
    Column("decided_at", Float),
    Column("reason", Text),
    Column("spent_at", Float),
    Column("signature", Text, nullable=False),
    # The digest of the arguments the ticket was opened for (see c4a_effects.args_digest), part
    # of what is signed.
    Column("args_digest", String(64)),
    # The framework's id of the tool call the ticket was opened for (schema version 6; NULL
    # where none was known): the first ticket of a call id holds the arguments first shown.
    Column("call_id", Text),
    # Why the ticket was opened and the tool's side-effect kind, as the gate saw them (schema
    # version 8): the inbox shows both before the tool has ever run, when there is no action row
    # to read the kind from.
    Column("asked_by", Text),
    Column("kind", String(16)),
    # Schema version 13: for each argument holding a redacted value, a digest of its key
    # material (where the value is already an HMAC under the ledger's salt), as JSON; NULL when
    # nothing was redacted. The inbox tells a person whether a masked value differs from the one
    # approved before without ever showing it.
    Column("redacted_marks", Text),
)

Index("c4a_approvals_key", approvals.c.key, approvals.c.for_attempt)
Index("c4a_approvals_run", approvals.c.run_id, approvals.c.state)

# How a run ended, when it ended by a run control (schema version 3): "escalated" with its
# hand-off, or "undone" / "partly_undone" with the last undo report. A run still going has no row.
runs = Table(
    "c4a_runs",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("status", String(32), nullable=False),  # escalated | undone | partly_undone
    Column("reason", Text),
    Column("details", Text),  # JSON: the escalation's what_remains/blocking_fact, or undo report
    Column("created_at", Float, nullable=False),
    Column("updated_at", Float, nullable=False),
)

# A run's budget counters (schema version 3): "tool_calls", "tool:<name>", and "started_at" (the
# database time the run was first entered with its budget, for the deadline). In the ledger, so a
# crash and resume, or a second worker, continues the count instead of starting it again.
run_counters = Table(
    "c4a_run_counters",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("name", _ByteName, primary_key=True),
    Column("value", Float, nullable=False),
)

# The one change log (schema version 16, see ``tally``): a trigger on c4a_effects appends a row
# per action inserted, deleted, or changing state or attempt; a trigger on c4a_run_counters one
# per change of a counter the alert figures read; and each process adds the repeats it served
# from the record every few seconds. The triggers write in the writer's own transaction, so a
# crash keeps the row and the change together or neither. Whoever reads the figures first folds
# the rows it finds into the tallies below and deletes them. Appending takes no shared row
# lock, so workers never wait for each other here.
changes = Table(
    "c4a_changes",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("run_id", Text, nullable=False),  # "" for repeats
    Column("name", Text, nullable=False),  # the action's kind, the counter's name, or "deduped"
    # An action's state and attempt, or a counter's value (or the repeats' count), before and
    # after the change; NULL where there is none (inserted, deleted, or not an action).
    Column("old_state", String(16)),
    Column("old_value", Float),
    Column("new_state", String(16)),
    Column("new_value", Float),
    # When the action was first attempted, or the repeats were written; NULL for a counter.
    Column("created_at", Float),
    Column("at", Float),  # when an action changed (its new updated_at; the clock for a delete)
)

# Every figure folded from the log, all time (step 0, at 0) and by minute and by hour (step 60
# or 3600, at the start of the minute or hour), so a window's figures cost what its hours cost,
# not what its actions do. The actions' figures ("actions:<state>", "retried", "executions",
# "irreversible") are filed under the time the action was first attempted; "doubt_in" and
# "doubt_out" (an action fell in doubt, or left it) under when that happened, so open doubt has
# a history; "deduped" under when the repeats were written. The run figures are kept all time
# only: "runs" (with at least one action), "runs_failed", "runs_completed",
# "runs_completed_with_read", "runs_trigger:<trigger>", and the runs by tool calls
# ("tool_calls:<n>") and by cost to two significant figures ("cost:<value>"). Only the fold
# writes them, one fold at a time.
tallies = Table(
    "c4a_tallies",
    metadata,
    Column("step", Integer, primary_key=True),
    Column("at", BigInteger, primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("value", BigInteger, nullable=False),
)

# Per-run figures, folded from the same log: what the run states need to tell a run with
# failures from a done one, its irreversible executions, whether it completed and read something
# (the one figure that needs two counters at once), and when its latest action was first
# attempted, so a window finds its runs by this index instead of reading its actions. A run with
# none of these has no row.
run_tallies = Table(
    "c4a_run_tallies",
    metadata,
    Column("run_id", Text, primary_key=True),
    Column("actions", BigInteger, nullable=False),
    Column("failed", BigInteger, nullable=False),
    Column("irreversible", BigInteger, nullable=False),  # attempts of irreversible tools
    Column("completed", BigInteger, nullable=False),  # its completion counter: 0 or 1
    Column("has_read", BigInteger, nullable=False),  # its reads counter is above 0: 0 or 1
    Column("last_at", Float),
)
Index("c4a_run_tallies_last", run_tallies.c.last_at)

# What people and reconcilers decided, one row each, written in the decision's own transaction
# (schema version 12): a yes or no to a ticket, an in-doubt action settled. The ticket and the
# action rows change afterwards (a ticket is spent, a settled action runs again and succeeds);
# these rows do not, and `gc` leaves them, so no decision is lost from the audit.
audit = Table(
    "c4a_audit",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("at", Float, nullable=False),
    Column("actor", Text, nullable=False),
    # approved | denied | happened | did_not_happen
    Column("action", String(16), nullable=False),
    Column("run_id", Text, nullable=False),
    Column("tool", Text, nullable=False),
    Column("key", String(64), nullable=False),  # the action's key
    Column("ticket", String(64)),  # the ticket decided, for approved and denied
    Column("attempt", Integer),  # the attempt settled, for happened and did_not_happen
    Column("reason", Text),  # the decision's reason or the settlement's note
)

# Webhook events given up on (schema version 12): every attempt failed, or the receiver's queue
# was full. Kept until replayed (``call4agents webhooks --replay``), so no event is lost unseen.
dead_letters = Table(
    "c4a_dead_letters",
    metadata,
    Column("id", _Id, primary_key=True, autoincrement=True),
    Column("receiver", Text, nullable=False),  # the URL, without credentials
    Column("event", Text, nullable=False),  # the event's JSON as it was to be sent
    Column("error", Text, nullable=False),
    Column("attempts", Integer, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("replayed_at", Float),
)

# Runs by a counter's value (schema version 9): the runs completed in a window, a range of this
# index.
Index("c4a_run_counters_value", run_counters.c.name, run_counters.c.value)

Index("c4a_run_tallies_irreversible", run_tallies.c.irreversible, run_tallies.c.run_id)
# Approvals waiting now (`stats`, the gauges, `approvals`): pending and not yet expired.
Index("c4a_approvals_pending", approvals.c.state, approvals.c.expires_at, approvals.c.requested_at)
# Dead letters not yet replayed, oldest first (the console, `stats`, `webhooks`).
Index("c4a_dead_letters_waiting", dead_letters.c.replayed_at, dead_letters.c.id)
# The audit read newest first (by time, ties by id), whole or by one of its filters, each a
# range of one index however far down a page is or whatever window `since` names (schema
# version 14; version 12 had only the first two filters, by id).
Index("c4a_audit_at", audit.c.at, audit.c.id)
Index("c4a_audit_actor_at", audit.c.actor, audit.c.at, audit.c.id)
Index("c4a_audit_run_at", audit.c.run_id, audit.c.at, audit.c.id)
Index("c4a_audit_action_at", audit.c.action, audit.c.at, audit.c.id)
Index("c4a_audit_tool_at", audit.c.tool, audit.c.at, audit.c.id)
