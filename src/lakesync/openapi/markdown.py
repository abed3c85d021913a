"""The reference part of ``docs/api.md``, rendered from the document."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from lakesync.openapi.builder import build_document

BEGIN_MARKER: Final = "<!-- BEGIN GENERATED: python -m lakesync.openapi docs/api.md -->"
END_MARKER: Final = "<!-- END GENERATED -->"


def _schema_text(schema: Mapping[str, Any]) -> str:
    """A one-line rendering of a schema: a component name, a type with its constraints, or a union."""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "anyOf" in schema:
        return " or ".join(_schema_text(s) for s in schema["anyOf"])
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    kind = schema.get("type", "any")
    text = " or ".join(kind) if isinstance(kind, list) else str(kind)
    if kind == "array" and "items" in schema:
        text = f"array of {_schema_text(schema['items'])}"
    elif schema.get("format") == "binary":
        text = "bytes"
    limits = [
        f"{key} {schema[key]}"
        for key in ("minLength", "maxLength", "minItems", "maxItems", "minimum")
        if key in schema and not (key == "minLength" and schema[key] == 1)
    ]
    if schema.get("minLength") == 1:
        text = "non-empty " + text
    if "pattern" in schema:
        limits.append(f"`{schema['pattern']}`")
    return text + (f" ({', '.join(limits)})" if limits else "")


def _cell(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())


def render_markdown(doc: Mapping[str, Any] | None = None) -> str:
    """The reference part of ``docs/api.md``: every operation, then every component schema."""
    doc = doc if doc is not None else build_document()
    components = doc["components"]
    operations = [(path, method, op) for path, methods in doc["paths"].items() for method, op in methods.items()]
    out: list[str] = [BEGIN_MARKER, "", "## Routes", ""]
    out += ["| Method | Path | Auth | Summary |", "|---|---|---|---|"]
    for path, method, op in operations:
        anchor = f"{method}-{path}".lower().replace("/", "").replace("{", "").replace("}", "").replace(".", "")
        out.append(f"| {method.upper()} | `{path}` | {_auth_of(op)} | [{op['summary']}](#{anchor}) |")
    for path, method, op in operations:
        out += _operation_section(path, method, op, components)
    out += ["", "## Schemas"]
    for name, schema in components["schemas"].items():
        out += _schema_section(name, schema)
    out += ["", END_MARKER]
    return "\n".join(out) + "\n"


def _operation_section(path: str, method: str, op: Mapping[str, Any], components: Mapping[str, Any]) -> list[str]:
    out = ["", f"### {method.upper()} {path}", "", f"**{op['summary']}.** Auth: {_auth_of(op)}."]
    if "description" in op:
        out += ["", op["description"]]
    params = op.get("parameters", [])
    if params:
        out += ["", "| Parameter | In | Required | Schema | Description |", "|---|---|---|---|---|"]
        out += [
            f"| `{p['name']}` | {p['in']} | {'yes' if p['required'] else 'no'} | "
            f"{_cell(_schema_text(p['schema']))} | {_cell(p.get('description', ''))} |"
            for p in params
        ]
    body = op.get("requestBody")
    if body:
        out += ["", "Request body:"]
        for media, content in body["content"].items():
            out.append(f"- `{media}`: {_schema_text(content['schema'])}")
            if "example" in content:
                out += ["", "  ```json", "  " + json.dumps(content["example"]), "  ```"]
    out += ["", "| Status | Meaning | Body |", "|---|---|---|"]
    for status, response in op["responses"].items():
        if "$ref" in response:
            response = components["responses"][str(response["$ref"]).rsplit("/", 1)[-1]]
        bodies = (
            ", ".join(
                f"`{media}` {_schema_text(content['schema'])}" for media, content in response.get("content", {}).items()
            )
            or "none"
        )
        out.append(f"| {status} | {_cell(response['description'])} | {_cell(bodies)} |")
    return out


def _schema_section(name: str, schema: Mapping[str, Any]) -> list[str]:
    out = ["", f"### {name}", ""]
    if "description" in schema:
        out += [schema["description"], ""]
    props = schema.get("properties")
    if not props:
        return [*out, f"{_schema_text(schema)}."]
    required = set(schema.get("required", ()))
    out += ["| Field | Required | Schema | Description |", "|---|---|---|---|"]
    out += [
        f"| `{prop}` | {'yes' if prop in required else 'no'} | {_cell(_schema_text(sub))} | "
        f"{_cell(sub.get('description', ''))} |"
        for prop, sub in props.items()
    ]
    return out


def _auth_of(op: Mapping[str, Any]) -> str:
    if not op["security"]:
        return "none"
    return "admin token" if "role `admin`" in op.get("description", "") else "client token"


def update_markdown(text: str) -> str:
    """``text`` with its generated section (between the markers) replaced by :func:`render_markdown`."""
    start, end = text.index(BEGIN_MARKER), text.index(END_MARKER) + len(END_MARKER) + 1
    return text[:start] + render_markdown() + text[end:]
