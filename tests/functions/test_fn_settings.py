"""lakesync.aws.settings.api.Settings.from_env: defaults, the table-name and secret alternatives, and one
clear error listing every bad variable; the materialise consumer's, the lake tick's and the WebSocket functions'
settings likewise; the one reader they share (lakesync.aws.settings.env.Env).
"""

from __future__ import annotations

import re

import pytest

from lakesync.aws.settings.api import Settings
from lakesync.aws.settings.env import Env, SettingsError, flag_problem
from lakesync.aws.settings.lake import LakeTickSettings
from lakesync.aws.settings.materialise import MaterialiseSettings
from lakesync.aws.settings.realtime import BroadcastSettings, RealtimeSettings
from lakesync.aws.settings.variables import (
    API_ENV_VARS,
    CHECKPOINT_BUCKET,
    CLAIM_CHECK_BUCKET,
    COMPACT_MAX_WAIT_MINUTES,
    COMPACT_MIN_FLUSH_RUNS,
    CONNECTIONS_TABLE,
    DESTINATION_SECRET_PREFIX,
    EVENT_OVERHEAD_BYTES,
    FLUSH_FUNCTION_MAX_BACKLOG,
    FLUSH_FUNCTION_NAME,
    FLUSH_FUNCTION_TIMEOUT_S,
    FLUSH_JOB_NAME,
    FLUSH_MAX_DELTAS,
    FLUSH_PUBLISHES,
    FLUSH_RETENTION_MS,
    FUNCTION_ENV_VARS,
    GATEWAY_IDS,
    JOB_NAME_VARS,
    LAKE_CATALOG,
    LAKE_CATALOG_URI,
    LAKE_NAMESPACE,
    LAKE_WAREHOUSE,
    LAMBDA_PAYLOAD_BYTES,
    MATERIALISE_QUEUE_URL,
    MAX_BODY_BYTES_LIMIT,
    NETWORK_ENV_VARS,
    SUB_SHARDS,
    TABLE_PREFIX,
    TABLE_VARS,
    WS_CALLBACK_URL,
)
from lakesync.aws.tables import TableNames
from lakesync.core.lake_work import DEFAULT_COMPACT_POLICY, CompactPolicy

SECRET = "a-secret-of-enough-bytes-32-bytes"
TABLES = {var: f"tbl-{kind}" for kind, var in TABLE_VARS.items()}


def _env(**extra: str) -> dict[str, str]:
    return {**TABLES, "LAKESYNC_JWT_SECRET": SECRET, **extra}


def test_settings_defaults():
    settings = Settings.from_env(_env())
    assert settings.gateway_ids == frozenset({"default"})
    assert settings.tables == TableNames(*(f"tbl-{kind}" for kind in TABLE_VARS))
    assert settings.jwt_secrets == (SECRET,) and settings.jwt_secret_arn is None
    assert settings.max_body_bytes == 1024 * 1024
    assert settings.backpressure_bytes is None and settings.sub_shards == {}
    assert settings.pull_basis_ttl_ms == 1000
    gateway = settings.gateway_settings()
    assert gateway.backpressure_limit == 2 * gateway.flush_threshold_bytes


def test_settings_reads_every_variable():
    settings = Settings.from_env(
        _env(
            LAKESYNC_GATEWAY_IDS=" a , b.c ",
            LAKESYNC_JWT_SECRET_PREVIOUS="the-previous-secret-of-32-bytes-x",
            LAKESYNC_FLUSH_THRESHOLD_BYTES="1000",
            LAKESYNC_BACKPRESSURE_BYTES="0",
            LAKESYNC_SUB_SHARDS='{"todos": 4}',
            LAKESYNC_MAX_BODY_BYTES="2048",
            LAKESYNC_PULL_BASIS_TTL_MS="0",
        )
    )
    assert settings.pull_basis_ttl_ms == 0
    assert settings.gateway_ids == frozenset({"a", "b.c"})
    assert settings.jwt_secrets == (SECRET, "the-previous-secret-of-32-bytes-x")
    gateway = settings.gateway_settings()
    assert (gateway.flush_threshold_bytes, gateway.backpressure_limit) == (1000, 0)
    assert gateway.sub_shards == {"todos": 4} and gateway.gateway_ids == frozenset({"a", "b.c"})
    assert settings.max_body_bytes == 2048


def test_settings_table_prefix_is_the_local_shortcut():
    settings = Settings.from_env({"LAKESYNC_TABLE_PREFIX": "dev", "LAKESYNC_JWT_SECRET": SECRET})
    assert settings.tables == TableNames.with_prefix("dev")


def test_settings_secret_arn_replaces_the_secret():
    settings = Settings.from_env({**TABLES, "LAKESYNC_JWT_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:x"})
    assert settings.jwt_secrets == () and settings.jwt_secret_arn == "arn:aws:secretsmanager:eu-west-1:1:secret:x"


def test_settings_ignore_empty_and_foreign_variables():
    settings = Settings.from_env(_env(LAKESYNC_GATEWAY_IDS="", LAKESYNC_JWT_SECRET_PREVIOUS="", HOME="/root"))
    assert settings.gateway_ids == frozenset({"default"}) and settings.jwt_secrets == (SECRET,)


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({"LAKESYNC_JWT_SECRET": SECRET}, "missing LAKESYNC_TABLE_DELTAS, LAKESYNC_TABLE_ROWS"),
        ({**TABLES, "LAKESYNC_TABLE_DELTAS": ""}, "missing LAKESYNC_TABLE_DELTAS (or set LAKESYNC_TABLE_PREFIX)"),
        (_env(LAKESYNC_TABLE_PREFIX="dev"), "set either LAKESYNC_TABLE_PREFIX or the 6 LAKESYNC_TABLE_* names"),
        (_env(LAKESYNC_TABLE_ROWS="a b"), "table name 'a b' (rows) is not a valid DynamoDB table name"),
        (TABLES, "missing LAKESYNC_JWT_SECRET (or LAKESYNC_JWT_SECRET_ARN)"),
        (_env(LAKESYNC_JWT_SECRET="short"), "LAKESYNC_JWT_SECRET must be at least 32 bytes (it has 5)"),
        (_env(LAKESYNC_JWT_SECRET="k" * 31), "LAKESYNC_JWT_SECRET must be at least 32 bytes (it has 31)"),
        (_env(LAKESYNC_JWT_SECRET_PREVIOUS="short"), "LAKESYNC_JWT_SECRET_PREVIOUS must be at least 32 bytes"),
        (_env(LAKESYNC_MAX_TOKEN_LIFETIME_S="59"), "LAKESYNC_MAX_TOKEN_LIFETIME_S must be an integer >= 60, got '59'"),
        (
            _env(LAKESYNC_MAX_TOKEN_LIFETIME_S="2592001"),
            "LAKESYNC_MAX_TOKEN_LIFETIME_S must be at most 2,592,000 s, got 2,592,001",
        ),
        (_env(LAKESYNC_JWT_SECRET_ARN="arn:x"), "set either LAKESYNC_JWT_SECRET_ARN or LAKESYNC_JWT_SECRET"),
        (_env(LAKESYNC_GATEWAY_IDS="a,,b"), "LAKESYNC_GATEWAY_IDS holds invalid gateway ids ['']"),
        (_env(LAKESYNC_GATEWAY_IDS="a/b"), "invalid gateway ids ['a/b']"),
        (_env(LAKESYNC_FLUSH_THRESHOLD_BYTES="0"), "LAKESYNC_FLUSH_THRESHOLD_BYTES must be an integer >= 1, got '0'"),
        (_env(LAKESYNC_BACKPRESSURE_BYTES="-1"), "LAKESYNC_BACKPRESSURE_BYTES must be an integer >= 0"),
        (_env(LAKESYNC_MAX_BODY_BYTES="1e6"), "LAKESYNC_MAX_BODY_BYTES must be an integer >= 1, got '1e6'"),
        (_env(LAKESYNC_MAX_BODY_BYTES="١٢"), "LAKESYNC_MAX_BODY_BYTES must be an integer"),
        (_env(LAKESYNC_SUB_SHARDS="[1]"), "LAKESYNC_SUB_SHARDS must be a JSON object"),
        (_env(LAKESYNC_SUB_SHARDS="{"), "LAKESYNC_SUB_SHARDS must be a JSON object"),
        (_env(LAKESYNC_SUB_SHARDS='{"1x": 2}'), "LAKESYNC_SUB_SHARDS: '1x' is not a valid table name"),
        (_env(LAKESYNC_SUB_SHARDS='{"t": 0}'), "LAKESYNC_SUB_SHARDS: t must map to an integer in 1..256, got 0"),
        (_env(LAKESYNC_SUB_SHARDS='{"t": true}'), "LAKESYNC_SUB_SHARDS: t must map to an integer in 1..256, got True"),
        (_env(LAKESYNC_PULL_BASIS_TTL_MS="-1"), "LAKESYNC_PULL_BASIS_TTL_MS must be an integer >= 0, got '-1'"),
        (_env(LAKESYNC_PULL_BASIS_TTL_MS="60001"), "LAKESYNC_PULL_BASIS_TTL_MS must be at most 60,000 ms, got 60,001"),
    ],
)
def test_settings_invalid_environment_is_a_clear_error(env, fragment):
    with pytest.raises(SettingsError) as err:
        Settings.from_env(env)
    assert fragment in str(err.value)


def test_max_body_is_the_largest_whose_base64_event_fits_lambdas_payload():
    # Given the largest body the settings accept, and one byte more
    def event_bytes(body: int) -> int:
        # HTTP API base64-encodes a binary body; the rest of the event is bounded by EVENT_OVERHEAD_BYTES
        return 4 * -(-body // 3) + EVENT_OVERHEAD_BYTES

    # Then its event is smaller than Lambda's 6,291,456-byte limit and a bigger body's would not be
    assert LAMBDA_PAYLOAD_BYTES == 6_291_456
    assert event_bytes(MAX_BODY_BYTES_LIMIT) < LAMBDA_PAYLOAD_BYTES <= event_bytes(MAX_BODY_BYTES_LIMIT + 1)
    assert MAX_BODY_BYTES_LIMIT == 4_669_437  # the figure docs/deployment.md quotes (4.45 MiB)
    # And the settings take it but refuse one byte more, naming the bound
    assert (
        Settings.from_env(_env(LAKESYNC_MAX_BODY_BYTES=str(MAX_BODY_BYTES_LIMIT))).max_body_bytes
        == MAX_BODY_BYTES_LIMIT
    )
    with pytest.raises(SettingsError, match="LAKESYNC_MAX_BODY_BYTES must be at most 4,669,437 bytes"):
        Settings.from_env(_env(LAKESYNC_MAX_BODY_BYTES=str(MAX_BODY_BYTES_LIMIT + 1)))


def test_settings_report_every_problem_at_once():
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"LAKESYNC_MAX_BODY_BYTES": "x", "LAKESYNC_SUB_SHARDS": "x"})
    message = str(err.value)
    for var in ("LAKESYNC_TABLE_DELTAS", "LAKESYNC_JWT_SECRET", "LAKESYNC_MAX_BODY_BYTES", "LAKESYNC_SUB_SHARDS"):
        assert var in message


def test_function_env_vars_cover_what_settings_read():
    # Given every LAKESYNC_* constant the settings' variables module defines
    from lakesync.aws.settings import variables

    constants = {
        v for k, v in vars(variables).items() if k.isupper() and isinstance(v, str) and v.startswith("LAKESYNC_")
    }
    # Then the API functions declare exactly those (and the six table names) but the job names and whether the flush
    # publishes, which flush_trigger and lake_tick read, the flush function's name, timeout and backlog limit (both
    # of them too; the trigger also the gateways, whose backlog it reads),
    # the compaction policy (lake_tick), the flush function's own lake settings, the claim-check bucket, which
    # materialise and the flush function read, and the WebSocket functions' sessions table and callback URL; health
    # and rotate_secret read none
    jobs = {*JOB_NAME_VARS.values(), FLUSH_PUBLISHES}
    function = {FLUSH_FUNCTION_NAME, FLUSH_FUNCTION_TIMEOUT_S, FLUSH_FUNCTION_MAX_BACKLOG}
    lake = {LAKE_WAREHOUSE, LAKE_CATALOG, LAKE_CATALOG_URI, LAKE_NAMESPACE, MATERIALISE_QUEUE_URL}
    lake |= {FLUSH_RETENTION_MS, FLUSH_MAX_DELTAS}
    realtime = {CONNECTIONS_TABLE, WS_CALLBACK_URL}
    policy = {COMPACT_MIN_FLUSH_RUNS, COMPACT_MAX_WAIT_MINUTES}
    assert constants | set(TABLE_VARS.values()) == (
        set(API_ENV_VARS) | jobs | function | lake | {CLAIM_CHECK_BUCKET} | realtime | policy
    )
    assert FUNCTION_ENV_VARS["health"] == FUNCTION_ENV_VARS["rotate_secret"] == frozenset()
    assert FUNCTION_ENV_VARS["flush_trigger"] == {
        GATEWAY_IDS,
        FLUSH_JOB_NAME,
        *function,
        TABLE_PREFIX,
        *TABLE_VARS.values(),
    }
    assert FUNCTION_ENV_VARS["flush"] == {GATEWAY_IDS, TABLE_PREFIX, *TABLE_VARS.values(), CHECKPOINT_BUCKET} | lake | {
        CLAIM_CHECK_BUCKET
    }
    assert FUNCTION_ENV_VARS["lake_tick"] == {
        GATEWAY_IDS,
        TABLE_PREFIX,
        *TABLE_VARS.values(),
        CHECKPOINT_BUCKET,
        *jobs,
        *function,
        *policy,
    }
    # materialise dials the destinations: it reads the network policy and the destination secret prefix too
    assert FUNCTION_ENV_VARS["materialise"] == {
        TABLE_PREFIX,
        *TABLE_VARS.values(),
        CLAIM_CHECK_BUCKET,
        *NETWORK_ENV_VARS,
        DESTINATION_SECRET_PREFIX,
    }
    assert {FUNCTION_ENV_VARS[f] for f in ("push", "pull", "actions", "admin")} == {API_ENV_VARS}
    assert FUNCTION_ENV_VARS["ws_connect"] == API_ENV_VARS | {CONNECTIONS_TABLE}
    assert FUNCTION_ENV_VARS["ws_message"] == API_ENV_VARS | realtime
    memberships = {CHECKPOINT_BUCKET, SUB_SHARDS}  # the membership tables the broadcaster reads
    assert FUNCTION_ENV_VARS["ws_broadcast"] == {TABLE_PREFIX, *TABLE_VARS.values(), *realtime, *memberships}


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"LAKESYNC_TABLE_PREFIX": "ls"}, RealtimeSettings("ls-connections")),
        (
            {"LAKESYNC_TABLE_PREFIX": "ls", "LAKESYNC_CONNECTIONS_TABLE": "stack-Conn-1", "LAKESYNC_WS_CALLBACK_URL":
                "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/prod/"},
            RealtimeSettings("stack-Conn-1", "https://a1b2c3d4e5.execute-api.eu-west-1.amazonaws.com/prod"),
        ),
        ({"LAKESYNC_CONNECTIONS_TABLE": "c-1", "LAKESYNC_WS_CALLBACK_URL": "http://127.0.0.1:8787"},
            RealtimeSettings("c-1", "http://127.0.0.1:8787")),
    ],
)  # fmt: skip
def test_realtime_settings_name_the_sessions_table_and_the_callback_url(env, expected):
    assert RealtimeSettings.from_env(env) == expected


@pytest.mark.parametrize(
    ("env", "fragment"),
    [
        ({}, "missing LAKESYNC_CONNECTIONS_TABLE (or set LAKESYNC_TABLE_PREFIX)"),
        ({"LAKESYNC_CONNECTIONS_TABLE": "a b"}, "is not a valid DynamoDB table name"),
        ({"LAKESYNC_TABLE_PREFIX": "ls", "LAKESYNC_WS_CALLBACK_URL": "wss://x/prod"}, "is not an http(s) URL"),
    ],
)
def test_realtime_settings_invalid_environment_is_a_clear_error(env, fragment):
    with pytest.raises(SettingsError, match=re.escape(fragment)):
        RealtimeSettings.from_env(env)


def test_the_broadcaster_needs_the_tables_and_the_callback_url():
    with pytest.raises(SettingsError) as err:
        BroadcastSettings.from_env({"LAKESYNC_CONNECTIONS_TABLE": "c-1"})
    assert "LAKESYNC_WS_CALLBACK_URL" in str(err.value) and "LAKESYNC_TABLE_DELTAS" in str(err.value)
    with pytest.raises(SettingsError, match="missing LAKESYNC_WS_CALLBACK_URL"):
        RealtimeSettings.from_env({"LAKESYNC_TABLE_PREFIX": "ls"}, sends=True)
    ok = BroadcastSettings.from_env({"LAKESYNC_TABLE_PREFIX": "ls", "LAKESYNC_WS_CALLBACK_URL": "http://h:1/s"})
    assert ok.tables == TableNames.with_prefix("ls") and ok.realtime == RealtimeSettings(
        "ls-connections", "http://h:1/s"
    )
    # And without a checkpoint bucket or sub-shards, membership tables are read from the log of one shard each
    assert ok.checkpoint_bucket is None and ok.sub_shards == {}


def test_the_broadcaster_reads_the_checkpoint_bucket_and_the_sub_shards_as_the_api_functions_do():
    # Given the broadcaster's variables with the checkpoint bucket and sub-shards
    env = {"LAKESYNC_TABLE_PREFIX": "ls", "LAKESYNC_WS_CALLBACK_URL": "http://h:1/s"}
    ok = BroadcastSettings.from_env({**env, CHECKPOINT_BUCKET: " my-ckpts ", SUB_SHARDS: '{"memberships": 4}'})
    # Then it reads them as the API functions' settings do
    api = Settings.from_env({**_env(), CHECKPOINT_BUCKET: " my-ckpts ", SUB_SHARDS: '{"memberships": 4}'})
    assert (
        (ok.checkpoint_bucket, ok.sub_shards)
        == (api.checkpoint_bucket, api.sub_shards)
        == (
            "my-ckpts",
            {"memberships": 4},
        )
    )
    # And refuses what they refuse, every problem at once
    with pytest.raises(SettingsError) as err:
        BroadcastSettings.from_env({**env, CHECKPOINT_BUCKET: "Not_A_Bucket", SUB_SHARDS: '{"t": 0}'})
    assert "LAKESYNC_CHECKPOINT_BUCKET 'Not_A_Bucket' is not a valid S3 bucket name" in str(err.value)
    assert "LAKESYNC_SUB_SHARDS: t must map to an integer in 1..256, got 0" in str(err.value)


def test_materialise_settings_need_tables_and_a_valid_claim_check_bucket():
    # Given the materialise function's variables
    settings = MaterialiseSettings.from_env({TABLE_PREFIX: "ls", CLAIM_CHECK_BUCKET: "my-claims"})
    # Then they name the tables and the bucket
    assert settings.claim_check_bucket == "my-claims"
    assert settings.tables == TableNames.with_prefix("ls")
    # And a missing or invalid bucket, or missing tables, are reported together
    with pytest.raises(SettingsError) as missing:
        MaterialiseSettings.from_env({})
    assert CLAIM_CHECK_BUCKET in str(missing.value) and TABLE_PREFIX in str(missing.value)
    with pytest.raises(SettingsError, match="not a valid S3 bucket name"):
        MaterialiseSettings.from_env({TABLE_PREFIX: "ls", CLAIM_CHECK_BUCKET: "Bad_Bucket"})


TICK_ENV = {
    TABLE_PREFIX: "ls",
    GATEWAY_IDS: "web, app",
    FLUSH_PUBLISHES: "true",
    **{var: f"lakesync-{job}" for job, var in JOB_NAME_VARS.items()},
}


def test_lake_tick_settings_name_the_jobs_the_tables_and_the_gateways():
    # Given the tick's variables, with and without a checkpoint bucket
    settings = LakeTickSettings.from_env(TICK_ENV)
    with_bucket = LakeTickSettings.from_env({**TICK_ENV, CHECKPOINT_BUCKET: "ckpt", FLUSH_PUBLISHES: "False"})
    # Then they name the three jobs, the tables, the gateways (sorted), publishing and the bucket
    assert dict(settings.job_names) == {
        "flush": "lakesync-flush",
        "compact": "lakesync-compact",
        "checkpoint": "lakesync-checkpoint",
    }
    assert settings.tables == TableNames.with_prefix("ls")
    assert settings.gateway_ids == ("app", "web")
    assert (settings.flush_publishes, settings.checkpoint_bucket) == (True, None)
    assert (with_bucket.flush_publishes, with_bucket.checkpoint_bucket) == (False, "ckpt")
    # and compaction waits for the default policy unless told otherwise
    assert settings.compact_policy == DEFAULT_COMPACT_POLICY == CompactPolicy(16, 6 * 3600 * 1000)
    tuned = LakeTickSettings.from_env({**TICK_ENV, COMPACT_MIN_FLUSH_RUNS: "4", COMPACT_MAX_WAIT_MINUTES: "0"})
    assert tuned.compact_policy == CompactPolicy(min_flush_runs=4, max_wait_ms=0)


def test_lake_tick_settings_report_every_problem_at_once():
    env = {GATEWAY_IDS: "bad id", FLUSH_PUBLISHES: "yes", JOB_NAME_VARS["compact"]: "a\nb", CHECKPOINT_BUCKET: "B"}
    env |= {COMPACT_MIN_FLUSH_RUNS: "26", COMPACT_MAX_WAIT_MINUTES: "-1"}
    with pytest.raises(SettingsError) as error:
        LakeTickSettings.from_env(env)
    message = str(error.value)
    for fragment in (
        "invalid gateway ids",
        TABLE_PREFIX,
        f"{FLUSH_PUBLISHES} must be true or false",
        f"missing {JOB_NAME_VARS['flush']}",
        f"{JOB_NAME_VARS['compact']} 'a\\nb' is not a Glue job name",
        f"missing {JOB_NAME_VARS['checkpoint']}",
        "not a valid S3 bucket name",
        f"{COMPACT_MIN_FLUSH_RUNS} must be at most 25 runs, got 26",
        f"{COMPACT_MAX_WAIT_MINUTES} must be an integer >= 0, got '-1'",
    ):
        assert fragment in message


def test_env_reads_only_non_empty_lakesync_variables():
    # Given an environment with an empty, a blank and a foreign variable besides one set
    env = Env({"LAKESYNC_A": " a ", "LAKESYNC_B": "", "LAKESYNC_C": "  ", "HOME": "/root"})
    # Then only the set one counts, as set (raw) and stripped (text), and the others read as their defaults
    assert "LAKESYNC_A" in env and "LAKESYNC_B" not in env and "LAKESYNC_C" not in env and "HOME" not in env
    assert (env.raw("LAKESYNC_A"), env.text("LAKESYNC_A"), env.optional("LAKESYNC_A")) == (" a ", "a", "a")
    assert (env.raw("LAKESYNC_B"), env.text("LAKESYNC_B", "d"), env.optional("LAKESYNC_C")) == (None, "d", None)
    assert env.errors == []


def test_env_integers_name_the_variable_its_range_and_the_value():
    env = Env({"LAKESYNC_N": " 7 ", "LAKESYNC_BIG": "12000", "LAKESYNC_NEG": "-1", "LAKESYNC_X": "x"})
    # Then a valid value is read (stripped), an unset one is the default, and each bad one is the default with a
    # message naming the variable, the bound and the value
    assert env.integer("LAKESYNC_N", 1, 0) == 7
    assert env.integer("LAKESYNC_UNSET", 5, 0) == 5
    assert env.integer("LAKESYNC_BIG", 5, 0, 10_000, unit="ms") == 5
    assert env.integer("LAKESYNC_NEG", 5, 0) == 5
    assert env.optional_integer("LAKESYNC_X", 1) is None
    assert env.errors == [
        "LAKESYNC_BIG must be at most 10,000 ms, got 12,000",
        "LAKESYNC_NEG must be an integer >= 0, got '-1'",
        "LAKESYNC_X must be an integer >= 1, got 'x'",
    ]


def test_env_flags_names_json_and_required_values_report_their_problems_in_order():
    env = Env({"LAKESYNC_F": "TRUE", "LAKESYNC_G": "yes", "LAKESYNC_J": "[1]", "LAKESYNC_K": " bad name "})
    assert env.flag("LAKESYNC_F") is True
    assert env.flag("LAKESYNC_G", note="why") is False
    assert env.flag("LAKESYNC_UNSET", default="false") is False
    assert env.json_object("LAKESYNC_J", "{...}") is None
    assert env.name("LAKESYNC_K", re.compile(r"[a-z]+"), "a name") == "bad name"
    assert env.required("LAKESYNC_R", alternative="LAKESYNC_S") == ""
    assert env.bucket("LAKESYNC_K") == "bad name"
    assert env.errors == [
        "LAKESYNC_G must be true or false (why)",
        "LAKESYNC_J must be a JSON object {...}, got '[1]'",
        "LAKESYNC_K 'bad name' is not a name",
        "missing LAKESYNC_R (or LAKESYNC_S)",
        "LAKESYNC_K ' bad name ' is not a valid S3 bucket name",
    ]
    assert flag_problem("LAKESYNC_F", " False ") is None
