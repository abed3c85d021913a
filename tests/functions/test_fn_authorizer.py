"""The HTTP API's Lambda authorizer (``functions.authorizer``) on its sample event: it admits the tokens the key
verifies -- well-signed expired ones too, so clients still get the 401 on which they refresh, and tokens of any
gateway, which the function answers 403 or 404 -- and refuses the rest, reading no table."""

from __future__ import annotations

import pytest

from functions import authorizer
from lakesync.auth import mint_token
from tests.functions.conftest import SECRET, Api


@pytest.mark.parametrize(
    ("token", "admitted"),
    [
        (lambda api: api.token(), True),
        (lambda api: api.admin_token(), True),
        (lambda api: api.token(gw="other"), True),
        (lambda api: mint_token("client-a", "default", SECRET, now_ms=1_000_000_000_000), True),
        (lambda api: api.token(secret="another-secret-of-enough-length-0123"), False),
        (lambda api: api.token(gw="elsewhere"), True),
        (lambda api: "not.a.token", False),
    ],
    ids=["client", "admin", "other served gateway", "expired", "foreign key", "any other gateway", "garbage"],
)
def test_the_authorizer_admits_what_the_functions_verify(api: Api, token: object, admitted: bool) -> None:
    event = api.event("authorizer", token=token(api))  # type: ignore[operator]
    event["identitySource"] = [event["headers"]["authorization"]]
    before = api.items()
    reply = authorizer.lambda_handler(event, api_context())
    assert reply == {"isAuthorized": admitted}
    assert api.items() == before


def test_a_header_that_is_not_a_bearer_token_is_refused(api: Api) -> None:
    event = api.event("authorizer", headers={"authorization": "Basic dXNlcjpwYXNz"})
    assert authorizer.lambda_handler(event, api_context()) == {"isAuthorized": False}


def api_context() -> object:
    from lakesync.local.front import LambdaContext

    return LambdaContext("lakesync-authorizer", "c0ffee00-0000-4000-8000-000000000001", "arn:aws:lambda:::function:a")
