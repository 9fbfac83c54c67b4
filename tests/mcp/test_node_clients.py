"""MCP clients nobody here wrote, against the mail server with and without OnceOnly.

The TypeScript SDK's ``Client`` (tests/mcp/node/client.mjs) and the MCP Inspector's CLI talk to
tests/mcp/node_server.py (examples/mcp/server.py's tools plus a raising tool and one that needs
approval) over stdio and streamable HTTP on 127.0.0.1, and to examples/mcp/server.py itself. The
SDK checks every ``structuredContent`` against the tool's ``outputSchema`` on ``callTool``: a
replayed or refused answer a real agent host would reject shows up here as an error. Side effects
are counted in an outbox file the server appends to, outside the ledger.

The clients are npm packages pinned in tests/mcp/node (``npm ci --prefix tests/mcp/node``, which
scripts/test runs). Without node or those packages the tests skip with the reason; with CI=true
they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import call4agents as c4a
from tests.conftest import TEST_SECRET

NODE_DIR = Path(__file__).with_name("node")
CLIENT = NODE_DIR / "client.mjs"
INSPECTOR = NODE_DIR / "node_modules" / ".bin" / "mcp-inspector"
SERVER = Path(__file__).with_name("node_server.py")
EXAMPLE = Path(__file__).parents[2] / "examples" / "mcp" / "server.py"
KEY = "io.call4agents/idempotency-key"
OUTCOME = "io.call4agents/outcome"
MODES = ["bare", "once"]
TRANSPORTS = ["stdio", "http"]

pytestmark = pytest.mark.slow  # real server processes and Node.js clients


def node_problem() -> str | None:
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "node and npm are not installed (Node.js 20 or later)"
    if not (NODE_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        return "the Node.js MCP clients are not installed (npm ci --prefix tests/mcp/node)"
    return None


@pytest.fixture(scope="module", autouse=True)
def node_clients() -> None:
    problem = node_problem()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"CI=true but the Node.js MCP client tests cannot run: {problem}", False)
        pytest.skip(problem)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("node-clients")


@pytest.fixture(scope="module")
def env(folder: Path) -> dict[str, str]:
    """What every server process gets: one SQLite ledger for the module, the shared secret."""
    return dict(
        os.environ,
        C4A_TEST_URL=f"sqlite:///{folder / 'ledger.db'}",
        C4A_TEST_SCHEMA="",
        CALL4AGENTS_SECRET=TEST_SECRET,
        PYTHONUNBUFFERED="1",
    )


@pytest.fixture(scope="module")
def ledger(env: dict[str, str]) -> Iterator[c4a.Ledger]:
    opened = c4a.Ledger(env["C4A_TEST_URL"])
    yield opened
    opened.close()


@contextmanager
def http_server(argv: list[str], env: dict[str, str], log: Path, cwd: Path) -> Iterator[str]:
    """Start a server that prints its port (or its URL) once listening; yields its URL."""
    with log.open("w") as stderr:
        proc = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        if line.startswith("PORT "):
            yield f"http://127.0.0.1:{line.split()[1]}/mcp"
        else:
            assert line.startswith("listening on "), f"{argv} did not start:\n{log.read_text()}"
            yield line.removeprefix("listening on ")
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def http_urls(folder: Path, env: dict[str, str], ledger: c4a.Ledger) -> Iterator[dict[str, str]]:
    """One streamable-HTTP server per mode for the whole module."""
    with (
        http_server(
            [sys.executable, str(SERVER), "bare", "http", str(folder / "bare-http.jsonl")],
            env,
            folder / "bare-http.log",
            folder,
        ) as bare,
        http_server(
            [sys.executable, str(SERVER), "once", "http", str(folder / "once-http.jsonl")],
            env,
            folder / "once-http.log",
            folder,
        ) as once,
    ):
        yield {"bare": bare, "once": once}


class Mail:
    """One (mode, transport) case: how a client reaches the server, and its outbox."""

    def __init__(self, mode: str, transport: str, folder: Path, urls: dict[str, str]) -> None:
        self.mode, self.transport = mode, transport
        self.outbox = folder / f"{mode}-{transport}.jsonl"
        self.url = urls[mode] if transport == "http" else None
        self.argv = [sys.executable, str(SERVER), mode, "stdio", str(self.outbox)]

    def effects(self, tool: str, **match: Any) -> list[dict[str, Any]]:
        lines = self.outbox.read_text().splitlines() if self.outbox.exists() else []
        found = [json.loads(line) for line in lines]
        return [e for e in found if e["tool"] == tool and match.items() <= e.items()]


@pytest.fixture(params=[(m, t) for m in MODES for t in TRANSPORTS], ids=lambda p: "-".join(p))
def mail(request: pytest.FixtureRequest, folder: Path, http_urls: dict[str, str]) -> Mail:
    mode, transport = request.param
    return Mail(mode, transport, folder, http_urls)


def sdk_session(
    steps: list[dict[str, Any]], *, url: str | None, argv: list[str], env: dict[str, str]
) -> list[dict[str, Any]]:
    """Run tests/mcp/node/client.mjs: one TypeScript SDK session that takes these steps."""
    server: dict[str, Any] = {"url": url} if url else {"command": argv[0], "args": argv[1:]}
    plan = json.dumps({"server": server, "steps": steps})
    done = subprocess.run(
        ["node", str(CLIENT), plan], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    answers: list[dict[str, Any]] = json.loads(done.stdout)
    assert len(answers) == len(steps)
    return answers


def result_of(answer: dict[str, Any]) -> dict[str, Any]:
    """The CallToolResult the SDK accepted (an answer it rejected fails the test here)."""
    assert "error" not in answer, f"the TypeScript SDK rejected the result: {answer['error']}"
    result: dict[str, Any] = answer["result"]
    return result


def text(result: dict[str, Any]) -> str:
    return str(result["content"][0]["text"])


def outcome(result: dict[str, Any]) -> str | None:
    return (result.get("_meta") or {}).get(OUTCOME, {}).get("outcome")


def test_typescript_sdk_client(mail: Mail, env: dict[str, str], ledger: c4a.Ledger) -> None:
    case = f"{mail.mode}-{mail.transport}"
    bob = {"to": f"bob-{case}@example.com", "body": "Your refund is on its way"}
    eve = {**bob, "to": f"eve-{case}@example.com"}
    card = {"card": f"4242-{case}", "amount": 30}
    order = {"order": f"o-{case}", "amount": 20}
    steps = [
        {"list": True},
        {"tool": "send_email", "args": bob, "key": f"mail-{case}"},  # fresh
        {"tool": "send_email", "args": bob, "key": f"mail-{case}"},  # the retry
        {"tool": "send_email", "args": eve, "key": f"mail-{case}"},  # same key, other arguments
        {"tool": "charge_card", "args": {"card": "declined", "amount": 5}, "key": f"no-{case}"},
        {"tool": "charge_card", "args": card, "key": f"card-{case}"},  # structured result
        {"tool": "charge_card", "args": card, "key": f"card-{case}"},  # its replay
        {"tool": "refund", "args": order, "key": f"refund-{case}"},  # needs a person's yes
        {"tool": "send_email", "args": {**bob, "body": "no key"}},  # no client key
        {"tool": "sent_count"},
    ]
    run = {"url": mail.url, "argv": mail.argv, "env": env}
    listed, fresh, retry, other, declined, charged, recharged, refund, keyless, count = [
        answer if "tools" in answer else result_of(answer) for answer in sdk_session(steps, **run)
    ]

    tools = {tool["name"]: tool for tool in listed["tools"]}
    assert {"send_email", "sent_count", "charge_card", "refund", "test_simple_text"} <= set(tools)
    assert tools["charge_card"]["outputSchema"]["required"] == ["charge_id", "amount"]
    assert not fresh["isError"]
    assert text(fresh) == fresh["structuredContent"]["result"]
    assert declined["isError"] is True
    assert "structuredContent" not in declined
    assert charged["structuredContent"]["amount"] == 30
    assert not keyless["isError"]
    assert count["structuredContent"]["result"] == len(mail.outbox.read_text().splitlines())

    if mail.mode == "bare":  # every call runs: the retry, the edited retry, the refund
        assert text(retry) != text(fresh)
        assert len(mail.effects("send_email", to=bob["to"], body=bob["body"])) == 2
        assert not other["isError"]
        assert len(mail.effects("send_email", to=eve["to"])) == 1
        assert recharged["structuredContent"] != charged["structuredContent"]
        assert len(mail.effects("charge_card", card=card["card"])) == 2
        assert not refund["isError"]
        assert refund["structuredContent"]["order"] == order["order"]
        assert outcome(declined) is None
        return

    # Once-only: the retry gets the first result, and the email went out once.
    assert outcome(fresh) is None
    assert outcome(retry) == "replayed"
    assert retry["content"] == fresh["content"]
    assert retry["structuredContent"] == fresh["structuredContent"]
    assert len(mail.effects("send_email", to=bob["to"], body=bob["body"])) == 1
    assert other["isError"] is True
    assert outcome(other) == "key_reused"
    assert mail.effects("send_email", to=eve["to"]) == []
    assert outcome(declined) == "failed"
    assert outcome(recharged) == "replayed"
    assert recharged["structuredContent"] == charged["structuredContent"]
    assert len(mail.effects("charge_card", card=card["card"])) == 1
    # A keyless call over stdio has no caller identity: it runs outside the ledger, and says so.
    # Over HTTP the session id is the caller; a first call of its own runs covered.
    [sent] = mail.effects("send_email", to=bob["to"], body="no key")
    assert sent["covered"] is (mail.transport == "http")

    # The refund waits for a person: nothing ran, and the answer carries the ticket.
    assert refund["isError"] is True
    assert outcome(refund) == "approval_required"
    assert "structuredContent" not in refund
    assert mail.effects("refund", order=order["order"]) == []
    ledger.approve(refund["_meta"][OUTCOME]["approval"]["ticket"], by="ann")
    again = [{"tool": "refund", "args": order, "key": f"refund-{case}"}] * 2
    approved, replayed = (result_of(a) for a in sdk_session(again, **run))
    assert not approved["isError"]
    assert approved["structuredContent"]["order"] == order["order"]
    assert outcome(replayed) == "replayed"
    assert replayed["structuredContent"] == approved["structuredContent"]
    assert len(mail.effects("refund", order=order["order"])) == 1


def inspector(mail: Mail, env: dict[str, str], *options: str) -> tuple[int, dict[str, Any]]:
    """The MCP Inspector's CLI, once: its exit code and its JSON answer."""
    # A stdio server gets only the variables named with -e (and a few like PATH and HOME).
    passed = [["-e", f"{name}={env[name]}"] for name in ("C4A_TEST_URL", "CALL4AGENTS_SECRET")]
    where = [mail.url] if mail.url else [*passed[0], *passed[1], *mail.argv]
    argv = [str(INSPECTOR), "--cli", *where, "--format", "json", "-q", *options]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    answer: dict[str, Any] = json.loads(done.stdout or done.stderr)
    return done.returncode, answer


def inspector_call(
    mail: Mail, env: dict[str, str], tool: str, args: dict[str, Any], key: str | None = None
) -> tuple[int, dict[str, Any]]:
    options = ["--method", "tools/call", "--tool-name", tool, "--tool-args-json", json.dumps(args)]
    options += ["--tool-metadata", f"{KEY}={key}"] if key else []
    code, answer = inspector(mail, env, *options)
    assert "result" in answer, answer
    result: dict[str, Any] = answer["result"]
    assert code == (5 if result.get("isError") else 0), (code, answer)
    return code, result


def test_inspector_cli(mail: Mail, env: dict[str, str]) -> None:
    case = f"inspector-{mail.mode}-{mail.transport}"
    card = {"card": f"4242-{case}", "amount": 12}
    with ThreadPoolExecutor() as pool:  # each run is a process of its own: several at once
        listing = pool.submit(inspector, mail, env, "--method", "tools/list")
        declining = pool.submit(
            inspector_call, mail, env, "charge_card", {"card": "declined", "amount": 1}
        )
        # --tool-metadata puts the key in the call's _meta; over stdio each run is a new server
        # process, so the retry is answered from the ledger file alone.
        _, first = inspector_call(mail, env, "charge_card", card, key=f"card-{case}")
        _, again = inspector_call(mail, env, "charge_card", card, key=f"card-{case}")
        # Two Inspector runs, two keys, two refunds: each run's first tools/call has the same
        # JSON-RPC id, and still each is a call of its own (not an edit of the other).
        refunds = [
            pool.submit(
                inspector_call,
                mail,
                env,
                "refund",
                {"order": f"{case}-{n}", "amount": n},
                f"r-{case}-{n}",
            )
            for n in (1, 2)
        ]
        code, listed = listing.result()
        _, declined = declining.result()
        refunded = [r.result()[1] for r in refunds]
    assert code == 0
    assert {t["name"] for t in listed["result"]["tools"]} >= {"send_email", "charge_card"}
    assert first["structuredContent"]["amount"] == 12
    assert declined["isError"] is True
    assert "structuredContent" not in declined
    charges = mail.effects("charge_card", card=card["card"])
    if mail.mode == "bare":
        assert [r["structuredContent"]["amount"] for r in refunded] == [1, 2]
        assert len(charges) == 2
        assert again["structuredContent"] != first["structuredContent"]
    else:
        assert len(charges) == 1
        assert outcome(again) == "replayed"
        assert again["structuredContent"] == first["structuredContent"]
        assert [outcome(r) for r in refunded] == ["approval_required"] * 2
        assert not any("changed" in text(r) for r in refunded), refunded
        assert [e for e in mail.effects("refund") if e["order"].startswith(case)] == []
        # The declined call had no key: over HTTP the session is its caller, so the ledger saw
        # it fail; over stdio nothing identifies the caller and it ran outside the ledger.
        assert outcome(declined) == ("failed" if mail.transport == "http" else None)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_example_server(transport: str, folder: Path, env: dict[str, str]) -> None:
    """examples/mcp/server.py as shipped (its ledger is CALL4AGENTS_URL), with the SDK client."""
    workdir = folder / f"example-{transport}"
    workdir.mkdir()
    example_env = dict(env, CALL4AGENTS_URL=f"sqlite:///{workdir / 'ledger.db'}")
    email = {"to": "bob@example.com", "body": "Your refund is on its way"}
    steps: list[dict[str, Any]] = [
        {"tool": "send_email", "args": email, "key": f"example-{transport}"},
        {"tool": "send_email", "args": email, "key": f"example-{transport}"},
        {"tool": "sent_count"},
    ]
    argv = [sys.executable, str(EXAMPLE)]

    def session(url: str | None) -> list[dict[str, Any]]:
        stdio = [*argv, "--stdio"]
        return [result_of(a) for a in sdk_session(steps, url=url, argv=stdio, env=example_env)]

    if transport == "stdio":
        first, retry, count = session(None)
    else:
        with http_server(argv, example_env, workdir / "server.log", workdir) as url:
            first, retry, count = session(url)
    assert outcome(retry) == "replayed"
    assert retry["content"] == first["content"]
    assert retry["structuredContent"] == first["structuredContent"]
    assert count["structuredContent"]["result"] == 1  # sent once


CONFORMANCE = NODE_DIR / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist"


def conformance(url: str, out: Path, env: dict[str, str]) -> dict[str, bool]:
    """The conformance suite's server scenarios against url: scenario -> passed."""
    shim = NODE_DIR / "node20" / "register.mjs"  # fs.globSync for Node.js 20
    argv = ["node", "--import", shim.as_uri(), str(CONFORMANCE / "index.js"), "server"]
    done = subprocess.run(
        [*argv, "--url", url, "-o", str(out)], env=env, capture_output=True, text=True, timeout=120
    )
    assert "SUMMARY" in done.stdout, done.stdout + done.stderr
    passed: dict[str, bool] = {}
    for checks in out.glob("server-*/checks.json"):
        scenario = re.sub(r"-\d{4}-\d\d-\d\dT.*$", "", checks.parent.name.removeprefix("server-"))
        statuses = {check["status"] for check in json.loads(checks.read_text())}
        passed[scenario] = "FAILURE" not in statuses
    return passed


def test_conformance_scenarios(
    http_urls: dict[str, str], folder: Path, env: dict[str, str]
) -> None:
    """@modelcontextprotocol/conformance's server scenarios: OnceOnly passes every one the same
    server passes without it (the rest test features the mail server does not have)."""
    with ThreadPoolExecutor() as pool:
        running = {
            mode: pool.submit(conformance, http_urls[mode], folder / f"conformance-{mode}", env)
            for mode in MODES
        }
    bare, once = running["bare"].result(), running["once"].result()
    assert set(once) == set(bare)
    for scenario in ("server-initialize", "ping", "tools-list", "tools-call-simple-text"):
        assert bare[scenario], scenario
    more = ("tools-call-error", "tools-call-image", "tools-call-with-progress")
    assert all(bare[scenario] for scenario in more), bare
    assert [s for s, ok in bare.items() if ok and not once[s]] == []
