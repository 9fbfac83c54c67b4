"""What makes a repeat served from memory cheap, held to what it replaces.

* Keys kept by value (``action._KEPT``) are the keys the full canonical path computes, for any plain
  arguments; values Python finds equal but JSON does not (``True`` and ``1``) stay two keys.
* The results kept in memory and the memo stay bounded (the oldest result goes first); the
  memo keeps nothing the tool's code or the ledger's secret takes part in, and a ledger's own
  ``max_args_bytes`` still refuses a call another ledger's memo knows.
* Results decode as ``json.loads`` decodes them, whatever the text.
* Repeats noted without a lock are all counted, from many threads at once, and a fork's child
  does not count its parent's.
"""

from __future__ import annotations

import importlib
import json
import os
import threading
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import call4agents as c4a
from call4agents.engine import action
from call4agents.model.canonical import canonical_args
from call4agents.model.codec import decode_result
from call4agents.model.errors import ConfigurationError
from call4agents.storage import tally
from tests.conftest import Target

effect_module = importlib.import_module("call4agents.engine.action")

plain = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12))
plain_args = st.dictionaries(st.text(min_size=1, max_size=6), plain, max_size=4)


def full_key(run_id: str, tool: str, arguments: dict[str, Any]) -> str:
    material = canonical_args(tool, arguments).key_material
    return str(effect_module.action_key(run_id, tool, None, material))


@settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(arguments=plain_args)
def test_a_kept_key_is_the_key_the_full_path_computes(
    sqlite_target: Target, arguments: dict[str, Any]
) -> None:
    ledger = sqlite_target.open()
    options = c4a.EffectOptions()
    first = effect_module.prepare("t", arguments, options, run_id="r", ledger=ledger)
    again = effect_module.prepare("t", dict(arguments), options, run_id="r", ledger=ledger)
    assert first.key == again.key == full_key("r", "t", arguments)
    assert first.args_display == again.args_display
    assert first.args_digest == again.args_digest


@pytest.mark.parametrize(
    ("one", "other"), [(True, 1), (False, 0), (1, True), (0, False), ("1", 1), (None, "null")]
)
def test_equal_in_python_but_not_in_json_are_two_actions(
    ledger: c4a.Ledger, one: object, other: object
) -> None:
    ran: list[object] = []

    @c4a.effect(name="pay")
    def pay(amount: object) -> str:
        ran.append(amount)
        return repr(amount)

    with c4a.run("memo-types"):
        assert pay(one) == repr(one)
        assert pay(other) == repr(other)  # not the first call's result
        assert pay(one) == repr(one)  # a repeat: from memory
    assert ran == [one, other]
    assert len(ledger.effects("memo-types")) == 2


def test_the_memo_is_bounded_and_keeps_short_plain_calls_only(
    sqlite_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(action, "_LIMIT", 8)
    monkeypatch.setattr(action, "_KEPT", {})
    ledger = sqlite_target.open()
    options = c4a.EffectOptions()
    for n in range(50):
        effect_module.prepare("t", {"n": n}, options, run_id="r", ledger=ledger)
        assert len(action._KEPT) <= 8
    action._KEPT.clear()
    effect_module.prepare("t", {"text": "x" * 2000}, options, run_id="r", ledger=ledger)
    effect_module.prepare("t", {"items": [1, 2]}, options, run_id="r", ledger=ledger)
    effect_module.prepare(
        "t", {"n": 1}, c4a.EffectOptions(ignore=("m",)), run_id="r", ledger=ledger
    )
    assert action._KEPT == {}


def test_the_results_kept_in_memory_are_bounded_and_drop_the_oldest_first(
    sqlite_target: Target, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger_module = importlib.import_module("call4agents.engine.ledger_core")
    monkeypatch.setattr(ledger_module, "_CACHE_LIMIT", 4)
    ledger = sqlite_target.open()
    ran: list[int] = []

    @c4a.effect(name="kept", ledger=ledger)
    def kept(n: int) -> int:
        ran.append(n)
        return n

    with c4a.run("kept-run", ledger=ledger):
        for n in range(6):
            kept(n)
        assert len(ledger.recent) == 4
        first_kept = [ledger.effects("kept-run")[n].key in ledger.recent for n in range(6)]
        assert first_kept == [False, False, True, True, True, True]
        assert [kept(n) for n in range(6)] == list(range(6))  # the dropped ones from the ledger
    assert ran == list(range(6))


def test_a_key_function_runs_on_every_call(ledger: c4a.Ledger) -> None:
    asked: list[int] = []

    def key(order: int) -> str:
        asked.append(order)
        return f"order-{order}"

    @c4a.effect(name="ship", key=key)
    def ship(order: int) -> int:
        return order

    with c4a.run("memo-key"):
        for _ in range(3):
            assert ship(7) == 7
    assert asked == [7, 7, 7]


def test_each_ledger_applies_its_own_size_limit(tmp_path: Any) -> None:
    roomy = c4a.Ledger(f"sqlite:///{tmp_path / 'roomy.db'}")
    tight = c4a.Ledger(f"sqlite:///{tmp_path / 'tight.db'}", max_args_bytes=100)
    try:
        options = c4a.EffectOptions()
        arguments = {"note": "y" * 500}
        for _ in range(2):  # the second is served by the memo
            effect_module.prepare("t", arguments, options, run_id="r", ledger=roomy)
        with pytest.raises(ConfigurationError, match="max_args_bytes"):
            effect_module.prepare("t", arguments, options, run_id="r", ledger=tight)
    finally:
        roomy.close()
        tight.close()


@pytest.mark.parametrize(
    "text",
    [
        '{"ok":true,"id":0}',
        "[1,2.5,null]",
        '"x"',
        " 1",
        "1 ",
        '{"a":1}\n',
        '{"b":{"c":[]},"a":"\\u00e9"}',
    ],
)
def test_results_decode_as_json_decodes_them(text: str) -> None:
    assert decode_result(text) == json.loads(text)


@pytest.mark.parametrize("text", ["", "{", "1 2", "\ufeff1", "[1,]", "NaN x"])
def test_text_that_is_not_one_json_value_is_refused_as_json_refuses_it(text: str) -> None:
    with pytest.raises(json.JSONDecodeError) as ours:
        decode_result(text)
    with pytest.raises(json.JSONDecodeError) as theirs:
        json.loads(text)
    assert str(ours.value) == str(theirs.value)


def test_repeats_from_many_threads_are_all_counted(
    ledger: c4a.Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tally, "_TAKE_AT", 97)  # add up often, while others keep appending
    counter = tally.DedupCounter(ledger.store)
    start = threading.Barrier(4)

    def add() -> None:
        start.wait()
        for _ in range(5_000):
            counter.add()

    workers = [threading.Thread(target=add) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    with counter._lock:
        counter.take()
        assert counter.pending == 20_000
        assert counter._noted == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_does_not_count_its_parents_repeats(ledger: c4a.Ledger) -> None:
    counter = tally.DedupCounter(ledger.store)
    for _ in range(3):
        counter.add()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report what it holds, and leave without running atexit
        counter.add()
        with counter._lock:
            counter.take()
            held = json.dumps(counter.pending)
        os.write(write, held.encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        held_in_child = json.loads(pipe.read())
    os.waitpid(pid, 0)
    assert held_in_child == 1
    with counter._lock:
        counter.take()
        assert counter.pending == 3
