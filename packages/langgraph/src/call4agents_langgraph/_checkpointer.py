"""LedgerCheckpointer: a thread's ledger records travel with its checkpoints.

It wraps any ``BaseCheckpointSaver`` and passes every call through, adding two things:

- ``put`` writes, under ``metadata["call4agents"]``, the actions recorded between the thread's
  previous checkpoint and this one, so ``get_state_history()`` shows what was done at which
  step. A process killed after acting leaves them for the next checkpoint, written by whichever
  process resumes. The window runs between the checkpoints' creation times, not the times they
  are written: with the default ``durability="async"`` a checkpoint is written in the
  background, possibly after the next step's tools ran. Creation times are taken on this
  machine's clock and moved onto the ledger's clock (the database's) by an offset measured once.
- ``delete_thread`` (and ``prune(..., strategy="delete")``) deletes the thread's ledger records
  with its checkpoints, and refuses while one of its actions is running or in doubt: forgetting
  those would let a new run of the same thread id act again.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
)

import call4agents as c4a
from call4agents import EffectRecord, Ledger, LedgerError
from call4agents.integration import warn_once

from ._ids import BRANCH_KEY

METADATA_KEY = "call4agents"
_MAX_MARKS = 10_000
_OPEN = ("started", "in_doubt")


class LedgerCheckpointer(BaseCheckpointSaver[Any]):
    """Wrap ``saver`` so checkpoints name the actions done between them, and deleting a thread
    deletes its ledger records (refused while one is in doubt).

    ``LedgerCheckpointer(SqliteSaver(conn))`` works anywhere the plain saver does, sync or async;
    methods it does not change (``setup()`` and the like) reach the wrapped saver. The ledger and
    the checkpoints may share one SQLite file or PostgreSQL database: the ledger's tables are
    named ``c4a_*``.

    Args:
        saver: the checkpointer to wrap.
        ledger: the ledger the thread's actions are in; default the one ``c4a.init()`` opened.
    """

    def __new__(cls, saver: BaseCheckpointSaver[Any] | None = None, **_: Any) -> LedgerCheckpointer:
        # Tools (LangGraph's conformance suite among them) tell what a saver supports by which
        # methods its class overrides, so the class made for ``saver`` overrides the optional
        # ones (delete_for_runs, copy_thread, prune, sync and async apart) only where the
        # wrapped saver does: never a method that would end in NotImplementedError.
        if cls is LedgerCheckpointer and saver is not None:
            cls = _shaped(frozenset(m for m in _OPTIONAL if _overrides(type(saver), m)))
        return super().__new__(cls)

    def __init__(self, saver: BaseCheckpointSaver[Any], *, ledger: Ledger | None = None) -> None:
        super().__init__(serde=saver.serde)
        self.saver = saver
        self.ledger = ledger
        # The ledger clock at each thread's last checkpoint written by this process; read back
        # from the saver when this process has not written one (e.g. after a restart).
        self._marks: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()
        self._offset: float | None = None  # ledger clock minus this machine's clock

    def __getattr__(self, name: str) -> Any:
        if name == "saver":  # not set yet (copy or unpickle in progress): no recursion
            raise AttributeError(name)
        return getattr(self.saver, name)

    def __repr__(self) -> str:
        return f"LedgerCheckpointer({self.saver!r})"

    @property
    def config_specs(self) -> list[Any]:
        return list(self.saver.config_specs)

    def _ledger(self) -> Ledger:
        return self.ledger or c4a.default_ledger()

    # -- reads: passed through -------------------------------------------------------------------

    def get(self, config: RunnableConfig) -> Checkpoint | None:
        return self.saver.get(config)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self.saver.get_tuple(config)

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return self.saver.list(config, filter=filter, before=before, limit=limit)

    def get_next_version(self, current: Any, channel: None) -> Any:
        return self.saver.get_next_version(current, channel)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return self.saver.get_delta_channel_history(config=config, channels=channels)

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> LedgerCheckpointer:
        inner = self.saver.with_allowlist(extra_allowlist)
        if inner is self.saver:
            return self
        clone = LedgerCheckpointer(inner, ledger=self.ledger)
        clone._marks, clone._lock = self._marks, self._lock  # one thread, one clock mark
        return clone

    # -- writes ----------------------------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread = _thread(config)
        since = self._previous_mark(thread, _namespace(config)) if thread else None
        annotated = self._annotate(config, checkpoint, metadata, since)
        return self.saver.put(config, checkpoint, annotated, new_versions)

    # `task_path` must be declared: LangGraph passes it only to a put_writes whose signature has it.
    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self.saver.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete the thread's checkpoints and its ledger records; refused while one is open."""
        runs = self._thread_runs(thread_id)
        self._refuse_open(thread_id, runs)
        self.saver.delete_thread(thread_id)
        self._forget(thread_id, runs)

    # -- async -----------------------------------------------------------------------------------

    async def aget(self, config: RunnableConfig) -> Checkpoint | None:
        return await self.saver.aget(config)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self.saver.aget_tuple(config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for found in self.saver.alist(config, filter=filter, before=before, limit=limit):
            yield found

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, Any]:
        return await self.saver.aget_delta_channel_history(config=config, channels=channels)

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread = _thread(config)
        since = await self._aprevious_mark(thread, _namespace(config)) if thread else None
        annotated = await asyncio.to_thread(self._annotate, config, checkpoint, metadata, since)
        return await self.saver.aput(config, checkpoint, annotated, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self.saver.aput_writes(config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        runs = await self._athread_runs(thread_id)
        await asyncio.to_thread(self._refuse_open, thread_id, runs)
        await self.saver.adelete_thread(thread_id)
        await asyncio.to_thread(self._forget, thread_id, runs)

    # -- the ledger side -------------------------------------------------------------------------

    def _annotate(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        since: float | None,
    ) -> CheckpointMetadata:
        """``metadata`` plus the actions recorded in this thread after ``since`` (ledger clock).

        ``since`` is the mark of the thread's latest checkpoint, None for its first one.
        """
        thread = _thread(config)
        if thread is None:
            return metadata
        ledger = self._ledger()
        now = self._created_at(checkpoint, ledger)
        run_ids = {thread}
        branch = checkpoint.get("channel_values", {}).get(BRANCH_KEY)
        if branch:
            run_ids.add(f"{thread}#{branch}")
        done = [
            _describe(record)
            for run_id in sorted(run_ids)
            for record in ledger.effects(run_id)
            if (since is None or record.updated_at > since) and record.updated_at <= now
        ]
        place = (thread, _namespace(config))
        with self._lock:
            if len(self._marks) >= _MAX_MARKS:  # a namespace per subgraph call: keep it bounded
                _drop(self._marks, lambda place: bool(place[1]))
            self._marks[place] = max(now, self._marks.get(place, now))
        note = {"mark": now, "actions": done}
        annotated: dict[str, Any] = {**metadata, METADATA_KEY: note}
        return cast(CheckpointMetadata, annotated)

    def _created_at(self, checkpoint: Checkpoint, ledger: Ledger) -> float:
        """When the loop created ``checkpoint``, on the ledger's clock."""
        if self._offset is None:
            self._offset = _clock_offset(ledger)
        try:
            created = datetime.fromisoformat(checkpoint["ts"]).timestamp()
        except (KeyError, TypeError, ValueError):
            created = time.time()
        return created + self._offset

    # Each checkpoint namespace (the root graph's "", a subgraph's "agent:<task id>") keeps its own
    # window, so a subgraph's checkpoint does not take the actions from its parent's next one. A
    # namespace's first checkpoint starts from the root's mark: a subgraph called in a later step
    # does not name what earlier steps did.
    def _previous_mark(self, thread: str, namespace: str) -> float | None:
        for place in _places(thread, namespace):
            with self._lock:
                if place in self._marks:
                    return self._marks[place]
            mark = _mark_of(self.saver.get_tuple(_config_of(place)))
            if mark is not None:
                return mark
        return None

    async def _aprevious_mark(self, thread: str, namespace: str) -> float | None:
        for place in _places(thread, namespace):
            with self._lock:
                if place in self._marks:
                    return self._marks[place]
            mark = _mark_of(await self.saver.aget_tuple(_config_of(place)))
            if mark is not None:
                return mark
        return None

    def _thread_runs(self, thread_id: str) -> set[str]:
        """The thread's run ids: the thread, and each re-run branch its checkpoints name."""
        found = self.saver.list({"configurable": {"thread_id": thread_id}})
        return {thread_id} | {f"{thread_id}#{b}" for b in map(_branch_of, found) if b}

    async def _athread_runs(self, thread_id: str) -> set[str]:
        runs = {thread_id}
        async for found in self.saver.alist({"configurable": {"thread_id": thread_id}}):
            branch = _branch_of(found)
            if branch:
                runs.add(f"{thread_id}#{branch}")
        return runs

    def _refuse_open(self, thread_id: str, runs: set[str]) -> None:
        ledger = self._ledger()
        ledger.sweep()  # a dead worker's action is in doubt, not running
        open_ = [r for run in sorted(runs) for r in ledger.effects(run) if r.state in _OPEN]
        if open_:
            tools = ", ".join(sorted({r.tool for r in open_}))
            raise LedgerError(
                f"thread {thread_id!r} was not deleted: {len(open_)} of its actions ({tools}) "
                "are running or in doubt. Settle them first (`call4agents doubt`, "
                "`call4agents resolve`); nothing was deleted."
            )

    def _forget(self, thread_id: str, runs: set[str]) -> None:
        ledger = self._ledger()
        for run_id in sorted(runs):
            ledger.delete_run(run_id)
        with self._lock:
            _drop(self._marks, lambda place: place[0] == thread_id)


# -- the optional methods, each offered only where the wrapped saver has it -------------------


def _delete_for_runs(self: LedgerCheckpointer, run_ids: Sequence[str]) -> None:
    # LangGraph run ids name single invocations; ledger records belong to whole threads.
    self.saver.delete_for_runs(run_ids)


async def _adelete_for_runs(self: LedgerCheckpointer, run_ids: Sequence[str]) -> None:
    await self.saver.adelete_for_runs(run_ids)


def _copy_thread(self: LedgerCheckpointer, source_thread_id: str, target_thread_id: str) -> None:
    _warn_copy()
    self.saver.copy_thread(source_thread_id, target_thread_id)


async def _acopy_thread(
    self: LedgerCheckpointer, source_thread_id: str, target_thread_id: str
) -> None:
    _warn_copy()
    await self.saver.acopy_thread(source_thread_id, target_thread_id)


def _prune(
    self: LedgerCheckpointer, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
) -> None:
    if strategy != "delete":
        self.saver.prune(thread_ids, strategy=strategy)
        return
    for thread_id in thread_ids:  # with the ledger's records, refused while one is open
        self.delete_thread(thread_id)


async def _aprune(
    self: LedgerCheckpointer, thread_ids: Sequence[str], *, strategy: str = "keep_latest"
) -> None:
    if strategy != "delete":
        await self.saver.aprune(thread_ids, strategy=strategy)
        return
    for thread_id in thread_ids:
        await self.adelete_thread(thread_id)


_OPTIONAL: dict[str, Any] = {
    "delete_for_runs": _delete_for_runs,
    "adelete_for_runs": _adelete_for_runs,
    "copy_thread": _copy_thread,
    "acopy_thread": _acopy_thread,
    "prune": _prune,
    "aprune": _aprune,
}
_SHAPES: dict[frozenset[str], type[LedgerCheckpointer]] = {}


def _overrides(saver_type: type, name: str) -> bool:
    return getattr(saver_type, name, None) is not getattr(BaseCheckpointSaver, name)


def _shaped(offered: frozenset[str]) -> type[LedgerCheckpointer]:
    """LedgerCheckpointer with exactly the ``offered`` optional methods (one class per set)."""
    if offered not in _SHAPES:
        body = {name: _OPTIONAL[name] for name in offered}
        body["__doc__"] = LedgerCheckpointer.__doc__
        body["__module__"] = LedgerCheckpointer.__module__
        _SHAPES[offered] = type("LedgerCheckpointer", (LedgerCheckpointer,), body)
    return _SHAPES[offered]


def _clock_offset(ledger: Ledger) -> float:
    """The ledger's clock minus this process's, from the quickest of a few readings: the first
    may include opening a connection, which would skew the midpoint by milliseconds and put an
    action finished just before a checkpoint after it."""
    readings = []
    for _ in range(3):
        before = time.time()
        ledger_now = ledger.store.now()
        after = time.time()
        readings.append((after - before, ledger_now - (before + after) / 2))
    return min(readings)[1]


def _drop(marks: dict[tuple[str, str], float], which: Callable[[tuple[str, str]], bool]) -> None:
    # In place: a with_allowlist() clone shares this dict.
    for place in [p for p in marks if which(p)]:
        del marks[place]


def _namespace(config: RunnableConfig) -> str:
    return str(config.get("configurable", {}).get("checkpoint_ns") or "")


def _places(thread: str, namespace: str) -> list[tuple[str, str]]:
    return [(thread, namespace), (thread, "")] if namespace else [(thread, "")]


def _config_of(place: tuple[str, str]) -> RunnableConfig:
    return {"configurable": {"thread_id": place[0], "checkpoint_ns": place[1]}}


def _thread(config: RunnableConfig) -> str | None:
    thread = config.get("configurable", {}).get("thread_id")
    return str(thread) if thread else None


def _mark_of(found: CheckpointTuple | None) -> float | None:
    if found is None:
        return None
    note = found.metadata.get(METADATA_KEY) if found.metadata else None
    mark = note.get("mark") if isinstance(note, dict) else None
    return float(mark) if isinstance(mark, (int, float)) else None


def _branch_of(found: CheckpointTuple) -> str | None:
    branch = found.checkpoint.get("channel_values", {}).get(BRANCH_KEY)
    return branch if isinstance(branch, str) and branch else None


def _describe(record: EffectRecord) -> dict[str, Any]:
    return {
        "action": record.key,
        "run_id": record.run_id,
        "tool": record.tool,
        "state": record.state,
        "attempt": record.attempt,
    }


def _warn_copy() -> None:
    warn_once(
        "langgraph-copy-thread",
        "LedgerCheckpointer.copy_thread copies checkpoints only: the actions recorded for the "
        "source thread are not recorded for the copy, so resuming the copy from before an "
        "action runs it again, under the new thread id.",
    )
