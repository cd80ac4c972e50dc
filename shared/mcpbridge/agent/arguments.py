"""Checking a tool call's arguments against the tool's JSON Schema, offline."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from typing import Any

from mcpbridge.errors import InvalidInput

MAX_ARGUMENT_BYTES = 256 * 1024


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> None:
    """Validate ``arguments`` against a tool's JSON Schema. Remote ``$ref`` are never fetched (a schema that needs
    one fails validation). Every problem is reported (up to 20), each naming the field and the rule it breaks, never
    the value: ``details.errors`` lists ``{path, rule, problem}``."""

    from jsonschema import exceptions as schema_errors
    from referencing.exceptions import NoSuchResource

    if not isinstance(arguments, dict):
        raise InvalidInput("arguments must be a JSON object", code="invalid_arguments")
    if len(json.dumps(arguments, default=str)) > MAX_ARGUMENT_BYTES:
        raise InvalidInput(f"arguments are larger than {MAX_ARGUMENT_BYTES // 1024} KiB", code="invalid_arguments")
    try:
        validator = _validator_of(json.dumps(schema, default=str))  # in its order: problems are listed in it
        errors = sorted(validator.iter_errors(arguments), key=lambda e: [str(p) for p in e.absolute_path])
    except (schema_errors.SchemaError, schema_errors._WrappedReferencingError, NoSuchResource) as broken:
        raise InvalidInput(
            "the tool's input schema cannot be used to check arguments", code="invalid_tool_schema"
        ) from broken
    if errors:
        found: list[dict[str, str]] = []
        for error in errors:
            found += [problem for problem in _problems(error) if problem not in found]
        problems = found[:MAX_PROBLEMS]
        listed = "; ".join(f"{p['path']}: {p['problem']}" for p in problems)
        more = f" (and {len(found) - MAX_PROBLEMS} more)" if len(found) > MAX_PROBLEMS else ""
        raise InvalidInput(
            f"arguments do not match the tool's schema: {listed}{more}",
            code="invalid_arguments",
            details={"errors": problems, "path": problems[0]["path"], "rule": problems[0]["rule"]},
        )


@functools.lru_cache(maxsize=256)
def _validator_of(schema_json: str) -> Any:
    """The validator of a schema (given as JSON), built once: building one took longer than checking
    a call's arguments with it. Validators hold no state of a validation, so calls share them."""
    from jsonschema import validators
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    def refuse(uri: str) -> Any:
        raise NoSuchResource(ref=uri)  # type: ignore[call-arg]

    schema = json.loads(schema_json)
    return validators.validator_for(schema)(schema, registry=Registry(retrieve=refuse))  # type: ignore[call-arg]


def _problems(error: Any) -> list[dict[str, str]]:
    """Where and what, in words built from the schema: never the value given (it may be a secret)."""
    parents = [str(p) for p in error.absolute_path]
    where = "/".join(parents) or "(root)"
    rule, expected = str(error.validator), error.validator_value
    if rule == "required" and isinstance(error.instance, dict) and isinstance(expected, list):
        # The missing property is the field to name (where it is missing is its parent).
        missing = [str(name) for name in expected if name not in error.instance]
        return [{"path": "/".join([*parents, name]), "rule": rule, "problem": "required"} for name in missing]
    if rule == "additionalProperties" and isinstance(error.instance, dict):
        known = set(error.schema.get("properties", {}))
        extra = sorted(str(name) for name in error.instance if name not in known)
        return [{"path": where, "rule": rule, "problem": f"unknown {_names(extra)} (not in the schema)"}]
    problem = _RULES.get(rule, "{rule} failed").format(rule=rule, v=_shown(expected))
    return [{"path": where, "rule": rule, "problem": problem}]


MAX_PROBLEMS = 20
_RULES = {
    "type": "must be of type {v}",
    "enum": "must be one of {v}",
    "const": "must be {v}",
    "minimum": "must be at least {v}",
    "maximum": "must be at most {v}",
    "exclusiveMinimum": "must be more than {v}",
    "exclusiveMaximum": "must be less than {v}",
    "minLength": "must be at least {v} characters long",
    "maxLength": "must be at most {v} characters long",
    "pattern": "must match the pattern {v}",
    "format": "must be a {v}",
    "minItems": "must have at least {v} items",
    "maxItems": "must have at most {v} items",
    "uniqueItems": "must not repeat items",
    "minProperties": "must have at least {v} properties",
    "maxProperties": "must have at most {v} properties",
    "multipleOf": "must be a multiple of {v}",
}


def _shown(expected: Any) -> str:
    text = json.dumps(expected, default=str) if not isinstance(expected, str) else expected
    return text if len(text) <= 120 else text[:119] + "…"


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n[:64]) for n in names[:5])
    return ("property " if len(names) == 1 else "properties ") + shown + (" ..." if len(names) > 5 else "")
