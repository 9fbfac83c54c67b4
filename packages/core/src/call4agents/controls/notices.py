"""One event in words a person reads: a Slack message (incoming-webhook blocks) or an email.

Both say what happened, where, and link to the console; an approval request carries the exact
arguments it will run with, redacted values masked as the ledger keeps them (never a secret).
"""

from __future__ import annotations

import json
import re
import time
from email.message import EmailMessage
from email.policy import SMTP
from typing import Any

Event = dict[str, Any]
SLACK_TEXT = 2900  # a section's text may hold 3,000 characters; the rest is in the console


TITLES = {
    "approval.requested": "Approval needed: {tool} in run {run}",
    "approval.decided": "{decision} by {by}: {tool} in run {run}",
    "approval.expired": "Expired without a decision: {tool} in run {run}",
    "action.in_doubt": "In doubt: {tool} in run {run} (attempt {attempt})",
    "action.settled": "Settled by {by} ({outcome}): {tool} in run {run}",
    "run.escalated": "Escalated to a person: run {run}",
    "run.budget_exceeded": "Budget reached ({reason}): run {run}",
}


def title(event: Event) -> str:
    """One line: what happened, to which tool, in which run."""
    words = {
        "tool": event.get("tool", "?"),
        "run": event.get("run_id", "?"),
        "decision": str(event.get("decision", "")).capitalize(),
        "by": event.get("by", "someone"),
        "attempt": event.get("attempt", "?"),
        "outcome": str(event.get("outcome", "")).replace("_", " "),
        "reason": event.get("reason", ""),
    }
    template = TITLES.get(str(event.get("event")), "{event}: run {run}")
    return template.format(event=event.get("event"), **words)


def facts(event: Event) -> list[tuple[str, str]]:
    """The event's details worth a line each, in reading order."""
    labels = (
        ("ticket", "Ticket"),
        ("decision", "Decision"),
        ("by", "By"),
        ("reason", "Reason"),
        ("why", "Why"),
        ("note", "Note"),
        ("detail", "Detail"),
        ("idempotency_key", "Idempotency key"),
        ("expires_at", "Expires"),
    )
    found = []
    for name, label in labels:
        value = event.get(name)
        if value in (None, ""):
            continue
        if name == "expires_at":
            value = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(value)))
        found.append((label, str(value)))
    return found


def arguments(event: Event) -> str | None:
    if "args" not in event:
        return None
    return json.dumps(event["args"], indent=2, sort_keys=True, default=str)


def slack(event: Event) -> dict[str, Any]:
    """An incoming-webhook message: a header, the facts, the exact arguments, a console link."""
    head = title(event)
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": head[:150]}},
        {"type": "section", "fields": [_mrkdwn(f"*{k}*\n{_esc(v)}") for k, v in _run(event)]},
    ]
    more = facts(event)
    if more:
        lines = "\n".join(f"*{k}:* {_esc(v)}" for k, v in more)
        blocks.append({"type": "section", "text": _mrkdwn(lines[:SLACK_TEXT])})
    shown = arguments(event)
    if shown is not None:
        if len(shown) > SLACK_TEXT:
            shown = shown[:SLACK_TEXT] + "\n… (cut here: the console shows them whole)"
        text = "*Exact arguments* (redacted values as ***)\n```" + _esc(shown) + "```"
        blocks.append({"type": "section", "text": _mrkdwn(text)})
    if event.get("url"):
        button = {
            "type": "button",
            "text": {"type": "plain_text", "text": "Open in the console"},
            "url": event["url"],
        }
        blocks.append({"type": "actions", "elements": [button]})
    blocks.append({"type": "context", "elements": [_mrkdwn(f"event {_esc(event.get('id'))}")]})
    return {"text": head, "blocks": blocks}


def email(event: Event, sender: str, to: list[str]) -> EmailMessage:
    """A plain-text email; its Message-ID-like header carries the event id to drop repeats by.

    Run ids and tool names come from agents: in a header their line breaks and other control
    characters are written out as escapes (``\\n``), so no value can start a header of its own,
    and letters beyond ASCII are encoded as RFC 2047 words by the SMTP policy."""
    message = EmailMessage(policy=SMTP)
    message["Subject"] = header_text("Call4Agents: " + title(event))
    message["From"] = sender
    message["To"] = ", ".join(to)
    message["X-Call4Agents-Event-Id"] = header_text(str(event.get("id", "")))
    lines = [title(event), ""]
    lines += [f"{k}: {v}" for k, v in [*_run(event), *facts(event)]]
    shown = arguments(event)
    if shown is not None:
        lines += ["", "Exact arguments (redacted values as ***):", shown]
    if event.get("url"):
        lines += ["", f"Open in the console: {event['url']}"]
    lines += ["", f"Event {event.get('id')}"]
    message.set_content("\n".join(lines) + "\n")
    return message


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def header_text(value: str) -> str:
    """One header line: each control character (CR, LF, tab...) written out as an escape."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), value)


def _run(event: Event) -> list[tuple[str, str]]:
    found = [("Run", str(event.get("run_id", "?")))]
    if event.get("tool"):
        found.append(("Tool", str(event["tool"])))
    return found


def _mrkdwn(text: str) -> dict[str, str]:
    return {"type": "mrkdwn", "text": text}


def _esc(value: object) -> str:
    # Slack reads &, < and > as markup (links, mentions) even inside code.
    return str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
