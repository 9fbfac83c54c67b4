"""MkDocs hooks for the docs site (mkdocs.yml names this file under `hooks:`).

The docstrings cross-reference in Sphinx's style (:class:`Ledger`, :func:`call_tool`), which
mkdocstrings renders as Markdown: the role prefix would show as literal text before the code. Drop
it, keeping the name as code.
"""

from __future__ import annotations

import re
from typing import Any

ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub("", html)
