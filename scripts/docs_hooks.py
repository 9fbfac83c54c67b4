"""MkDocs hooks for the docs site (mkdocs.yml names this file under `hooks:`).

Two jobs. The docstrings cross-reference in Sphinx's style (:class:`Ledger`, :func:`call_tool`),
which mkdocstrings renders as Markdown: the role prefix would show as literal text before the
code; drop it, keeping the name as code. And diagrams render offline (Mermaid, below).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from mkdocs.config.config_options import ExtraScriptValue
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

log = logging.getLogger("mkdocs.hooks.call4agents")

ROLE = re.compile(r":(?:class|func|meth|attr|mod|data|exc|obj):(?=<code>)")


def on_page_content(html: str, **kwargs: Any) -> str:
    return ROLE.sub("", html)


# Material loads Mermaid from a CDN when a page with a diagram is viewed, unless `mermaid` is
# already defined: the pinned copy npm installed (scripts/mermaid) goes into the site and onto every
# page, so diagrams render offline. Without it (npm not run) the site still builds, CDN-bound.
MERMAID = Path(__file__).parent / "mermaid" / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"
MERMAID_URI = "assets/vendor/mermaid.min.js"


def on_config(config: MkDocsConfig, **kwargs: Any) -> MkDocsConfig:
    if MERMAID.exists():
        config.extra_javascript.append(ExtraScriptValue(MERMAID_URI))
    else:
        log.info(
            "Mermaid is not installed (npm ci --prefix scripts/mermaid): diagrams load it online"
        )
    return config


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    if MERMAID.exists():
        files.append(File.generated(config, MERMAID_URI, abs_src_path=str(MERMAID)))
    return files
