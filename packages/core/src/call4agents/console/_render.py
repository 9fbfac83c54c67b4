"""Pages from the Jinja2 templates in ``templates/``, autoescaped: a value becomes markup only
where a template writes markup around it, so an argument, a tool's result, a run id or a name
can never become a tag, however it was crafted.

Templates are written indented, one element a line, and go out compact (``Compact``): a line
break and the indentation around it vanish beside a tag, a statement or between two values, and
read as one space between two words, or a word and a value; text to be spaced from a tag stays
on the tag's line. A page is then the markup it was when it was built by hand, and no stray
whitespace lands where it counts (``td:empty``, the text of a ``<pre>``, inline elements)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, PackageLoader, StrictUndefined
from jinja2.ext import Extension
from jinja2.lexer import TOKEN_DATA, TOKEN_VARIABLE_BEGIN, TOKEN_VARIABLE_END, Token, TokenStream

from call4agents.model.ages import age, ago

from ._auth import shown_name
from ._format import clock, json_parts

NAV = (
    ("/", "Approvals"),
    ("/doubt", "In doubt"),
    ("/runs", "Runs"),
    ("/audit", "Audit"),
    ("/health", "Health"),
)
_BREAK = re.compile(r"[ \t]*\n\s*")
_VALUE = "value"  # beside a ``{{ value }}``: a break there reads as a space, as between words
_EDGE = "edge"  # beside a block statement, a comment or either end: a break there vanishes


class Compact(Extension):
    """Line breaks in a template's text: gone beside markup, a statement or between two values;
    one space between words, or a word and a value. Done on the parsed text, so an error still
    names its template's line."""

    def filter_stream(self, stream: TokenStream) -> Iterator[Token]:
        before: str | None = None  # the type of the token before the text held
        held: Token | None = None
        for token in stream:
            if held is not None:
                yield _compact(held, before, token.type)
                before, held = held.type, None
            if token.type == TOKEN_DATA:
                held = token
                continue
            yield token
            before = token.type
        if held is not None:
            yield _compact(held, before, None)


def _compact(token: Token, before: str | None, after: str | None) -> Token:
    text = token.value
    left_edge = _VALUE if before == TOKEN_VARIABLE_END else _EDGE
    right_edge = _VALUE if after == TOKEN_VARIABLE_BEGIN else _EDGE

    def joined(found: re.Match[str]) -> str:
        left = text[found.start() - 1] if found.start() else left_edge
        right = text[found.end()] if found.end() < len(text) else right_edge
        if left in (">", _EDGE) or right in ("<", _EDGE) or left == right == _VALUE:
            return ""
        return " "

    return Token(token.lineno, token.type, _BREAK.sub(joined, text))


def _quoted(value: object) -> str:
    """A value inside an address: every reserved character percent-encoded, ``/`` too."""
    return quote(str(value), safe="")


ENV = Environment(
    loader=PackageLoader(__package__ or "call4agents.console", "templates"),
    autoescape=True,
    undefined=StrictUndefined,  # a name a template misspells fails its test, not the page
    extensions=[Compact],
    auto_reload=False,  # the templates ship with the package: read each once
)
ENV.filters.update(
    age=age,
    ago=ago,
    clock=clock,
    json_parts=json_parts,
    q=_quoted,
    shown_name=shown_name,
)
ENV.globals.update(NAV=NAV)


def render(template: str, **context: Any) -> str:
    return ENV.get_template(template).render(**context)
