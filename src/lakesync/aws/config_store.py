"""The config table's stores: rules, schemas, the shard registry, flush requests, destinations and connectors
(:class:`DynamoDBConfigStore`), and the pull's one read of the rules with the registry
(:class:`DynamoDBPullBasisReader`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from lakesync.aws.errors import condition_failed
from lakesync.aws.items import (
    CONNECTOR_PREFIX,
    DESTINATION_PREFIX,
    REGISTRY_PREFIX,
    RESTORE_MARK,
    Item,
    config_items,
    destination_key,
    num_attr,
    query_all,
    registry_shard,
    storage_error,
    str_attr,
    utf8_json,
)
from lakesync.aws.tables import TableNames
from lakesync.core.connectors import ConnectorConfig
from lakesync.core.destinations import DestinationConfig, parse_destination
from lakesync.core.errors import AlreadyExistsError, GatewayRestoringError, StorageError, ValidationError
from lakesync.core.log import CommitConflict, PullBasis
from lakesync.core.rules import SyncRules, parse_sync_rules
from lakesync.core.schema import TableSchema, parse_table_schema

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBClient

__all__ = ["DynamoDBConfigStore", "DynamoDBPullBasisReader"]


def _rules_and(db: DynamoDBClient, table: str, gateway: str, prefix: str) -> Iterator[Item]:
    """The gateway's ``rules`` item and its items keyed ``prefix...`` (``prefix`` ends in ``#`` and sorts after
    ``rules``), in one consistent Query: the range ends at ``prefix`` with ``$``, which sorts right after ``#``, and
    skips what lies between.

    Raises:
        GatewayRestoringError: a restore from the lake holds the gateway (its :data:`RESTORE_MARK` is there).
    """
    for item in query_all(
        db,
        TableName=table,
        KeyConditionExpression="gw = :gw AND sk BETWEEN :rules AND :end",
        FilterExpression="sk = :rules OR sk = :mark OR begins_with(sk, :prefix)",
        ExpressionAttributeValues={
            ":gw": str_attr(gateway),
            ":rules": str_attr("rules"),
            ":mark": str_attr(RESTORE_MARK),
            ":end": str_attr(prefix[:-1] + "$"),
            ":prefix": str_attr(prefix),
        },
        ConsistentRead=True,
    ):
        if item["sk"]["S"] == RESTORE_MARK:
            raise GatewayRestoringError(f"gateway {gateway!r} is being restored from the lake: retry in a few seconds")
        yield item


class DynamoDBConfigStore:
    """Gateway configuration items in the config table."""

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._t = names

    def _get(self, gateway: str, sk: str) -> Item | None:
        try:
            out = self._db.get_item(
                TableName=self._t.config, Key={"gw": str_attr(gateway), "sk": str_attr(sk)}, ConsistentRead=True
            )
        except ClientError as exc:
            raise storage_error(exc, "GetItem") from exc
        item: Item | None = out.get("Item")
        return item

    def get_sync_rules(self, gateway: str) -> SyncRules | None:
        item = self._get(gateway, "rules")
        return parse_sync_rules(json.loads(item["doc"]["S"])) if item else None

    def put_sync_rules(self, gateway: str, rules: SyncRules) -> None:
        try:
            self._db.put_item(
                TableName=self._t.config,
                Item={"gw": str_attr(gateway), "sk": str_attr("rules"), "doc": str_attr(utf8_json(rules.to_json()))},
            )
        except ClientError as exc:
            raise storage_error(exc, "PutItem") from exc

    def get_schemas(self, gateway: str) -> dict[str, tuple[TableSchema, int]]:
        schemas = {}
        for item in config_items(self._db, self._t.config, gateway, "schema#"):
            schema = parse_table_schema(json.loads(item["doc"]["S"]))
            schemas[schema.table] = (schema, int(item["ver"]["N"]))
        return schemas

    def get_push_config(self, gateway: str) -> tuple[SyncRules | None, dict[str, tuple[TableSchema, int]]]:
        rules: SyncRules | None = None
        schemas = {}
        for item in _rules_and(self._db, self._t.config, gateway, "schema#"):
            if item["sk"]["S"] == "rules":
                rules = parse_sync_rules(json.loads(item["doc"]["S"]))
            else:
                schema = parse_table_schema(json.loads(item["doc"]["S"]))
                schemas[schema.table] = (schema, int(item["ver"]["N"]))
        return rules, schemas

    def put_schema(self, gateway: str, schema: TableSchema, version: int, expected_version: int) -> None:
        request: dict[str, Any] = {
            "TableName": self._t.config,
            "Item": {
                "gw": str_attr(gateway),
                "sk": str_attr(f"schema#{schema.table}"),
                "doc": str_attr(utf8_json(schema.to_json())),
                "ver": num_attr(version),
            },
            "ConditionExpression": "attribute_not_exists(sk)",
        }
        if expected_version:
            request["ConditionExpression"] = "ver = :e"
            request["ExpressionAttributeValues"] = {":e": num_attr(expected_version)}
        try:
            self._db.put_item(**request)
        except ClientError as exc:
            if condition_failed(exc):
                raise CommitConflict() from exc
            raise storage_error(exc, "PutItem") from exc

    def request_flush(self, gateway: str, request: Mapping[str, Any]) -> None:
        at = int(request.get("atMs", 0))
        # Without an id every request of the same millisecond would overwrite the previous one.
        sk = f"flush#{at:015d}#{request.get('id') or uuid.uuid4().hex}"
        try:
            self._db.put_item(
                TableName=self._t.config,
                Item={"gw": str_attr(gateway), "sk": str_attr(sk), "doc": str_attr(utf8_json(dict(request)))},
            )
        except ClientError as exc:
            raise storage_error(exc, "PutItem") from exc

    def list_flush_requests(self, gateway: str) -> list[dict[str, Any]]:
        items = config_items(self._db, self._t.config, gateway, "flush#")
        return [json.loads(item["doc"]["S"]) for item in items]

    def list_destinations(self, gateway: str) -> list[DestinationConfig]:
        configs = []
        for item in config_items(self._db, self._t.config, gateway, DESTINATION_PREFIX):
            try:
                configs.append(parse_destination(json.loads(item["doc"]["S"])))
            except (ValidationError, ValueError) as exc:  # written by add_destination, so never expected
                raise StorageError(f"Stored destination {item['sk']['S']!r} is invalid") from exc
        return sorted(configs, key=lambda c: c.name)

    def add_destination(self, gateway: str, config: DestinationConfig) -> None:
        self._add(gateway, destination_key(config.name), config.to_json(), f'Destination "{config.name}"')

    def remove_destination(self, gateway: str, name: str) -> bool:
        return self._remove(gateway, destination_key(name))

    def list_connectors(self, gateway: str) -> list[ConnectorConfig]:
        configs = []
        for item in config_items(self._db, self._t.config, gateway, CONNECTOR_PREFIX):
            configs.append(_connector(item))
        return sorted(configs, key=lambda c: c.name)

    def get_connector(self, gateway: str, name: str) -> ConnectorConfig | None:
        item = self._get(gateway, CONNECTOR_PREFIX + name)
        return _connector(item) if item else None

    def add_connector(self, gateway: str, config: ConnectorConfig) -> None:
        self._add(gateway, CONNECTOR_PREFIX + config.name, config.to_json(), f'Connector "{config.name}"')

    def remove_connector(self, gateway: str, name: str) -> bool:
        return self._remove(gateway, CONNECTOR_PREFIX + name)

    def _add(self, gateway: str, key: str, doc: Mapping[str, Any], what: str) -> None:
        """Put a configuration document where none is: of two concurrent adds of one name exactly one wins."""
        try:
            self._db.put_item(
                TableName=self._t.config,
                Item={"gw": str_attr(gateway), "sk": str_attr(key), "doc": str_attr(utf8_json(doc))},
                ConditionExpression="attribute_not_exists(sk)",
            )
        except ClientError as exc:
            if condition_failed(exc):
                raise AlreadyExistsError(f"{what} already exists") from exc
            raise storage_error(exc, "PutItem") from exc

    def _remove(self, gateway: str, key: str) -> bool:
        """Delete a configuration document; whether it was there."""
        try:
            out = self._db.delete_item(
                TableName=self._t.config,
                Key={"gw": str_attr(gateway), "sk": str_attr(key)},
                ReturnValues="ALL_OLD",
            )
        except ClientError as exc:
            raise storage_error(exc, "DeleteItem") from exc
        return bool(out.get("Attributes"))


def _connector(item: Item) -> ConnectorConfig:
    doc = json.loads(item["doc"]["S"])
    return ConnectorConfig(str(doc["name"]), str(doc["type"]), doc)


class DynamoDBPullBasisReader:
    """A pull's sync rules and shard registry in one consistent ``Query`` of the gateway's config partition.

    The sort keys ``rules`` < ``schema#…`` < ``shard#…`` are adjacent, so one key range holds the rules and the
    registry; a filter leaves the schemas on the server.
    """

    def __init__(self, client: DynamoDBClient, names: TableNames) -> None:
        self._db = client
        self._t = names

    def read_pull_basis(self, gateway: str) -> PullBasis:
        """The sync rules and the registered shards of ``gateway``."""
        rules: SyncRules | None = None
        shards = []
        for item in _rules_and(self._db, self._t.config, gateway, REGISTRY_PREFIX):
            key = item["sk"]["S"]
            if key == "rules":
                rules = parse_sync_rules(json.loads(item["doc"]["S"]))
            else:
                shards.append(registry_shard(key))
        return PullBasis(rules, tuple(sorted(shards)))
