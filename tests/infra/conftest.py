"""One synth of the CDK app per test session, shared by every infra test.

The app is built exactly as ``infra/app.py`` builds it (``build_app`` with ``infra/cdk.json``'s context and the real
Lambda assets and Glue bundle), for the ``dev`` environment with every optional setting switched on, so each code
path that depends on configuration appears in the one template -- but for the flush engine, the default (``auto``: the
flush function and the Glue flush job, the lake tick choosing): ``glue_synth`` is the same environment with
``flushEngine: glue`` (the Glue flush job alone), ``function_synth`` with ``flushEngine: function``. cdk-nag runs during
the synth; a failed validation does not stop the session (the nag test reports it), the template is read from the
cloud assembly either way.

``Cfn`` wraps the template with the few queries the tests need. CloudFormation expressions are rendered the way
cdk-nag spells them: ``{"Ref": "X"}`` -> ``<X>``, ``{"Fn::GetAtt": ["X", "Arn"]}`` -> ``<X.Arn>``, ``Fn::Join``
concatenated, ``Fn::Select`` as its JSON.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

# Node 20 is what these machines have; jsii's end-of-life banner on every import is noise here (see STACK.md).
os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

ROOT = Path(__file__).resolve().parents[2]
CDK_JSON = ROOT / "infra" / "cdk.json"
ENV = "dev"
OPTIONS = {
    "subShards": {"todos": 4},
    "flushThresholdBytes": 2_000_000,
    "backpressureBytes": 8_000_000,
    "maxBodyBytes": 2_097_152,
    "reservedConcurrency": {"push": 50, "pull": 40},
    "corsOrigins": ["https://app.example.com"],
    "alarmEmail": "ops@example.com",
    "gatewayIds": ["default", "other"],
    "logRetentionDays": 14,
    "dashboard": True,
    "sqlSourcePulls": True,
    "pullBasisTtlMs": 2500,
    "apiGatewayLogsRole": "create",
}
"""Settings layered over cdk.json's ``dev`` environment for the test synth."""


def _render(value: Any, ref: Callable[[str], str] | None = None) -> str:
    """A CloudFormation value as text (``<X>`` for ``Ref X``, ``<X.Attr>`` for ``GetAtt``, or ``ref(X)``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, dict) and len(value) == 1:
        ((fn, arg),) = value.items()
        if fn == "Ref":
            if arg.startswith("AWS::"):
                return f"<{arg}>"
            return ref(arg) if ref else f"<{arg}>"
        if fn == "Fn::GetAtt":
            return f"<{arg[0]}.{arg[1]}>"
        if fn == "Fn::Join":
            sep, parts = arg
            return sep.join(_render(p, ref) for p in parts)
        if fn == "Fn::Sub":
            return arg if isinstance(arg, str) else arg[0]
        if fn == "Fn::Select":  # as cdk-nag spells it: the expression's JSON (the Glue database's stack-id part)
            return json.dumps(value, separators=(",", ":"))
    raise AssertionError(f"cannot render {value!r}")


@dataclass
class Cfn:
    """The synthesized template and the queries the tests share."""

    template: dict[str, Any]
    resources: dict[str, Any] = field(init=False)

    def __post_init__(self) -> None:
        self.resources = self.template["Resources"]

    @staticmethod
    def render(value: Any, ref: Callable[[str], str] | None = None) -> str:
        """A CloudFormation value as text (see the module docstring); ``ref`` renders non-pseudo ``Ref``s."""
        return _render(value, ref)

    def of_type(self, kind: str) -> dict[str, dict[str, Any]]:
        """Logical id -> properties of every resource of ``kind``."""
        return {k: r.get("Properties", {}) for k, r in self.resources.items() if r["Type"] == kind}

    def functions(self) -> dict[str, dict[str, Any]]:
        """Our functions (handler ``functions.<name>.lambda_handler``) by name -> (logical id, properties)."""
        out = {}
        for logical, props in self.of_type("AWS::Lambda::Function").items():
            handler = props.get("Handler", "")
            if handler.startswith("functions."):
                out[handler.split(".")[1]] = {"logical": logical, **props}
        return out

    def role_statements(self, role_logical: str) -> list[dict[str, Any]]:
        """Every statement of the inline policies attached to ``role_logical``."""
        statements = []
        for props in self.of_type("AWS::IAM::Policy").values():
            if {"Ref": role_logical} in props["Roles"]:
                statements.extend(props["PolicyDocument"]["Statement"])
        role = self.resources[role_logical]["Properties"]
        for policy in role.get("Policies", []):
            statements.extend(policy["PolicyDocument"]["Statement"])
        return statements

    def allowed(self, role_logical: str) -> list[tuple[str, str]]:
        """``(action, rendered resource)`` pairs the role's policies allow."""
        pairs = []
        for st in self.role_statements(role_logical):
            assert st["Effect"] == "Allow"
            actions = st["Action"] if isinstance(st["Action"], list) else [st["Action"]]
            resources = st["Resource"] if isinstance(st["Resource"], list) else [st["Resource"]]
            pairs.extend((a, _render(r)) for a in actions for r in resources)
        return pairs

    def role_of(self, function_props: dict[str, Any]) -> str:
        """The logical id of a function's role."""
        role = function_props["Role"]
        return str(role["Fn::GetAtt"][0])


@dataclass
class Synth:
    """The session's synth: template, cloud assembly, validation outcome, the stack object, artifacts."""

    cfn: Cfn
    outdir: Path
    stack: Any
    artifacts: Any
    violations: list[dict[str, Any]]
    error: str | None
    seconds: float
    acknowledgments: dict[str, dict[str, str]]
    ids: dict[str, str]

    @property
    def engine(self) -> str:
        """The environment's ``flushEngine``: ``auto``, ``function`` or ``glue``."""
        return str(self.stack.config.flush_engine)

    @property
    def engines(self) -> tuple[str, ...]:
        """The flush engines deployed: ``function`` and/or ``glue``."""
        return tuple(self.stack.config.flush_engines)

    def flush_role(self, engine: str) -> str:
        """The logical id of an engine's flush role: the flush function's (``function``) or the Glue flush job's."""
        if engine == "function":
            return self.cfn.role_of(self.cfn.functions()["flush"])
        return str(self.cfn.resources[self.ids["job:flush"]]["Properties"]["Role"]["Fn::GetAtt"][0])

    def flush_roles(self) -> list[str]:
        """The logical ids of the deployed flush engines' roles, sorted."""
        return sorted(self.flush_role(engine) for engine in self.engines)


def _acknowledgments(metadata_file: Path) -> dict[str, dict[str, str]]:
    """Construct path -> {rule: reason} recorded by ``Validations.of(...).acknowledge``."""
    from lakesync_infra.common import ACKNOWLEDGED_RULES_METADATA

    metadata = json.loads(metadata_file.read_text(encoding="utf-8"))
    out: dict[str, dict[str, str]] = {}
    for path, entries in metadata.items():
        for entry in entries:
            if entry["type"] == ACKNOWLEDGED_RULES_METADATA:
                out.setdefault(path, {}).update(entry["data"])
    return out


def _synthesize(outdir: Path, artifacts: Any, options: dict[str, Any]) -> Synth:
    """The app for the ``dev`` environment with ``options`` layered over cdk.json's, synthesized into ``outdir``."""
    from lakesync_infra.stack import build_app

    context = json.loads(CDK_JSON.read_text(encoding="utf-8"))["context"]
    env_key = f"lakesync:env:{ENV}"
    post = {"lakesync:environments": ENV, env_key: {**context.get(env_key, {}), **options}}
    started = time.monotonic()
    app, stacks = build_app(context, artifacts, outdir=str(outdir), post_cli_context=post)
    error = None
    try:
        app.synth()
    except RuntimeError as exc:
        error = str(exc)
    seconds = time.monotonic() - started
    (stack,) = stacks
    report = outdir / "validation-report.json"
    violations = []
    if report.exists():
        for plugin in json.loads(report.read_text(encoding="utf-8"))["pluginReports"]:
            violations.extend(plugin.get("violations", []))
    template = json.loads((outdir / stack.template_file).read_text(encoding="utf-8"))
    return Synth(
        cfn=Cfn(template),
        outdir=outdir,
        stack=stack,
        artifacts=artifacts,
        violations=violations,
        error=error,
        seconds=seconds,
        acknowledgments=_acknowledgments(outdir / f"{stack.artifact_id}.metadata.json"),
        ids=_logical_ids(stack),
    )


@pytest.fixture(scope="session")
def synth(tmp_path_factory: pytest.TempPathFactory) -> Synth:
    from lakesync_infra.packaging import (
        build_flush_asset,
        build_glue_bundle,
        build_lambda_asset,
        build_materialise_asset,
    )
    from lakesync_infra.stack import Artifacts

    artifacts = Artifacts(
        lambda_asset=build_lambda_asset(),
        glue=build_glue_bundle(),
        materialise_asset=build_materialise_asset(),
        flush_asset=build_flush_asset(),
    )
    return _synthesize(tmp_path_factory.mktemp("cdk.out"), artifacts, OPTIONS)


@pytest.fixture(scope="session")
def glue_synth(synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The same environment with ``flushEngine: glue`` (the flush as the Glue job, no flush function): a second
    synth, made only for the tests that ask for it."""
    return _synthesize(tmp_path_factory.mktemp("cdk.out.glue"), synth.artifacts, {**OPTIONS, "flushEngine": "glue"})


@pytest.fixture(scope="session")
def function_synth(synth: Synth, tmp_path_factory: pytest.TempPathFactory) -> Synth:
    """The same environment with ``flushEngine: function`` (the flush function alone, no Glue flush job): a third
    synth, made only for the tests that ask for it."""
    options = {**OPTIONS, "flushEngine": "function"}
    return _synthesize(tmp_path_factory.mktemp("cdk.out.function"), synth.artifacts, options)


@pytest.fixture(scope="session", params=["auto", "glue"])
def either_engine(request: pytest.FixtureRequest) -> Synth:
    """The default synth (both flush engines), then ``glue_synth`` (the Glue flush job alone)."""
    synth: Synth = request.getfixturevalue("synth" if request.param == "auto" else "glue_synth")
    return synth


@pytest.fixture(scope="session")
def glue_cfn(glue_synth: Synth) -> Cfn:
    return glue_synth.cfn


@pytest.fixture(scope="session")
def glue_ids(glue_synth: Synth) -> dict[str, str]:
    return glue_synth.ids


@pytest.fixture(scope="session")
def cfn(synth: Synth) -> Cfn:
    return synth.cfn


def _logical_ids(stack: Any) -> dict[str, str]:
    """Logical ids of the resources the tests look up: ``table:<kind>``, ``bucket:<name>``, ``job:<kind>``..."""
    import aws_cdk as cdk

    def lid(construct: Any) -> str:
        resource = construct if isinstance(construct, cdk.CfnElement) else construct.node.default_child
        return str(stack.get_logical_id(resource))

    ids = {f"table:{kind}": lid(table) for kind, table in stack.buffer.tables.items()}
    ids |= {f"job:{kind}": lid(job) for kind, job in stack.jobs.jobs.items()}
    ids["job:restore"] = lid(stack.restore.job)  # started by hand: not one of the lake's jobs (stack.jobs.jobs)
    ids |= {f"function:{name}": lid(fn) for name, fn in stack.functions.functions.items()}
    ids |= {
        "bucket:warehouse": lid(stack.lake.bucket),
        "bucket:checkpoints": lid(stack.lake.checkpoints),
        "bucket:access_logs": lid(stack.lake.access_logs),
        "bucket:artifacts": lid(stack.jobs.artifacts),
        "bucket:claim_check": lid(stack.queues.claim_check),
        "queue:materialise": lid(stack.queues.queue),
        "queue:dead_letters": lid(stack.queues.dead_letter_queue),
        "queue:stream_failures": lid(stack.functions.stream_failures),
        "secret:jwt": lid(stack.secrets.jwt_secret),
        "key:data": lid(stack.data_key),
        "database": lid(stack.lake.database),
        "topic:alarms": lid(stack.monitoring.topic),
        "rule:glue_failures": lid(stack.monitoring.glue_failures),
        "role:connector_schedules": lid(stack.connectors.role),
    }
    return ids


@pytest.fixture(scope="session")
def ids(synth: Synth) -> dict[str, str]:
    return synth.ids


@pytest.fixture(scope="session")
def options() -> dict[str, Any]:
    """The settings the test synth layers over cdk.json's ``dev`` environment."""
    return OPTIONS
