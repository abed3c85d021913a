"""The results files every benchmark writes (``<name>.json`` with every figure, ``<name>.md`` for people), the
markdown tables and machine lines in them, and the gateway benchmark's own: ``latest.json`` and ``latest.md``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks import plots
from benchmarks.write_rules import markdown as write_rules_markdown

RESULTS = Path(__file__).resolve().parent / "results"
"""Where the benchmarks write their results files unless told otherwise."""

_ALIGN = {"l": "---", "r": "---:"}


def write(
    results: Mapping[str, Any],
    directory: Path,
    *,
    stem: str,
    render: Callable[[Any], str],
    ensure_ascii: bool = False,
) -> tuple[Path, Path]:
    """Write ``{stem}.json`` (indented; values JSON cannot hold as their ``str``) and ``{stem}.md``
    (``render(results)``) into ``directory``, made if missing; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{stem}.json"
    md_path = directory / f"{stem}.md"
    text = json.dumps(results, indent=2, ensure_ascii=ensure_ascii, default=str)
    json_path.write_text(text + "\n", encoding="utf-8")
    md_path.write_text(render(results), encoding="utf-8")
    return json_path, md_path


def table(headers: Sequence[object], rows: Iterable[Sequence[object]], *, align: str = "") -> list[str]:
    """A markdown table's lines: the header, the alignment row (``align``: ``l`` or ``r`` per column, left where
    missing) and one line per row (see :func:`table_row`)."""
    marks = "".join(f"{_ALIGN[a]}|" for a in align.ljust(len(headers), "l"))
    return [table_row(headers), f"|{marks}", *(table_row(row) for row in rows)]


def table_row(cells: Sequence[object]) -> str:
    """One markdown table line of ``cells``, each written as its ``str``; ``None`` leaves a cell out (``| |``)."""
    return "|" + "".join(" |" if cell is None else f" {cell} |" for cell in cells)


def load_average() -> list[float] | None:
    """The 1, 5 and 15-minute load averages, rounded to hundredths (``None`` where the platform has none)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def stat_range(stats: dict[str, Any], fmt: str = "{:.0f}") -> str:
    """``median (min–max, spread, n)`` of a :func:`benchmarks._common.summarize` result."""
    return (
        f"{fmt.format(stats['median'])} ({fmt.format(stats['min'])}–{fmt.format(stats['max'])}, "
        f"spread {stats['spread_pct']:.0f}%, n={stats['n']})"
    )


_range = stat_range


def _calls(calls: dict[str, int]) -> str:
    return ", ".join(f"{count} `{operation}`" for operation, count in calls.items())


def _verdict(met: bool) -> str:
    return "met" if met else "**missed**"


def _owners(breakdown: dict[str, Any]) -> list[str]:
    """A profile's self time by owner, as a table."""
    total = breakdown["total_s"] or 1.0
    rows = [(owner, f"{s:.2f}", f"{100 * s / total:.0f}%") for owner, s in breakdown["by_owner"].items()]
    return table(("owner", "s", "share"), rows)


def _functions(entries: list[dict[str, Any]], heading: str = "function") -> list[str]:
    """A profile's costliest functions, as a table."""
    return table((heading, "owner", "s"), [(f"`{e['function']}`", e["owner"], f"{e['self_s']:.3f}") for e in entries])


def _cumulative(entries: dict[str, Any], heading: str) -> list[str]:
    """Calls and cumulative seconds of each entry, as a table."""
    return table((heading, "calls", "s"), [(k, v["calls"], f"{v['seconds']:.2f}") for k, v in entries.items()])


def machine_lines(m: dict[str, Any]) -> list[str]:
    """The machine, code and package lines of a results file's header."""
    return [
        f"Machine: {m['cpu']}, {m['cpu_count']} CPUs, {m['memory_gib']} GiB, {m['os']}, Python {m['python']}; "
        f"load average {m['load_average_start']} at the start, {m['load_average_end']} at the end "
        "(other work on the machine makes absolute figures noisy; the ratios pair sides measured back to back)"
        + (
            f"; the fixed Python yardstick took {m['yardstick_ms']} ms: absolute times (the cold imports' goal among"
            " them) scale with it, ratios do not."
            if m.get("yardstick_ms")
            else "."
        ),
        f"Code: commit `{(m['git']['commit'] or 'unknown')[:12]}`"
        + (" with uncommitted changes in src/ or functions/." if m["git"]["src_or_functions_modified"] else "."),
        f"Packages: {', '.join(f'{k} {v}' for k, v in m['packages'].items())}.",
    ]


def markdown(r: dict[str, Any]) -> str:
    """The human-readable results."""
    m = r["machine"]
    lines = [
        "# Gateway benchmarks — latest results",
        "",
        f"Measured {r['timestamp']} in {r['duration_s']:.0f} s by `python -m benchmarks` (`make bench`).",
        *machine_lines(m),
        "",
        "## Goals",
        "",
        "| figure | goal | measured (median) | verdict |",
        "|---|---|---|---|",
    ]
    push, pull, imports = r.get("push"), r.get("pull"), r.get("imports")
    if push:
        lines.append(
            f"| push: handler rate / raw `BatchWriteItem` rate of one log item per delta (floor A) | "
            f"≥ {push['goal']['ratio_vs_log_writes_at_least']} | "
            f"{push['ratio_vs_log_writes']['median']:.3f}× | {_verdict(push['goal']['met'])} |"
        )
    if pull:
        lines.append(
            f"| pull: handler time / raw `Query` time of one log item per delta (floor A) | "
            f"≤ {pull['goal']['ratio_at_most']} | "
            f"{pull['ratio_handler_over_floor_a']['median']:.2f}× | {_verdict(pull['goal']['met'])} |"
        )
    write = r.get("write_rules")
    if write:
        lines.append(
            f"| push with write rules / push without (same run) | ≥ {write['goal']['ratio_at_least']} | "
            f"{write['ratio_with_over_without']['median']:.3f}× | {_verdict(write['goal']['met'])} |"
        )
    if imports:
        for module, figures in imports["modules"].items():
            lines.append(
                f"| cold import of `{module}` | ≤ {imports['goal_ms']:.0f} ms | {figures['import_ms']:.0f} ms | "
                f"{_verdict(figures['goal_met'])} |"
            )
    lines += ["", "![Each repetition against its floor and goal, per benchmark](latest.png)"]
    lines += ["", "## How", "", *r["method"]["common"]]
    checks = []
    for name in ("push", "pull"):
        fast = (r.get(name) or {}).get("moto_fast_json")
        if fast:
            state = f"turned off ({fast['disabled_reason']})" if fast["disabled_reason"] else "stayed on"
            checks.append(f"{name} server: {fast['used']} fast responses, {fast['verified']} verified, {state}")
    if checks:
        lines.append(f"* Checks of the moto patch in this run: {'; '.join(checks)}.")
    lines.append("")
    if push:
        lines += _push_section(r, push)
    if pull:
        lines += _pull_section(r, pull)
    if write:
        lines += write_rules_markdown(write)
    if imports:
        lines += _imports_section(imports)
    return "\n".join(lines) + "\n"


def _push_section(r: dict[str, Any], push: dict[str, Any]) -> list[str]:
    w = push["workload"]
    calls = push["dynamodb_calls"]
    lines = [
        "## Push throughput",
        "",
        f"Workload: {w['deltas']} deltas per repetition ({w['shape']}), {w['deltas_per_request']} per request "
        f"({w['requests']} requests), {w['repetitions']} repetitions after a {w['warmup_deltas']}-delta warm-up; "
        "fresh tables for every side of every repetition.",
        "",
        *r["method"]["push"],
        "",
        "| side | deltas/s: median (min–max, spread) |",
        "|---|---|",
        f"| handler (full path) | {_range(push['handler_deltas_per_s'])} |",
        f"| floor C: raw `BatchWriteItem` of every item the handler stored | "
        f"{_range(push['floor_all_items_deltas_per_s'])} |",
        f"| floor A: raw `BatchWriteItem` of the log items alone | {_range(push['floor_log_writes_deltas_per_s'])} |",
        f"| floor B: raw replay of the handler's write requests | {_range(push['floor_replay_deltas_per_s'])} |",
        "",
        f"Ratios (per repetition, then median): handler / floor C = {_range(push['ratio_vs_all_items'], '{:.3f}')}; "
        f"handler / floor A = {_range(push['ratio_vs_log_writes'], '{:.3f}')} (the goal); "
        f"handler / floor B = {_range(push['ratio_vs_replay'], '{:.3f}')}.",
        "",
        f"DynamoDB requests of one handler repetition: {_calls(calls['handler'])} = {calls['handler_total']} "
        f"({calls['handler_per_commit']} per commit; {calls['commits']} commits, each one conditional `PutItem` of "
        "its chunk's log item), against "
        f"{calls['floor_all_items_total']} `BatchWriteItem` requests "
        f"({calls['items_written_per_delta_floor_all_items']} items per delta) for floor C and "
        f"{calls['floor_log_writes_total']} (1 item per delta) for floor A. SDK retries during the handler runs: "
        f"{calls['handler_sdk_retries_total']}.",
        "",
    ]
    profile = r.get("push_profile")
    if profile:
        lines += [
            f"### Where the push time goes (cProfile, {profile['deltas']} deltas, client and moto profiled "
            "separately, the client's storage requests one after another so that its profile sees them; profiling "
            "inflates absolute times)",
            "",
            "Client process (the Lambda side), self time by owner; stdlib time is charged to its caller:",
            "",
            *_owners(profile["client"]),
            "",
            *_cumulative(profile["client_functions"], "client function (cumulative)"),
            "",
            "Costliest functions of our code (self time incl. the stdlib work they ask for):",
            "",
            *_functions(profile["client"]["top_ours"]),
            "",
            "Costliest functions overall on the client (without the socket wait):",
            "",
            *_functions(profile["client"]["top_functions"]),
            "",
            "moto server process, by owner and by DynamoDB operation (cumulative):",
            "",
            *_owners(profile["moto"]),
            "",
            *_cumulative(profile["moto_operations"], "moto operation"),
            "",
            *_functions(profile["moto"]["top_functions"][:8], "moto function"),
            "",
        ]
    return lines


def _pull_section(r: dict[str, Any], pull: dict[str, Any]) -> list[str]:
    w = pull["workload"]
    req = pull["requests"]
    lines = [
        "## Pull of pending deltas",
        "",
        f"Workload: {w['pending_deltas']} pending deltas ({w['shape']}), `limit={w['limit_per_request']}` per "
        f"request, {w['repetitions']} repetitions after a one-page warm-up.",
        "",
        *r["method"]["pull"],
        "",
        "| side | seconds for all deltas: median (min–max, spread) | deltas/s (median) |",
        "|---|---|---|",
        f"| handler, paging with the cursor until `hasMore` is false | {_range(pull['handler_s'], '{:.3f}')} | "
        f"{pull['handler_deltas_per_s']['median']:.0f} |",
        f"| floor A: raw `Query` pages of one log item per delta | {_range(pull['floor_a_s'], '{:.2f}')} | "
        f"{pull['floor_a_deltas_per_s']['median']:.0f} |",
        f"| raw paginated `Query` of the stored chunks | {_range(pull['raw_query_s'], '{:.3f}')} | "
        f"{pull['raw_query_deltas_per_s']['median']:.0f} |",
        f"| raw replay of the handler's own DynamoDB requests | {_range(pull['replay_of_handler_calls_s'], '{:.3f}')} "
        "| – |",
        *(
            [
                f"| raw paginated `Query`, then every item's entries inflated | "
                f"{_range(pull['raw_query_and_inflate_s'], '{:.3f}')} | – |"
            ]
            if "raw_query_and_inflate_s" in pull
            else []
        ),
        "",
        f"Ratios (per repetition, then median): handler / floor A = "
        f"{_range(pull['ratio_handler_over_floor_a'], '{:.3f}')} (the goal); "
        f"handler / raw Query of the stored chunks = "
        f"{_range(pull['ratio_handler_over_raw'], '{:.2f}')}; handler / replay of its own requests = "
        f"{_range(pull['ratio_handler_over_replay'], '{:.2f}')}"
        + (
            f"; raw + inflate / raw Query = {_range(pull['ratio_raw_and_inflate_over_raw'], '{:.2f}')}; handler / "
            f"(raw + inflate) = {_range(pull['ratio_handler_over_raw_and_inflate'], '{:.2f}')}."
            if "ratio_handler_over_raw_and_inflate" in pull
            else "."
        ),
        "",
        f"Per page of {w['limit_per_request']} deltas: the handler {pull['handler_ms_per_page']} ms, floor A "
        f"{pull['floor_a_ms_per_page']} ms, of which the SDK's parse of the response alone (botocore on the "
        f"recorded body, no emulator) {pull['floor_a_sdk_parse_ms_per_page']} ms.",
        "",
        f"Requests of one pass: {req['handler_invocations']} handler invocations making "
        f"{_calls(req['handler_dynamodb_calls_per_pass'])} DynamoDB requests, against {req['raw_queries']} "
        f"`Query` requests raw ({req['floor_a_queries']} for floor A). SDK retries during the handler runs: "
        f"{req['handler_sdk_retries_total']}.",
        "",
    ]
    profile = pull.get("profile")
    if profile:
        lines += [
            f"### Where the pull time goes (cProfile of the first {profile['pages']} pages of a handler pass, "
            "client process, its storage requests one after another so that the profile sees them)",
            "",
            *_owners(profile),
            "",
            *_functions(profile["top_ours"]),
            "",
        ]
    return lines


def _imports_section(imports: dict[str, Any]) -> list[str]:
    lines = [
        "## Cold import of the handler modules",
        "",
        f"Method: {imports['method']}. Bare interpreter start and exit: {_range(imports['bare_interpreter_ms'])} ms. "
        f"Heavy packages loaded by the handlers (pyspark, pyiceberg, pandas, pyarrow, numpy, moto): "
        f"{', '.join(imports['heavy_packages_loaded_by_handlers']) or 'none'}.",
        "",
        "| module | in-process import ms: median (min–max) | wall − bare ms | `-X importtime` total ms |",
        "|---|---|---|---|",
    ]
    for module, f in imports["modules"].items():
        w = f["in_process_ms"]
        lines.append(
            f"| `{module}` | {w['median']:.0f} ({w['min']:.0f}–{w['max']:.0f}) | {f['wall_minus_bare_ms']:.0f} | "
            f"{f['importtime']['total_ms']:.0f} |"
        )
    lines += [
        "",
        "Third-party modules the handlers load, each imported alone in a fresh interpreter (in-process ms, median; "
        "they share dependencies, so they do not add up): "
        + ", ".join(f"`{k}` {v['median']:.0f}" for k, v in imports["dependencies_alone_in_process_ms"].items())
        + ".",
    ]
    for module, f in imports["modules"].items():
        t = f["importtime"]
        lines += [
            "",
            f"### `python -X importtime -c 'import {module}'`",
            "",
            "By top-level package (sum of module self times): "
            + ", ".join(f"{k} {v:.0f} ms" for k, v in t["packages_self_ms"].items())
            + ".",
            "",
            "Modules with the largest self time: "
            + ", ".join(f"`{k}` {v:.0f} ms" for k, v in t["modules_self_ms"].items())
            + ".",
            "",
            "Our modules, cumulative: "
            + ", ".join(f"`{k}` {v:.0f} ms" for k, v in t["our_modules_cumulative_ms"].items())
            + ".",
        ]
    return [*lines, ""]


_PUSH_SIDES = {
    "handler": "handler_deltas_per_s",
    "floor A\nlog items": "floor_log_writes_deltas_per_s",
    "floor C\nall items": "floor_all_items_deltas_per_s",
    "floor B\nreplay": "floor_replay_deltas_per_s",
}
"""The push panel's boxes (label: the rate in ``push``), handler first."""
_PULL_SIDES = {
    "handler": "handler_deltas_per_s",
    "floor A\none item a delta": "floor_a_deltas_per_s",
    "raw Query\nof the chunks": "raw_query_deltas_per_s",
}
"""The pull panel's boxes, handler first."""


def plot(r: Mapping[str, Any], path: Path) -> Path:
    """``latest.png``: each repetition of push, pull and push with write rules against its floors and goal line,
    and each handler's cold imports against the import goal (a panel per benchmark the run has)."""
    panels = [name for name in ("push", "pull", "write_rules", "imports") if r.get(name)]
    fig, axes = plots.figure(len(panels), columns=2, width=6.2, height=4.2)
    for ax, name in zip(axes, panels, strict=True):
        figures = r[name]
        if name == "push":
            at_least = figures["goal"]["ratio_vs_log_writes_at_least"]
            _against_floors(
                ax,
                figures,
                _PUSH_SIDES,
                (at_least * figures["floor_log_writes_deltas_per_s"]["median"], f"goal: ≥ {at_least:g}× floor A"),
            )
            ax.set_ylim(bottom=0)
            ax.set_title(
                f"push: {figures['workload']['deltas']:,} deltas; handler / floor A"
                f" {figures['ratio_vs_log_writes']['median']:.2f}× (median of repetitions)"
            )
        elif name == "pull":
            at_most = figures["goal"]["ratio_at_most"]
            _against_floors(
                ax,
                figures,
                _PULL_SIDES,
                (figures["floor_a_deltas_per_s"]["median"] / at_most, f"goal: time ≤ {at_most:g}× floor A"),
            )
            plots.plain_log(ax)
            ax.set_ylabel("deltas/s, log scale (higher is better)")
            ax.set_title(
                f"pull: {figures['workload']['pending_deltas']:,} deltas paged; time / floor A"
                f" {figures['ratio_handler_over_floor_a']['median']:.2f}×"
            )
        elif name == "write_rules":
            plots.spread(
                ax,
                {"with rules / without,\neach repetition": figures["ratio_with_over_without"]["values"]},
                fmt="{:.3f}×",
            )
            at_least = figures["goal"]["ratio_at_least"]
            plots.goal_line(ax, at_least, f"goal: ≥ {at_least:g}×")
            ax.set_ylabel("push rate with write rules / without")
            ax.set_title("push with write rules against without (same run)")
            ax.set_ylim(0, max(1.1, *figures["ratio_with_over_without"]["values"]) * 1.05)
        else:
            plots.spread(
                ax,
                {m.removeprefix("functions."): f["in_process_ms"]["values"] for m, f in figures["modules"].items()},
                unit="ms",
            )
            plots.goal_line(ax, figures["goal_ms"], f"goal: ≤ {figures['goal_ms']:g} ms")
            ax.set_ylabel("cold import, in-process ms (lower is better)")
            ax.set_title("each handler's cold import")
            ax.set_ylim(bottom=0)
            ax.tick_params(axis="x", labelsize="small")
        ax.legend(loc="lower right", fontsize="small")
    return plots.save(fig, path, title=f"Gateway benchmarks, {r['timestamp'][:10]} (only ratios are meaningful)")


def _against_floors(ax: Any, figures: Mapping[str, Any], sides: Mapping[str, str], goal: tuple[float, str]) -> None:
    """The handler's repetitions (the first side) beside its floors' (the others, grey), with the goal line."""
    plots.spread(
        ax,
        {label: figures[key]["values"] for label, key in sides.items()},
        colours=[plots.OURS, *[plots.FLOOR] * (len(sides) - 1)],
    )
    plots.goal_line(ax, *goal)
    ax.set_ylabel("deltas/s (higher is better)")
