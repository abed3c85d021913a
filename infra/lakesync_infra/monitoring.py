"""Alarms and a dashboard, kept to what an idle deployment can afford (docs/deployment.md, "Cost notes").

Alarms (all notify the alarm topic, KMS-encrypted; ``alarmEmail`` subscribes an address) -- each one costs $0.10 a
month, so each watches something no other alarm sees:

* any message in a dead-letter queue (materialisation DLQ, flush-trigger stream failures);
* API 5xx responses: an API function that raises, times out or is throttled answers 5xx, so this one alarm covers
  the API functions (their errors and throttles are on the dashboard, per function);
* any error (an unhandled exception or timeout) of the functions no client waits for: the flush trigger, the
  materialise consumer, the secret rotation, the lake tick (if it fails, no lake job starts), the connector poller
  (a source that fails or refuses, a push refused: the connector's position does not move, and its schedule's next
  tick polls again -- one alarm for every connector, the log names which), the real-time broadcaster and, with
  ``flushEngine: function``, the flush function (a run that failed or timed out: what the Glue failure rule below
  reports of the Glue flush job);
* the broadcaster falling behind the ``deltas`` stream: its ``IteratorAge`` above :data:`BROADCAST_AGE_LIMIT` (it
  fails and retries a batch, or cannot keep up); its exhausted batches land in ``BroadcastFailures`` (a DLQ above);
* materialisation: a range the flush could not publish after its retries (metric ``MaterialisePublishFailures`` of
  namespace ``LakeSync``, dimension ``service=flush``, emitted by the flush: the function or the Glue job), and a
  materialisation message older than :data:`QUEUE_AGE_LIMIT` (the consumer is failing or cannot keep up; messages
  are kept 14 days);
* a stale checkpoint: metric :data:`CHECKPOINT_AGE` (namespace ``LakeSync``, dimension ``service=lake_tick``), the
  seconds since the newest checkpoint of a gateway whose flushed data it does not cover, above
  :data:`CHECKPOINT_AGE_LIMIT`. The buffer is released only behind a checkpoint, so a stalled checkpoint job lets a
  hot shard's log grow toward the deltas table's 10 GB item-collection limit (its local secondary index), where
  pushes to it fail; this alarm says so long before. The lake tick's checkpoint ticks are to emit it (0 when every
  shard is covered, so an idle deployment never alarms); until they do, the alarm has no data and stays OK;
* data at risk: metric :data:`FLUSH_LAG` (namespace ``LakeSync``, dimension ``service=lake_tick``), the age of the
  oldest commit not yet in the lake, its maximum over :func:`flush_lag_period` above ``flushLagAlarmMinutes``
  (``LakeSyncConfig.flush_lag_limit_minutes``). A restore from the lake loses what was committed and not flushed, so
  this bounds what it could lose; the flush tick writes it while anything is unflushed (no data: nothing waits, OK),
  with ``UnflushedDeltas``, how many wait. The flush runs' own failures are reported (the Glue rule,
  ``FlushErrors``), but not a flush that cannot keep up, nor one the tick never starts. Neither metric is on the
  dashboard, whose 50 metrics are spent; the alarm's state is;
* a shard near its partition's ceiling: each table keyed by the shard
  (:meth:`lakesync_infra.buffer.Buffer.shard_tables`: ``deltas``, ``heads``) serves a shard from one partition, at
  most 1,000 write and 3,000 read units a second, beyond which the shard's requests are throttled whatever the
  on-demand table's capacity. A table's consumed units (``AWS/DynamoDB``, free, per minute) bound every shard's share
  of them, so an alarm per table and direction at :data:`SHARD_ALARM_SHARE` of one partition's units fires before any
  shard gets there -- and also when the traffic is spread over many shards, which the operator tells apart
  (docs/deployment.md, "Shard ceilings"). No per-shard signal is as cheap: DynamoDB's Contributor Insights names its
  rules after their creation time (DynamoDB developer guide, "CloudWatch contributor insights for DynamoDB: How it
  works"), so no alarm on them can be declared at synth, and costs $0.50 a rule a month (CloudWatch pricing; four
  rules on ``deltas``); a custom rule would need a log line per commit, and no one function instance sees a shard's
  whole traffic to emit a metric of its own;
* a Glue job run that FAILED, TIMEOUT or ERROR: an EventBridge rule on Glue's job state changes for our Glue jobs
  sends the event itself to the topic (the message says which job and run); the rule's ``TriggeredRules`` metric
  is on the dashboard (no alarm: the rule already notifies).

Throttles of the functions outside the API are retried by their event sources (the stream, the queue, the
schedules' asynchronous invocations) and show up as the alarms above when they persist (queue age, DLQ, errors).

The dashboard (``dashboard: true``) holds at most :data:`DASHBOARD_METRICS` metrics, so it is one of the three free
ones of an account that has no more; beyond them a dashboard costs $3 a month, which is why it is opt-in.
"""

from __future__ import annotations

from collections.abc import Mapping

import aws_cdk as cdk
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as events_targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from lakesync_infra.buffer import PARTITION_READ_UNITS, PARTITION_WRITE_UNITS
from lakesync_infra.config import EXTRA_FUNCTIONS, REALTIME_FUNCTIONS, LakeSyncConfig
from lakesync_infra.jobs import METRIC_NAMESPACE

FAILED_STATES = ("FAILED", "TIMEOUT", "ERROR")
PERIOD = cdk.Duration.minutes(5)
PUBLISH_FAILURES = "MaterialisePublishFailures"
"""The flush's metric (``lakesync.aws.publish.FAILURE_METRIC``), dimension ``service=flush``."""
QUEUE_AGE_LIMIT = cdk.Duration.hours(1)
CHECKPOINT_AGE = "CheckpointAgeSeconds"
"""The lake tick's metric: seconds since the newest checkpoint of the gateway that lags it most (0: none lags)."""
CHECKPOINT_AGE_LIMIT = cdk.Duration.hours(24)
"""Beyond the longest default checkpoint schedule (1 day in dev) by the time a few failed runs take to notice; the
buffer's log items expire 14 days after their commit, so a day leaves time to act."""
FLUSH_LAG = "FlushLagSeconds"
"""The lake tick's metric: the age of the oldest commit not yet flushed, over the gateways (no data: none waits)."""
BROADCASTER = "ws_broadcast"
BROADCAST_AGE_LIMIT = cdk.Duration.minutes(1)
AUTHORIZER = "authorizer"
"""The HTTP API's token authorizer: API Gateway answers 500 when it fails, so ``Api5xx`` alarms on it."""
ERROR_ALARMED = (*(f for f in EXTRA_FUNCTIONS if f != AUTHORIZER), BROADCASTER)
"""Functions with an error alarm: those no client waits for (an API function's failure, the authorizer's included, is
a 5xx answer; a WebSocket route's failure is a refused upgrade or a closed socket, which the client sees and
retries)."""
QUIET_FUNCTIONS = ("rotate_secret", "connector_poll", *(f for f in REALTIME_FUNCTIONS if f != BROADCASTER))
"""Functions too trivial or too rare for the invocation, duration and throttle graphs (their errors are graphed); the
WebSocket routes and the connector poller (one invocation per connector and schedule tick; its errors alarm) are here
so the dashboard stays within :data:`DASHBOARD_METRICS`."""
UNGRAPHED = ("health", AUTHORIZER, "flush")
"""Functions left off the dashboard entirely (the dashboard has no room): ``health`` does no I/O, a failure of it is
an API 5xx (graphed and alarmed), as is one of the authorizer (about one invocation per token and cache period);
the flush function runs at most one run at a time, and its
errors alarm is on the dashboard's alarm widget (as the Glue flush job's failures are on its graph of failed
runs)."""
OWN_ROW = "materialise"
"""The function with its own dashboard row (left out of the per-function graphs)."""
SHARD_ALARM_SHARE = 0.8
"""The share of one partition's units a second (a minute's average) at which a shard table's alarm fires."""
SHARD_PERIOD = cdk.Duration.minutes(1)
"""DynamoDB publishes consumed capacity per minute; the ceiling is per second, so the shortest period."""
DASHBOARD_METRICS = 50
"""The most metrics a free dashboard may show (CloudWatch's free tier: 3 dashboards of up to 50 metrics)."""


def flush_lag_period(config: LakeSyncConfig) -> cdk.Duration:
    """The ``FlushLag`` alarm's period: two flush intervals, so that each holds a value of the flush tick's (written
    once an interval), at most a day (CloudWatch's limit)."""
    return cdk.Duration.minutes(min(2 * config.flush_interval_minutes, 24 * 60))


class Monitoring(Construct):
    """The alarm topic, the alarms and the dashboard.

    Attributes:
        topic: Where alarms and Glue failures are sent.
        alarms: Every alarm, by name.
        glue_failures: The EventBridge rule matching failed job runs.
        dashboard: The CloudWatch dashboard (``None`` unless the configuration asks for it).
    """

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: LakeSyncConfig,
        functions: Mapping[str, lambda_.IFunction],
        dead_letter_queues: Mapping[str, sqs.IQueue],
        job_names: Mapping[str, str],
        http_api: apigwv2.IHttpApi,
        materialise_queue: sqs.IQueue,
        materialise_dead_letters: sqs.IQueue,
        materialise: lambda_.IFunction,
        shard_tables: Mapping[str, dynamodb.ITable],
    ) -> None:
        super().__init__(scope, construct_id)
        key = kms.Key(
            self,
            "AlarmKey",
            description=f"LakeSync {config.name}: alarm topic",
            enable_key_rotation=True,
            removal_policy=cdk.RemovalPolicy.DESTROY,
            pending_window=cdk.Duration.days(7),
        )
        for service in ("cloudwatch.amazonaws.com", "events.amazonaws.com"):
            key.add_to_resource_policy(
                iam.PolicyStatement(
                    sid=f"Publish{service.split('.')[0].capitalize()}",
                    principals=[iam.ServicePrincipal(service)],
                    actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                    resources=["*"],
                    conditions={"StringEquals": {"aws:SourceAccount": cdk.Aws.ACCOUNT_ID}},
                )
            )
        self.topic = sns.Topic(self, "Alarms", master_key=key, enforce_ssl=True)
        if config.alarm_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alarm_email))
        notify = actions.SnsAction(self.topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}

        def alarm(name: str, metric: cloudwatch.IMetric, description: str, *, threshold: float = 1) -> None:
            created = cloudwatch.Alarm(
                self,
                name,
                metric=metric,
                threshold=threshold,
                evaluation_periods=1,
                comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
                alarm_description=description,
            )
            created.add_alarm_action(notify)
            self.alarms[name] = created

        for name, queue in dead_letter_queues.items():
            alarm(
                f"{name}Depth",
                queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
                f"Messages in {name}: something failed repeatedly and waits for an operator",
            )
        for name, fn in functions.items():
            if name in ERROR_ALARMED:
                pascal = "".join(p.capitalize() for p in name.split("_"))
                alarm(f"{pascal}Errors", fn.metric_errors(period=PERIOD), f"functions.{name} raised or timed out")
        api_5xx = cloudwatch.Metric(
            namespace="AWS/ApiGateway",
            metric_name="5xx",
            dimensions_map={"ApiId": http_api.api_id},
            statistic="Sum",
            period=PERIOD,
        )
        alarm("Api5xx", api_5xx, "The API answered 5xx: a function raised, timed out or was throttled (its log says)")
        if BROADCASTER in functions:
            alarm(
                "BroadcastIteratorAge",
                functions[BROADCASTER].metric(
                    "IteratorAge", statistic="Maximum", period=PERIOD, unit=cloudwatch.Unit.MILLISECONDS
                ),
                f"The broadcaster is more than {BROADCAST_AGE_LIMIT.to_human_string()} behind the deltas stream: it "
                "fails and retries batches or cannot keep up (its errors and log say which)",
                threshold=BROADCAST_AGE_LIMIT.to_milliseconds(),
            )

        for kind, table in shard_tables.items():
            for direction, units, metric in (
                ("Writes", PARTITION_WRITE_UNITS, table.metric_consumed_write_capacity_units),
                ("Reads", PARTITION_READ_UNITS, table.metric_consumed_read_capacity_units),
            ):
                alarm(
                    f"{kind.capitalize()}Shard{direction}",
                    metric(period=SHARD_PERIOD, statistic="Sum"),
                    f"The {kind} table consumed {SHARD_ALARM_SHARE:.0%} of one partition's {units:,} "
                    f"{direction[:-1].lower()} units a second over a minute: a shard may be near its ceiling, past "
                    "which its requests are throttled (503). Find the hot table (GET /v1/admin/metrics, twice) and "
                    "give it more subShards (docs/deployment.md, Shard ceilings)",
                    threshold=SHARD_ALARM_SHARE * units * SHARD_PERIOD.to_seconds(),
                )

        self.glue_failures = events.Rule(
            self,
            "GlueJobFailed",
            description="A LakeSync Glue job run failed",
            event_pattern=events.EventPattern(
                source=["aws.glue"],
                detail_type=["Glue Job State Change"],
                detail={"jobName": list(job_names.values()), "state": list(FAILED_STATES)},
            ),
            targets=[events_targets.SnsTopic(self.topic)],
        )
        glue_failed = cloudwatch.Metric(
            namespace="AWS/Events",
            metric_name="TriggeredRules",
            dimensions_map={"RuleName": self.glue_failures.rule_name},
            statistic="Sum",
            period=PERIOD,
        )

        publish_failures = cloudwatch.Metric(
            namespace=METRIC_NAMESPACE,
            metric_name=PUBLISH_FAILURES,
            dimensions_map={"service": "flush"},
            statistic="Sum",
            period=PERIOD,
        )
        alarm(
            "MaterialisePublishFailures",
            publish_failures,
            "The flush could not publish materialisation ranges after retries (its log says why); the next flush "
            "retries them",
        )
        checkpoint_age = cloudwatch.Metric(
            namespace=METRIC_NAMESPACE,
            metric_name=CHECKPOINT_AGE,
            dimensions_map={"service": "lake_tick"},
            statistic="Maximum",
            period=cdk.Duration.hours(1),
            unit=cloudwatch.Unit.SECONDS,
        )
        alarm(
            "CheckpointAge",
            checkpoint_age,
            f"The newest checkpoint is more than {CHECKPOINT_AGE_LIMIT.to_human_string()} behind flushed data: the "
            "checkpoint job fails or does not run (see its Glue runs and the lake tick's log). The buffer is not "
            "released meanwhile, and a hot shard's log grows toward the deltas table's 10 GB item-collection limit",
            threshold=CHECKPOINT_AGE_LIMIT.to_seconds(),
        )
        flush_lag = cloudwatch.Metric(
            namespace=METRIC_NAMESPACE,
            metric_name=FLUSH_LAG,
            dimensions_map={"service": "lake_tick"},
            statistic="Maximum",
            period=flush_lag_period(config),
            unit=cloudwatch.Unit.SECONDS,
        )
        lag_limit = cdk.Duration.minutes(config.flush_lag_limit_minutes)
        alarm(
            "FlushLag",
            flush_lag,
            f"A commit has waited more than {lag_limit.to_human_string()} for the flush: a restore from the lake "
            "would lose it and every later one (GET /v1/admin/metrics/{gw}, flushLag, says how much). The flush "
            "fails, is not started or cannot keep up: see the lake tick's log and the flush runs",
            threshold=lag_limit.to_seconds(),
        )
        queue_age = materialise_queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum")
        alarm(
            "MaterialiseQueueAge",
            queue_age,
            f"A materialisation message waits for more than {QUEUE_AGE_LIMIT.to_human_string()}: the consumer fails "
            "or cannot keep up (see the materialise function's errors and the DLQ)",
            threshold=QUEUE_AGE_LIMIT.to_seconds(),
        )

        self.dashboard: cloudwatch.Dashboard | None = None
        if config.dashboard:
            self.dashboard = self._dashboard(
                functions,
                http_api,
                api_5xx,
                publish_failures,
                queue_age,
                glue_failed,
                materialise_queue,
                materialise_dead_letters,
                materialise,
            )

    def _dashboard(
        self,
        functions: Mapping[str, lambda_.IFunction],
        http_api: apigwv2.IHttpApi,
        api_5xx: cloudwatch.IMetric,
        publish_failures: cloudwatch.Metric,
        queue_age: cloudwatch.Metric,
        glue_failed: cloudwatch.Metric,
        materialise_queue: sqs.IQueue,
        materialise_dead_letters: sqs.IQueue,
        materialise: lambda_.IFunction,
    ) -> cloudwatch.Dashboard:
        """API traffic and latency, the functions, materialisation, failed Glue runs and the alarms' states."""
        dashboard = cloudwatch.Dashboard(self, "Dashboard", default_interval=cdk.Duration.hours(6))
        api_metric = {"namespace": "AWS/ApiGateway", "dimensions_map": {"ApiId": http_api.api_id}, "period": PERIOD}
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="API requests and errors",
                left=[
                    cloudwatch.Metric(metric_name="Count", statistic="Sum", **api_metric),  # type: ignore[arg-type]
                    cloudwatch.Metric(metric_name="4xx", statistic="Sum", **api_metric),  # type: ignore[arg-type]
                    api_5xx,
                ],
                width=12,
            ),
            cloudwatch.GraphWidget(
                title="API latency (p50, p99)",
                left=[
                    cloudwatch.Metric(metric_name="Latency", statistic="p50", **api_metric),  # type: ignore[arg-type]
                    cloudwatch.Metric(metric_name="Latency", statistic="p99", **api_metric),  # type: ignore[arg-type]
                ],
                width=12,
            ),
        )
        graphed = {name: fn for name, fn in functions.items() if name != OWN_ROW and name not in UNGRAPHED}
        busy = {name: fn for name, fn in graphed.items() if name not in QUIET_FUNCTIONS}
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Function invocations",
                left=[fn.metric_invocations(period=PERIOD, label=name) for name, fn in busy.items()],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Function errors and throttles",
                left=[fn.metric_errors(period=PERIOD, label=f"{name} errors") for name, fn in graphed.items()],
                right=[fn.metric_throttles(period=PERIOD, label=f"{name} throttles") for name, fn in busy.items()],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Function duration p99",
                left=[fn.metric_duration(period=PERIOD, statistic="p99", label=name) for name, fn in busy.items()],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Materialise: errors and publish failures",
                left=[
                    materialise.metric_errors(period=PERIOD, label="consumer errors"),
                    publish_failures.with_(label="ranges not published"),
                ],
                right=[materialise.metric_invocations(period=PERIOD, label="consumer invocations")],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Materialise: consumer duration (p50, p99)",
                left=[
                    materialise.metric_duration(period=PERIOD, statistic="p50", label="p50"),
                    materialise.metric_duration(period=PERIOD, statistic="p99", label="p99"),
                ],
                width=8,
            ),
            cloudwatch.GraphWidget(
                title="Materialise: queue",
                left=[
                    materialise_queue.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic="Maximum", label="queued"
                    ),
                    materialise_dead_letters.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic="Maximum", label="dead letters"
                    ),
                ],
                right=[queue_age.with_(label="oldest message (s)")],
                width=8,
            ),
        )
        dashboard.add_widgets(
            cloudwatch.GraphWidget(
                title="Glue job runs failed (the rule notifies the topic)",
                left=[glue_failed.with_(label="failed runs")],
                width=8,
            ),
            cloudwatch.AlarmStatusWidget(title="Alarms", alarms=list(self.alarms.values()), width=16),
        )
        return dashboard
