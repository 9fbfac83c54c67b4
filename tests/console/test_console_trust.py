"""The console's trust boundary, one test per attack: a user header sent by anyone, a foreign
host name (DNS rebinding), names differing only in case, a huge form, and webhooks that one
stuck receiver held up or lost.
"""

from __future__ import annotations

import base64
import html
import json
import re
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest
from starlette.testclient import TestClient

import call4agents as c4a
from call4agents.console import ConsoleSettings, create_app, proxy_networks
from call4agents.controls import stats
from call4agents.controls.webhooks import Delivery, Receiver, Webhooks, replay
from call4agents.facade import cli
from call4agents.model.errors import ConfigurationError
from call4agents.storage import dead_letters
from tests.conftest import Target
from tests.console.browser import console
from tests.console.helpers import field, open_ticket

SECRET = {"proxy_secret_header": "X-Proxy-Secret", "proxy_secret": "only-the-proxy-knows"}


def header_mode(ledger: c4a.Ledger, *, client: str = "127.0.0.1", **settings: Any) -> TestClient:
    values: dict[str, Any] = {"operator": "", "user_header": "X-Forwarded-User", **settings}
    app = create_app(ledger, ConsoleSettings(**values))
    return TestClient(app, base_url="http://127.0.0.1", client=(client, 40000))


def deny_as(c: TestClient, ticket: str, headers: dict[str, Any]) -> Any:
    """Deny as the page's form would; where the page offers no form (read-only), post anyway."""
    page = c.get(f"/approvals/{ticket}", headers=headers)
    if page.status_code != 200:
        return page
    form = {}
    if 'name="csrf"' in page.text:
        form = {"csrf": field(page.text, "csrf"), "fingerprint": field(page.text, "fingerprint")}
    return c.post(f"/approvals/{ticket}", data={**form, "decision": "deny"}, headers=headers)


# -- header mode believes only the proxy ----------------------------------------------------


def test_header_mode_without_a_proxy_check_refuses_to_start(
    ledger: c4a.Ledger, target: Target, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ConfigurationError, match="--proxy-secret-header"):
        ConsoleSettings(operator="", user_header="X-Forwarded-User")
    with pytest.raises(ConfigurationError, match="secret's value"):
        ConsoleSettings(operator="", user_header="X-U", proxy_secret_header="X-Proxy-Secret")
    url = ["--url", ledger.url] + (["--schema", target.schema] if target.schema else [])
    assert cli.main(["console", *url, "--user-header", "X-Forwarded-User"]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "--trusted-proxy" in err
    assert "Traceback" not in err
    bad = ["--user-header", "X-U", "--trusted-proxy", "the-proxy"]
    assert cli.main(["console", *url, *bad]) == cli.EXIT_ERROR
    assert "not an IP address" in capsys.readouterr().err


def test_a_direct_request_naming_anyone_decides_nothing(ledger: c4a.Ledger) -> None:
    """The attack: any process that reaches the console claims to be ceo@corp and denies."""
    request = open_ticket()
    with header_mode(ledger, **SECRET) as c:
        forged = {"X-Forwarded-User": "ceo@corp"}
        assert c.get("/", headers=forged).status_code == 401
        assert "csrf" not in c.get(f"/approvals/{request.ticket}", headers=forged).text
        answer = c.post(f"/approvals/{request.ticket}", data={"decision": "deny"}, headers=forged)
        assert answer.status_code == 401
        wrong = {**forged, "X-Proxy-Secret": "only-the-proxy-knows-not"}
        assert deny_as(c, request.ticket, wrong).status_code == 401
        assert c.get("/static/console.css", headers=forged).status_code == 401
        found = ledger.approval(request.ticket)
        assert found is not None
        assert found.state == "pending"
        proxied = {"X-Forwarded-User": "olga", "X-Proxy-Secret": "only-the-proxy-knows"}
        assert deny_as(c, request.ticket, proxied).status_code == 200
    found = ledger.approval(request.ticket)
    assert found is not None
    assert (found.state, found.decided_by) == ("denied", "olga")


def test_an_allow_list_of_proxy_addresses(ledger: c4a.Ledger) -> None:
    request = open_ticket()
    proxies = proxy_networks(["10.0.0.0/24", "fd00::7"])
    olga = {"X-Forwarded-User": "olga"}
    with header_mode(ledger, client="127.0.0.1", trusted_proxies=proxies) as local:
        assert local.get("/", headers=olga).status_code == 401  # every local process
        assert deny_as(local, request.ticket, olga).status_code == 401
    with header_mode(ledger, client="10.0.0.9", trusted_proxies=proxies) as proxy:
        assert proxy.get("/", headers=olga).status_code == 200
    with header_mode(ledger, client="fd00::7", trusted_proxies=proxies) as proxy:
        assert proxy.get("/", headers=olga).status_code == 200
    # Both set: both must hold.
    with header_mode(ledger, client="10.0.0.9", trusted_proxies=proxies, **SECRET) as both:
        assert both.get("/", headers=olga).status_code == 401
        assert both.get("/", headers={**olga, "X-Proxy-Secret": SECRET["proxy_secret"]}).is_success
    found = ledger.approval(request.ticket)
    assert found is not None
    assert found.state == "pending"


# -- a foreign host name is refused (DNS rebinding) -------------------------------------------


@pytest.mark.parametrize("path", ["/", "/doubt", "/api/live", "/api/events", "/static/console.js"])
def test_a_foreign_host_name_is_refused_even_signed_in(ledger: c4a.Ledger, path: str) -> None:
    settings = ConsoleSettings(operator="ann", token="tok")
    app = create_app(ledger, settings)
    with TestClient(app, base_url="http://127.0.0.1:8470") as c:
        assert c.get("/?token=tok").status_code == 200  # signed in: the cookie is set
        if path != "/api/events":  # on PostgreSQL the stream never ends
            assert c.get(path).status_code == 200
        # A page on rebind.example whose name now points at 127.0.0.1 sends the same cookie.
        answer = c.get(path, headers={"Host": "rebind.example:8470"})
        assert answer.status_code == 421
        assert "--allowed-host" in answer.text
    for name in ("localhost:8470", "LOCALHOST.", "[::1]:8470"):
        with TestClient(app, base_url=f"http://{name}") as c:
            assert c.get("/?token=tok").status_code == 200, name


def test_a_proxy_name_is_allowed_when_given(ledger: c4a.Ledger) -> None:
    headers = {"X-Forwarded-User": "olga", "X-Proxy-Secret": SECRET["proxy_secret"]}
    with header_mode(ledger, **SECRET) as c:
        assert c.get("/", headers={**headers, "Host": "console.corp.example"}).status_code == 421
    with header_mode(ledger, allowed_hosts=frozenset({"Console.Corp.Example"}), **SECRET) as c:
        assert c.get("/", headers={**headers, "Host": "console.corp.example"}).status_code == 200
        assert c.get("/", headers={**headers, "Host": "other.corp.example"}).status_code == 421


# -- names compare as people mean them -------------------------------------------------------


@pytest.mark.parametrize("user", ["bob", "Bob", "BOB ", "ｂｏｂ"])  # the last: full-width letters
def test_a_read_only_user_is_read_only_in_any_case(ledger: c4a.Ledger, user: str) -> None:
    request = open_ticket()
    with header_mode(ledger, read_only_users=frozenset({"Bob"}), **SECRET) as c:
        # A proxy sends the name as UTF-8 bytes.
        headers: dict[str, Any] = {"X-Forwarded-User": user.encode(), **_secret()}
        assert "(read-only)" in c.get("/", headers=headers).text
        answer = deny_as(c, request.ticket, headers)
        assert answer.status_code == 403
    found = ledger.approval(request.ticket)
    assert found is not None
    assert found.state == "pending"


@pytest.mark.parametrize("role", ["viewer", "Viewer", "READ-ONLY", " ReadOnly ", "ｖｉｅｗｅｒ"])
def test_a_read_only_role_is_read_only_in_any_case(ledger: c4a.Ledger, role: str) -> None:
    request = open_ticket()
    with header_mode(ledger, role_header="X-Role", **SECRET) as c:
        headers: dict[str, Any] = {"X-Forwarded-User": "vic", "X-Role": role.encode(), **_secret()}
        assert deny_as(c, request.ticket, headers).status_code == 403
    found = ledger.approval(request.ticket)
    assert found is not None
    assert found.state == "pending"


def test_a_user_name_with_control_characters_is_refused(ledger: c4a.Ledger) -> None:
    with header_mode(ledger, **SECRET) as c:
        answer = c.get("/", headers={"X-Forwarded-User": "olga\x1b[2J", **_secret()})
        assert answer.status_code == 400
        assert "control characters" in answer.text


@pytest.mark.parametrize("header", ["X-Forwarded-User", "X-Role"])
def test_a_repeated_user_or_role_header_is_refused(ledger: c4a.Ledger, header: str) -> None:
    """A proxy that adds its header after the client's, instead of replacing it: whichever
    copy came first, nothing is believed."""
    request = open_ticket()
    with header_mode(ledger, role_header="X-Role", **SECRET) as c:
        given = {"X-Forwarded-User": "ann", "X-Role": "staff", **_secret()}
        page = c.get(f"/approvals/{request.ticket}", headers=given).text
        form = {"decision": "approve", "csrf": field(page, "csrf")}
        form["fingerprint"] = field(page, "fingerprint")
        added = "ceo@corp" if header == "X-Forwarded-User" else "viewer"
        twice = [*given.items(), (header, added)]
        answer = c.get("/", headers=twice)
        assert answer.status_code == 400
        assert f"the {header} header was sent 2 times" in html.unescape(answer.text)
        assert "<nav" not in answer.text  # in the layout, signed in as nobody
        decided = c.post(f"/approvals/{request.ticket}", data=form, headers=twice)
        assert decided.status_code == 400
    found = ledger.approval(request.ticket)
    assert found is not None
    assert found.state == "pending"


def test_a_name_mixing_scripts_is_its_own_user_and_shown_as_such(ledger: c4a.Ledger) -> None:
    """``bоb`` with a Cyrillic о is not the read-only ``bob``: it is whoever the proxy signed in,
    and the page and the audit say its letters mix scripts, so nobody reads it as bob."""
    request = open_ticket()
    look_alike = "b\u043eb"
    with header_mode(ledger, read_only_users=frozenset({"bob"}), **SECRET) as c:
        headers: dict[str, Any] = {"X-Forwarded-User": look_alike.encode(), **_secret()}
        home = html.unescape(c.get("/", headers=headers).text)
        assert f"signed in as <b>{look_alike} (mixed scripts: \u043e is Cyrillic)</b>" in home
        assert "(operator)" in home
        answer = deny_as(c, request.ticket, headers)
        assert answer.status_code == 200
        audit = html.unescape(c.get("/audit", headers=headers).text)
    [entry] = ledger.audit()
    assert entry.actor == look_alike  # the real name, letter for letter
    assert f"{look_alike} (mixed scripts: \u043e is Cyrillic)" in audit
    with header_mode(ledger, read_only_users=frozenset({"bob"}), **SECRET) as c:
        plain = html.unescape(c.get("/", headers={"X-Forwarded-User": "bob", **_secret()}).text)
    assert "signed in as <b>bob</b> (read-only)" in plain


def test_names_in_one_script_are_shown_as_they_are() -> None:
    from call4agents.console._auth import shown_name

    for name in ("bob", "Zoë Ørsted", "Дмитрий", "山田たろう", "ann-2@corp"):
        assert shown_name(name) == name
    assert shown_name("p\u0430ypal") == "p\u0430ypal (mixed scripts: \u0430 is Cyrillic)"
    assert shown_name("Дмиtрий") == "Дмиtрий (mixed scripts: t is Latin)"


def _secret() -> dict[str, str]:
    return {"X-Proxy-Secret": SECRET["proxy_secret"]}


# -- a huge form is refused while it streams in -----------------------------------------------


def _token(address: str) -> str:
    found = re.search(r"token=([^&\s]+)", address)
    assert found
    return found.group(1)


def _post_head(port: int, token: str, extra: str) -> bytes:
    return (
        f"POST /approvals/apr_x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Authorization: Bearer {token}\r\n"
        f"Content-Type: application/x-www-form-urlencoded\r\n{extra}\r\n"
    ).encode()


def _answer(conn: socket.socket) -> bytes:
    conn.settimeout(20)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def test_a_form_over_the_limit_is_refused_before_it_is_read(
    sqlite_target: Target,
) -> None:
    """A real console: 413 after the first 64 KB of a body that declares 50 MB, and after the
    chunk that passes 1 MB of a chunked body, with the rest never sent."""
    sqlite_target.open().close()  # the ledger exists
    with console(sqlite_target) as address:
        port = int(address.split(":")[2].split("/")[0])
        token = _token(address)
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(_post_head(port, token, "Content-Length: 50000000\r\n"))
            conn.sendall(b"a" * 65536)
            assert _answer(conn).startswith(b"HTTP/1.1 413")
        with socket.create_connection(("127.0.0.1", port)) as conn:
            conn.sendall(_post_head(port, token, "Transfer-Encoding: chunked\r\n"))
            chunk = b"a" * 262144
            sent = 0
            for _ in range(5):  # 1.25 MB
                conn.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
            answer = _answer(conn)
            assert answer.startswith(b"HTTP/1.1 413"), answer[:200]


# -- webhooks: one stuck receiver holds up nothing, and nothing is lost -------------------------


class _Receiver(BaseHTTPRequestHandler):
    got: ClassVar[list[tuple[dict[str, str], dict[str, Any]]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        _Receiver.got.append((dict(self.headers), json.loads(body)))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def good_receiver() -> Iterator[str]:
    _Receiver.got = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def hung_receiver() -> Iterator[str]:
    """Accepts every connection and never answers (nor reads) until the test ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    held: list[socket.socket] = []
    done = threading.Event()

    def hold() -> None:
        listener.settimeout(0.2)
        while not done.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    threading.Thread(target=hold, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/hook"
    finally:
        done.set()
        for conn in held:
            conn.close()
        listener.close()


def _events(n: int) -> list[dict[str, Any]]:
    return [
        {"id": f"t:apr_{i}", "event": "approval.requested", "ticket": f"apr_{i}"} for i in range(n)
    ]


def _eventually(check: Any, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "not reached in time"
        time.sleep(0.05)


def test_a_hung_receiver_holds_up_no_other_and_its_events_become_dead_letters(
    ledger: c4a.Ledger,
) -> None:
    with hung_receiver() as stuck, good_receiver() as good:
        delivery = Delivery(attempts=2, backoff=0.05, timeout=1.0, workers=2, queue_size=100)
        hooks = Webhooks([Receiver.parse(stuck), Receiver.parse(good)], b"s3cret", delivery)
        hooks.start(ledger)
        try:
            started = time.monotonic()
            for event in _events(6):
                hooks.submit(event)
            # A receiver that never answers held every submit up for less than one post's
            # timeout in all (it queues; it never posts).
            assert time.monotonic() - started < delivery.timeout
            # Every event reaches the good receiver while the stuck one still hangs.
            _eventually(lambda: len(_Receiver.got) == 6, seconds=5 * delivery.timeout)
            assert {e["id"] for _, e in _Receiver.got} == {e["id"] for e in _events(6)}
            # Each stuck event: 2 attempts of 1 s, 2 in flight at once; then a dead letter.
            _eventually(lambda: dead_letters.count_waiting(ledger.store) == 6)
        finally:
            hooks.stop()
    letters = dead_letters.waiting(ledger.store)
    assert {json.loads(d.event)["id"] for d in letters} == {e["id"] for e in _events(6)}
    assert {(d.receiver, d.attempts) for d in letters} == {(Receiver.parse(stuck).url, 2)}
    assert all("timed out" in d.error for d in letters)
    assert stats.compute(ledger).webhooks_dead == 6


def test_a_full_queue_makes_dead_letters_not_silence(ledger: c4a.Ledger) -> None:
    with hung_receiver() as stuck:
        hooks = Webhooks([Receiver.parse(stuck)], b"s3cret", Delivery(queue_size=2, workers=0))
        hooks.start(ledger)  # no delivery thread takes anything: the queue fills
        for event in _events(5):
            hooks.submit(event)
    letters = dead_letters.waiting(ledger.store)
    assert [json.loads(d.event)["id"] for d in letters] == [e["id"] for e in _events(5)[2:]]
    assert all("queue was full" in d.error and d.attempts == 0 for d in letters)


def test_replay_delivers_each_dead_letter_once(ledger: c4a.Ledger, target: Target) -> None:
    with hung_receiver() as stuck:
        hooks = Webhooks([Receiver.parse(stuck)], b"s3cret", Delivery(queue_size=1, workers=0))
        hooks.start(ledger)
        for event in _events(3):
            hooks.submit(event)
    assert dead_letters.count_waiting(ledger.store) == 2
    with good_receiver() as good:
        done = replay(ledger, hooks, receiver=good)
        assert [r.delivered for r in done] == [True, True]
        assert replay(ledger, hooks, receiver=good) == []  # marked: never sent twice
        ids = [e["id"] for _, e in _Receiver.got]
        assert ids == ["t:apr_1", "t:apr_2"]
        assert all(e["replayed"] for _, e in _Receiver.got)
    assert dead_letters.count_waiting(ledger.store) == 0
    assert stats.compute(ledger).webhooks_dead == 0


def test_the_webhooks_command_lists_and_replays(
    ledger: c4a.Ledger,
    target: Target,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = ["--url", ledger.url] + (["--schema", target.schema] if target.schema else [])
    assert cli.main(["webhooks", *url]) == cli.EXIT_OK
    assert "No webhook events given up on." in capsys.readouterr().out
    with hung_receiver() as stuck:
        hooks = Webhooks([Receiver.parse(stuck)], b"s3cret", Delivery(queue_size=1, workers=0))
        hooks.start(ledger)
        for event in _events(2):
            hooks.submit(event)
    assert cli.main(["webhooks", *url]) == cli.EXIT_OK
    listed = capsys.readouterr().out
    assert stuck.split("/hook")[0] in listed
    assert "queue was full" in listed
    assert cli.main(["stats", *url, "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["webhooks_dead"] == 1
    monkeypatch.delenv("CALL4AGENTS_WEBHOOK_SECRET", raising=False)
    assert cli.main(["webhooks", *url, "--replay"]) == cli.EXIT_ERROR
    assert "HMAC secret" in capsys.readouterr().err
    monkeypatch.setenv("CALL4AGENTS_WEBHOOK_SECRET", "s3cret")
    with good_receiver() as good:
        assert cli.main(["webhooks", *url, "--replay", "--to", good, "--json"]) == cli.EXIT_OK
        assert [r["delivered"] for r in json.loads(capsys.readouterr().out)] == [True]
        assert [e["id"] for _, e in _Receiver.got] == ["t:apr_1"]
    assert cli.main(["webhooks", *url, "--to", "http://x"]) == cli.EXIT_ERROR
    assert "only go with --replay" in capsys.readouterr().err


def test_credentials_in_a_webhook_url_are_sent_as_basic_auth(ledger: c4a.Ledger) -> None:
    with good_receiver() as good:
        with_auth = good.replace("http://", "http://hook%40corp:p%3Ass@")
        receiver = Receiver.parse(with_auth)
        assert receiver.url == good  # what logs, pages and dead letters show
        assert Webhooks([receiver], b"s3cret").send(receiver, _events(1)[0])
        [(headers, _)] = _Receiver.got
    assert headers["Authorization"] == "Basic " + base64.b64encode(b"hook@corp:p:ss").decode()


@pytest.mark.parametrize(
    "url", ["ftp://hooks.example/x", "file:///etc/passwd", "http://", "hooks.example/x"]
)
def test_a_webhook_url_that_cannot_be_posted_to_is_refused_at_start(
    ledger: c4a.Ledger,
    target: Target,
    url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CALL4AGENTS_WEBHOOK_SECRET", "s3cret")
    where = ["--url", ledger.url] + (["--schema", target.schema] if target.schema else [])
    assert cli.main(["console", *where, "--webhook-url", url]) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "is not an http(s)://, slack+https:// or smtp:// address" in err
    assert "Traceback" not in err


def test_a_password_in_a_refused_webhook_url_is_not_printed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ConfigurationError) as info:
        Receiver.parse("ftp://user:hunter2@hooks.example/x")
    assert "hunter2" not in str(info.value)


def test_the_health_page_lists_dead_letters(ledger: c4a.Ledger) -> None:
    with hung_receiver() as stuck:
        hooks = Webhooks([Receiver.parse(stuck)], b"s3cret", Delivery(queue_size=1, workers=0))
        hooks.start(ledger)
        for event in _events(2):
            hooks.submit(event)
    app = create_app(ledger, ConsoleSettings(operator="ann", token="tok"))
    with TestClient(app, base_url="http://127.0.0.1") as c:
        page = c.get("/health?token=tok").text
    assert 'id="dead-letters"' in page
    assert Receiver.parse(stuck).url in page
    assert "approval.requested" in page
    assert "queue was full" in page


def test_a_hung_receiver_delays_neither_a_tool_call_nor_a_page(
    sqlite_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real console posting to a receiver that never answers (each post would wait 10 s)."""
    import urllib.request

    monkeypatch.setenv("CALL4AGENTS_WEBHOOK_SECRET", "s3cret")
    c4a.init(sqlite_target.open())
    with hung_receiver() as stuck, console(sqlite_target, "--webhook-url", stuck) as address:
        token = _token(address)
        base = address.split("?")[0]
        for i in range(6):  # each one an event for the stuck receiver
            started = time.monotonic()
            open_ticket(run_id=f"refund-{i}")
            assert time.monotonic() - started < 5  # against 10 s a post, times 6 attempts
            time.sleep(0.5)  # the console polls every 2 s: events keep arriving
        for path in ("", "doubt", "health"):
            started = time.monotonic()
            with urllib.request.urlopen(
                urllib.request.Request(base + path, headers={"Authorization": f"Bearer {token}"}),
                timeout=10,
            ) as answer:
                assert answer.status == 200
            assert time.monotonic() - started < 5
