"""The log-keys marker (lakesync_infra.rollout) in the synthesized template: CloudFormation creates it after every
function, Glue job and event source mapping, it names the config table, its grace outlasts the longest function
invocation and job run, and its function may write and delete items of the config table and nothing else there."""

from __future__ import annotations

from typing import Any

import pytest
from lakesync_infra.config import LakeSyncConfig
from lakesync_infra.rollout import marker_grace_ms

from lakesync.aws.log_chunks import LOG_FORMAT


def _marker(cfn: Any) -> dict[str, Any]:
    (marker,) = [r for r in cfn.resources.values() if r["Type"] == "Custom::LogKeysMarker"]
    return dict(marker)


@pytest.mark.parametrize("engine", ["function", "glue"])
def test_the_marker_comes_after_every_function_and_job(cfn, ids, glue_cfn, glue_ids, engine):
    template, names = (cfn, ids) if engine == "function" else (glue_cfn, glue_ids)
    marker = _marker(template)
    props = marker["Properties"]
    # It is served by the marker function and names the config table
    assert props["ServiceToken"] == {"Fn::GetAtt": [names["function:log_keys_marker"], "Arn"]}
    assert props["TableName"] == {"Ref": names["table:config"]}
    # It is created after every function (the marker's own included), job and stream mapping of the stack
    depends = set(marker["DependsOn"])
    functions = {fn["logical"] for fn in template.functions().values()}
    jobs = set(template.of_type("AWS::Glue::Job"))
    mappings = set(template.of_type("AWS::Lambda::EventSourceMapping"))
    assert functions and jobs and mappings
    assert functions | jobs | mappings <= depends, sorted((functions | jobs | mappings) - depends)
    # And its grace outlasts any invocation or job run that started before it
    longest_s = max(
        max(int(fn["Timeout"]) for fn in template.functions().values()),
        max(int(job["Timeout"]) * 60 for job in template.of_type("AWS::Glue::Job").values()),
    )
    assert int(props["GraceMs"]) > longest_s * 1000
    # And it names the newest chunk layout this release reads: a release reading a newer one updates it
    assert props["LogFormat"] == str(LOG_FORMAT)


def test_the_grace_follows_the_glue_timeout():
    # Lambda's longest invocation (15 minutes) rules short job timeouts; a longer job timeout rules past it
    assert marker_grace_ms(LakeSyncConfig(name="a", glue_timeout_minutes=5)) == (900 + 60) * 1000
    assert marker_grace_ms(LakeSyncConfig(name="a", glue_timeout_minutes=120)) == (7200 + 60) * 1000


def test_the_marker_function_writes_only_the_config_table(cfn, ids):
    role = cfn.role_of(cfn.functions()["log_keys_marker"])
    dynamodb = sorted((a, r) for a, r in cfn.allowed(role) if a.startswith("dynamodb:"))
    config = f"<{ids['table:config']}.Arn>"
    assert dynamodb == [("dynamodb:DeleteItem", config), ("dynamodb:PutItem", config)]


def test_the_marker_fails_within_minutes_when_its_function_never_answers(cfn):
    # CloudFormation waits an hour for a custom resource without ServiceTimeout: a function that fails at import
    # would hold the deploy an hour, and its rollback another
    marker = _marker(cfn)
    timeout_s = int(marker["Properties"]["ServiceTimeout"])
    # It waits out the function's three asynchronous attempts (a minute and two between them), and not much more
    function_s = int(cfn.functions()["log_keys_marker"]["Timeout"])
    assert 3 * function_s + 3 * 60 <= timeout_s <= 15 * 60
