"""lakesync.aws.jobs.GlueJobStarter's history and one-shot start, against a scripted Glue client: runs read page by
page only until the caller has enough, Glue's times as epoch ms, and a busy or throttled job reported rather than
waited for.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from botocore.exceptions import ClientError

from lakesync.aws.jobs import HISTORY_PAGES, GlueJobStarter
from lakesync.core.errors import StorageError
from lakesync.core.lake_work import JobRun

T0 = 1_700_000_000_000


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def _error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, operation)


class PagedGlue:
    """A Glue client serving a job's history in pages; it records each request."""

    def __init__(self, pages: list[list[dict[str, Any]]], start: str | Exception = "jr_new") -> None:
        self.pages = pages
        self.start = start
        self.requests: list[dict[str, Any]] = []

    def get_job_runs(self, **kwargs: Any) -> dict[str, Any]:
        self.requests.append(kwargs)
        index = int(kwargs.get("NextToken", "0"))
        answer: dict[str, Any] = {"JobRuns": self.pages[index]}
        if index + 1 < len(self.pages):
            answer["NextToken"] = str(index + 1)
        return answer

    def start_job_run(self, **kwargs: Any) -> dict[str, Any]:
        assert kwargs == {"JobName": "compact"}
        if isinstance(self.start, Exception):
            raise self.start
        return {"JobRunId": self.start}


def _glue_run(run_id: str, state: str, started: int, completed: int | None = None) -> dict[str, Any]:
    run: dict[str, Any] = {"Id": run_id, "JobRunState": state, "StartedOn": _at(started)}
    if completed is not None:
        run["CompletedOn"] = _at(completed)
    return run


def _starter(glue: PagedGlue) -> GlueJobStarter:
    return GlueJobStarter(glue, "compact")  # type: ignore[arg-type]


def test_runs_reads_one_page_by_default_with_times_in_epoch_ms():
    # Given a history of two pages
    glue = PagedGlue([[_glue_run("jr_2", "RUNNING", T0 + 5_000)], [_glue_run("jr_1", "SUCCEEDED", T0, T0 + 60_000)]])
    # When the runs are read without saying what is enough
    runs = _starter(glue).runs()
    # Then only the newest page is read, its times in epoch ms
    assert runs == [JobRun("jr_2", "RUNNING", T0 + 5_000, None)]
    assert glue.requests == [{"JobName": "compact", "MaxResults": 50}]


def test_runs_reads_further_pages_until_the_caller_has_enough():
    # Given a history whose first success is on the third page
    pages = [
        [_glue_run("jr_5", "FAILED", T0 + 4_000, T0 + 4_500)],
        [_glue_run("jr_4", "FAILED", T0 + 3_000, T0 + 3_500)],
        [_glue_run("jr_3", "SUCCEEDED", T0 + 2_000, T0 + 2_500)],
        [_glue_run("jr_2", "SUCCEEDED", T0 + 1_000, T0 + 1_500)],
    ]
    glue = PagedGlue(pages)
    # When the runs are read until one succeeded
    runs = _starter(glue).runs(enough=lambda rs: any(r.succeeded for r in rs))
    # Then three pages were read, each after the previous one's token, and no more
    assert [r.run_id for r in runs] == ["jr_5", "jr_4", "jr_3"]
    assert [r.get("NextToken") for r in glue.requests] == [None, "1", "2"]


def test_runs_stops_at_the_page_limit():
    glue = PagedGlue([[_glue_run(f"jr_{i}", "FAILED", T0 + i)] for i in range(HISTORY_PAGES + 3)])
    runs = _starter(glue).runs(enough=lambda rs: False)
    assert len(runs) == len(glue.requests) == HISTORY_PAGES


def test_runs_reports_a_glue_that_cannot_answer_as_a_storage_error():
    class Throttled(PagedGlue):
        def get_job_runs(self, **kwargs: Any) -> dict[str, Any]:
            raise _error("ThrottlingException", "GetJobRuns")

    with pytest.raises(StorageError, match=r"GetJobRuns \(compact\) failed: ThrottlingException"):
        _starter(Throttled([])).runs()


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("jr_new", ("jr_new", "")),
        (_error("ConcurrentRunsExceededException", "StartJobRun"), (None, "busy")),
        (_error("ThrottlingException", "StartJobRun"), (None, "ThrottlingException")),
    ],
    ids=["started", "busy", "throttled"],
)
def test_try_start_starts_once_or_says_why_not(answer, expected):
    assert _starter(PagedGlue([[]], start=answer)).try_start() == expected


def test_try_start_raises_what_waiting_cannot_fix():
    glue = PagedGlue([[]], start=_error("AccessDeniedException", "StartJobRun"))
    with pytest.raises(StorageError, match=r"StartJobRun \(compact\) failed: AccessDeniedException"):
        _starter(glue).try_start()
