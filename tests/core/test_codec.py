"""Result codec: a stored result comes back equal and of the same types."""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import enum
import json
import math
import pathlib
import socket
import uuid
from typing import Any, NamedTuple

import pytest

from call4agents.model.codec import MAX_DEPTH, ResultEncodingError, decode_result, encode_result

try:
    import pydantic
except ImportError:  # pragma: no cover - pydantic is a dev dependency
    pydantic = None  # type: ignore[assignment]

LIMIT = 1_048_576
UTC = dt.timezone.utc


def roundtrip(value: Any) -> Any:
    return decode_result(encode_result(value, max_bytes=LIMIT))


def same(a: Any, b: Any) -> bool:
    """Equal, with the same types all the way down (and NaN equal to NaN)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float) and math.isnan(a):
        return math.isnan(b)
    if isinstance(a, dict):
        return list(a) == list(b) and all(
            same(ka, kb) and same(a[ka], b[kb]) for ka, kb in zip(a, b, strict=True)
        )
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if dataclasses.is_dataclass(a):
        return all(same(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))
    if pydantic is not None and isinstance(a, pydantic.BaseModel):
        return all(same(getattr(a, n), getattr(b, n)) for n in type(a).model_fields)
    return bool(a == b)


class Color(enum.Enum):
    RED = "red"
    PAIR = (1, 2)


class Level(enum.IntEnum):
    LOW = 1


class Perm(enum.Flag):
    R = 1
    W = 2


class Pos(NamedTuple):
    x: int
    y: int


@dataclasses.dataclass
class Point:
    x: int
    y: float


@dataclasses.dataclass(frozen=True)
class Shape:
    name: str
    points: tuple[Point, ...]
    tags: frozenset[str]
    made: dt.datetime
    area: float = dataclasses.field(init=False, default=0.0)


if pydantic is not None:

    class Item(pydantic.BaseModel):
        sku: str
        qty: int = 1

    class Customer(pydantic.BaseModel):
        name: str
        since: dt.date

    class Order(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="allow")

        id: uuid.UUID
        customer: Customer
        placed_at: dt.datetime
        items: list[Item]
        total: decimal.Decimal
        note: str | None = pydantic.Field(default=None, alias="orderNote")


# --- Plain JSON stays plain --------------------------------------------------------------------


def test_plain_json_results_are_stored_as_plain_json() -> None:
    value = {"id": "r-1", "n": 3, "ok": True, "x": None, "f": 1.5, "list": [1, "a", {"b": []}]}
    text = encode_result(value, max_bytes=LIMIT)
    assert text == json.dumps(value, separators=(",", ":"))
    assert same(decode_result(text), value)


@pytest.mark.parametrize("value", ["text é", 5, 1.0, True, None, [], {}, [1, [2, [3]]]])
def test_plain_scalars_and_containers(value: Any) -> None:
    text = encode_result(value, max_bytes=LIMIT)
    assert not text.startswith('{"$')
    assert same(decode_result(text), value)


def test_non_ascii_text_is_stored_unescaped() -> None:
    assert encode_result({"msg": "héllo ✓"}, max_bytes=LIMIT) == '{"msg":"héllo ✓"}'


# --- Round trips keep the types ----------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        (1, "a"),
        [(1, 2), [3, (4,)]],
        {1: "x", "1": "y", (2, 3): [4]},
        {"$x": 1, "y": 2},
        {"$x": 1},
        {"$$x": (1,)},
        {"$tagged": 1},
        {"$tuple": [1, 2]},
        {1, 2, 3},
        frozenset({"a", (1, 2)}),
        {frozenset({1}): {2}},
        b"\x00\xffbytes",
        bytearray(b"\x01\x02"),
        dt.datetime(2024, 5, 1, 12, 30, 1, 5, tzinfo=UTC),
        dt.datetime(2024, 5, 1, 12, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5))),
        dt.datetime(2024, 5, 1, 12, 30),  # noqa: DTZ001 - results may be naive
        dt.date(2024, 5, 1),
        dt.time(9, 30, 0, 7),
        dt.time(9, 30, tzinfo=UTC),
        dt.timedelta(days=-1, seconds=5, microseconds=6),
        decimal.Decimal("1.10"),
        decimal.Decimal("-Infinity"),
        uuid.UUID(int=7),
        pathlib.PurePosixPath("/tmp/a"),
        pathlib.PureWindowsPath("C:/a"),
        pathlib.Path("/tmp/b"),
        Color.RED,
        Color.PAIR,
        Level.LOW,
        Perm.R | Perm.W,
        Pos(1, 2),
        Point(1, 2.5),
        [Point(1, 2.0), {"p": Point(3, 4.0)}],
        math.inf,
        -math.inf,
        [1.0, -0.0, math.inf],
        "lone \ud800 surrogate",
        {"k": "✓ and \udfff"},
    ],
)
def test_roundtrip_keeps_types(value: Any) -> None:
    assert same(roundtrip(value), value)


def test_ints_too_long_for_decimal_roundtrip() -> None:
    for value in (10**5000, -(10**5000), [2**20000]):
        assert same(roundtrip(value), value)


def test_nan_roundtrips() -> None:
    out = roundtrip({"x": math.nan})
    assert math.isnan(out["x"])
    assert type(out["x"]) is float


def test_decimal_nan_roundtrips() -> None:
    out = roundtrip(decimal.Decimal("NaN"))
    assert type(out) is decimal.Decimal
    assert out.is_nan()


def test_dict_order_is_kept() -> None:
    value = {"b": 1, "a": 2, 3: "c"}
    assert list(roundtrip(value)) == ["b", "a", 3]
    assert list(roundtrip({"b": 1, "a": (2,)})) == ["b", "a"]


def test_frozen_dataclass_with_nested_values_and_non_init_field() -> None:
    shape = Shape("tri", (Point(0, 0.0), Point(1, 1.0)), frozenset({"a"}), dt.datetime.now(UTC))
    object.__setattr__(shape, "area", 0.5)
    out = roundtrip(shape)
    assert type(out) is Shape
    assert same(out, shape)
    assert out.area == 0.5


def test_zoned_datetime_keeps_its_zone() -> None:
    zoneinfo = pytest.importorskip("zoneinfo")
    try:
        paris = zoneinfo.ZoneInfo("Europe/Paris")
    except zoneinfo.ZoneInfoNotFoundError:
        pytest.skip("no time zone data here")
    value = dt.datetime(2024, 7, 1, 12, tzinfo=paris)
    out = roundtrip(value)
    assert out == value
    assert out.tzinfo == paris
    assert out.utcoffset() == dt.timedelta(hours=2)


def test_str_and_dict_subclasses_come_back_as_their_base() -> None:
    class Tag(str):
        pass

    out = roundtrip({"t": Tag("x")})
    assert type(out["t"]) is str
    assert out == {"t": "x"}


@pytest.mark.skipif(pydantic is None, reason="needs pydantic")
def test_pydantic_model_with_nested_model_datetime_and_list_of_models() -> None:
    order = Order(
        id=uuid.UUID(int=9),
        customer=Customer(name="Ann", since=dt.date(2020, 1, 1)),
        placed_at=dt.datetime(2024, 1, 2, 3, 4, tzinfo=UTC),
        items=[Item(sku="a", qty=2), Item(sku="b")],
        total=decimal.Decimal("9.90"),
        orderNote="leave at door",
        gift=(1, 2),
    )
    out = roundtrip(order)
    assert type(out) is Order
    assert out == order
    assert type(out.customer) is Customer
    assert type(out.items[1]) is Item
    assert out.placed_at == order.placed_at
    assert out.note == "leave at door"
    assert out.model_extra == {"gift": (1, 2)}
    assert out.model_fields_set == order.model_fields_set
    assert out.items[1].model_fields_set == {"sku"}
    assert out.model_dump() == order.model_dump()


@pytest.mark.skipif(pydantic is None, reason="needs pydantic")
def test_models_inside_containers() -> None:
    value = {"items": (Item(sku="a"),), "by_sku": {"b": Item(sku="b", qty=3)}}
    assert same(roundtrip(value), value)


# --- Classes that moved or vanished --------------------------------------------------------------


def tagged(tree: Any) -> str:
    return json.dumps({"$tagged": tree}, separators=(",", ":"))


def test_vanished_classes_give_plain_data_back() -> None:
    assert decode_result(tagged({"$dataclass": ["gone_mod:Thing", {"a": 1}]})) == {"a": 1}
    assert decode_result(tagged({"$dataclass": [f"{__name__}:Gone", {"a": 1}]})) == {"a": 1}
    assert decode_result(tagged({"$model": ["gone_mod:M", {"a": {"$tuple": [1]}}, ["a"]]})) == {
        "a": (1,)
    }
    assert decode_result(tagged({"$enum": ["gone_mod:E", "red"]})) == "red"
    assert decode_result(tagged({"$enum": [f"{__name__}:Color", "green"]})) == "green"
    assert decode_result(tagged({"$namedtuple": ["gone_mod:P", [1, 2]]})) == (1, 2)
    assert decode_result(tagged({"$path": ["gone_mod:P", "/x"]})) == pathlib.PurePath("/x")


def test_local_classes_give_plain_data_back() -> None:
    @dataclasses.dataclass
    class Local:
        a: int

    assert roundtrip(Local(1)) == {"a": 1}


def test_changed_dataclass_gives_plain_data_back() -> None:
    text = tagged({"$dataclass": [f"{__name__}:Point", {"x": 1, "renamed": 2}]})
    assert decode_result(text) == {"x": 1, "renamed": 2}


def test_only_classes_of_the_right_kind_are_ever_called() -> None:
    # Stored text naming a function must never get it called.
    text = tagged({"$dataclass": ["os:system", {"command": "echo hacked"}]})
    assert decode_result(text) == {"command": "echo hacked"}
    assert decode_result(tagged({"$model": ["builtins:dict", {"a": 1}, []]})) == {"a": 1}
    assert decode_result(tagged({"$enum": ["builtins:int", "5"]})) == "5"


# --- Refusals ----------------------------------------------------------------------------------


def test_unstorable_object_is_refused_with_its_path() -> None:
    with socket.socket() as sock:
        with pytest.raises(ResultEncodingError) as info:
            encode_result({"conn": [sock]}, max_bytes=LIMIT)
        assert info.value.why == (
            "result contains a socket object at result.conn[0], which cannot be stored"
        )
        with pytest.raises(ResultEncodingError) as info:
            encode_result(sock, max_bytes=LIMIT)
        assert str(info.value) == "result is a socket object, which cannot be stored"


def test_result_encoding_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="cannot be stored"):
        encode_result(object(), max_bytes=LIMIT)


def test_cycle_is_refused() -> None:
    loop: dict[str, Any] = {"a": [1]}
    loop["a"].append(loop)
    with pytest.raises(ResultEncodingError) as info:
        encode_result(loop, max_bytes=LIMIT)
    assert info.value.why == "result contains a reference cycle at result.a[1]"


def test_depth_limit() -> None:
    value: Any = 1
    for _ in range(MAX_DEPTH):
        value = [value]
    assert roundtrip(value) == value
    with pytest.raises(ResultEncodingError) as info:
        encode_result([value], max_bytes=LIMIT)
    assert info.value.why == f"result is nested deeper than {MAX_DEPTH} levels"


def test_size_limit() -> None:
    value = {"blob": "x" * 2000}
    size = len(encode_result(value, max_bytes=LIMIT))
    assert encode_result(value, max_bytes=size)
    with pytest.raises(ResultEncodingError) as info:
        encode_result(value, max_bytes=size - 1)
    assert info.value.why == f"result is {size:,} bytes, over the {size - 1:,}-byte limit"
    assert info.value.why == "result is 2,011 bytes, over the 2,010-byte limit"


def test_size_limit_counts_utf8_bytes() -> None:
    value = "é" * 100  # 100 characters, 200 bytes, plus 2 quotes
    assert encode_result(value, max_bytes=202)
    with pytest.raises(ResultEncodingError, match="202 bytes, over the 201-byte limit"):
        encode_result(value, max_bytes=201)


def test_size_limit_applies_to_tagged_results() -> None:
    with pytest.raises(ResultEncodingError, match="over the 10-byte limit"):
        encode_result((1, 2, 3), max_bytes=10)


def test_tagged_encodings_are_pinned() -> None:
    # Pinned: stored results are read back by later versions, so a tag never changes its form.
    zoneinfo = pytest.importorskip("zoneinfo")
    paris = dt.datetime(2024, 5, 1, 12, tzinfo=zoneinfo.ZoneInfo("Europe/Paris"))
    value = {
        "b": (1, Pos(1, 2)),
        "a": {2: b"\x00", "$k": frozenset({3})},
        "at": paris,
        "naive": dt.datetime(2024, 1, 2, 3),  # noqa: DTZ001 - results may be naive
        "big": 2**2001,
        "nan": math.nan,
        "p": pathlib.PurePosixPath("/x"),
        "mv": memoryview(b"ab"),
        "level": Level.LOW,
        "point": Point(1, 2.5),
        "d": [decimal.Decimal("1.10"), dt.timedelta(seconds=3), uuid.UUID(int=1), {"$x": None}],
    }
    assert encode_result(value, max_bytes=LIMIT) == (
        '{"$tagged":{"b":{"$tuple":[1,{"$namedtuple":["tests.core.test_codec:Pos",[1,2]]}]},'
        '"a":{"$map":[[2,{"$bytes":"AA=="}],["$k",{"$frozenset":[3]}]]},'
        '"at":{"$datetime":["2024-05-01T12:00:00+02:00","Europe/Paris"]},'
        '"naive":{"$datetime":"2024-01-02T03:00:00"},'
        '"big":{"$int":"2' + "0" * 500 + '"},"nan":{"$float":"nan"},'
        '"p":{"$path":["pathlib:PurePosixPath","/x"]},"mv":{"$bytes":"YWI="},'
        '"level":{"$enum":["tests.core.test_codec:Level",1]},'
        '"point":{"$dataclass":["tests.core.test_codec:Point",{"x":1,"y":2.5}]},'
        '"d":[{"$decimal":"1.10"},{"$timedelta":[0,3,0]},'
        '{"$uuid":"00000000-0000-0000-0000-000000000001"},{"$$x":null}]}}'
    )


@pytest.mark.skipif(pydantic is None, reason="needs pydantic")
def test_tagged_model_encoding_is_pinned() -> None:
    order = Order(
        id=uuid.UUID(int=9),
        customer=Customer(name="Ann", since=dt.date(2020, 1, 1)),
        placed_at=dt.datetime(2024, 1, 2, 3, 4, tzinfo=UTC),
        items=[Item(sku="a", qty=2)],
        total=decimal.Decimal("9.90"),
        gift=(1, 2),
    )
    assert encode_result(order, max_bytes=LIMIT) == (
        '{"$tagged":{"$model":["tests.core.test_codec:Order",'
        '{"id":{"$uuid":"00000000-0000-0000-0000-000000000009"},'
        '"customer":{"$model":["tests.core.test_codec:Customer",'
        '{"name":"Ann","since":{"$date":"2020-01-01"}},["name","since"]]},'
        '"placed_at":{"$datetime":"2024-01-02T03:04:00+00:00"},'
        '"items":[{"$model":["tests.core.test_codec:Item",{"sku":"a","qty":2},["qty","sku"]]}],'
        '"total":{"$decimal":"9.90"},"note":null,"gift":{"$tuple":[1,2]}},'
        '["customer","gift","id","items","placed_at","total"]]}}'
    )


def test_paths_through_maps_and_sets() -> None:
    with socket.socket() as sock:
        for value, path in (({1: "x", "a": sock}, "result['a']"), ([{sock}], "result[0][0]")):
            with pytest.raises(ResultEncodingError) as info:
                encode_result(value, max_bytes=LIMIT)
            assert (
                info.value.why
                == f"result contains a socket object at {path}, which cannot be stored"
            )
