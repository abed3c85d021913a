"""The flush lag alarm (issue 44, item 4: data at risk): it watches the lake tick's ``FlushLagSeconds``, the maximum
over two flush intervals, fires at the configured threshold (by default the longer of an hour and four flush
intervals) and notifies the alarm topic; no data (nothing waits) is OK. The threshold setting is validated: more than
the flush interval, at most a week."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match
from lakesync_infra.config import ConfigError, LakeSyncConfig

from tests.infra.test_infra_lake_tick import monitoring_template


def _flush_lag_alarm(alarms: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (alarm,) = [a for k, a in alarms.items() if k.startswith("MonitoringFlushLag")]
    return alarm


def test_flush_lag_alarm_watches_the_flush_ticks_metric_and_notifies_the_topic(cfn, ids, synth):
    # Given the stack's flush lag alarm (the dev environment: a flush tick every 60 minutes, no threshold set)
    alarm = _flush_lag_alarm(cfn.of_type("AWS::CloudWatch::Alarm"))
    assert synth.stack.config.flush_interval_minutes == 60
    # Then it watches the lake tick's FlushLagSeconds in the LakeSync namespace, the maximum over two ticks
    assert (alarm["Namespace"], alarm["MetricName"]) == ("LakeSync", "FlushLagSeconds")
    assert alarm["Dimensions"] == [{"Name": "service", "Value": "lake_tick"}]
    assert (alarm["Statistic"], alarm["Period"], alarm["Unit"]) == ("Maximum", 2 * 60 * 60, "Seconds")
    # And fires once the oldest unflushed commit is four flush intervals old; no data (nothing waits) is not an alarm
    assert alarm["Threshold"] == 4 * 60 * 60
    assert (alarm["ComparisonOperator"], alarm["EvaluationPeriods"]) == ("GreaterThanOrEqualToThreshold", 1)
    assert alarm["TreatMissingData"] == "notBreaching"
    # And it notifies the alarm topic
    assert alarm["AlarmActions"] == [{"Ref": ids["topic:alarms"]}]


def test_flush_lag_alarm_fires_at_the_configured_threshold():
    # Given an environment flushing every 10 minutes whose flush lag alarm is set to 45 minutes
    config = LakeSyncConfig.from_settings("prod", {"flushIntervalMinutes": 10, "flushLagAlarmMinutes": 45})
    # When its monitoring is synthesized
    template = monitoring_template(config)
    # Then the alarm fires at 45 minutes, over the maximum of two ticks
    template.has_resource_properties(
        "AWS::CloudWatch::Alarm",
        {
            "MetricName": "FlushLagSeconds",
            "Namespace": "LakeSync",
            "Threshold": 45 * 60,
            "Period": 20 * 60,
            "Statistic": "Maximum",
            "AlarmActions": Match.any_value(),
        },
    )


@pytest.mark.parametrize(
    ("settings", "minutes"),
    [
        ({}, 60),  # the default flush interval (15): an hour
        ({"flushIntervalMinutes": 60}, 240),  # four intervals beyond an hour
        ({"flushIntervalMinutes": 24 * 60}, 4 * 24 * 60),  # a daily flush: four days, within the week
        ({"flushIntervalMinutes": 15, "flushLagAlarmMinutes": 16}, 16),  # as set
    ],
)
def test_flush_lag_threshold_defaults_to_an_hour_or_four_flush_intervals(settings, minutes):
    assert LakeSyncConfig.from_settings("prod", settings).flush_lag_limit_minutes == minutes


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"flushIntervalMinutes": 30, "flushLagAlarmMinutes": 30}, r"flushLagAlarmMinutes \(30\) must exceed"),
        ({"flushLagAlarmMinutes": 7 * 24 * 60 + 1}, r"flushLagAlarmMinutes must be an integer in 2\.\.10080"),
        ({"flushLagAlarmMinutes": "an hour"}, r"flushLagAlarmMinutes must be an integer"),
        ({"flushLagAlarmMinutes": True}, r"flushLagAlarmMinutes must be an integer"),
    ],
)
def test_flush_lag_threshold_is_validated(settings, message):
    with pytest.raises(ConfigError, match=message):
        LakeSyncConfig.from_settings("prod", settings)
