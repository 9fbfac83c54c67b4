"""OnceOnly: each tool call of a LangChain agent or a LangGraph ToolNode goes through the ledger."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from types import MappingProxyType
from typing import Annotated, Any, TypeVar

from langchain.agents.middleware import (
    AgentMiddleware,
    AgentState,
    ModelRequest,
    ModelResponse,
    ToolCallRequest,
)
from langchain.agents.middleware.types import ModelCallResult, PrivateStateAttr
from langchain_core.messages import ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.errors import GraphInterrupt
from typing_extensions import NotRequired

from call4agents import (
    ApprovalDenied,
    ApprovalRequired,
    Budget,
    BudgetExceeded,
    ConfigurationError,
    EffectInDoubt,
    EffectInProgress,
    EffectOptions,
    Ledger,
    LedgerError,
    ResultNotStored,
    ResultPruned,
)
from call4agents.integration import (
    Action,
    OnceOnlySettings,
    Trigger,
    action_for,
    arun_finished,
    arun_tool,
    ends_run,
    escalate_by_policy,
    message_for_model,
    note_unrecorded,
    options_for,
    run_continues,
    run_finished,
    run_part,
    run_tool,
    with_escalate_on,
)

from . import _approval, _endings, _hooks, _model, _nodes, _order, _steps
from ._ids import BRANCH_KEY, no_thread_error, thread_run_id
from ._otel_parent import instrumented_parent
from ._results import ToolReportedError, ToolResult, check_reported_error, deliver, error_message

T = TypeVar("T")

ToolOptions = Mapping[str, EffectOptions | Mapping[str, Any]]
SyncHandler = Callable[[ToolCallRequest], ToolResult]
AsyncHandler = Callable[[ToolCallRequest], Awaitable[ToolResult]]
ModelHandler = Callable[[ModelRequest[Any]], ModelResponse[Any]]
AsyncModelHandler = Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]]

# Outcomes the model is told about as a tool error. Configuration and ledger faults are not the
# model's to handle: they stop the run, and the checkpoint keeps the call for a resume.
_REFUSALS = (EffectInDoubt, EffectInProgress, ApprovalDenied, ResultNotStored, ResultPruned)
# An answer is recorded, then the call is tried again; an expired ticket pauses once more. More
# rounds than this in one run of the node means the ledger keeps refusing the decision.
_MAX_ROUNDS = 5
_EMPTY: ToolOptions = MappingProxyType({})


class OnceOnlyState(AgentState[Any]):
    """The agent state OnceOnly adds: the re-run branch a fork was started with, if any."""

    call4agents_branch: NotRequired[Annotated[str, PrivateStateAttr]]


@dataclasses.dataclass(frozen=True)
class _Call:
    """One tool call on its way through the ledger."""

    request: ToolCallRequest
    action: Action
    options: EffectOptions
    run_id: str
    edited: bool = False

    @property
    def tool_call(self) -> Any:
        return self.request.tool_call


class OnceOnly(AgentMiddleware[OnceOnlyState, Any, Any]):
    """Once-only tool calls for ``create_agent``, ``ToolNode`` and custom graph nodes.

    ``create_agent(model, tools, checkpointer=..., middleware=[OnceOnly()])``: each tool call is
    keyed by the thread id, the tool name and its canonical arguments (plus the tool call id for
    tools with ``scope="call"``), recorded before it runs, and never run twice: a repeat after a
    crash, a resume or a time-travel fork gets the recorded result. List it after
    ``HumanInTheLoopMiddleware``; the other order is refused at the first call that shows it.

    Args:
        ledger: the ledger to record in; default the one opened by ``c4a.init()``.
        tools: per-tool options by tool name, as ``EffectOptions`` or a dict of its fields
            (``{"lookup": {"kind": "read"}, "refund": {"approval": True}}``).
        default: options for tools not named in ``tools`` (every tool is a write by default).
        budget: limits on the thread's run (tool calls, model requests, cost, deadline), counted
            in the ledger, so a resume or a second worker continues the count. Without it, an
            enclosing ``c4a.run(..., budget=...)`` (a parent agent's run) is spent instead.
        escalate_on: outcomes that end the run as escalated to a person (``c4a.Escalated``,
            with a hand-off) instead of going back to the model: ``"in_doubt"``, ``"denied"``,
            ``"budget"``. Added to every tool's ``EffectOptions.escalate_on`` (which may also
            be given per tool in ``tools=``); ``"budget"`` covers model requests too.
        trigger: what started the thread's run: ``"user"``, ``"schedule"``, ``"webhook"``; the
            ledger records ``"retry"`` itself when the thread had recorded actions before.
    """

    state_schema = OnceOnlyState

    def __init__(
        self,
        *,
        ledger: Ledger | None = None,
        tools: ToolOptions = _EMPTY,
        default: EffectOptions | None = None,
        budget: Budget | None = None,
        escalate_on: Collection[str] = (),
        trigger: Trigger | None = None,
    ) -> None:
        super().__init__()
        self._shared = OnceOnlySettings.check(
            ledger=ledger,
            tools=tools,
            default=default,
            budget=budget,
            escalate_on=escalate_on,
            trigger=trigger,
        )
        _refuse_credentials(self._shared.tools, self._shared.default)
        self.ledger, self.budget = self._shared.ledger, self._shared.budget  # read by _nodes
        # The options tool calls run with: undo/find_existing/check speaking of the tool's own
        # value, and escalate_on added. Built now, so the undo registered under each tool's name
        # is the adapted one.
        self._for_calls = {name: self._for_call(o) for name, o in self._shared.tools.items()}
        self._nodes = _nodes.NodeSteps(self)

    # -- per-tool options ------------------------------------------------------------------------

    def options(self, tool: str) -> EffectOptions:
        """The options a tool runs with: ``tools[tool]`` over ``default``."""
        return options_for(tool, self._shared.tools, self._shared.default)

    def _call_options(self, tool: str) -> EffectOptions:
        found = self._for_calls.get(tool)
        if found is None:
            found = self._for_calls[tool] = self._for_call(self.options(tool))
        return found

    def _for_call(self, options: EffectOptions) -> EffectOptions:
        return _hooks.for_tool_calls(with_escalate_on(options, self._shared.escalate_on))

    # -- create_agent middleware and ToolNode wrappers ---------------------------------------------

    def wrap_tool_call(self, request: ToolCallRequest, handler: SyncHandler) -> ToolResult:
        """Run one tool call at most once per thread (sync graphs)."""
        call = self._prepare(request)
        with self._ending(), self._tool_run(request, call), _endings.watch() as watcher:
            if call is None:
                self._note_unrecorded(request)
                result = handler(request)
                watcher.raise_found()
                return result
            self._later_no(call)
            for _ in range(_MAX_ROUNDS):
                try:
                    return self._once(call, handler, watcher)
                except ApprovalRequired as exc:
                    call = self._decide(call, exc, _approval.ask(exc, call.tool_call))
                except _REFUSALS as exc:
                    return error_message(call.tool_call, message_for_model(exc), key=exc.key)
            raise _unsettled(call)

    async def awrap_tool_call(self, request: ToolCallRequest, handler: AsyncHandler) -> ToolResult:
        """Run one tool call at most once per thread (async graphs)."""
        call = self._prepare(request)
        with self._ending(), self._tool_run(request, call), _endings.watch() as watcher:
            if call is None:
                self._note_unrecorded(request)
                result = await handler(request)
                watcher.raise_found()
                return result
            await asyncio.to_thread(self._later_no, call)
            for _ in range(_MAX_ROUNDS):
                try:
                    return await self._aonce(call, handler, watcher)
                except ApprovalRequired as exc:
                    decision = _approval.ask(exc, call.tool_call)
                    call = await asyncio.to_thread(self._decide, call, exc, decision)
                except _REFUSALS as exc:
                    return error_message(call.tool_call, message_for_model(exc), key=exc.key)
            raise _unsettled(call)

    def _note_unrecorded(self, request: ToolCallRequest) -> None:
        """A read (or a ``none`` tool) counts for the run: a read is the evidence behind it."""
        name = request.tool_call["name"]
        if request.tool is not None or name in self._shared.tools:
            note_unrecorded(self._call_options(name))

    def _prepare(self, request: ToolCallRequest) -> _Call | None:
        """Key the call, or None for a call that passes straight through (reads, unknown tools)."""
        _order.check_no_pending_edit(request)
        tool_call = request.tool_call
        name = tool_call["name"]
        if request.tool is None and name not in self._shared.tools:
            return None  # ToolNode answers an unknown tool with an error; nothing can act
        options = self._call_options(name)
        if not options.recorded:
            return None
        runtime = request.runtime
        run_id = thread_run_id(
            runtime.execution_info if runtime else None, request.state, f"tool call {name}"
        )
        action = self._action(tool_call, options, run_id)
        return _Call(request, action, options, run_id)

    def _action(self, tool_call: Any, options: EffectOptions, run_id: str) -> Action:
        return action_for(
            tool_call["name"],
            tool_call["args"],
            options,
            run_id=run_id,
            call_id=tool_call.get("id") or None,
            ledger=self.ledger,
        )

    def _once(self, call: _Call, handler: SyncHandler, watcher: _endings.Watcher) -> ToolResult:
        produced: list[ToolResult] = []

        def run() -> ToolResult:
            try:
                answer = handler(call.request)
            except GraphInterrupt as exc:
                _raise_if_wrong_order(exc, call)
                raise
            watcher.raise_found()  # an ending the tool raised, handled into a message
            result = check_reported_error(answer)
            produced.append(result)
            return result

        try:
            result = run_tool(call.action, run)
        except ToolReportedError as exc:
            return exc.message
        except ResultNotStored:
            if not produced:
                raise
            result = produced[0]  # ran now; only a repeat goes without the result
        return self._deliver(call, result, ran=bool(produced))

    async def _aonce(
        self, call: _Call, handler: AsyncHandler, watcher: _endings.Watcher
    ) -> ToolResult:
        produced: list[ToolResult] = []

        async def run() -> ToolResult:
            try:
                answer = await handler(call.request)
            except GraphInterrupt as exc:
                _raise_if_wrong_order(exc, call)
                raise
            watcher.raise_found()
            result = check_reported_error(answer)
            produced.append(result)
            return result

        try:
            result = await arun_tool(call.action, run)
        except ToolReportedError as exc:
            return exc.message
        except ResultNotStored:
            if not produced:
                raise
            result = produced[0]
        return self._deliver(call, result, ran=bool(produced))

    def _deliver(self, call: _Call, result: ToolResult, *, ran: bool) -> ToolResult:
        delivered = deliver(result, tool_call=call.tool_call, key=call.action.key, ran=ran)
        return _with_edit_notice(delivered, call) if call.edited else delivered

    def _later_no(self, call: _Call) -> None:
        """A reject resume value wins over a yes already in the ledger and not yet spent."""
        if call.action.needs_approval:
            _approval.reject_a_waiting_yes(call.action)

    def _decide(self, call: _Call, exc: ApprovalRequired, decision: _approval.Decision) -> _Call:
        """Record a person's answer; an edit becomes a "yes" to the edited call, which then runs."""
        ledger = call.action.ledger
        if decision["type"] != "edit":
            if decision["type"] == "approve" and exc.shown is not None:
                # The saved state was edited after this call was shown: the resume value is a
                # yes to what was shown, not to these arguments. Nothing is recorded; the call
                # asks again, and a person decides the new arguments.
                return call
            _approval.record_ticket(ledger, exc.request.ticket, decision)
            return call
        args = _approval.edited_args(decision, call.tool_call)
        tool_call = {**call.tool_call, "args": args}
        action = self._action(tool_call, call.options, call.run_id)
        ledger.approve_action(
            action, by=_approval.decided_by(decision), reason=decision.get("message")
        )
        request = call.request.override(tool_call=tool_call)  # type: ignore[arg-type]
        return dataclasses.replace(call, request=request, action=action, edited=True)

    # -- the run: budget, model requests and endings ----------------------------------------------

    def wrap_model_call(
        self, request: ModelRequest[Any], handler: ModelHandler
    ) -> ModelCallResult[Any]:
        """Count the model request against the run's budget; past the soft threshold, tell the
        model to wrap up. Past a hard limit the run ends with ``c4a.BudgetExceeded``."""
        run_id = self._model_run_id(request)
        with self._ending(), self._model_run(request), _steps.step(run_id, request) as turn:
            try:
                request = _model.before(request, self.ledger)
            except BudgetExceeded as exc:
                self._escalate_budget(exc)
                raise
            response = handler(request)
            _model.after(response, self.ledger)
            stop = _steps.finish(turn, response)
        if stop == "end" and run_id is not None:
            run_finished(run_id)  # the model answered without asking for tools: completed
        return response

    async def awrap_model_call(
        self, request: ModelRequest[Any], handler: AsyncModelHandler
    ) -> ModelCallResult[Any]:
        """The async form of :meth:`wrap_model_call`."""
        run_id = self._model_run_id(request)
        with self._ending(), self._model_run(request), _steps.step(run_id, request) as turn:
            try:
                request = await _model.abefore(request, self.ledger)
            except BudgetExceeded as exc:
                await asyncio.to_thread(self._escalate_budget, exc)
                raise
            response = await handler(request)
            await _model.aafter(response, self.ledger)
            stop = _steps.finish(turn, response)
        if stop == "end" and run_id is not None:
            await arun_finished(run_id)
        return response

    def _run_scope(self, run_id: str | None) -> contextlib.AbstractContextManager[Any]:
        """The thread's run around a step, with this OnceOnly's budget (or the enclosing one's).

        Also lets ``@c4a.effect`` functions and ``c4a.escalate()`` called inside a tool find it.
        """
        if run_id is None:
            return contextlib.nullcontext()
        return run_part(run_id, ledger=self.ledger, budget=self.budget)

    @contextlib.contextmanager
    def _tool_run(self, request: ToolCallRequest, call: _Call | None) -> Iterator[None]:
        if call is None:
            runtime = request.runtime
            info = runtime.execution_info if runtime else None
            with self._run_scope(_thread_or_none(info, request.state)):
                yield
            return
        token = _hooks.current_call_id.set(call.tool_call.get("id") or "")
        try:
            with self._run_scope(call.run_id), instrumented_parent():
                yield
        finally:
            _hooks.current_call_id.reset(token)

    def _model_run_id(self, request: ModelRequest[Any]) -> str | None:
        """The thread's run id; its first model request in this process opens the run's notes
        (trigger, tool calls, reads), which its final answer closes."""
        runtime = request.runtime
        info = getattr(runtime, "execution_info", None) if runtime is not None else None
        run_id = _thread_or_none(info, request.state)
        if run_id is not None:
            run_continues(run_id, ledger=self.ledger, trigger=self._shared.trigger)
        return run_id

    def _model_run(self, request: ModelRequest[Any]) -> contextlib.AbstractContextManager[Any]:
        runtime = request.runtime
        info = getattr(runtime, "execution_info", None) if runtime is not None else None
        run_id = _thread_or_none(info, request.state)
        if run_id is None and self.budget is not None:
            raise no_thread_error("OnceOnly(budget=...) counting a model request")
        return self._run_scope(run_id)

    @contextlib.contextmanager
    def _ending(self) -> Iterator[None]:
        """Let a budget cut or an escalation leave as a signal no error handler turns into a
        message for the model (see _endings)."""
        try:
            yield
        except Exception as exc:
            if ends_run(exc):
                raise _endings.as_signal(exc) from exc.__cause__
            raise

    # -- escalation from policy ----------------------------------------------------------------

    def _escalate_budget(self, exc: BudgetExceeded) -> None:
        """A model request refused by the budget hands the run over, if so configured (a tool
        call refused by it is escalated by the core, through the tool's escalate_on)."""
        escalate_by_policy(exc, self._shared.escalate_on, ledger=self.ledger)

    # -- custom nodes ------------------------------------------------------------------------------

    def node(self, fn: Callable[..., T]) -> Callable[..., T]:
        """Decorate a graph node so side effects inside it happen once per thread.

        Inside the node, ``once.call(fn, ...)`` (``await once.acall(...)``) runs ``fn`` through
        the ledger, keyed by the thread and ``fn``'s arguments, or with ``scope="call"`` by the
        thread, the checkpoint namespace, the task id and the call's order inside the node: all
        survive an ``interrupt()`` resume and a crash resume. ``@c4a.effect`` functions called
        inside also run in the thread's run.
        """
        return self._nodes.decorate(fn)

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Inside an ``@once.node`` node: run ``fn(*args, **kwargs)`` once per thread."""
        return self._nodes.call(fn, args, kwargs)

    async def acall(self, fn: Callable[..., Awaitable[T]], /, *args: Any, **kwargs: Any) -> T:
        """Inside an ``@once.node`` node: await ``fn(*args, **kwargs)`` once per thread."""
        return await self._nodes.acall(fn, args, kwargs)

    # -- time travel -------------------------------------------------------------------------------

    def rerun(self, graph: Any, config: RunnableConfig, *, label: str) -> RunnableConfig:
        """Fork ``config``'s checkpoint into a branch whose actions run again.

        A plain fork from an earlier checkpoint returns the results recorded on the original
        branch instead of running its actions again. To run them for real, start the fork with
        ``graph.invoke(None, once.rerun(graph, config, label="retry-2"))``: the branch's actions
        are keyed under ``<thread id>#<label>``, which later resumes of that branch keep using.
        """
        if not label or not label.strip():
            raise ConfigurationError("rerun needs a label naming the branch, e.g. 'retry-2'")
        forked: RunnableConfig = graph.update_state(config, {BRANCH_KEY: label})
        return forked


def _thread_or_none(execution_info: Any, state: Any) -> str | None:
    """The run id of a step, or None when the graph runs without a thread id."""
    if not getattr(execution_info, "thread_id", None):
        return None
    return thread_run_id(execution_info, state, "step")


def _refuse_credentials(tools: Mapping[str, EffectOptions], default: EffectOptions) -> None:
    for name, options in [*tools.items(), ("default", default)]:
        if options.credentials:
            # ToolNode strips every InjectedToolArg value from a tool call before it runs (so a
            # model cannot forge one), which leaves no way to hand the tool a secret.
            raise ConfigurationError(
                f"OnceOnly: credentials= ({name}) cannot reach a LangChain tool, because "
                "LangGraph's ToolNode strips injected arguments from tool calls. Read the secret "
                "inside the tool (environment, runtime.context); it never enters the ledger."
            )


def _raise_if_wrong_order(exc: GraphInterrupt, call: _Call) -> None:
    call_id = call.tool_call.get("id")
    if _order.is_inner_review(exc, call_id):
        raise _order.wrong_order(call_id) from exc


def _with_edit_notice(result: ToolResult, call: _Call) -> ToolResult:
    """Tell the model the call that ran is not the one it wrote, so it does not re-issue it."""
    if not isinstance(result, ToolMessage) or not isinstance(result.content, str):
        return result
    notice = (
        "Note: a person edited this tool call before it ran. It ran with arguments "
        f"{call.tool_call['args']!r}, not the ones you wrote; do not re-issue the original call."
    )
    return result.model_copy(update={"content": f"{notice}\n\n{result.content}"})


def _unsettled(call: _Call) -> LedgerError:
    return LedgerError(
        f"{call.tool_call['name']} in run {call.run_id!r}: the approval did not settle after "
        f"{_MAX_ROUNDS} answers; look at it with `call4agents show {call.action.key[:12]}`"
    )
