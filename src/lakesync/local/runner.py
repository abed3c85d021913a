"""The embedded default: moto in server mode as AWS, the real Lambda handlers served over HTTP on 127.0.0.1.

Exposure: the HTTP front (API, real-time socket) binds ``host``; moto binds 127.0.0.1 whatever ``host`` is and answers
only requests signed with its random per-instance credential, which this process hands to the handlers, the worker
processes and its own clients (the environment, :meth:`LocalStack.aws_kwargs`); the sockets' management API answers
only this machine's peers signed with the same credential. :func:`exposure_warning` says what a non-loopback ``host``
exposes.

This process plays the Lambda runtime: it sets the environment the handlers read (table names, JWT secret, AWS
endpoint), routes each request as API Gateway would (route key and path parameters from
:mod:`lakesync.api_routes`) and calls the handler module's ``lambda_handler``: in this process one invocation at a
time (``workers=0``), or in ``workers`` handler processes at once (:mod:`lakesync.local.workers`).

With ``persist`` (the default), the tables and the checkpoint bucket are durable (:mod:`lakesync.local.journal`):
an acknowledged write survives ``kill -9`` and a power cut. The materialisation queue and claim-check bucket are
not kept: at every start the heads' published positions are cleared, so the next flush publishes again what may
have been in flight (the consumer is idempotent).

The data directory is 0700; the files this module writes in it are 0600.
"""

from __future__ import annotations

import configparser
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

from lakesync.auth import check_signing_key, generate_secret
from lakesync.local.access import is_loopback_host
from lakesync.local.authorizer import LocalAuthorizer
from lakesync.local.dispatch import route_request
from lakesync.local.front import LocalFront
from lakesync.local.journal import DurableState
from lakesync.local.materialiser import MAX_RECEIVE_COUNT, LocalMaterialiser
from lakesync.local.moto import MotoServer
from lakesync.local.streams import LocalStreamSource
from lakesync.local.websocket import GatewaySessions, HubManagementClient, SocketHub

if TYPE_CHECKING:
    from collections.abc import Callable

    from lakesync.aws.publish import PublishConfig
    from lakesync.local.connector_scheduler import LocalConnectorScheduler
    from lakesync.local.journal import RecoveryReport
    from lakesync.local.moto import AwsEndpoint
    from lakesync.local.workers import WorkerPool

logger = logging.getLogger(__name__)

TABLE_PREFIX = "lakesync"
SECRET_FILE = "jwt-secret"
PREVIOUS_SECRET_FILE = "jwt-secret.previous"
SNAPSHOT_FILE = "snapshot.json"
CHECKPOINT_BUCKET = "lakesync-checkpoints"
CLAIM_CHECK_BUCKET = "lakesync-claim-check"
MATERIALISE_QUEUE = "lakesync-materialise"
MATERIALISE_DLQ = "lakesync-materialise-dlq"
MATERIALISED_DB = "materialised.db"
CONNECTOR_SECRETS_DIR = "connector-secrets"
AWS_CONFIG_FILE = "aws-config"
AWS_PROFILE = "lakesync-local"
STREAM_POLL_S = 0.25
"""Seconds between reads of the deltas table's idle stream (a Lambda event source mapping's base rate, 4 a second);
a commit to the table wakes the reader at once (:meth:`LocalStreamSource.wake`)."""
MOTO_HOST = "127.0.0.1"
"""Where the moto server listens, whatever the front's ``host``: every table, bucket and secret is behind it."""


def exposure_warning(host: str, data_dir: Path) -> str | None:
    """What serving the front on ``host`` exposes, for stderr; ``None`` for a loopback host."""
    if is_loopback_host(host):
        return None
    return (
        f"WARNING: --host {host} serves the gateway API and its real-time socket over plain HTTP to every machine that"
        " can reach this address. A gateway has no sync rules by default (POST /v1/admin/sync-rules/{gw}): until it"
        " has some, any valid client token reads and writes every row of it. Tokens are signed with the key in"
        f" {data_dir / SECRET_FILE}; keep it private. The moto endpoint (every table, bucket and secret) and the"
        " sockets' management API stay on 127.0.0.1. Use --host 127.0.0.1 unless other machines must connect,"
        " and then put TLS in front."
    )


class LocalKeyError(ValueError):
    """A JWT key file of the data directory is not a usable signing key (the message says how to replace it)."""


def load_or_create_secret(data_dir: Path) -> str:
    """The local JWT secret, created (32 random bytes) on first use and kept in the data directory.

    Raises:
        LocalKeyError: the kept secret is shorter than :data:`~lakesync.auth.MIN_KEY_BYTES` or unusable.
    """
    path = data_dir / SECRET_FILE
    if not path.exists():
        make_data_dir(data_dir)
        secret = generate_secret()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")
        return secret
    return _read_key(path, data_dir)


def load_previous_secret(data_dir: Path) -> str | None:
    """The key replaced by the last ordinary :func:`rotate_local_key`, still accepted; ``None`` when there is none.

    Raises:
        LocalKeyError: the file holds an unusable key.
    """
    path = data_dir / PREVIOUS_SECRET_FILE
    return _read_key(path, data_dir) if path.exists() else None


def rotate_local_key(data_dir: Path, *, emergency: bool = False) -> bool:
    """Replace the local JWT key with a new random one (applies when ``lakesync local`` next starts).

    An ordinary rotation keeps the replaced key as the previous one, so tokens signed with it still verify until the
    next rotation; an emergency rotation keeps no previous key, so every token signed before it fails.

    Returns:
        Whether a previous key is kept.
    """
    make_data_dir(data_dir)
    current, previous = data_dir / SECRET_FILE, data_dir / PREVIOUS_SECRET_FILE
    keep = not emergency and current.exists()
    if keep:
        os.replace(current, previous)
    else:
        previous.unlink(missing_ok=True)
    _write_private(current, generate_secret() + "\n")
    return keep


def _read_key(path: Path, data_dir: Path) -> str:
    secret = path.read_text().strip()
    try:
        check_signing_key(secret, f"the JWT key in {path}")
    except ValueError as exc:
        raise LocalKeyError(f"{exc}; replace it with `lakesync rotate-key --emergency --data-dir {data_dir}`") from None
    return secret


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (mode 0600) atomically: a temporary file renamed over it."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


def make_data_dir(data_dir: Path) -> None:
    """Create the data directory (0700); an existing one that holds a JWT secret is made 0700 too."""
    if not data_dir.exists():
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(data_dir, 0o700)  # mkdir's mode is filtered by the umask
    elif (data_dir / SECRET_FILE).exists():
        os.chmod(data_dir, 0o700)


@dataclass
class LocalStack:
    """moto server + tables + HTTP front; ``with LocalStack(...) as stack: stack.url``."""

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 8787
    moto_port: int = 0
    gateway_ids: tuple[str, ...] = ("default",)
    persist: bool = True
    fsync: bool = True
    workers: int = 0
    extra_env: dict[str, str] = field(default_factory=dict)
    materialise_url: str | None = None
    materialise: bool = True
    queue_url: str = ""
    dead_letter_url: str = ""
    materialiser: LocalMaterialiser | None = None
    aws_parity: bool = False
    broadcaster: LocalStreamSource | None = None
    connector_poller: LocalConnectorScheduler | None = None
    connector_tick_s: float = 1.0
    _moto: MotoServer | None = None
    _front: LocalFront | None = None
    _pool: WorkerPool | None = None
    durable: DurableState | None = None
    recovery: RecoveryReport | None = None
    _saved_env: dict[str, str | None] = field(default_factory=dict)
    _stop_waking: Callable[[], None] | None = None
    _restore_logs: Callable[[], None] | None = None
    secret: str = ""

    @property
    def url(self) -> str:
        """Base URL of the HTTP API."""
        assert self._front is not None
        return self._front.url

    @property
    def aws_endpoint(self) -> str:
        """The moto server's endpoint URL."""
        assert self._moto is not None
        return self._moto.endpoint_url

    def start(self) -> Self:
        """Start moto, create (and restore) the tables, point the handlers at them and serve HTTP."""
        from lakesync.aws.objects import create_bucket, s3_client
        from lakesync.aws.table_setup import create_tables, drop_tables
        from lakesync.aws.tables import TableNames, connections_table_name

        make_data_dir(self.data_dir)
        self.secret = load_or_create_secret(self.data_dir)
        previous = load_previous_secret(self.data_dir)
        self._moto = MotoServer(MOTO_HOST, self.moto_port).start()
        _write_aws_profile(self.data_dir, self._moto.aws())
        env = {
            **self._moto.aws().env(),
            "LAKESYNC_TABLE_PREFIX": TABLE_PREFIX,
            "LAKESYNC_JWT_SECRET": self.secret,
            # Empty counts as unset: a previous key in the caller's environment must not be accepted here.
            "LAKESYNC_JWT_SECRET_PREVIOUS": previous or "",
            "LAKESYNC_GATEWAY_IDS": ",".join(self.gateway_ids),
            # Several handler processes, and a rules change a developer expects to see on the next pull: every pull
            # reads the rules and the registry (LAKESYNC_PULL_BASIS_TTL_MS).
            "LAKESYNC_PULL_BASIS_TTL_MS": "0",
            "LAKESYNC_CHECKPOINT_BUCKET": CHECKPOINT_BUCKET,
            "LAKESYNC_CLAIM_CHECK_BUCKET": CLAIM_CHECK_BUCKET,
            # Connectors: secrets as 0600 files beside the journal, pollers on the local loop (connector_poller).
            "LAKESYNC_CONNECTOR_SECRETS_DIR": str(self.data_dir / CONNECTOR_SECRETS_DIR),
            "LAKESYNC_CONNECTOR_SCHEDULER": "local",
            # Development: connectors and destinations may reach this machine (loopback) and plain-http vendor
            # stand-ins; link-local and metadata addresses stay refused whatever is set.
            "LAKESYNC_ALLOWED_NETWORKS": "127.0.0.0/8,::1/128",
            "LAKESYNC_ALLOW_PLAIN_HTTP": "true",
            "POWERTOOLS_TRACE_DISABLED": "true",
            "POWERTOOLS_SERVICE_NAME": "lakesync",
            "POWERTOOLS_METRICS_NAMESPACE": "LakeSync",
            "POWERTOOLS_LOG_LEVEL": os.environ.get("POWERTOOLS_LOG_LEVEL", "WARNING"),
            # Metrics go to stdout as EMF on Lambda (CloudWatch picks them up); locally they are noise.
            "POWERTOOLS_METRICS_DISABLED": os.environ.get("POWERTOOLS_METRICS_DISABLED", "true"),
            **self.extra_env,
        }
        self._saved_env = {key: os.environ.get(key) for key in env}
        os.environ.update(env)
        # Imported only now: the handlers' logger reads POWERTOOLS_LOG_LEVEL when it is first imported.
        from functions._runtime import reset_runtime
        from lakesync import egress
        from lakesync.aws.settings.validators import network_policy
        from lakesync.local.terminal import readable_function_logs

        reset_runtime()
        # The handlers log as deployed; this terminal gets their records as readable lines, not JSON objects.
        self._restore_logs = readable_function_logs()
        _forget_default_credentials()
        egress.configure(network_policy(os.environ))
        client = self.dynamodb_client()
        names = TableNames.with_prefix(TABLE_PREFIX)
        # moto's state lives as long as the process: start from exactly the snapshot (or nothing), not leftovers.
        drop_tables(client, names, connections=connections_table_name(TABLE_PREFIX))
        create_tables(client, names, connections=connections_table_name(TABLE_PREFIX))
        s3 = s3_client(**self._moto.aws().client_kwargs())
        create_bucket(s3, CHECKPOINT_BUCKET)
        _empty_bucket(s3, CHECKPOINT_BUCKET)
        if self.persist:
            self.durable = DurableState(
                self.data_dir,
                tables=dict(names.as_dict()),
                buckets=(CHECKPOINT_BUCKET,),
                fsync=self.fsync,
            )
            self.recovery = self.durable.recover(self._moto)
            logger.info("recovered %s from %s", self.recovery, self.data_dir)
            _forget_published_positions(client, names.heads)
            self.durable.start(self._moto)
        self._start_materialisation()
        handler = route_request
        if self.workers > 0:
            from lakesync.local.workers import WorkerPool

            self._pool = WorkerPool(self.workers, dict(os.environ)).start()
            handler = self._pool.invoke
        # API Gateway's authorizer before the routes that need a token, as deployed (lakesync.local.authorizer)
        authorizer = LocalAuthorizer()
        self._front = LocalFront(
            handler, self.host, self.port, sockets=self._socket_hub(), authorizer=authorizer
        ).start()
        self._start_broadcaster(names.deltas)
        self._start_connector_poller()
        return self

    def _start_connector_poller(self) -> None:
        """Run registered connectors' pollers on the local loop (what EventBridge Scheduler does on AWS), after
        dropping the leases left by polls of an earlier run that died: this loop is the only poller of its data dir,
        so every lease on record now is dead, and would otherwise hold its connector until it expires."""
        from functions._runtime import get_deps
        from functions.connector_poll import lambda_handler
        from lakesync.gateway.poller import drop_leases
        from lakesync.local.connector_scheduler import LocalConnectorScheduler

        positions = get_deps().positions
        if positions is not None:
            for gateway in self.gateway_ids:
                for name in drop_leases(positions, gateway):
                    logger.warning(
                        "connector %s of %s: dropped the lease of a poll that died in an earlier run "
                        "(its position did not move: the next poll repeats it)",
                        name,
                        gateway,
                    )
        self.connector_poller = LocalConnectorScheduler(
            lambda: get_deps().config,
            self.gateway_ids,
            lambda event: lambda_handler(event, _PollContext()),
            tick_s=self.connector_tick_s,
        ).start()

    def _socket_hub(self) -> SocketHub:
        """The real-time socket on the HTTP port, served by the gateway services in this process."""
        from functions._runtime import get_deps, get_realtime, get_settings, jwt_secrets

        sessions = GatewaySessions(
            get_deps, lambda: get_realtime().connections, jwt_secrets, lambda: get_settings().gateway_ids
        )
        assert self._moto is not None
        return SocketHub(sessions, aws_parity=self.aws_parity, management_credentials=self._moto.credentials)

    def _start_broadcaster(self, deltas_table: str) -> None:
        """The broadcaster function on the deltas table's stream, sending through the front's management API."""
        import boto3

        from functions._runtime import get_broadcast_deps
        from functions.ws_broadcast import lambda_handler
        from lakesync.aws.settings.variables import WS_CALLBACK_URL
        from lakesync.aws.ws_sender import ManagementApiSender

        assert self._front is not None
        self._saved_env.setdefault(WS_CALLBACK_URL, os.environ.get(WS_CALLBACK_URL))
        os.environ[WS_CALLBACK_URL] = self._front.url
        kwargs = self.aws_kwargs()
        arn = self.dynamodb_client().describe_table(TableName=deltas_table)["Table"]["LatestStreamArn"]
        streams = boto3.client("dynamodbstreams", **kwargs)  # type: ignore[call-overload]
        sender = get_broadcast_deps().sender
        if isinstance(sender, ManagementApiSender) and self._front.sockets is not None:
            # The hub is in this process: its management API without an HTTP request per message. Sent from the I/O
            # pool, one recipient per future, as on AWS: measured no slower than from the broadcasting thread, and a
            # listener slow to read holds one pool thread, not the broadcast.
            sender.use(HubManagementClient(self._front.sockets))
        self.broadcaster = LocalStreamSource(
            streams, arn, lambda_handler, region=kwargs["region_name"], poll_s=STREAM_POLL_S
        ).start()
        assert self._moto is not None
        self._stop_waking = self._moto.on_write(deltas_table, self.broadcaster.wake)

    @property
    def materialise_target(self) -> str:
        """Where the local materialiser writes rows: ``--materialise URL`` or ``<data-dir>/materialised.db``."""
        return self.materialise_url or f"sqlite:///{(self.data_dir / MATERIALISED_DB).resolve()}"

    def _start_materialisation(self) -> None:
        """The claim-check bucket, the queue with its dead-letter queue, and the consumer on its own thread."""
        import json

        from lakesync.aws.objects import create_bucket, s3_client

        kwargs = self.aws_kwargs()
        create_bucket(s3_client(**kwargs), CLAIM_CHECK_BUCKET)
        sqs = self.sqs_client()
        self.dead_letter_url = sqs.create_queue(QueueName=MATERIALISE_DLQ)["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=self.dead_letter_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}
        self.queue_url = sqs.create_queue(
            QueueName=MATERIALISE_QUEUE,
            Attributes={"VisibilityTimeout": "60", "RedrivePolicy": json.dumps(redrive)},
        )["QueueUrl"]
        if not self.materialise:
            return
        from functions._runtime import use_materialise_deps
        from functions.materialise import lambda_handler
        from lakesync import sql
        from lakesync.aws.config_store import DynamoDBConfigStore
        from lakesync.aws.destinations import ConfiguredDestinations
        from lakesync.aws.objects import S3ObjectStore
        from lakesync.aws.secrets import secretsmanager_client
        from lakesync.aws.tables import TableNames
        from lakesync.gateway.materialise import MaterialiseDeps

        if self.materialise_url is None and not (self.data_dir / MATERIALISED_DB).exists():
            # Created here with mode 0600, before SQLite creates it with the umask's.
            os.close(os.open(self.data_dir / MATERIALISED_DB, os.O_WRONLY | os.O_CREAT, 0o600))
        local = sql.connect(self.materialise_target, name="local")
        config = DynamoDBConfigStore(self.dynamodb_client(), TableNames.with_prefix(TABLE_PREFIX))
        use_materialise_deps(
            MaterialiseDeps(
                payloads=S3ObjectStore(CLAIM_CHECK_BUCKET, s3_client(**kwargs)),
                bucket=CLAIM_CHECK_BUCKET,
                config=config,
                destinations=ConfiguredDestinations(
                    config, lambda: secretsmanager_client(**kwargs), extra=[local], config_ttl_s=2.0
                ),
            )
        )
        self.materialiser = LocalMaterialiser(sqs, self.queue_url, lambda_handler).start()

    def open_gateways(self) -> list[str]:
        """The gateways without sync rules: any valid token of one reads and writes every row of it."""
        from lakesync.aws.config_store import DynamoDBConfigStore
        from lakesync.aws.tables import TableNames

        config = DynamoDBConfigStore(self.dynamodb_client(), TableNames.with_prefix(TABLE_PREFIX))
        return [gw for gw in self.gateway_ids if config.get_sync_rules(gw) is None]

    def sqs_client(self) -> Any:
        """A boto3 SQS client for the local moto server."""
        import boto3

        return boto3.client("sqs", **self.aws_kwargs())  # type: ignore[call-overload]

    def publish_config(self) -> PublishConfig:
        """Where the local flush publishes materialisation jobs (every gateway: the local database takes all)."""
        from lakesync.aws.publish import PublishConfig

        kwargs = self.aws_kwargs()
        return PublishConfig(
            CLAIM_CHECK_BUCKET,
            self.queue_url,
            publish_all=True,
            endpoint_url=kwargs["endpoint_url"],
            region=kwargs["region_name"],
            access_key_id=kwargs["aws_access_key_id"],
            secret_access_key=kwargs["aws_secret_access_key"],
        )

    def aws_kwargs(self) -> dict[str, str]:
        """boto3 client arguments (endpoint, region, fake credentials) for the local moto server."""
        assert self._moto is not None
        return self._moto.aws().client_kwargs()

    def dynamodb_client(self) -> Any:
        """A boto3 DynamoDB client for the local moto server."""
        from lakesync.aws.clients import dynamodb_client

        assert self._moto is not None
        return dynamodb_client(**self._moto.aws().client_kwargs())

    def stop(self) -> None:
        """Stop serving, write a final snapshot to the data directory, stop moto."""
        if self.connector_poller is not None:
            self.connector_poller.stop()
            self.connector_poller = None
        if self._stop_waking is not None:
            self._stop_waking()
            self._stop_waking = None
        if self.broadcaster is not None:
            self.broadcaster.stop()
            self.broadcaster = None
        if self._front is not None:
            self._front.stop()
            self._front = None
        if self._pool is not None:
            self._pool.stop()
            self._pool = None
        if self.materialiser is not None:
            self.materialiser.stop()
            self.materialiser = None
        from functions._runtime import reset_runtime

        reset_runtime()  # closes the destinations' and connectors' connections
        if self._moto is not None:
            if self.durable is not None:
                self.durable.stop(self._moto)
                logger.info("saved snapshot generation %d in %s", self.durable.generation, self.data_dir)
                self.durable = None
            self._moto.stop()
            self._moto = None
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env = {}
        if self._restore_logs is not None:
            self._restore_logs()
            self._restore_logs = None
        _forget_default_credentials()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def aws_profile(data_dir: Path) -> dict[str, str]:
    """boto3 client arguments for the moto server of the ``lakesync local`` running on ``data_dir``: its endpoint,
    region and credential, from the profile it writes there (``AWS_CONFIG_FILE=<data-dir>/aws-config
    AWS_PROFILE=lakesync-local`` gives the same to the AWS CLI).

    Raises:
        FileNotFoundError: no stack has started on ``data_dir``. KeyError: the file holds no such profile.
    """
    parser = configparser.ConfigParser()
    with (data_dir / AWS_CONFIG_FILE).open(encoding="utf-8") as f:
        parser.read_file(f)
    section = parser[f"profile {AWS_PROFILE}"]
    return {
        "endpoint_url": section["endpoint_url"],
        "region_name": section["region"],
        "aws_access_key_id": section["aws_access_key_id"],
        "aws_secret_access_key": section["aws_secret_access_key"],
    }


def _write_aws_profile(data_dir: Path, aws: AwsEndpoint) -> None:
    """The run's moto endpoint and credential as an AWS CLI profile in the data directory (0600, like the JWT key)."""
    _write_private(
        data_dir / AWS_CONFIG_FILE,
        f"[profile {AWS_PROFILE}]\n"
        f"endpoint_url = {aws.endpoint_url}\n"
        f"region = {aws.region}\n"
        f"aws_access_key_id = {aws.access_key_id}\n"
        f"aws_secret_access_key = {aws.secret_access_key}\n",
    )


def _forget_default_credentials() -> None:
    """Make boto3's default session read the environment again: it keeps the credentials it first resolved, and the
    moto server answers only its own (set in the environment by :meth:`LocalStack.start`, restored by ``stop``)."""
    import boto3

    boto3.DEFAULT_SESSION = None


def _empty_bucket(s3: Any, bucket: str) -> None:
    """Delete leftovers of an earlier stack in this process (moto's state is process-wide)."""
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=bucket, Key=obj["Key"])


def _forget_published_positions(client: Any, heads_table: str) -> None:
    """Clear every head's ``ps``: the materialisation queue is not kept, so jobs sent before a restart may be lost.

    The next flush then publishes again from each shard's release mark (the idempotent consumer applies what it
    already had without effect); release is bounded by what that pass publishes, so nothing unpublished is released.
    """
    from lakesync.aws.buffer.items import HeadAttr

    for page in client.get_paginator("scan").paginate(TableName=heads_table, ConsistentRead=True):
        for item in page.get("Items", []):
            if HeadAttr.PUBLISHED_SEQ in item:
                client.update_item(
                    TableName=heads_table,
                    Key={HeadAttr.SHARD: item[HeadAttr.SHARD]},
                    UpdateExpression=f"REMOVE {HeadAttr.PUBLISHED_SEQ}",
                )


class _PollContext:
    """The Lambda context the local poll loop passes (the fields Powertools reads), with the poll function's
    15-minute budget counted from its creation."""

    function_name = "connector_poll"
    function_version = "$LATEST"
    invoked_function_arn = "arn:aws:lambda:local:000000000000:function:connector_poll"
    memory_limit_in_mb = 512
    aws_request_id = "local"
    log_group_name = "local"
    log_stream_name = "local"
    budget_ms = 900_000

    def __init__(self) -> None:
        self._start = time.monotonic()

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self.budget_ms - int((time.monotonic() - self._start) * 1000))
