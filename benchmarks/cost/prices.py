"""The price table of the cost benchmark: us-east-1 list prices (USD, no free tier, no discounts), each with its
source and the date it was checked.

Every figure was checked on :data:`CHECKED` against the cited page or, where the page renders its table in the
browser only, against copies of it found with a web search (``via``). Prices change: re-check them before relying on
a figure, and change the date with them. The comparison prices (AppSync, Firestore, Electric Cloud) are used only by
``docs/cost.md``'s side-by-side table.
"""

from __future__ import annotations

from dataclasses import dataclass

REGION = "us-east-1"
CHECKED = "2026-11-24"


@dataclass(frozen=True, slots=True)
class Price:
    """One list price.

    Attributes:
        usd: Dollars per ``unit``.
        unit: What is billed.
        source: The pricing page.
        checked: When the figure was checked (ISO date).
        note: Tier, condition or how the figure was verified.
    """

    usd: float
    unit: str
    source: str
    checked: str = CHECKED
    note: str = ""


_DDB = "https://aws.amazon.com/dynamodb/pricing/on-demand/"
_LAMBDA = "https://aws.amazon.com/lambda/pricing/"
_APIGW = "https://aws.amazon.com/api-gateway/pricing/"
_SQS = "https://aws.amazon.com/sqs/pricing/"
_S3 = "https://aws.amazon.com/s3/pricing/"
_GLUE = "https://aws.amazon.com/glue/pricing/"
_CW = "https://aws.amazon.com/cloudwatch/pricing/"
_EVENTS = "https://aws.amazon.com/eventbridge/pricing/"
_XRAY = "https://aws.amazon.com/xray/pricing/"
_KMS = "https://aws.amazon.com/kms/pricing/"
_SECRETS = "https://aws.amazon.com/secrets-manager/pricing/"
_TRANSFER = "https://aws.amazon.com/ec2/pricing/on-demand/#Data_Transfer"
_APPSYNC = "https://aws.amazon.com/appsync/pricing/"
_FIRESTORE = "https://cloud.google.com/firestore/pricing"
_ELECTRIC = "https://electric.ax/pricing"

PRICES: dict[str, Price] = {
    # -- what a LakeSync deployment bills ----------------------------------------------------------------------------
    "dynamodb.wru": Price(
        0.625 / 1e6, "write request unit", _DDB, note="on-demand, Standard table class; halved on 2024-11-01"
    ),
    "dynamodb.rru": Price(0.125 / 1e6, "read request unit", _DDB, note="on-demand, Standard table class"),
    "dynamodb.storage": Price(0.25, "GB-month stored", _DDB, note="first 25 GB per month free"),
    "dynamodb.pitr": Price(0.20, "GB-month of table size with point-in-time recovery", _DDB),
    "lambda.request": Price(0.20 / 1e6, "invocation", _LAMBDA),
    "lambda.gb_s.arm64": Price(0.0000133334, "GB-second, arm64", _LAMBDA, note="first 7.5 billion GB-s per month"),
    "lambda.gb_s.x86_64": Price(0.0000166667, "GB-second, x86_64", _LAMBDA, note="first 6 billion GB-s per month"),
    "apigw.http.request": Price(
        1.00 / 1e6, "HTTP API request (512 KB increments)", _APIGW, note="first 300 million per month"
    ),
    "apigw.ws.message": Price(
        1.00 / 1e6, "WebSocket API message, sent or received (32 KB increments)", _APIGW, note="first 1 billion"
    ),
    "apigw.ws.connection_minute": Price(0.25 / 1e6, "WebSocket API connection-minute", _APIGW),
    "sqs.request": Price(0.40 / 1e6, "standard-queue request (64 KB chunks)", _SQS, note="first 1M per month free"),
    "s3.put": Price(0.005 / 1000, "PUT, COPY, POST or LIST request", _S3, note="S3 Standard"),
    "s3.get": Price(0.0004 / 1000, "GET or other request", _S3, note="S3 Standard; DELETE is free"),
    "s3.storage": Price(0.023, "GB-month stored", _S3, note="S3 Standard, first 50 TB"),
    "glue.dpu_hour": Price(
        0.44, "DPU-hour (Spark job)", _GLUE, note="billed per second, 1-minute minimum (Glue 2.0 and later)"
    ),
    "glue.dpu_hour.flex": Price(
        0.29,
        "DPU-hour (Spark job, Flex execution class)",
        _GLUE,
        note="spare capacity: starts may wait; billed per second, 1-minute minimum (Glue 3.0 and later, G.1X/G.2X)",
    ),
    "scheduler.invocation": Price(
        1.00 / 1e6, "EventBridge Scheduler invocation", _EVENTS, note="first 14 million per month free"
    ),
    "cloudwatch.alarm": Price(0.10, "standard-resolution alarm metric-month", _CW, note="first 10 per month free"),
    "cloudwatch.dashboard": Price(3.00, "dashboard-month", _CW, note="first 3 dashboards per account free"),
    "cloudwatch.metric": Price(0.30, "custom metric-month", _CW, note="first 10,000 metrics; EMF metrics are custom"),
    "cloudwatch.logs_ingest": Price(0.50, "GB of logs ingested", _CW, note="standard log class, first 5 GB free"),
    "xray.trace": Price(5.00 / 1e6, "trace recorded", _XRAY, note="first 100,000 per month free"),
    "kms.key": Price(1.00, "customer managed key-month", _KMS, note="rotated keys add $1/month per version, up to $3"),
    "kms.request": Price(0.03 / 10000, "request", _KMS, note="first 20,000 per month free"),
    "secretsmanager.secret": Price(0.40, "secret-month", _SECRETS),
    "secretsmanager.call": Price(0.05 / 10000, "API call", _SECRETS),
    "transfer.out": Price(0.09, "GB out to the internet", _TRANSFER, note="first 10 TB per month; 100 GB free"),
    # -- the comparison (docs/cost.md) --------------------------------------------------------------------------------
    "appsync.operation": Price(4.00 / 1e6, "query or mutation operation", _APPSYNC),
    "appsync.realtime_update": Price(2.00 / 1e6, "real-time update delivered", _APPSYNC),
    "appsync.connection_minute": Price(0.08 / 1e6, "connection-minute", _APPSYNC),
    "firestore.nam5.read": Price(
        0.06 / 1e5, "document read, nam5 multi-region", _FIRESTORE, note="Standard edition; via a copy of the page"
    ),
    "firestore.nam5.write": Price(0.18 / 1e5, "document write, nam5", _FIRESTORE, note="Standard edition"),
    "firestore.nam5.delete": Price(0.02 / 1e5, "document delete, nam5", _FIRESTORE, note="Standard edition"),
    "firestore.us-east1.read": Price(
        0.03 / 1e5, "document read, us-east1", _FIRESTORE, note="Standard edition; via copies of the page"
    ),
    "firestore.us-east1.write": Price(0.09 / 1e5, "document write, us-east1", _FIRESTORE, note="Standard edition"),
    "firestore.us-east1.delete": Price(0.01 / 1e5, "document delete, us-east1", _FIRESTORE, note="Standard edition"),
    "electric.write": Price(1.00 / 1e6, "write (Electric Cloud PAYG)", _ELECTRIC, note="reads and fan-out free"),
    "electric.retention": Price(0.10, "GB-month retained (Electric Cloud PAYG)", _ELECTRIC),
}
"""Every price the benchmark and docs/cost.md use, by key."""


def price(key: str) -> float:
    """Dollars per unit of ``key``.

    Raises:
        KeyError: no such price.
    """
    return PRICES[key].usd


def table_rows() -> list[dict[str, str]]:
    """The price table for the results files: key, price, unit, source, checked, note."""
    return [
        {
            "key": key,
            "usd": f"{p.usd:.10g}",
            "unit": p.unit,
            "source": p.source,
            "checked": p.checked,
            "note": p.note,
        }
        for key, p in PRICES.items()
    ]
