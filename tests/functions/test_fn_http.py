"""The HTTP edge shared by every handler (functions._http, functions._runtime): auth order and messages, unknown
routes and gateways, response headers, the 500 mapping, JWT secrets from Secrets Manager, metrics, health, and
serialised invocations.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import boto3
import pytest

import functions.health as health_fn
import functions.pull as pull_fn
import functions.push as push_fn
from functions._runtime import jwt_secrets, reset_runtime
from lakesync.auth import mint_token

SECRET = "functions-test-secret-0123456789"  # the api fixture's secret


def _b64(obj: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(obj).encode()).decode().rstrip("=")


# -- authentication and authorisation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("authorization", "error"),
    [
        (None, "Missing Bearer token"),
        ("Basic dXNlcjpwYXNz", "Missing Bearer token"),
        ("bearer abc.def.ghi", "Missing Bearer token"),
        ("Bearer a b", "Missing Bearer token"),
        ("Bearer abc", "Malformed JWT: expected three dot-separated segments"),
        ("Bearer a..c", "Malformed JWT: empty segment"),
        (
            f"Bearer {_b64({'alg': 'none', 'typ': 'JWT'})}.{_b64({'sub': 'x'})}.x",
            'Unsupported JWT: header must be {"alg":"HS256","typ":"JWT"}',
        ),
    ],
    ids=["none", "basic", "lowercase-bearer", "two-tokens", "one-segment", "empty-segment", "alg-none"],
)
def test_auth_bad_credentials_are_401(api, authorization, error):
    event = api.event("pull", token=None, headers={"authorization": authorization})
    reply = api.call(pull_fn, event)
    assert (reply.status, reply.json()) == (401, {"error": error, "code": "AUTH_ERROR"})


def test_auth_expired_token_is_401(api):
    assert api.secret == SECRET
    token = mint_token("client-a", "default", SECRET, ttl_s=60, now_ms=int(time.time() * 1000) - 3_600_000)
    reply = api.call(pull_fn, api.event("pull", token=token))
    assert (reply.status, reply.json()) == (401, {"error": "JWT has expired", "code": "AUTH_ERROR"})


def test_auth_token_of_another_secret_is_401(api):
    reply = api.call(pull_fn, api.event("pull", token=api.token(secret="someone-elses-secret-xyz")))
    assert (reply.status, reply.json()) == (401, {"error": "Invalid JWT signature", "code": "AUTH_ERROR"})


def test_auth_previous_secret_is_accepted_during_rotation(api, monkeypatch):
    # Given a rotation: the old secret became the previous one
    monkeypatch.setenv("LAKESYNC_JWT_SECRET", "the-new-primary-secret-0001-of-32-bytes")
    monkeypatch.setenv("LAKESYNC_JWT_SECRET_PREVIOUS", SECRET)
    reset_runtime()
    # When tokens signed with either secret arrive, Then both are accepted
    for secret in ("the-new-primary-secret-0001-of-32-bytes", SECRET):
        assert api.call(pull_fn, api.event("pull", token=api.token(secret=secret))).status == 200


def test_auth_token_for_another_gateway_is_403(api):
    reply = api.call(pull_fn, api.event("pull", token=api.token(gw="other")))
    assert (reply.status, reply.json()) == (
        403,
        {"error": "Gateway ID mismatch: JWT authorises a different gateway", "code": "FORBIDDEN"},
    )


def test_unknown_gateway_is_404_after_auth(api):
    # Given a valid token for a gateway this deployment does not serve
    reply = api.call(pull_fn, api.event("pull", token=api.token(gw="ghost"), gateway="ghost"))
    # Then 404 Gateway not found; without a valid token the same request is 401 (auth comes first)
    assert (reply.status, reply.json()) == (404, {"error": "Gateway not found", "code": "NOT_FOUND"})
    anonymous = api.call(pull_fn, api.event("pull", token=None, gateway="ghost"))
    assert anonymous.status == 401


def test_unknown_gateway_push_writes_nothing(api):
    before = api.items()
    reply = api.call(push_fn, api.event("push_json", token=api.token(gw="ghost"), gateway="ghost"))
    assert reply.status == 404
    assert api.items() == before


# -- routing and headers --------------------------------------------------------------------------------------------


def test_unknown_route_is_404(api):
    event = api.event("pull")
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/v1/nope"
    reply = api.call(pull_fn, event)
    assert (reply.status, reply.json()) == (404, {"error": "Not found", "code": "NOT_FOUND"})


def test_wrong_method_is_405_with_allow(api):
    event = api.event("pull")
    event["requestContext"]["http"]["method"] = "DELETE"
    reply = api.call(pull_fn, event)
    assert reply.status == 405
    assert reply.headers["Allow"] == "GET"
    assert reply.json() == {"error": "Method not allowed", "code": "VALIDATION_ERROR"}


@pytest.mark.parametrize("token", ["valid", None])
def test_every_response_carries_the_security_headers(api, token):
    event = api.event("pull", **({} if token else {"token": None}))
    reply = api.call(pull_fn, event)
    assert reply.status == (200 if token else 401)
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert reply.headers["API-Version"] == "v1"
    assert reply.headers["Cache-Control"] == "no-store"
    assert reply.headers["X-Request-Id"] == event["requestContext"]["requestId"]


def test_health_has_no_cache_control_and_no_auth(api):
    reply = api.call(health_fn, api.event("health"))
    assert (reply.status, reply.json()) == (200, {"status": "ok"})
    assert reply.headers["X-Content-Type-Options"] == "nosniff"
    assert "Cache-Control" not in reply.headers


def test_named_stage_prefix_is_routed(api):
    # Given the request arrives on stage "prod" (rawPath carries it, as on AWS)
    event = api.event("pull")
    event["requestContext"]["stage"] = "prod"
    event["rawPath"] = event["requestContext"]["http"]["path"] = "/prod" + event["rawPath"]
    reply = api.call(pull_fn, event)
    assert reply.status == 200
    assert reply.headers["Cache-Control"] == "no-store"


# -- failures are 500 without details -------------------------------------------------------------------------------


def _logged_errors(caplog: pytest.LogCaptureFixture) -> str:
    return "\n".join(f"{r.getMessage()} {r.exc_info[1]!r}" for r in caplog.records if r.exc_info)


def test_storage_failure_is_a_generic_500(api, monkeypatch, caplog):
    # Given tables that do not exist
    monkeypatch.setenv("LAKESYNC_TABLE_HEADS", "missing-heads-table")
    reset_runtime()
    # When a push is handled
    event = api.event("push_json")
    reply = api.call(push_fn, event)
    # Then the client gets a generic 500 with the request id; the details are only in the log, with the traceback
    assert reply.status == 500
    request_id = event["requestContext"]["requestId"]
    assert reply.json() == {"error": "Internal error", "code": "INTERNAL_ERROR", "requestId": request_id}
    assert "StorageError" in _logged_errors(caplog) and "ResourceNotFoundException" in _logged_errors(caplog)


def test_invalid_configuration_is_a_generic_500_logged_with_the_reason(api, monkeypatch, caplog):
    monkeypatch.delenv("LAKESYNC_JWT_SECRET")
    reset_runtime()
    reply = api.call(pull_fn, api.event("pull"))
    assert reply.status == 500 and reply.json()["error"] == "Internal error"
    assert "missing LAKESYNC_JWT_SECRET" in _logged_errors(caplog)


def test_health_needs_no_configuration_and_no_aws(bare_api, monkeypatch):
    # Given no LakeSync variables at all and an AWS endpoint nothing listens on
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    # When health is checked, Then it answers
    reply = bare_api.call(health_fn, bare_api.event("health"))
    assert (reply.status, reply.json()) == (200, {"status": "ok"})


# -- JWT secrets from Secrets Manager -------------------------------------------------------------------------------


@pytest.fixture
def secret_arn(api, monkeypatch, moto_endpoint):
    client = boto3.client("secretsmanager", endpoint_url=moto_endpoint, region_name="us-east-1")
    arn = client.create_secret(Name=f"jwt-{time.time_ns()}", SecretString=SECRET)["ARN"]
    monkeypatch.delenv("LAKESYNC_JWT_SECRET")
    monkeypatch.setenv("LAKESYNC_JWT_SECRET_ARN", arn)
    reset_runtime()
    return client, arn


def test_secret_arn_tokens_verify(api, secret_arn):
    assert api.call(pull_fn, api.event("pull")).status == 200
    assert api.call(pull_fn, api.event("pull", token=api.token(secret="not-the-secret-at-all"))).status == 401


def test_secret_rotation_accepts_current_and_previous(api, secret_arn):
    # Given the secret rotated to a new value (the old one becomes AWSPREVIOUS)
    client, arn = secret_arn
    client.put_secret_value(SecretId=arn, SecretString="rotated-secret-value-0002-of-32-bytes")
    reset_runtime()
    # Then tokens of both values verify, and the current one is tried first
    assert tuple(jwt_secrets()) == ("rotated-secret-value-0002-of-32-bytes", SECRET)
    for secret in ("rotated-secret-value-0002-of-32-bytes", SECRET):
        assert api.call(pull_fn, api.event("pull", token=api.token(secret=secret))).status == 200


def test_secret_is_cached_and_kept_when_a_refresh_fails(api, secret_arn, monkeypatch):
    # Given the secret was read once
    client, arn = secret_arn
    assert tuple(jwt_secrets()) == (SECRET,)
    client.delete_secret(SecretId=arn, ForceDeleteWithoutRecovery=True)
    # When it is read again within the TTL, and after the TTL while Secrets Manager fails
    assert tuple(jwt_secrets()) == (SECRET,)
    monkeypatch.setattr("lakesync.aws.lambda_runtime.SECRET_TTL_S", -1.0)
    assert tuple(jwt_secrets()) == (SECRET,)  # refreshes now, fails, keeps the cached value
    # Then a cold start without a cached value fails the request with a generic 500
    reset_runtime()
    assert api.call(pull_fn, api.event("pull")).status == 500


# -- runtime ---------------------------------------------------------------------------------------------------------


def test_handler_emits_request_metrics(api, capsys):
    capsys.readouterr()
    api.call(pull_fn, api.event("pull"))
    emf = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith('{"_aws"')]
    assert len(emf) == 1
    assert emf[0]["Requests"] == [1.0] and emf[0]["PulledDeltas"] == [0.0]
    assert emf[0]["_aws"]["CloudWatchMetrics"][0]["Namespace"] == "LakeSync"


def test_concurrent_invocations_keep_their_own_request(api):
    # Given requests of two gateways handled on many threads at once (as the local runner does)
    events = [api.event("pull", token=api.token(gw=gw), gateway=gw) for gw in ("default", "other") for _ in range(6)]
    barrier = threading.Barrier(len(events))

    def call(event):
        barrier.wait()
        return api.call(pull_fn, event)

    # When they run concurrently
    with ThreadPoolExecutor(len(events)) as pool:
        replies = list(pool.map(call, events))
    # Then each one was routed with its own event (a mixed-up event would be a 403 gateway mismatch)
    assert [r.status for r in replies] == [200] * len(events)
    assert [r.headers["X-Request-Id"] for r in replies] == [e["requestContext"]["requestId"] for e in events]
