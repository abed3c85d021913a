"""The cost benchmark's arithmetic: DynamoDB item sizes and units, other services' metering, the meter's charging of
writes and reads, the idle month from a template, and the price table (every price sourced and dated)."""

from __future__ import annotations

import re
from datetime import date
from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.cost.idle_month import idle_month
from benchmarks.cost.meter import Meter, TableInfo
from benchmarks.cost.model import (
    IndexSpec,
    glue_billed_seconds,
    glue_dpu_hours,
    glue_dpus,
    http_api_requests,
    index_entry,
    index_write_units,
    item_size,
    lambda_gb_seconds,
    number_size,
    read_units,
    runs_per_month,
    sqs_requests,
    value_size,
    write_units,
)
from benchmarks.cost.prices import PRICES, price
from benchmarks.cost.pricing import (
    LAMBDA_PLATFORM_LOG_BYTES,
    comparisons,
    fit_line,
    glue_per_million,
    price_invocations,
    price_usage,
    subtract,
    usage_key,
)
from benchmarks.cost.template import functions_of

# -- item sizes -------------------------------------------------------------------------------------------------------


def test_string_size_is_utf8_bytes_of_name_and_value():
    assert item_size({"pk": {"S": "abc"}}) == 2 + 3
    assert item_size({"é": {"S": "日本"}}) == 2 + 6


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("0", 2),
        ("7", 2),
        ("12", 2),
        ("123", 3),
        ("1000", 2),  # trailing zeros are not significant
        ("0.001", 2),  # nor leading ones
        ("12.30", 3),
        ("-5", 3),  # a negative number takes one byte more
        ("123456789012345678901234567890", 16),
        ("1E+3", 2),
    ],
)
def test_number_size_is_one_byte_per_two_significant_digits_plus_one(text, size):
    assert number_size(text) == size


def test_number_size_refuses_text_that_is_no_number():
    with pytest.raises(ValueError):
        number_size("twelve")


def test_binary_boolean_null_and_set_sizes():
    assert value_size({"B": b"\x00\x01\x02"}) == 3
    assert value_size({"B": "AAEC"}) == 3  # base64 text as on the wire: the raw bytes count
    assert value_size({"BOOL": True}) == 1
    assert value_size({"NULL": True}) == 1
    assert value_size({"SS": ["a", "bc"]}) == 3
    assert value_size({"NS": ["1", "1000"]}) == 4
    assert value_size({"BS": [b"ab", b"c"]}) == 3


def test_lists_and_maps_take_three_bytes_plus_one_per_element():
    assert value_size({"L": []}) == 3
    assert value_size({"M": {}}) == 3
    assert value_size({"L": [{"S": "ab"}, {"BOOL": False}]}) == 3 + (2 + 1) + (1 + 1)
    # a map element counts its name too
    assert value_size({"M": {"k": {"S": "v"}}}) == 3 + (1 + 1 + 1)
    assert value_size({"M": {"outer": {"L": [{"N": "5"}]}}}) == 3 + (5 + (3 + 2 + 1) + 1)


def test_unknown_attribute_types_are_refused():
    with pytest.raises(ValueError):
        value_size({"X": "1"})
    with pytest.raises(ValueError):
        value_size({"S": "a", "N": "1"})


# -- capacity units ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("size", "units"), [(0, 1), (1, 1), (1024, 1), (1025, 2), (3000, 3), (4096, 4)])
def test_write_units_round_up_per_kilobyte(size, units):
    assert write_units(size) == units
    assert write_units(size, transactional=True) == 2 * units


@pytest.mark.parametrize(("size", "units"), [(0, 1), (4096, 1), (4097, 2), (8192, 2), (10_000, 3)])
def test_read_units_round_up_per_four_kilobytes(size, units):
    assert read_units(size, consistent=True) == units
    assert read_units(size, consistent=False) == units / 2
    assert read_units(size, consistent=True, transactional=True) == 2 * units


LSI = IndexSpec("by_commit", ("shard", "chlc"), "ALL")
KEYS = ("shard", "seq")


def _log_item(chlc: str, pad: int = 0) -> dict[str, Any]:
    return {"shard": {"S": "s"}, "seq": {"N": "1"}, "chlc": {"N": chlc}, "d": {"S": "x" * pad}}


def test_an_index_entry_written_removed_or_moved():
    new = _log_item("5", pad=1500)
    size = item_size(new)
    assert write_units(size) == 2
    assert index_write_units(None, new, KEYS, LSI, transactional=False) == 2  # a new entry
    assert index_write_units(new, None, KEYS, LSI, transactional=False) == 2  # the entry removed
    assert index_write_units(new, new, KEYS, LSI, transactional=False) == 0  # nothing changed
    moved = _log_item("6", pad=1500)
    assert index_write_units(new, moved, KEYS, LSI, transactional=False) == 4  # key changed: delete + put
    grown = _log_item("5", pad=3000)
    assert index_write_units(new, grown, KEYS, LSI, transactional=False) == write_units(item_size(grown))
    assert index_write_units(None, new, KEYS, LSI, transactional=True) == 4


def test_a_sparse_index_costs_nothing_for_items_without_its_key():
    item = {"shard": {"S": "s"}, "seq": {"N": "1"}}
    assert index_entry(item, KEYS, LSI) is None
    assert index_write_units(None, item, KEYS, LSI, transactional=False) == 0


def test_projected_index_entries_hold_keys_and_the_included_attributes():
    item = _log_item("5", pad=3000) | {"n": {"N": "3"}}
    keys_only = index_entry(item, KEYS, IndexSpec("i", ("shard", "chlc"), "KEYS_ONLY"))
    assert keys_only is not None and set(keys_only) == {"shard", "seq", "chlc"}
    include = index_entry(item, KEYS, IndexSpec("i", ("shard", "chlc"), "INCLUDE", ("n",)))
    assert include is not None and set(include) == {"shard", "seq", "chlc", "n"}
    index = IndexSpec("i", ("shard", "chlc"), "KEYS_ONLY")
    assert index_write_units(None, item, KEYS, index, transactional=False) == 1  # the small entry, not the item


# -- other services ---------------------------------------------------------------------------------------------------


def test_http_api_requests_are_metered_in_512_kb_increments():
    assert http_api_requests(0, 0) == 1
    assert http_api_requests(512 * 1024, 100) == 1
    assert http_api_requests(100, 512 * 1024 + 1) == 2


def test_sqs_requests_count_64_kb_chunks():
    assert sqs_requests(0) == 1
    assert sqs_requests(64 * 1024) == 1
    assert sqs_requests(64 * 1024 + 1) == 2
    assert sqs_requests(256 * 1024) == 4


def test_lambda_gb_seconds_round_the_duration_up_to_the_millisecond():
    assert lambda_gb_seconds(0.0101, 1024) == pytest.approx(0.011)
    assert lambda_gb_seconds(0.010, 512) == pytest.approx(0.005)
    assert lambda_gb_seconds(0.0, 256) == pytest.approx(0.00025)


def test_glue_bills_a_minute_at_least_then_per_second():
    assert glue_billed_seconds(0.4) == 60
    assert glue_billed_seconds(60.2) == 61
    assert glue_dpus("G.1X", 2) == 2
    assert glue_dpus("G.2X", 3) == 6
    assert glue_dpu_hours(30, 2) == pytest.approx(2 / 60)
    with pytest.raises(ValueError):
        glue_dpus("Standard", 2)


def test_runs_per_month_of_rate_expressions():
    assert runs_per_month("rate(15 minutes)") == pytest.approx(2880)
    assert runs_per_month("rate(1 hour)") == pytest.approx(720)
    assert runs_per_month("rate(6 hours)") == pytest.approx(120)
    assert runs_per_month("rate(30 days)") == pytest.approx(1)
    with pytest.raises(ValueError):
        runs_per_month("cron(0 * * * ? *)")


def test_glue_cost_per_million_follows_the_fitted_run_time():
    intercept, slope = fit_line([(1000, 12.0), (5000, 20.0)], floor=5.0)
    assert slope == pytest.approx(0.002)
    assert intercept == pytest.approx(10.0)
    small = glue_per_million(intercept, slope, 1000, dpus=2)
    assert small["runs"] == pytest.approx(1000)
    assert small["billed_dpu_seconds_per_run"] == pytest.approx(120)  # 12 s billed as a minute, 2 DPUs
    assert small["usd"] == pytest.approx(1000 * 120 / 3600 * 0.44)
    big = glue_per_million(intercept, slope, 1_000_000, dpus=2)
    assert big["run_seconds"] == pytest.approx(2010)
    assert fit_line([(100, 1.0), (300, 0.5)], floor=0.7) == (pytest.approx(0.75), 0.0)  # never a negative slope


# -- pricing usage ----------------------------------------------------------------------------------------------------


def test_usage_is_priced_per_unit_and_empty_receives_are_left_to_the_idle_month():
    usage = {
        usage_key("dynamodb", "deltas", "put (tx)", "WRU"): 2_000_000,
        usage_key("dynamodb", "deltas", "put (tx)", "items"): 1_000_000,
        usage_key("dynamodb", "rows", "batch-get", "RRU"): 1_000_000,
        usage_key("sqs", "q", "SendMessage", "requests"): 1_000_000,
        usage_key("sqs", "q", "ReceiveMessage (empty)", "requests"): 5_000_000,
        usage_key("s3", "b", "PutObject", "requests:put"): 1000,
        usage_key("s3", "b", "GetObject", "requests:get"): 1000,
        usage_key("s3", "b", "DeleteObject", "requests:free"): 1000,
    }
    dollars = price_usage(usage)
    assert dollars["DynamoDB"] == pytest.approx(2 * 0.625 + 0.125)
    assert dollars["SQS"] == pytest.approx(0.40)
    assert dollars["S3"] == pytest.approx(0.005 + 0.0004)
    assert subtract({"a": 3.0, "b": 1.0}, {"a": 1.0, "b": 2.0}) == {"a": 2.0}


def test_invocations_are_priced_at_their_architecture():
    functions = {"push": {"memory_mb": 1024, "architecture": "arm64"}, "m": {"architecture": "x86_64"}}
    arm = price_invocations({"push": {"count": 1e6, "gb_s": 1e6}}, functions, xray_sampled=0)
    x86 = price_invocations({"m": {"count": 1e6, "gb_s": 1e6}}, functions, xray_sampled=0)
    assert arm["Lambda"] == pytest.approx(0.20 + 13.3334)
    assert x86["Lambda"] == pytest.approx(0.20 + 16.6667)
    api = price_invocations({"push": {"count": 1e6, "api_requests": 1e6, "response_bytes": 1e9}}, functions)
    assert api["API Gateway"] == pytest.approx(1.00)
    assert api["Other"] == pytest.approx(0.09)
    assert api["X-Ray"] == pytest.approx(1e6 * 0.05 * 5e-6)


def test_x_ray_is_priced_only_for_functions_the_template_traces():
    template = {
        "Resources": {
            "Push": {
                "Type": "AWS::Lambda::Function",
                "Properties": {"Handler": "functions.push.lambda_handler", "TracingConfig": {"Mode": "Active"}},
            },
            "Pull": {"Type": "AWS::Lambda::Function", "Properties": {"Handler": "functions.pull.lambda_handler"}},
        }
    }
    functions = functions_of(template)
    assert (functions["push"]["traced"], functions["pull"]["traced"]) == (True, False)
    calls = {"count": 1e6}
    assert price_invocations({"push": calls}, functions)["X-Ray"] == pytest.approx(1e6 * 0.05 * 5e-6)
    assert price_invocations({"pull": calls}, functions)["X-Ray"] == 0.0


def test_lambdas_own_log_lines_are_priced_only_where_the_system_log_level_keeps_them():
    def fn(handler: str, logging: dict[str, str] | None) -> dict[str, object]:
        props: dict[str, object] = {"Handler": f"functions.{handler}.lambda_handler"}
        if logging is not None:
            props["LoggingConfig"] = logging
        return {"Type": "AWS::Lambda::Function", "Properties": props}

    template = {
        "Resources": {
            "Push": fn("push", {"LogFormat": "JSON", "SystemLogLevel": "WARN"}),
            "Pull": fn("pull", {"LogFormat": "JSON", "SystemLogLevel": "INFO"}),
            "Health": fn("health", None),
        }
    }
    functions = functions_of(template)
    assert [functions[n]["platform_logs"] for n in ("push", "pull", "health")] == [False, True, True]
    calls = {"count": 1e6, "log_bytes": 1e8}
    own = 1e8 / 1e9 * 0.50
    platform = 1e6 * LAMBDA_PLATFORM_LOG_BYTES / 1e9 * 0.50
    assert price_invocations({"push": calls}, functions)["CloudWatch Logs"] == pytest.approx(own)
    assert price_invocations({"pull": calls}, functions)["CloudWatch Logs"] == pytest.approx(own + platform)
    assert price_invocations({"health": calls}, functions)["CloudWatch Logs"] == pytest.approx(own + platform)


def test_comparison_prices_follow_the_readers():
    one = comparisons(250, 1)
    ten = comparisons(250, 10)
    assert sum(one["Firestore Standard, nam5"].values()) == pytest.approx(1.8 + 0.6)
    assert sum(ten["Firestore Standard, nam5"].values()) == pytest.approx(1.8 + 6.0)
    assert ten["AWS AppSync (+ DataStore)"]["real-time updates"] == pytest.approx(20.0)
    assert one["Electric Cloud (PAYG)"] == {"writes": pytest.approx(1.0)}


# -- the idle month ---------------------------------------------------------------------------------------------------
TEMPLATE: dict[str, Any] = {
    "Resources": {
        "Job": {
            "Type": "AWS::Glue::Job",
            "Properties": {"Description": "x: flush (glue_jobs/flush.py)", "WorkerType": "G.1X", "NumberOfWorkers": 2},
        },
        "Direct": {
            "Type": "AWS::Scheduler::Schedule",
            "Properties": {
                "ScheduleExpression": "rate(1 hour)",
                "Target": {"Input": {"Fn::Join": ["", ['{"JobName":"', {"Ref": "Job"}, '"}']]}},
            },
        },
        "Tick": {
            "Type": "AWS::Lambda::Function",
            "Properties": {
                "Handler": "functions.lake_tick.lambda_handler",
                "MemorySize": 256,
                "Architectures": ["arm64"],
                "TracingConfig": {"Mode": "Active"},
            },
        },
        "Ticking": {
            "Type": "AWS::Scheduler::Schedule",
            "Properties": {
                "ScheduleExpression": "rate(15 minutes)",
                "Target": {"Arn": {"Fn::GetAtt": ["Tick", "Arn"]}, "Input": '{"job":"flush"}'},
            },
        },
        "Queue": {"Type": "AWS::SQS::Queue", "Properties": {}},
        "Mapping": {
            "Type": "AWS::Lambda::EventSourceMapping",
            "Properties": {
                "EventSourceArn": {"Fn::GetAtt": ["Queue", "Arn"]},
                "ScalingConfig": {"MaximumConcurrency": 5},
            },
        },
        "A1": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors"}},
        "A2": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Throttles"}},
        "Board": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {}},
        "Key": {"Type": "AWS::KMS::Key", "Properties": {}},
        "Secret": {"Type": "AWS::SecretsManager::Secret", "Properties": {}},
    }
}


def test_the_idle_month_prices_schedules_pollers_alarms_and_dashboards():
    scheduled = {
        "Ticking": {
            "invocations": {"count": 1, "seconds": 0.01, "gb_s": 0.0025, "log_bytes": 150},
            "usage": {usage_key("dynamodb", "heads", "batch-get", "RRU"): 4},
            "glue_starts": 0,
        }
    }
    month = idle_month(TEMPLATE, job_seconds={"flush": 20.0}, scheduled=scheduled)
    by_item = {line["item"]: line for line in month["lines"]}
    glue = next(line for item, line in by_item.items() if item.startswith("Glue flush job"))
    assert glue["quantity"] == pytest.approx(720 * 2 / 60)  # 720 runs of 2 DPUs billed a minute each
    assert glue["usd"] == pytest.approx(720 * 2 / 60 * 0.44)
    polls = next(line for item, line in by_item.items() if item.startswith("SQS long polls"))
    assert polls["quantity"] == pytest.approx(5 * 3 * 60 * 24 * 30)
    assert by_item["CloudWatch alarms"]["usd"] == pytest.approx(0.20)
    assert by_item["CloudWatch dashboards"]["usd"] == pytest.approx(3.00)
    tick = next(line for item, line in by_item.items() if item.startswith("lake_tick function"))
    per_tick = 0.2e-6 + 0.0025 * 0.0000133334 + 4 * 0.125e-6 + (150 + 350) / 1e9 * 0.50 + 5e-6
    assert tick["usd"] == pytest.approx(2880 * per_tick)
    assert not any(item.startswith("Glue flush job: 2880") for item in by_item)  # an idle tick starts no run
    assert month["total_usd"] == pytest.approx(sum(line["usd"] for line in month["lines"]))
    assert month["kms_and_secrets_usd"] == pytest.approx(1.00 + 0.40)


def test_a_tick_that_starts_a_run_bills_the_glue_run():
    scheduled = {"Ticking": {"invocations": {"count": 1}, "usage": {}, "glue_starts": 1}}
    month = idle_month(TEMPLATE, scheduled=scheduled)
    runs = [line for line in month["lines"] if line["item"].startswith("Glue flush job")]
    assert sorted(line["quantity"] for line in runs) == pytest.approx([720 * 2 / 60, 2880 * 2 / 60])


# -- the meter's charging ---------------------------------------------------------------------------------------------
class FakeDynamo:
    """The few DynamoDB calls the meter's uncounted client makes, over dicts."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}

    @staticmethod
    def _id(key: dict[str, Any]) -> str:
        return repr(sorted((k, sorted(v.items())) for k, v in key.items()))

    def put(self, table: str, item: dict[str, Any], keys: tuple[str, ...]) -> None:
        self.items[(table, self._id({k: item[k] for k in keys}))] = item

    def batch_get_item(self, RequestItems: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, list[Any]] = {}
        for table, request in RequestItems.items():
            for key in request["Keys"]:
                item = self.items.get((table, self._id(key)))
                if item is not None:
                    out.setdefault(table, []).append(item)
        return {"Responses": out, "UnprocessedKeys": {}}


def _meter(fake: FakeDynamo) -> Meter:
    meter = Meter()
    meter.raw = lambda *_: fake  # type: ignore[method-assign]
    meter._tables["log"] = TableInfo(KEYS, (LSI,), None)
    meter._tables["dedup"] = TableInfo(("pk",), (), "exp")
    meter.phase = "test"
    return meter


def _call(meter: Meter, op: str, params: dict[str, Any], parsed: dict[str, Any], status: int = 200) -> None:
    model = SimpleNamespace(name=op, service_model=SimpleNamespace(service_name="dynamodb"))
    context: dict[str, Any] = {"client_region": "us-east-1"}
    meter._on_params(params=params, model=model, context=context)
    meter._on_before(model=model, params={"url": "http://127.0.0.1:1"}, context=context)
    meter._on_after(http_response=SimpleNamespace(status_code=status), parsed=parsed, model=model, context=context)


def _totals(meter: Meter, metric: str) -> dict[tuple[str, str], float]:
    return {(r, op): v for (_, _, r, op, m), v in meter.totals.items() if m == metric}


def test_a_transactional_put_is_charged_twice_with_its_index_copy():
    fake = FakeDynamo()
    meter = _meter(fake)
    item = _log_item("5", pad=1500)
    _call(meter, "TransactWriteItems", {"TransactItems": [{"Put": {"TableName": "log", "Item": item}}]}, {})
    wru = _totals(meter, "WRU")
    assert wru[("log", "put (tx)")] == 4
    assert wru[("log/by_commit", "put (tx)")] == 4


def test_a_put_replacing_a_larger_item_is_charged_on_the_larger():
    fake = FakeDynamo()
    fake.put("log", _log_item("5", pad=3000), KEYS)
    meter = _meter(fake)
    _call(meter, "PutItem", {"TableName": "log", "Item": _log_item("5", pad=10)}, {})
    wru = _totals(meter, "WRU")
    assert wru[("log", "put")] == 3
    assert wru[("log/by_commit", "put")] == 3  # the entry shrank: one write of the larger size


def test_a_failed_conditional_write_is_charged_on_the_existing_item_without_index_writes():
    fake = FakeDynamo()
    fake.put("log", _log_item("5", pad=2500), KEYS)
    meter = _meter(fake)
    params = {"TableName": "log", "Item": _log_item("6"), "ConditionExpression": "attribute_not_exists(seq)"}
    _call(meter, "PutItem", params, {"Error": {"Code": "ConditionalCheckFailedException"}}, status=400)
    wru = _totals(meter, "WRU")
    assert wru == {("log", "put (failed)"): 3}


def test_batch_deletes_charge_the_deleted_items_and_skip_unprocessed_ones():
    fake = FakeDynamo()
    first, second = _log_item("5", pad=1500), {**_log_item("6", pad=10), "seq": {"N": "2"}}
    fake.put("log", first, KEYS)
    fake.put("log", second, KEYS)
    meter = _meter(fake)
    requests = [{"DeleteRequest": {"Key": {"shard": {"S": "s"}, "seq": {"N": n}}}} for n in ("1", "2")]
    parsed = {"UnprocessedItems": {"log": [requests[1]]}}
    _call(meter, "BatchWriteItem", {"RequestItems": {"log": requests}}, parsed)
    wru = _totals(meter, "WRU")
    assert wru[("log", "delete (batch)")] == 2
    assert wru[("log/by_commit", "delete (batch)")] == 2


def test_ttl_records_are_counted_as_free_deletes():
    meter = _meter(FakeDynamo())
    item = {"pk": {"S": "gw#d1"}, "exp": {"N": "1999999999"}}
    _call(meter, "BatchWriteItem", {"RequestItems": {"dedup": [{"PutRequest": {"Item": item}}]}}, {})
    assert _totals(meter, "WRU") == {("dedup", "put (batch)"): 1}
    assert _totals(meter, "items")[("dedup", "expires by TTL (free delete)")] == 1


def test_reads_charge_found_items_by_size_and_missing_keys_the_minimum():
    fake = FakeDynamo()
    big = {"pk": {"S": "a"}, "d": {"S": "x" * 5000}}
    fake.put("dedup", big, ("pk",))
    meter = _meter(fake)
    keys = [{"pk": {"S": "a"}}, {"pk": {"S": "missing"}}]
    request = {"RequestItems": {"dedup": {"Keys": keys, "ConsistentRead": True}}}
    _call(meter, "BatchGetItem", request, {"Responses": {"dedup": [big]}})
    assert _totals(meter, "RRU") == {("dedup", "batch-get"): 2 + 1}


def test_a_query_is_charged_on_the_summed_item_sizes_per_request():
    meter = _meter(FakeDynamo())
    items = [_log_item(str(i), pad=1000) for i in range(10)]  # ~10 KB in all
    _call(meter, "Query", {"TableName": "log", "ConsistentRead": False}, {"Items": items})
    total = sum(item_size(i) for i in items)
    assert _totals(meter, "RRU") == {("log", "query"): read_units(total, consistent=False)}
    assert read_units(total, consistent=False) == 1.5


def test_nothing_is_counted_outside_a_phase():
    meter = _meter(FakeDynamo())
    meter.phase = None
    _call(meter, "PutItem", {"TableName": "log", "Item": _log_item("5")}, {})
    assert meter.totals == {}


# -- the price table --------------------------------------------------------------------------------------------------
def test_every_price_has_a_positive_amount_a_unit_a_source_and_a_date():
    assert PRICES
    for key, entry in PRICES.items():
        assert entry.usd > 0, key
        assert entry.unit.strip(), key
        assert re.fullmatch(r"https://[^\s]+", entry.source), key
        assert date.fromisoformat(entry.checked) <= date(2100, 1, 1), key


def test_the_priced_keys_the_benchmark_uses_exist():
    used = (
        "dynamodb.wru dynamodb.rru dynamodb.storage dynamodb.pitr lambda.request lambda.gb_s.arm64 lambda.gb_s.x86_64 "
        "apigw.http.request sqs.request s3.put s3.get glue.dpu_hour scheduler.invocation cloudwatch.alarm "
        "cloudwatch.dashboard cloudwatch.logs_ingest xray.trace kms.key secretsmanager.secret secretsmanager.call "
        "transfer.out appsync.operation appsync.realtime_update firestore.nam5.write firestore.nam5.read "
        "electric.write"
    ).split()
    for key in used:
        assert price(key) > 0


def test_the_dynamodb_on_demand_prices_are_those_since_november_2024():
    assert price("dynamodb.wru") * 1e6 == pytest.approx(0.625)
    assert price("dynamodb.rru") * 1e6 == pytest.approx(0.125)
    assert price("glue.dpu_hour") == pytest.approx(0.44)


def test_a_downstream_run_carries_the_flush_runs_its_rule_waits_for_rounded_up_to_its_ticks():
    from benchmarks.cost.model import compaction_wants, flush_runs_per_run

    # Compaction after 16 flush runs or 6 hours, on an hourly tick, flushes every 15 minutes: 16 runs a compaction
    assert compaction_wants(16, 360, 15) == 16
    assert flush_runs_per_run(4, compaction_wants(16, 360, 15)) == 16
    # The wait cuts it short when flushes are rare (hourly flushes: the 7th run comes 6 hours after the first)
    assert compaction_wants(16, 360, 60) == 7
    # A count that falls between ticks waits for the next tick; never fewer runs than one tick's worth
    assert flush_runs_per_run(4, 10) == 12
    assert flush_runs_per_run(4, 1) == 4
    assert flush_runs_per_run(0.5, 1) == 1
    # Compacting after every flush (the old rule) is one tick's worth; a checkpoint every 6 hours after 16-run
    # compactions carries 24
    assert flush_runs_per_run(4, compaction_wants(1, 0, 15)) == 4
    assert flush_runs_per_run(24, 16) == 24
    assert flush_runs_per_run(24, 32) == 48
