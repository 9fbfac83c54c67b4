"""The OpenAI Agents SDK's Temporal plugin, as far as this environment can have it.

temporalio's ``temporalio.contrib.openai_agents`` only forwards to ``temporalio.openai_agents``,
which the separate ``temporalio-openai-agents`` package provides; that package (1.1.0, its
newest) requires ``openai-agents<0.23``, while the Agents SDK integration needs 0.24. So the two
cannot be installed together, and docs/jobs-temporal.md says so. If this test fails, the plugin
became importable here: the docs' reason no longer holds, and the kill-and-retry test can be
written.
"""

from __future__ import annotations

import importlib
from importlib.metadata import version

import pytest
from packaging.version import Version


def test_the_agents_sdk_temporal_plugin_is_not_importable_beside_the_integration() -> None:
    assert Version(version("openai-agents")) >= Version("0.24")  # what the integration needs
    with pytest.raises(ModuleNotFoundError, match=r"temporalio\.openai_agents"):
        importlib.import_module("temporalio.contrib.openai_agents")
