"""Checking a tool call's arguments against the tool's JSON Schema, offline."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from mcpbridge.errors import InvalidInput

MAX_ARGUMENT_BYTES = 256 * 1024


def validate_arguments(schema: Mapping[str, Any], arguments: Any) -> None:
    """Validate ``arguments`` against a tool's JSON Schema. Remote ``$ref`` are never fetched (a schema that needs
    one fails validation), and the error names the failing path, never the value."""

    from jsonschema import exceptions as schema_errors
    from jsonschema import validators
    from referencing import Registry
    from referencing.exceptions import NoSuchResource

    if not isinstance(arguments, dict):
        raise InvalidInput("arguments must be a JSON object", code="invalid_arguments")
    if len(json.dumps(arguments, default=str)) > MAX_ARGUMENT_BYTES:
        raise InvalidInput(f"arguments are larger than {MAX_ARGUMENT_BYTES // 1024} KiB", code="invalid_arguments")

    def refuse(uri: str) -> Any:
        raise NoSuchResource(ref=uri)  # type: ignore[call-arg]

    try:
        validator_class = validators.validator_for(dict(schema))
        validator = validator_class(dict(schema), registry=Registry(retrieve=refuse))  # type: ignore[call-arg]
        error = schema_errors.best_match(validator.iter_errors(arguments))
    except (schema_errors.SchemaError, schema_errors._WrappedReferencingError, NoSuchResource) as broken:
        raise InvalidInput(
            "the tool's input schema cannot be used to check arguments", code="invalid_tool_schema"
        ) from broken
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(root)"
        raise InvalidInput(
            f"arguments do not match the tool's schema at {where}: {error.validator} failed",
            code="invalid_arguments",
            details={"path": where, "rule": str(error.validator)},
        )
