"""moto's requests made cheaper (:mod:`lakesync.local.moto_requests`): every fast response is the one moto would
have written, a difference switches the fast path off rather than reaching a client, and a Query that lists only
its partition answers what moto's own Query answers, pages, directions and indexes included."""

from __future__ import annotations

import uuid
from decimal import Decimal
from typing import Any

import pytest
from boto3.dynamodb.types import Binary

from lakesync.local import moto_requests

pytestmark = pytest.mark.integration


@pytest.fixture
def every_response_verified(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(moto_requests, "VERIFY_FIRST", 10**9)
    monkeypatch.setattr(moto_requests._State, "counts", {})


def _table(client: Any) -> str:
    name = f"t{uuid.uuid4().hex[:10]}"
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "B"},
            {"AttributeName": "n", "AttributeType": "N"},
            {"AttributeName": "g", "AttributeType": "S"},
        ],
        LocalSecondaryIndexes=[
            {
                "IndexName": "by_n",
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "n", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "INCLUDE", "NonKeyAttributes": ["b"]},
            }
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_g",
                "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}, {"AttributeName": "n", "KeyType": "RANGE"}],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    return name


def _item(partition: int, i: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "pk": {"S": f"p{partition}"},
        "sk": {"B": bytes([i % 256, 255 - i % 256, 0]) + b"\x80" * (i % 3)},
        "n": {"N": str(Decimal(i * 7 % 23) / 4)},
        "g": {"S": f"g{i % 3}"},
        "b": {"B": bytes(range(256))[i % 200 :]},
        "s": {"S": "é€𝄞" * (i % 4)},
        "flags": {"L": [{"BOOL": i % 2 == 0}, {"NULL": True}, {"N": "-1e-3"}, {"L": []}, {"M": {}}]},
        "nested": {"M": {"bin": {"B": b"\x00\xff" * i}, "set": {"BS": [b"x", bytes([i % 256, 1])]}, "e": {"S": ""}}},
        "strings": {"SS": ["a", f"b{i}"]},
        "numbers": {"NS": ["1", "12345678901234567890123456789012345678", f"{i}.5"]},
    }
    if i % 4 == 0:
        del item["g"]  # not in the global index
    return item


def test_every_item_operation_s_fast_response_is_moto_s_own(
    dynamodb_client: Any, every_response_verified: None
) -> None:
    # Given a table whose items hold every attribute type, binary keys among them
    table = _table(dynamodb_client)
    for i in range(12):
        dynamodb_client.put_item(TableName=table, Item=_item(i % 3, i))

    # When every item operation answers, each fast response also written the stock way and compared
    key = {"pk": {"S": "p1"}, "sk": _item(1, 4)["sk"]}
    old = dynamodb_client.put_item(
        TableName=table, Item=_item(1, 4), ReturnValues="ALL_OLD", ReturnConsumedCapacity="TOTAL"
    )
    got = dynamodb_client.get_item(TableName=table, Key=key, ConsistentRead=True)
    projected = dynamodb_client.get_item(
        TableName=table, Key=key, ProjectionExpression="nested.#b, s", ExpressionAttributeNames={"#b": "bin"}
    )
    updated = dynamodb_client.update_item(
        TableName=table,
        Key=key,
        UpdateExpression="SET s = :s",
        ExpressionAttributeValues={":s": {"S": "x"}},
        ReturnValues="ALL_NEW",
    )
    pages = dynamodb_client.get_paginator("query").paginate(
        TableName=table, KeyConditionExpression="pk = :p", ExpressionAttributeValues={":p": {"S": "p0"}}, Limit=2
    )
    queried = [item for page in pages for item in page["Items"]]
    by_index = dynamodb_client.query(
        TableName=table,
        IndexName="by_n",
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "p2"}},
    )["Items"]
    scanned = [
        item
        for page in dynamodb_client.get_paginator("scan").paginate(TableName=table, Limit=5)
        for item in page["Items"]
    ]
    batch = dynamodb_client.batch_get_item(
        RequestItems={table: {"Keys": [key, {"pk": {"S": "p9"}, "sk": {"B": b"\x01"}}]}}
    )
    transact = dynamodb_client.transact_get_items(TransactItems=[{"Get": {"TableName": table, "Key": key}}])
    statement = dynamodb_client.execute_statement(
        Statement=f'SELECT * FROM "{table}" WHERE pk = ?', Parameters=[{"S": "p1"}]
    )
    deleted = dynamodb_client.delete_item(TableName=table, Key=key, ReturnValues="ALL_OLD")

    # Then none differed from moto's, and the fast path wrote them
    assert moto_requests.fast_responses_disabled() is None
    served = moto_requests.fast_response_counts()
    for operation in (
        "PutItem",
        "GetItem",
        "UpdateItem",
        "Query",
        "Scan",
        "BatchGetItem",
        "TransactGetItems",
        "ExecuteStatement",
        "DeleteItem",
    ):
        assert served.get(operation, 0) >= 1, operation
    # And boto3 reads them back as what was written: binary as bytes, numbers as strings, empty containers kept
    assert old["Attributes"] == _item(1, 4) and got["Item"] == _item(1, 4) and deleted["Attributes"]["s"] == {"S": "x"}
    assert projected["Item"] == {"nested": {"M": {"bin": {"B": b"\x00\xff" * 4}}}, "s": {"S": "é€𝄞" * 0}}
    assert updated["Attributes"]["nested"] == _item(1, 4)["nested"] and isinstance(got["Item"]["sk"]["B"], bytes)
    assert sorted(item["sk"]["B"] for item in queried) == sorted(_item(0, i)["sk"]["B"] for i in range(0, 12, 3))
    assert len(by_index) == 4 and len(scanned) == 12
    assert batch["Responses"][table] == [_item(1, 4) | {"s": {"S": "x"}}] and transact["Responses"][0]["Item"]["s"] == {
        "S": "x"
    }
    assert len(statement["Items"]) == 4
    assert Binary(got["Item"]["b"]["B"]) == Binary(bytes(range(256))[4:])


def test_a_fast_response_that_differs_is_replaced_by_moto_s_own_and_the_path_switches_off(
    dynamodb_client: Any, every_response_verified: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a fast path told to write a member the stock serializer changes (capacity units: 2 becomes 2.0)
    monkeypatch.setattr(moto_requests._State, "disabled", None)
    monkeypatch.setattr(
        moto_requests, "ITEM_MEMBERS", {**moto_requests.ITEM_MEMBERS, "BatchGetItem": ("Responses", "ConsumedCapacity")}
    )
    table = _table(dynamodb_client)
    dynamodb_client.put_item(TableName=table, Item=_item(0, 1))
    key = {"pk": {"S": "p0"}, "sk": _item(0, 1)["sk"]}

    # When a response with such a member is written
    answer = dynamodb_client.batch_get_item(
        RequestItems={table: {"Keys": [key], "ConsistentRead": True}}, ReturnConsumedCapacity="TOTAL"
    )

    # Then the client got moto's own response, and the fast path is off from then on
    assert answer["Responses"][table] == [_item(0, 1)]
    assert answer["ConsumedCapacity"][0]["CapacityUnits"] == 1.0 and isinstance(
        answer["ConsumedCapacity"][0]["CapacityUnits"], float
    )
    assert "BatchGetItem" in str(moto_requests.fast_responses_disabled())
    before = moto_requests.fast_response_counts()
    assert dynamodb_client.get_item(TableName=table, Key=key)["Item"] == _item(0, 1)
    assert moto_requests.fast_response_counts() == before


QUERIES: list[dict[str, Any]] = [
    {"KeyConditionExpression": "pk = :p"},
    {"KeyConditionExpression": "pk = :p", "ScanIndexForward": False, "Limit": 3},
    {"KeyConditionExpression": "pk = :p AND sk > :lo", "Limit": 2, "lo": {"B": b"\x05"}},
    {"KeyConditionExpression": "pk = :p AND sk BETWEEN :lo AND :hi", "lo": {"B": b"\x03"}, "hi": {"B": b"\x0c\xff"}},
    {"KeyConditionExpression": "pk = :p AND begins_with(sk, :lo)", "lo": {"B": b"\x06"}},
    {"IndexName": "by_n", "KeyConditionExpression": "pk = :p AND n >= :n", "n": {"N": "1"}, "Limit": 2},
    {
        "IndexName": "by_n",
        "KeyConditionExpression": "pk = :p",
        "ScanIndexForward": False,
        "FilterExpression": "attribute_exists(b)",
    },
    {"IndexName": "by_g", "KeyConditionExpression": "g = :g", "g": {"S": "g1"}, "Limit": 4},
]


def _run(client: Any, table: str, query: dict[str, Any], partition: str) -> list[dict[str, Any]]:
    params = {k: v for k, v in query.items() if k not in ("lo", "hi", "n", "g")}
    values = {f":{k}": v for k, v in query.items() if k in ("lo", "hi", "n", "g")}
    if "pk = :p" in query["KeyConditionExpression"]:
        values[":p"] = {"S": partition}
    pages = client.get_paginator("query").paginate(TableName=table, ExpressionAttributeValues=values, **params)
    return [item for page in pages for item in page["Items"]]


def _expected(items: list[dict[str, Any]], query: dict[str, Any], partition: str) -> list[dict[str, Any]]:
    index = query.get("IndexName")
    hash_name, range_name = {None: ("pk", "sk"), "by_n": ("pk", "n"), "by_g": ("g", "n")}[index]
    wanted = query["g"]["S"] if index == "by_g" else partition
    kept = [i for i in items if i.get(hash_name, {}).get("S") == wanted and range_name in i]

    def sort_value(item: dict[str, Any]) -> Any:
        value = item[range_name]
        return value["B"] if "B" in value else Decimal(value["N"])

    def position(item: dict[str, Any]) -> Any:
        return (sort_value(item), item["pk"]["S"], item["sk"]["B"])

    condition = query["KeyConditionExpression"]
    if "sk > :lo" in condition:
        kept = [i for i in kept if i["sk"]["B"] > query["lo"]["B"]]
    if "BETWEEN" in condition:
        kept = [i for i in kept if query["lo"]["B"] <= i["sk"]["B"] <= query["hi"]["B"]]
    if "begins_with" in condition:
        kept = [i for i in kept if i["sk"]["B"].startswith(query["lo"]["B"])]
    if "n >= :n" in condition:
        kept = [i for i in kept if Decimal(i["n"]["N"]) >= Decimal(query["n"]["N"])]
    kept.sort(key=position, reverse=query.get("ScanIndexForward") is False)
    if index == "by_n":
        kept = [{k: v for k, v in i.items() if k in ("pk", "sk", "n", "b")} for i in kept]
    return kept


def test_a_query_that_lists_only_its_partition_answers_what_moto_s_query_answers(dynamodb_client: Any) -> None:
    # Given a table of many partitions, with a local and a global index
    table = _table(dynamodb_client)
    items = [_item(i % 9, i) for i in range(90)]
    for item in items:
        dynamodb_client.put_item(TableName=table, Item=item)
    assert (
        len([i for page in dynamodb_client.get_paginator("scan").paginate(TableName=table) for i in page["Items"]])
        == 90
    )

    # Then every Query, paged, in both directions, on the table and both indexes, answers what its conditions keep
    for partition in ("p0", "p4", "p8", "p-none"):
        for query in QUERIES:
            assert _run(dynamodb_client, table, query, partition) == _expected(items, query, partition), (
                partition,
                query,
            )
