"""The quickstart's children (call4agents._children): new processes from the fork server."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from call4agents.facade import _children


def kill_self() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def report(word: str) -> int:
    print(os.environ.get("C4A_PROBE"), word, os.getpid())
    print("to stderr", file=sys.stderr)
    return 3


def test_a_child_is_a_new_process_with_its_own_environment_and_output() -> None:
    code, out, err = _children.run(report, "hello", env={"C4A_PROBE": "probe"})
    assert code == 3
    probe, word, pid = out.split()
    assert (probe, word) == ("probe", "hello")
    assert int(pid) != os.getpid()
    assert err == "to stderr\n"
    assert "C4A_PROBE" not in os.environ


def test_sigkill_is_reported_as_minus_nine() -> None:
    assert _children.run(kill_self)[0] == -signal.SIGKILL


def sleep_after_saying_so(seconds: float) -> None:
    print("sleeping", flush=True)
    time.sleep(seconds)


def test_a_child_past_its_time_is_stopped_saying_where_it_was_and_how_to_give_more(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with _children.Child(sleep_after_saying_so, 600, env=None) as child:
        assert child.first_line(timeout=600) == "sleeping"  # in the call now, wherever it began
        monkeypatch.setenv(_children.TIMEOUT_ENV, "1")  # the limit is read as the wait begins
        with pytest.raises(TimeoutError) as raised:
            child.wait(600)
        assert child.exitcode is not None  # stopped
    message = str(raised.value)
    assert message.startswith(
        "the child running tests.core.test_children.sleep_after_saying_so(600) was still "
        "running after 1s and was stopped. On a busy machine, give children more time: "
        "CALL4AGENTS_CHILD_TIMEOUT=600 (seconds)."
    )
    assert "in sleep_after_saying_so" in message  # its stack when it was stopped


def test_the_time_limit_grows_with_the_load_or_is_the_one_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(_children.TIMEOUT_ENV, raising=False)
    load = os.getloadavg()[0] / (os.cpu_count() or 1)
    assert _children.time_limit(120) >= 120 * max(1.0, load) * 0.5  # the load moves meanwhile
    monkeypatch.setenv(_children.TIMEOUT_ENV, "900")
    assert _children.time_limit(120) == 900
    monkeypatch.setenv(_children.TIMEOUT_ENV, "ten minutes")
    with pytest.raises(ValueError, match="CALL4AGENTS_CHILD_TIMEOUT='ten minutes' is not a number"):
        _children.time_limit(120)


def test_a_script_without_a_main_guard_starts_its_child_once(tmp_path: Path) -> None:
    # multiprocessing would run the script again in the child, which would start a child again.
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import time\n"
        "from call4agents.facade import _children\n"
        "print('top level', flush=True)\n"
        "code, out, err = _children.run(time.sleep, 0)\n"
        "print(code, repr(out), repr(err))\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["top level", "0 '' ''"]


def test_children_started_and_awaited_from_many_threads_report_their_own_exit_codes() -> None:
    # Each start polls every running child; unguarded, that read races a waiting thread's read of
    # the same exit code, and the loser is told 255 (about 1 child in 70 here).
    # The targets are builtins, so the children start in milliseconds and overlap.
    ends = [(signal.raise_signal, signal.SIGKILL), (sys.exit, 3)] * 300
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda end: _children.run(*end)[0], ends))
    assert codes == [-signal.SIGKILL, 3] * 300
