"""Property-based checks of the two promises bad values most often break (hypothesis).

* Two argument values that differ, by type or by value, never share a key (or one is refused).
* Whatever text a tool's error carries, a definite failure is recorded as failed.

Example counts are bounded so the suite stays fast; a failure prints the smallest example found.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import call4agents as c4a
from call4agents.model.canonical import canonical_args
from call4agents.model.errors import UnstableArguments

SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.binary(max_size=8),
    st.binary(max_size=8).map(bytearray),
    st.datetimes(timezones=st.just(dt.timezone.utc)),
    st.dates(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.dictionaries(st.text(max_size=4), inner, max_size=4),
        st.frozensets(st.integers(), max_size=4),
        st.sets(st.integers(), max_size=4),
    ),
    max_leaves=10,
)


def _same(a: Any, b: Any) -> bool:
    """Equal in value and in type at every level: what a tool could not tell apart."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float):
        return a == b and str(a) == str(b)  # 0.0 and -0.0 are two values
    return bool(a == b)


def _key(value: Any) -> str | None:
    try:
        return canonical_args("t", {"v": value}).key_material
    except UnstableArguments:
        return None


def _retype(value: Any, pick: int) -> Any:
    """A look-alike of ``value``: the same content in a type a tool could tell apart."""
    swaps: list[Any] = []
    if isinstance(value, frozenset):
        swaps.append(set(value))
    elif isinstance(value, set):
        swaps.append(frozenset(value))
    if isinstance(value, bytearray):
        swaps.append(bytes(value))
    elif isinstance(value, bytes):
        swaps += [bytearray(value), memoryview(value).tobytes().decode("latin-1")]
    if isinstance(value, tuple):
        swaps.append(list(value))
    elif isinstance(value, list):
        swaps += [tuple(value), [_retype(v, pick) for v in value]]
    if isinstance(value, dict):
        swaps.append({k: _retype(v, pick) for k, v in value.items()})
    if isinstance(value, bool):
        swaps.append(int(value))
    elif isinstance(value, int) and abs(value) < 2**53:
        swaps += [float(value), str(value)]
    if isinstance(value, dt.date):  # datetimes included
        swaps.append(value.isoformat())
    return swaps[pick % len(swaps)] if swaps else value


twins = st.tuples(values, st.integers(0, 7)).map(lambda vp: (vp[0], _retype(vp[0], vp[1])))


@SETTINGS
@given(st.one_of(st.tuples(values, values), twins))
def test_values_that_differ_never_share_a_key(pair: tuple[Any, Any]) -> None:
    a, b = pair
    ka, kb = _key(a), _key(b)
    if ka is None or kb is None:
        return  # refused: nothing is written, so nothing can be shared
    assert (ka == kb) == _same(a, b), (a, b, ka)


@pytest.fixture
def recording(tmp_path_factory: pytest.TempPathFactory) -> Iterator[c4a.Ledger]:
    ledger = c4a.Ledger(f"sqlite:///{Path(tmp_path_factory.mktemp('props')) / 'ledger.db'}")
    yield ledger
    ledger.close()


@SETTINGS
@given(
    st.text(
        alphabet=st.one_of(st.characters(), st.sampled_from(["\x00", "\udc80", "\ud800"])),
        max_size=3000,
    )
)
def test_any_error_text_leaves_a_definite_failure_recorded_as_failed(
    recording: c4a.Ledger, text: str
) -> None:
    @c4a.effect(ledger=recording, name="upload")
    def upload(n: int) -> None:
        raise ValueError(text)

    run_id = f"r-{abs(hash(text))}-{len(text)}"
    with c4a.run(run_id, ledger=recording), pytest.raises(ValueError):
        upload(1)
    [record] = recording.effects(run_id)
    assert record.state == "failed"
