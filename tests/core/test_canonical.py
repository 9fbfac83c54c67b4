"""Canonical arguments: distinct values give distinct text, unstable values are refused by path."""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import decimal
import enum
import hashlib
import hmac
import json
import math
import pathlib
import uuid
import zoneinfo
from collections import OrderedDict
from typing import Any, NamedTuple

import pytest
from pydantic import BaseModel, Field

from call4agents.model.canonical import (
    CanonicalArgs,
    canonical_args,
    canonical_json,
    parse_paths,
    scrub,
)
from call4agents.model.errors import ConfigurationError, UnstableArguments

UTC = dt.timezone.utc


def digest(data: bytes) -> str:
    return hmac.new(b"ledger-secret", data, hashlib.sha256).hexdigest()


def cj(value: Any) -> str:
    return canonical_json("tool", value)


def refusal(arguments: dict[str, Any], **options: Any) -> UnstableArguments:
    with pytest.raises(UnstableArguments) as info:
        canonical_args("send_email", arguments, **options)
    return info.value


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    LOW = 1


@dataclasses.dataclass
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Other:
    x: int
    y: int


@dataclasses.dataclass
class Card:
    number: str
    holder: str


@dataclasses.dataclass
class Node:
    name: str
    child: Any = None


class Plain:
    pass


class Printed:
    def __repr__(self) -> str:
        return "Printed()"


class Tag(str):
    pass


# --- Plain values and exact encodings -----------------------------------------------------------


def test_plain_arguments_are_compact_sorted_json() -> None:
    canon = canonical_args("send_email", {"to": "bob@example.com", "body": "hi"})
    assert canon == CanonicalArgs(
        '{"body":"hi","to":"bob@example.com"}', '{"body":"hi","to":"bob@example.com"}', ()
    )


def test_scalars_are_kept_as_is() -> None:
    text = canonical_args("t", {"n": None, "b": True, "i": -3, "f": 1.5, "s": "é✓"}).key_material
    assert text == '{"b":true,"f":1.5,"i":-3,"n":null,"s":"é✓"}'


def test_dict_insertion_order_does_not_change_the_key() -> None:
    one = canonical_args("t", {"a": {"x": 1, "y": [1, {"p": 1, "q": 2}]}, "b": 2})
    two = canonical_args("t", {"b": 2, "a": {"y": [1, {"q": 2, "p": 1}], "x": 1}})
    assert one.key_material == two.key_material


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"$a": 1, "b": 2}, '{"$$a":1,"b":2}'),
        ({"$$a": 1}, '{"$$$a":1}'),
        ({2: "b", 1: "a"}, '{"$map":[[1,"a"],[2,"b"]]}'),
        ({2: "b", "a": 1}, '{"$map":[["a",1],[2,"b"]]}'),
        ((1, "a"), '{"$tuple":[1,"a"]}'),
        ({3, 1, 2}, '{"$set":[1,2,3]}'),
        (frozenset({"b", "a"}), '{"$frozenset":["a","b"]}'),
        (b"\x00\xff", '{"$bytes":"AP8="}'),
        (bytearray(b"\x00\xff"), '{"$bytearray":"AP8="}'),
        (memoryview(b"\x00\xff"), '{"$memoryview":"AP8="}'),
        (dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC), '{"$datetime":"2024-05-01T12:00:00+00:00"}'),
        (
            dt.datetime(2024, 5, 1, 12, 0, tzinfo=dt.timezone(dt.timedelta(hours=2))),
            '{"$datetime":"2024-05-01T12:00:00+02:00"}',
        ),
        (dt.date(2024, 5, 1), '{"$date":"2024-05-01"}'),
        (dt.time(9, 30), '{"$time":"09:30:00"}'),
        (dt.timedelta(days=1, seconds=2, microseconds=3), '{"$timedelta":[1,2,3]}'),
        (decimal.Decimal("1.10"), '{"$decimal":"1.10"}'),
        (uuid.UUID(int=1), '{"$uuid":"00000000-0000-0000-0000-000000000001"}'),
        (pathlib.PurePosixPath("/tmp/x"), '{"$path":"/tmp/x"}'),
        (Color.RED, '{"$enum":["' + __name__ + ':Color","red"]}'),
        (Level.LOW, '{"$enum":["' + __name__ + ':Level",1]}'),
        (Point(1, 2), '{"$dataclass":["' + __name__ + ':Point",{"x":1,"y":2}]}'),
        (Tag("x"), '"x"'),
        (OrderedDict([("b", 1), ("a", 2)]), '{"a":2,"b":1}'),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
    ],
)
def test_encodings(value: Any, expected: str) -> None:
    assert cj(value) == expected


def test_pydantic_model_is_tagged_with_its_class() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        sku: str
        at: dt.date

    text = cj(Order(sku="a", at=dt.date(2024, 1, 2)))
    assert text == (
        '{"$model":["' + __name__ + ':test_pydantic_model_is_tagged_with_its_class.<locals>.Order",'
        '{"at":{"$date":"2024-01-02"},"sku":"a"}]}'
    )


# --- Values a tool could treat differently never share a text ----------------------------------


@pytest.mark.parametrize(
    ("one", "two"),
    [
        ({1: "x"}, {"1": "x"}),
        (dt.date(2024, 1, 1), "2024-01-01"),
        (dt.date(2024, 1, 1), {"$date": "2024-01-01"}),
        (b"ab", {"$bytes": base64.b64encode(b"ab").decode()}),
        ((1, 2), [1, 2]),
        ((1, 2), {"$tuple": [1, 2]}),
        (1, 1.0),
        (1, True),
        (1.0, True),
        (0, False),
        (0.0, -0.0),
        ({1, 2}, [1, 2]),
        (Color.RED, "red"),
        (Level.LOW, 1),
        (decimal.Decimal("1.0"), decimal.Decimal("1.00")),
        (decimal.Decimal("1.5"), 1.5),
        (uuid.UUID(int=1), str(uuid.UUID(int=1))),
        (pathlib.PurePosixPath("a"), "a"),
        (Point(1, 2), {"x": 1, "y": 2}),
        (Point(1, 2), Other(1, 2)),
        (None, "null"),
        ("1", 1),
        (
            dt.datetime(2024, 1, 1, 12, tzinfo=UTC),
            dt.datetime(2024, 1, 1, 14, tzinfo=dt.timezone(dt.timedelta(hours=2))),
        ),
        (dt.timedelta(seconds=1), 1),
        ({"$tuple": [1]}, (1,)),
        ({"a": None}, {}),
    ],
)
def test_distinct_values_give_distinct_texts(one: Any, two: Any) -> None:
    assert cj(one) != cj(two)


def test_sets_and_maps_do_not_depend_on_order() -> None:
    assert cj({"b", "a", "c"}) == cj({"c", "a", "b"})
    assert cj({2: "x", 1: "y"}) == cj({1: "y", 2: "x"})
    assert cj({(1, 2), (0, 5)}) == cj({(0, 5), (1, 2)})


# --- Refusals, with the path of the offending field ---------------------------------------------


def test_nan_is_refused_with_its_path() -> None:
    err = refusal({"body": {"items": [1.0, 2.0, math.nan]}})
    assert err.tool == "send_email"
    assert err.path == "body.items[2]"
    assert err.reason == "is NaN, which has no stable form"
    assert str(err).startswith(
        "send_email: argument 'body.items[2]' is NaN, which has no stable form. Nothing was"
    )
    assert "ignore=('body',)" in str(err)


@pytest.mark.parametrize("value", [math.inf, -math.inf])
def test_infinity_is_refused(value: float) -> None:
    err = refusal({"amount": value})
    assert (err.path, err.reason) == ("amount", "is infinite, which has no stable form")


def test_naive_datetime_is_refused() -> None:
    err = refusal({"when": [dt.datetime(2024, 1, 1)]})  # noqa: DTZ001 - the point of the test
    assert err.path == "when[0]"
    assert err.reason == "is a naive datetime; attach a timezone (datetime.now(timezone.utc))"


def test_object_printed_by_address_is_refused() -> None:
    err = refusal({"opts": {"headers": {"x-trace": Plain()}}})
    assert err.path == "opts.headers['x-trace']"
    assert err.reason == "is a Plain object whose only printed form is its memory address"
    err = refusal({"obj": object()})
    assert err.reason == "is an object object whose only printed form is its memory address"


def test_other_unknown_types_are_refused() -> None:
    err = refusal({"p": Printed()})
    assert err.reason == f"is a {__name__}.Printed, which has no stable canonical form"
    err = refusal({"z": {"c": 1j}})
    assert (err.path, err.reason) == ("z.c", "is a complex, which has no stable canonical form")


def test_path_names_non_str_keys_and_tuple_indexes() -> None:
    err = refusal({"m": {1: "a", 2: (0, math.nan)}})
    assert err.path == "m[2][1]"


def test_bad_dict_key_is_refused() -> None:
    err = refusal({"m": {Plain(): 1}})
    assert err.path.startswith(f"m[<{__name__}.Plain object at ")
    assert err.reason.endswith("whose only printed form is its memory address")


def test_dataclass_and_enum_fields_are_checked() -> None:
    err = refusal({"p": Point(1, math.nan)})  # type: ignore[arg-type]
    assert err.path == "p.y"


def test_list_cycle_is_refused() -> None:
    loop: list[Any] = [1]
    loop.append(loop)
    err = refusal({"data": {"loop": loop}})
    assert (err.path, err.reason) == ("data.loop[1]", "contains a reference cycle")


def test_dict_and_dataclass_cycles_are_refused() -> None:
    d: dict[str, Any] = {}
    d["self"] = d
    assert refusal({"d": d}).path == "d.self"
    node = Node("a")
    node.child = Node("b", node)
    err = refusal({"n": node})
    assert (err.path, err.reason) == ("n.child.child", "contains a reference cycle")


def nested(levels: int) -> Any:
    value: Any = "leaf"
    for _ in range(levels):
        value = [value]
    return value


def test_depth_limit() -> None:
    canonical_args("t", {"deep": nested(64)})
    err = refusal({"deep": nested(65)})
    assert err.reason == "is nested deeper than 64 levels"
    assert err.path == "deep" + "[0]" * 64


def test_shared_values_are_not_cycles() -> None:
    shared = [1, 2]
    text = canonical_args("t", {"a": [shared, shared], "b": shared}).key_material
    assert text == '{"a":[[1,2],[1,2]],"b":[1,2]}'


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (decimal.Decimal("NaN"), "is a Decimal NaN, which has no stable form"),
        (decimal.Decimal("sNaN"), "is a Decimal NaN, which has no stable form"),
        (decimal.Decimal("-Infinity"), "is an infinite Decimal, which has no stable form"),
    ],
)
def test_decimal_nan_and_infinity_are_refused(value: decimal.Decimal, reason: str) -> None:
    err = refusal({"price": {"total": value}})
    assert (err.path, err.reason) == ("price.total", reason)


def test_nan_inside_set_and_enum_value_are_refused() -> None:
    assert refusal({"s": {1, math.nan}}).reason == "is NaN, which has no stable form"


def test_lone_surrogate_is_refused() -> None:
    err = refusal({"a": "ok", "b": {"c": "x\ud800"}})
    assert err.path == "b.c"
    assert err.reason == "contains a lone surrogate character, which is not valid Unicode text"


def test_int_too_long_for_decimal_is_refused() -> None:
    err = refusal({"n": [10**5000]})
    assert err.path == "n[0]"
    assert err.reason.startswith("is an integer too long to write in decimal")


def test_canonical_json_names_the_value_key() -> None:
    assert cj({"b": (1,), "a": 2}) == '{"a":2,"b":{"$tuple":[1]}}'
    with pytest.raises(UnstableArguments) as info:
        canonical_json("send_email", {"a": math.nan})
    assert info.value.path == "key.a"
    loop: list[Any] = [1]
    loop.append(loop)
    with pytest.raises(UnstableArguments) as info:
        canonical_json("send_email", loop, root="key()")
    assert (info.value.path, info.value.reason) == ("key()[1]", "contains a reference cycle")


# --- ignore= ------------------------------------------------------------------------------------


def test_ignore_drops_fields_even_unstable_ones() -> None:
    now = dt.datetime.now()  # noqa: DTZ005 - naive on purpose: ignored, so fine
    one = canonical_args("t", {"to": "bob", "timestamp": now}, ignore=("timestamp",))
    two = canonical_args("t", {"to": "bob", "timestamp": object()}, ignore=["timestamp"])
    assert one.key_material == two.key_material == '{"to":"bob"}'


def test_ignore_nested_and_list_paths() -> None:
    args = {
        "meta": {"request_id": "r-1", "user": "u"},
        "items": [{"id": 1, "n": "a"}, {"id": 2, "n": "b"}],
        "pairs": ({"id": 3, "n": "c"},),
    }
    canon = canonical_args("t", args, ignore=("meta.request_id", "items[].id", "pairs.*.id"))
    assert canon.key_material == (
        '{"items":[{"n":"a"},{"n":"b"}],"meta":{"user":"u"},"pairs":{"$tuple":[{"n":"c"}]}}'
    )


def test_ignore_path_missing_in_a_call_is_skipped() -> None:
    args = {"meta": "not a dict", "items": [1, {"other": 2}], "x": None}
    canon = canonical_args("t", args, ignore=("meta.request_id", "items[].id", "absent", "x.y"))
    assert canon.key_material == '{"items":[1,{"other":2}],"meta":"not a dict","x":null}'


def test_ignore_dataclass_and_model_fields() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        sku: str
        placed_at: dt.datetime

    args = {"order": Order(sku="a", placed_at=dt.datetime(2024, 1, 1)), "p": Point(1, 2)}  # noqa: DTZ001
    canon = canonical_args("t", args, ignore=("order.placed_at", "p.y"))
    assert '"placed_at"' not in canon.key_material
    assert '"$dataclass":["' + __name__ + ':Point",{"x":1}]' in canon.key_material


def test_ignore_in_dict_with_mixed_keys() -> None:
    canon = canonical_args("t", {"m": {1: "a", "ts": 5}}, ignore=("m.ts",))
    assert canon.key_material == '{"m":{"$map":[[1,"a"]]}}'


# --- redact= ------------------------------------------------------------------------------------

SECRET = "4111-1111-1111-1111"


def test_redact_keys_by_digest_and_masks_display() -> None:
    canon = canonical_args(
        "pay", {"card": SECRET, "amount": 5}, redact=("card",), redact_digest=digest
    )
    assert canon.key_material == (
        '{"amount":5,"card":{"$redacted":"' + digest(json.dumps(SECRET).encode()) + '"}}'
    )
    assert canon.display == '{"amount":5,"card":"***"}'
    assert canon.secrets == (SECRET,)
    assert SECRET not in canon.key_material
    assert SECRET not in canon.display


def test_different_secrets_give_different_keys() -> None:
    def key(card: str) -> str:
        args = {"card": card}
        return canonical_args("pay", args, redact=("card",), redact_digest=digest).key_material

    assert key(SECRET) == key(SECRET)
    assert key(SECRET) != key("4000-0000-0000-0002")


def test_digest_gets_the_canonical_json_of_the_value() -> None:
    seen: list[bytes] = []

    def record(data: bytes) -> str:
        seen.append(data)
        return "d"

    value = {"b": (1,), "a": "é"}
    canonical_args("t", {"v": value}, redact=("v",), redact_digest=record)
    assert seen == [cj(value).encode("utf-8")]


def test_redact_nested_list_model_and_dataclass_paths() -> None:
    pydantic = pytest.importorskip("pydantic")

    class Order(pydantic.BaseModel):  # type: ignore[name-defined,misc]
        sku: str
        card_number: str

    args = {
        "order": Order(sku="a", card_number=SECRET),
        "cards": [Card(SECRET + "-1", "Ann"), {"number": SECRET + "-2", "holder": "Bo"}],
        "meta": {"auth": {"token": "tok-123456"}},
    }
    canon = canonical_args(
        "pay",
        args,
        redact=("order.card_number", "cards[].number", "meta.auth.token"),
        redact_digest=digest,
    )
    for text in (canon.key_material, canon.display):
        assert SECRET not in text
        assert "tok-123456" not in text
    assert canon.display.count('"***"') == 4
    assert canon.key_material.count('"$redacted"') == 4
    assert '"holder":"Ann"' in canon.display
    assert set(canon.secrets) == {SECRET, SECRET + "-1", SECRET + "-2", "tok-123456"}


def test_redacted_container_lists_its_scalars_as_secrets() -> None:
    canon = canonical_args(
        "t", {"auth": {"user": "alice", "pin": "9876"}}, redact=("auth",), redact_digest=digest
    )
    assert canon.display == '{"auth":"***"}'
    assert {"alice", "9876"} <= set(canon.secrets)


def test_short_secrets_are_masked_but_not_listed() -> None:
    canon = canonical_args("t", {"pin": "12"}, redact=("pin",), redact_digest=digest)
    assert canon.display == '{"pin":"***"}'
    assert canon.secrets == ()


def test_ignore_inside_a_redacted_value_changes_nothing() -> None:
    def key(ts: int) -> str:
        args = {"auth": {"token": "tok-123456", "ts": ts}}
        return canonical_args(
            "t", args, ignore=("auth.ts",), redact=("auth",), redact_digest=digest
        ).key_material

    assert key(1) == key(2)


def test_redacted_value_never_appears_in_error_messages() -> None:
    err = refusal({"auth": {SECRET: math.nan}}, redact=("auth",), redact_digest=digest)
    assert err.path == "auth"
    assert err.reason == "is NaN, which has no stable form"
    assert SECRET not in str(err)
    err = refusal({"auth": {1: {SECRET: object()}}}, redact=("auth",), redact_digest=digest)
    assert err.path == "auth"
    assert SECRET not in str(err)
    err = refusal({"auth": "x\ud800" + SECRET}, redact=("auth",), redact_digest=digest)
    assert err.path == "auth"
    assert SECRET not in str(err)


def test_redact_without_a_digest_needs_a_ledger_secret() -> None:
    with pytest.raises(ConfigurationError, match="redact= needs"):
        canonical_args("t", {"card": SECRET}, redact=("card",))


def test_path_in_both_ignore_and_redact_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="both ignore= and redact="):
        canonical_args("t", {"a": 1}, ignore=("a",), redact=("a",), redact_digest=digest)


# --- parse_paths and scrub ----------------------------------------------------------------------


def test_parse_paths() -> None:
    assert parse_paths(["a", "a.b", "items[].id", "items.*.id", "grid[][]"]) == (
        ("a",),
        ("a", "b"),
        ("items", "[]", "id"),
        ("items", "[]", "id"),
        ("grid", "[]", "[]"),
    )
    assert parse_paths(()) == ()


@pytest.mark.parametrize(
    ("path", "why"),
    [
        ("", "it is empty"),
        ("a..b", "empty name"),
        (".a", "empty name"),
        ("a.", "empty name"),
        ("[].a", "empty name"),
        ("*.a", "must start with an argument name"),
        ("a[0]", "is not a name"),
        ("a[]b", "is not a name"),
        ("a. b", "spaces"),
        (3, "not a string"),
    ],
)
def test_parse_paths_rejects_bad_syntax(path: Any, why: str) -> None:
    with pytest.raises(ConfigurationError, match="bad field path") as info:
        parse_paths([path])
    assert why in str(info.value)


def test_a_lone_string_is_not_a_list_of_paths() -> None:
    with pytest.raises(ConfigurationError, match=r"write \('timestamp',\)"):
        parse_paths("timestamp")
    with pytest.raises(ConfigurationError):
        canonical_args("t", {"timestamp": 1}, ignore="timestamp")


def test_scrub() -> None:
    assert scrub("card 4111-1111 declined", ["4111-1111"]) == "card *** declined"
    assert scrub("key abcdef and abc", ["abc", "abcdef"]) == "key *** and ***"
    assert scrub("nothing here", ["", "secret"]) == "nothing here"
    # Error texts often quote values with repr() or json, which escape some characters.
    assert scrub("bad value 'pass\\nword'", ["pass\nword"]) == "bad value '***'"
    assert scrub('{"pw": "p\\"w0rd"}', ['p"w0rd']) == '{"pw": "***"}'


class _Point(NamedTuple):
    x: int
    y: int


class _Login(BaseModel):
    user: str
    password: str = Field(exclude=True)


class _Order(BaseModel):
    login: _Login
    amount: int


_PARIS = dt.datetime(2024, 5, 1, 12, 0, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))


@pytest.mark.parametrize(
    ("first", "second"),
    [
        (_Login(user="a", password="p1"), _Login(user="a", password="p2")),
        (
            _Order(login=_Login(user="a", password="p1"), amount=5),
            _Order(login=_Login(user="a", password="p2"), amount=5),
        ),
        (_PARIS, _PARIS.astimezone(dt.timezone(dt.timedelta(hours=2)))),
        (_Point(1, 2), (1, 2)),
        ({1, 2}, frozenset({1, 2})),
        (b"ab", bytearray(b"ab")),
        (b"ab", memoryview(b"ab")),
    ],
    ids=["excluded-field", "nested-excluded-field", "zone-vs-offset", "namedtuple", "frozenset",
         "bytearray", "memoryview"],
)  # fmt: skip
def test_values_a_tool_can_tell_apart_get_different_keys(first: Any, second: Any) -> None:
    one = canonical_args("t", {"v": first}).key_material
    two = canonical_args("t", {"v": second}).key_material
    assert one != two


class _Plain(BaseModel):
    user: str
    login: _Point


def test_a_model_without_excluded_fields_keys_as_before() -> None:
    # Pinned: a change would make old runs with such arguments repeat their actions.
    text = canonical_args("t", {"v": _Plain(user="a", login=_Point(1, 2))}).key_material
    assert text == (
        '{"v":{"$model":["tests.core.test_canonical:_Plain",'
        '{"login":{"$tuple":[1,2]},"user":"a"}]}}'
    )


def test_text_is_keyed_as_given_nfc_and_nfd_apart() -> None:
    nfc, nfd = "caf\u00e9", "cafe\u0301"
    assert (
        canonical_args("t", {"v": nfc}).key_material != canonical_args("t", {"v": nfd}).key_material
    )


def test_keys_and_display_of_varied_arguments_are_pinned() -> None:
    # Pinned: any change here changes the keys of stored actions, so old runs would repeat them.
    args = {
        "when": _PARIS,
        "pos": _Point(1, 2),
        "tags": {("b", 1), ("a", 2)},
        "m": {2: "b", "a": 1, "ts": 5},
        "login": _Login(user="ann", password="p"),
        "cards": [Card("4111-1111", "Ann")],
        "blob": memoryview(b"\x00\xff"),
        "level": Level.LOW,
        "$x": [decimal.Decimal("1.10"), dt.timedelta(seconds=3), uuid.UUID(int=1)],
    }
    canon = canonical_args(
        "t", args, ignore=("m.ts",), redact=("cards[].number",), redact_digest=digest
    )
    card = "38ce10fe75788e78c569d7f1d8dcdf073fe4fc6728bccfc1bf94c4596d91ec2a"  # its HMAC
    shared = (
        '{"$$x":[{"$decimal":"1.10"},{"$timedelta":[0,3,0]},'
        '{"$uuid":"00000000-0000-0000-0000-000000000001"}],"blob":{"$memoryview":"AP8="},'
        '"cards":[{"$dataclass":["tests.core.test_canonical:Card",{"holder":"Ann","number":CARD}]}],'
        '"level":{"$enum":["tests.core.test_canonical:Level",1]},'
        '"login":{"$model":["tests.core.test_canonical:_Login",{"user":"ann"},{"password":"p"}]},'
        '"m":{"$map":[["a",1],[2,"b"]]},'
        '"pos":{"$namedtuple":["tests.core.test_canonical:_Point",[1,2]]},'
        '"tags":{"$set":[{"$tuple":["a",2]},{"$tuple":["b",1]}]},'
        '"when":{"$datetime":["2024-05-01T12:00:00+02:00","Europe/Paris"]}}'
    )
    assert canon.key_material == shared.replace("CARD", '{"$redacted":"' + card + '"}')
    assert canon.display == shared.replace("CARD", '"***"')
