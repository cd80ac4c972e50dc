"""Logging: structured JSON in Lambda (powertools formatter, request id on every line), plain text locally; and
telemetry (``ports.Telemetry``): Powertools Metrics and Tracer in Lambda, nothing locally.

Nothing logs a secret, token, authorization code or state value: modules log ids and hints only. Libraries are
less careful: ``httpx`` and ``httpx2`` log every request's full URL at INFO, uvicorn's access log keeps the query
string, and exception messages often quote URLs. A URL's query is where secrets end up by mistake
(``?api_key=sk_...``), so :func:`install_log_redaction` masks URLs in every record the process creates, whoever
logs it and whichever handler writes it: query (and, in absolute URLs, fragment) values become ``***`` and userinfo
``***@``, parameter names stay (``https://h/mcp?api_key=***&v=***``). :func:`masked_url` is the same rule for
URLs shown in API responses.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from mcpbridge.request_context import bind as bind_request_id
from mcpbridge.request_context import install_request_id_logging, quiet_chatty_loggers

if TYPE_CHECKING:
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

MASK = "***"

# An absolute URL up to whitespace, a double quote, a backslash (JSON's escape: a URL never holds a bare one) or
# angle brackets (single quotes are legal inside a URL).
_ABSOLUTE_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s\"\\<>`]*")
# A query after something that can end a path or a host ("/mcp?", "host?", "]:8080/?"), up to a fragment or the
# end of the word; a "?" after a space or a bracket ("what?", "(?i)") is prose, not a URL.
_QUERY = re.compile(r"(?<=[\w\-.~%/:\]])\?([^\s#\"\\<>`]*)")


def _mask_parameters(text: str) -> str:
    """``a=1&b=2&flag`` -> ``a=***&b=***&***``: names kept, every value (and a bare item, which may be one) masked."""
    parts: list[str] = []
    for part in text.split("&"):
        if not part:
            parts.append(part)
            continue
        name, equals, _ = part.partition("=")
        parts.append(f"{name}={MASK}" if equals else MASK)
    return "&".join(parts)


def _mask_absolute(url: str) -> str:
    scheme, _, rest = url.partition("://")
    end = len(rest)
    for mark in "/?#":
        index = rest.find(mark)
        if index != -1:
            end = min(end, index)
    authority, tail = rest[:end], rest[end:]
    if "@" in authority:
        authority = f"{MASK}@{authority.rpartition('@')[2]}"
    tail, hash_, fragment = tail.partition("#")
    path, question, query = tail.partition("?")
    masked = f"{scheme}://{authority}{path}"
    if question:
        masked += "?" + _mask_parameters(query)
    if hash_:
        masked += "#" + _mask_parameters(fragment)
    return masked


def redact_text(text: str) -> str:
    """``text`` with every URL in it masked (see the module docstring); text without a URL comes back unchanged."""
    if "?" not in text and "@" not in text and "#" not in text:
        return text
    text = _ABSOLUTE_URL.sub(lambda match: _mask_absolute(match.group(0)), text)
    return _QUERY.sub(lambda match: "?" + _mask_parameters(match.group(1)), text)


def masked_url(url: str) -> str:
    """``url`` fit to show in a response or a message: query and fragment values ``***``, userinfo ``***@``.

    The stored URL is left as it is (mcpbridge still connects with the real query).
    """
    if "://" in url:
        return _mask_absolute(url)
    return redact_text(url)


# --------------------------------------------------------------------------------------------------------------------
# Log records


def _is_url_like(value: object) -> bool:
    # httpx.URL, httpx2.URL, starlette's URL, pydantic's AnyUrl...: their str() is the URL with its query.
    name = type(value).__name__
    return name.endswith(("URL", "Url"))


def _redacted_argument(value: Any) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, BaseException) or _is_url_like(value):
        text = str(value)
        masked = redact_text(text)
        return value if masked == text else masked
    return value


def _redact_pieces(record: logging.LogRecord) -> None:
    record.msg = redact_text(record.msg) if isinstance(record.msg, str) else _redacted_argument(record.msg)
    args = record.args
    if isinstance(args, tuple):
        record.args = tuple(_redacted_argument(arg) for arg in args)
    elif isinstance(args, Mapping):
        record.args = {key: _redacted_argument(value) for key, value in args.items()}


def redact_record(record: logging.LogRecord) -> None:
    """Mask URLs in a record's message, rendered traceback and stack, in place.

    The message and its arguments are masked one by one, so arguments keep their types (``%d`` still gets its int;
    uvicorn's access formatter still finds its five arguments). When that does not give the masked message (a
    URL built from the format string and an argument, ``"%s?key=%s"``), the record carries the masked message
    itself, without arguments. An exception's traceback is rendered now when it needs masking (``exc_text``, which
    formatters reuse).
    """
    try:
        message: str | None = record.getMessage()
    except Exception:  # a malformed logging call: the handler reports it; mask what can be masked
        message = None
    if message is None:
        _redact_pieces(record)
    else:
        masked = redact_text(message)
        if masked != message:
            _redact_pieces(record)
            try:
                pieces_match = record.getMessage() == masked
            except Exception:
                pieces_match = False
            if not pieces_match:
                record.msg, record.args = masked, ()
    if record.exc_info and not record.exc_text:
        rendered = logging.Formatter().formatException(record.exc_info)
        masked_traceback = redact_text(rendered)
        if masked_traceback != rendered:
            record.exc_text = masked_traceback
    elif record.exc_text:
        record.exc_text = redact_text(record.exc_text)
    if record.stack_info:
        record.stack_info = redact_text(record.stack_info)


def install_log_redaction() -> None:
    """Mask URLs in every log record this process creates from now on (idempotent).

    The record factory is the one place every record passes, whichever logger made it (``httpx``, ``httpx2``,
    ``httpcore``, ``uvicorn.access``, the MCP SDK, mcpbridge) and whichever handler writes it (stderr, powertools'
    JSON, a test's capture): a filter on a logger misses its children's records, one on a handler misses the
    handlers installed later (uvicorn's, for one).
    """
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacts_urls", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        redact_record(record)
        return record

    factory.redacts_urls = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


LOCAL_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"


def configure_local_logging(level: str) -> None:
    """Plain text on stderr for every logger (uvicorn's too, when it is run with ``log_config=None``), each line
    with its request id."""
    install_log_redaction()
    install_request_id_logging()
    logging.basicConfig(level=level.upper(), format=LOCAL_FORMAT)
    quiet_chatty_loggers(level)


def _powertools_formatter() -> LambdaPowertoolsFormatter:
    from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter

    class RedactingFormatter(LambdaPowertoolsFormatter):
        """Powertools renders tracebacks itself (not from ``exc_text``): mask them, and the exception's value."""

        def formatException(self, ei: Any) -> str:
            return redact_text(super().formatException(ei))

        def _serialize_stacktrace(self, log_record: logging.LogRecord) -> Any:
            trace = super()._serialize_stacktrace(log_record)
            if isinstance(trace, dict) and "value" in trace:
                trace = {**trace, "value": redact_text(str(trace["value"]))}
            return trace

    return RedactingFormatter(service="mcpbridge")


class LambdaLogging:
    """Every log line as JSON, with ``request_id`` (API Gateway's for an HTTP request, else the invocation's) and
    ``function_request_id`` (the Lambda invocation's).

    The JSON handler takes the place of the runtime's own on the root logger, so the libraries' lines (the MCP SDK,
    httpx) are JSON with the request id too; the ``mcpbridge`` tree keeps one as well (its level is ours)."""

    def __init__(self, level: str) -> None:
        install_log_redaction()
        install_request_id_logging()
        self._formatter = _powertools_formatter()
        handler = logging.StreamHandler()
        handler.setFormatter(self._formatter)
        ours = logging.getLogger("mcpbridge")
        ours.handlers[:] = [handler]
        ours.setLevel(level.upper())
        ours.propagate = False
        root = logging.getLogger()
        root.handlers[:] = [h for h in root.handlers if type(h).__name__ != _RUNTIME_HANDLER and not _is_ours(h)]
        shared = logging.StreamHandler()
        shared.setFormatter(self._formatter)
        shared.mcpbridge_json = True  # type: ignore[attr-defined]
        root.addHandler(shared)
        root.setLevel(level.upper())
        quiet_chatty_loggers(level)

    def bind(self, context: Any) -> None:
        """At the start of an invocation: its id, until an HTTP request binds API Gateway's inside it."""
        request_id = getattr(context, "aws_request_id", None)
        if request_id:
            self._formatter.append_keys(function_request_id=request_id)
        bind_request_id(request_id or None)


_RUNTIME_HANDLER = "LambdaLoggerHandler"  # the Python runtime's handler on the root logger


def _is_ours(handler: logging.Handler) -> bool:
    return bool(getattr(handler, "mcpbridge_json", False))


# --------------------------------------------------------------------------------------------------------------------
# Telemetry

log = logging.getLogger("mcpbridge.observability")


class NoTelemetry:
    """``ports.Telemetry`` that records nothing (the embedded backend, tests, any process outside Lambda)."""

    def count(self, name: str, value: float = 1, *, unit: str = "Count", **dimensions: str) -> None:
        return None

    def span(self, name: str, **annotations: str) -> AbstractContextManager[None]:
        return contextlib.nullcontext()

    def flush(self) -> None:
        return None


class LambdaTelemetry:
    """``ports.Telemetry`` in a Lambda function: CloudWatch metrics in the embedded metric format (Powertools
    Metrics: namespace ``POWERTOOLS_METRICS_NAMESPACE``, the one dimension ``service`` = ``POWERTOOLS_SERVICE_NAME``;
    a metric with dimensions of its own, e.g. ``outcome``, is written on its own at once) and X-Ray subsegments
    (Powertools Tracer; botocore is patched, so every AWS call, the store's included, is a subsegment too).

    Built at import (no I/O); :meth:`flush` writes the invocation's metrics (call it when each invocation ends)."""

    def __init__(self) -> None:
        import os

        from aws_lambda_powertools import Metrics

        # The template sets both; without them (a function configured by hand) the product's own names.
        namespace = os.environ.get("POWERTOOLS_METRICS_NAMESPACE") or "mcpbridge"
        service = os.environ.get("POWERTOOLS_SERVICE_NAME") or "mcpbridge"
        self._metrics = Metrics(namespace=namespace, service=service)
        self._pending = False
        self._tracer: Any = None
        try:
            from aws_lambda_powertools import Tracer

            self._tracer = Tracer(patch_modules=["botocore"])
        except ImportError:  # aws-xray-sdk missing from the layer: metrics still work
            log.warning("tracing is off: aws-xray-sdk is not installed")

    def count(self, name: str, value: float = 1, *, unit: str = "Count", **dimensions: str) -> None:
        from aws_lambda_powertools.metrics import MetricUnit, single_metric

        try:
            if not dimensions:
                self._metrics.add_metric(name=name, unit=MetricUnit(unit), value=value)
                self._pending = True
                return
            service = self._metrics.service or "mcpbridge"
            namespace = self._metrics.namespace
            with single_metric(
                name, MetricUnit(unit), value, namespace=namespace, default_dimensions={"service": service}
            ) as metric:
                for dimension, dimension_value in dimensions.items():
                    metric.add_dimension(dimension, dimension_value)
        except Exception as exc:  # a metric is never worth failing the request for
            log.warning("metric %s not recorded (%s)", name, type(exc).__name__)

    @contextlib.contextmanager
    def span(self, name: str, **annotations: str) -> Iterator[None]:
        if self._tracer is None:
            yield
            return
        try:
            manager = self._tracer.provider.in_subsegment(name=name)
            subsegment = manager.__enter__()
            for key, annotation in annotations.items():
                subsegment.put_annotation(key, annotation)
        except Exception:  # no segment to hang it on (tracing off): no span
            yield
            return
        try:
            yield
        except BaseException as exc:
            manager.__exit__(type(exc), exc, exc.__traceback__)
            raise
        manager.__exit__(None, None, None)

    def flush(self) -> None:
        if self._pending:
            self._pending = False
            try:
                self._metrics.flush_metrics()
            except Exception as exc:
                log.warning("metrics not written (%s)", type(exc).__name__)
                self._metrics.clear_metrics()  # Powertools keeps them process-wide: not into the next invocation
