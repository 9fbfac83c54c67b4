"""What the tool wrappers and the approval policy need of the OnceOnly they belong to."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from agents import FunctionTool, RunContextWrapper
from agents.tool_context import ToolContext

from call4agents import EffectOptions
from call4agents.integration import Action

from ._controls import RunControls
from ._run_id import RunIdSource


class Owner(Protocol):
    controls: RunControls

    @property
    def run_id_source(self) -> RunIdSource: ...

    def run_id_for(self, wrapper: RunContextWrapper[Any], tool: str) -> str: ...

    def keyed(
        self,
        options: EffectOptions,
        tool: str,
        arguments: Mapping[str, Any],
        run_id: str,
        call_id: str | None,
    ) -> Action: ...

    def action(
        self,
        options: EffectOptions,
        tool: str,
        arguments: Mapping[str, Any],
        wrapper: RunContextWrapper[Any],
        call_id: str | None,
    ) -> Action: ...

    def may_need_approval(self, tool: FunctionTool, options: EffectOptions) -> bool: ...

    async def prepare_approval(
        self, action: Action, tool: FunctionTool, ctx: ToolContext[Any]
    ) -> None: ...
