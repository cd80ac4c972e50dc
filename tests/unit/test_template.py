"""``template.yaml`` agrees with the code: table schema, function code, runtime, settings, IAM scope, and the test
helpers."""

from __future__ import annotations

import ast
import json
import re
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mcpbridge import errors
from mcpbridge.domain.items import INDEX_KEYS, KEY_ATTRS, TTL_ATTR
from mcpbridge.settings import Settings
from tests.support.aws import (
    REPO_ROOT,
    create_aws_resources,
    load_template,
    parse_template,
    set_fake_aws_env,
    table_create_kwargs,
    ttl_attribute,
)
from tests.support.build_script import build_script

TEMPLATE = load_template()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
TABLE: dict[str, Any] = RESOURCES["Table"]["Properties"]
FUNCTIONS = {name: r for name, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::Function"}
HTTP_FUNCTIONS = {
    "AdminApiFunction",
    "McpEndpointFunction",
    "OAuthCallbackFunction",
    "ResolutionsFunction",
    "AuthorizationServerFunction",
}
INDEXER = "IndexerFunction"
# Not behind the API either: the tasks of the tool-call state machine invoke it.
TOOL_CALLS = "ToolCallsFunction"
STATE_MACHINE = "ToolCallsStateMachine"
STATE_MACHINE_ROLE = "ToolCallsStateMachineRole"
# Not behind the API: it consumes the indexer's failure queue and sweeps stuck jobs on a schedule.
RECOVERY = "JobRecoveryFunction"
# The functions that submit background jobs, i.e. invoke the indexer.
# The resolutions function submits webhook deliveries of the decisions it records.
JOB_SUBMITTERS = {"AdminApiFunction", "McpEndpointFunction", "ResolutionsFunction", RECOVERY}
# The functions that store documents (blobs in S3, sealed with the key).
DOCUMENT_WRITERS = {"AdminApiFunction", "McpEndpointFunction"}
RUNTIME = "python3.13"
GLOBAL_ENV: dict[str, Any] = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
# Where the records of the indexer's failed asynchronous invocations go, and what the consumer gives up on.
FAILED_JOBS_QUEUE = "IndexerFailedJobsQueue"
REDRIVE_QUEUE = "IndexerFailedJobsRedriveQueue"
ALARMS = {name: r["Properties"] for name, r in RESOURCES.items() if r["Type"] == "AWS::CloudWatch::Alarm"}


def _non_alarms() -> list[tuple[str, dict[str, Any]]]:
    """The resources other than alarms (which reference what they watch, and grant nothing)."""
    return [(name, r) for name, r in RESOURCES.items() if r["Type"] != "AWS::CloudWatch::Alarm"]


def function_property(name: str, prop: str) -> Any:
    """A function's property, falling back to ``Globals.Function``."""
    own = FUNCTIONS[name].get("Properties", {})
    return own[prop] if prop in own else TEMPLATE.get("Globals", {}).get("Function", {}).get(prop)


def key_schema(hash_key: str, range_key: str) -> list[dict[str, str]]:
    return [{"AttributeName": hash_key, "KeyType": "HASH"}, {"AttributeName": range_key, "KeyType": "RANGE"}]


def by_index_name(indexes: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {index["IndexName"]: index for index in indexes}


# ------------------------------------------------------------------------------------------------ loader


def test_loader_understands_short_tags() -> None:
    doc = parse_template(
        """
        a: !Ref X
        b: !GetAtt Table.Arn
        c: !GetAtt [Table, StreamArn]
        d: !Sub "${Table.Arn}/index/*"
        e: !If [IsProd, !Join [",", [a, b]], !Select [0, !Split [",", "x,y"]]]
        f: !Not [!Equals [!Ref P, ""]]
        g: !Condition IsProd
        h: !FindInMap [M, K, V]
        i: !GetAZs ""
        """
    )
    assert doc == {
        "a": {"Ref": "X"},
        "b": {"Fn::GetAtt": ["Table", "Arn"]},
        "c": {"Fn::GetAtt": ["Table", "StreamArn"]},
        "d": {"Fn::Sub": "${Table.Arn}/index/*"},
        "e": {
            "Fn::If": [
                "IsProd",
                {"Fn::Join": [",", ["a", "b"]]},
                {"Fn::Select": [0, {"Fn::Split": [",", "x,y"]}]},
            ]
        },
        "f": {"Fn::Not": [{"Fn::Equals": [{"Ref": "P"}, ""]}]},
        "g": {"Condition": "IsProd"},
        "h": {"Fn::FindInMap": ["M", "K", "V"]},
        "i": {"Fn::GetAZs": ""},
    }


def test_outputs_reference_the_resources() -> None:
    outputs = TEMPLATE["Outputs"]
    assert outputs["ApiUrl"]["Value"] == {"Fn::Sub": "https://${HttpApi}.execute-api.${AWS::Region}.amazonaws.com"}
    assert outputs["TableName"]["Value"] == {"Ref": "Table"}
    assert outputs["SecretsKeyId"]["Value"] == {"Ref": "SecretsKey"}
    assert outputs["SecretsKeyArn"]["Value"] == {"Fn::GetAtt": ["SecretsKey", "Arn"]}
    assert outputs["IndexerFailedJobsQueueUrl"]["Value"] == {"Ref": FAILED_JOBS_QUEUE}
    assert outputs["IndexerFailedJobsRedriveQueueUrl"]["Value"] == {"Ref": REDRIVE_QUEUE}
    assert outputs["BucketName"]["Value"] == {"Ref": "Bucket"}
    assert outputs["ToolCallsStateMachineArn"]["Value"] == {"Ref": STATE_MACHINE}


# ------------------------------------------------------------------------------------------------ table


def test_table_keys_match_the_domain() -> None:
    assert TABLE["KeySchema"] == key_schema(*KEY_ATTRS)
    indexes = by_index_name(TABLE["GlobalSecondaryIndexes"])
    assert set(indexes) == set(INDEX_KEYS)
    for name, (hash_key, range_key) in INDEX_KEYS.items():
        assert indexes[name]["KeySchema"] == key_schema(hash_key, range_key)
        assert indexes[name]["Projection"] == {"ProjectionType": "ALL"}


def test_table_attribute_definitions_are_exactly_the_key_attributes() -> None:
    expected = {*KEY_ATTRS, *(attr for pair in INDEX_KEYS.values() for attr in pair)}
    definitions = {d["AttributeName"]: d["AttributeType"] for d in TABLE["AttributeDefinitions"]}
    assert len(definitions) == len(TABLE["AttributeDefinitions"]), "duplicate attribute definitions"
    assert definitions == dict.fromkeys(expected, "S")


def test_table_ttl_pitr_encryption_and_retention() -> None:
    assert TABLE["TimeToLiveSpecification"] == {"AttributeName": TTL_ATTR, "Enabled": True}
    assert ttl_attribute() == TTL_ATTR
    assert TABLE["PointInTimeRecoverySpecification"] == {"PointInTimeRecoveryEnabled": True}
    assert TABLE["SSESpecification"]["SSEEnabled"] is True
    assert TABLE["BillingMode"] == "PAY_PER_REQUEST"
    for name in ("Table", "SecretsKey", "Bucket"):
        assert RESOURCES[name]["DeletionPolicy"] == "Retain", name
        assert RESOURCES[name]["UpdateReplacePolicy"] == "Retain", name


def test_table_create_kwargs_follow_the_template() -> None:
    kwargs = table_create_kwargs("t")
    assert kwargs["TableName"] == "t"
    assert kwargs["KeySchema"] == TABLE["KeySchema"]
    assert kwargs["AttributeDefinitions"] == TABLE["AttributeDefinitions"]
    assert kwargs["BillingMode"] == "PAY_PER_REQUEST"
    assert by_index_name(kwargs["GlobalSecondaryIndexes"]) == by_index_name(TABLE["GlobalSecondaryIndexes"])


# ------------------------------------------------------------------------------------------------ functions


def test_there_are_eight_functions() -> None:
    assert set(FUNCTIONS) == HTTP_FUNCTIONS | {INDEXER, TOOL_CALLS, RECOVERY}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_functions_are_built_by_the_makefile_without_their_runtime(name: str) -> None:
    """sam build's Python builder would need a python3.13 on PATH; the Makefile copies the code (the layer holds
    the rest), so any build host with make builds them."""
    assert FUNCTIONS[name]["Metadata"] == {"BuildMethod": "makefile", "ContextPath": "infra/sam"}
    makefile = (REPO_ROOT / "infra" / "sam" / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^build-%Function:$", makefile, re.M)
    assert name.endswith("Function")


def _defines_handler(source: str) -> bool:
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "handler":
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "handler" for t in node.targets):
            return True
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "handler":
            return True
        if isinstance(node, ast.ImportFrom) and any((a.asname or a.name) == "handler" for a in node.names):
            return True
    return False


# The handlers themselves (functions/*/handler.py) are owned by the function modules; this only checks the wiring.
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_code_exists(name: str) -> None:
    code_uri = Path(REPO_ROOT, function_property(name, "CodeUri"))
    module, _, attr = function_property(name, "Handler").rpartition(".")
    assert (module, attr) == ("handler", "handler")
    assert code_uri.is_dir(), f"{name}: CodeUri {code_uri} is not a directory"
    handler_file = code_uri / "handler.py"
    assert handler_file.is_file(), f"{name}: {handler_file} is missing"
    assert _defines_handler(handler_file.read_text(encoding="utf-8")), f"{handler_file} defines no `handler`"


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_runtime_and_architecture(name: str) -> None:
    assert function_property(name, "Runtime") == RUNTIME
    assert function_property(name, "Architectures") == ["arm64"]
    assert function_property(name, "Layers") == [{"Ref": "CoreLayer"}]
    assert function_property(name, "AutoPublishAlias") == "live"
    if name in HTTP_FUNCTIONS:
        # API Gateway HTTP APIs give up on an integration after 30 s.
        assert function_property(name, "Timeout") < 30
    elif name == TOOL_CALLS:
        # Below every task's TimeoutSeconds (see test_state_machine_tasks_outlast_the_function).
        assert function_property(name, "Timeout") == 300
    elif name == RECOVERY:
        # The failure queue's visibility timeout must cover it (test_the_failure_queue_is_consumed_and_redriven).
        assert function_property(name, "Timeout") == 120
    else:
        assert function_property(name, "Timeout") == 900
        assert function_property(name, "MemorySize") == 2048


def test_indexer_is_invoked_asynchronously_with_bounded_retries() -> None:
    assert function_property(INDEXER, "EventInvokeConfig") == {
        "MaximumRetryAttempts": 2,
        "MaximumEventAgeInSeconds": 3600,
        "DestinationConfig": {
            "OnFailure": {"Type": "SQS", "Destination": {"Fn::GetAtt": [FAILED_JOBS_QUEUE, "Arn"]}},
        },
    }
    assert Path(REPO_ROOT, function_property(INDEXER, "CodeUri")) == REPO_ROOT / "functions" / "indexer"


def test_snapstart_only_where_callers_wait_for_a_cold_start() -> None:
    # Set per function, never in Globals: the indexer must not inherit it (it caps /tmp at 512 MB).
    assert "SnapStart" not in TEMPLATE["Globals"]["Function"]
    for name in FUNCTIONS:
        snapstart = function_property(name, "SnapStart")
        if name in HTTP_FUNCTIONS:
            assert snapstart == {"ApplyOn": {"Ref": "ApiSnapStart"}}, name
        else:
            # Nobody waits on the indexer; the tool-call steps are built at the first invocation, after a restore.
            assert snapstart is None, name
    parameter = TEMPLATE["Parameters"]["ApiSnapStart"]
    assert (parameter["Default"], parameter["AllowedValues"]) == ("PublishedVersions", ["PublishedVersions", "None"])


def test_indexer_has_room_in_tmp_for_index_files() -> None:
    # Lambda's most: a job copies a knowledge base's index file and writes the next version beside it.
    assert function_property(INDEXER, "EphemeralStorage") == {"Size": 10240}
    for name in FUNCTIONS:
        storage = (function_property(name, "EphemeralStorage") or {"Size": 512})["Size"]
        snapstart = (function_property(name, "SnapStart") or {}).get("ApplyOn", "None")
        # SnapStart refuses ephemeral storage above 512 MB.
        assert storage <= 512 or snapstart == "None", name


def test_reserved_concurrency_is_a_parameter() -> None:
    parameters = TEMPLATE["Parameters"]
    no_reservation = {"Ref": "AWS::NoValue"}
    expected = dict.fromkeys(HTTP_FUNCTIONS, ("ReservesApiConcurrency", "ApiReservedConcurrency"))
    expected[INDEXER] = ("ReservesIndexerConcurrency", "IndexerReservedConcurrency")
    for name in FUNCTIONS:
        reserved = function_property(name, "ReservedConcurrentExecutions")
        if name not in expected:
            assert reserved is None, name  # Step Functions retries throttled steps; nothing to reserve
            continue
        condition, parameter = expected[name]
        assert reserved == {"Fn::If": [condition, {"Ref": parameter}, no_reservation]}, name
        # -1 means none: 0 would stop the function altogether.
        assert TEMPLATE["Conditions"][condition] == {"Fn::Not": [{"Fn::Equals": [{"Ref": parameter}, -1]}]}
        assert parameters[parameter]["MinValue"] == -1
    assert parameters["ApiReservedConcurrency"]["Default"] == -1
    assert parameters["IndexerReservedConcurrency"]["Default"] == 5


def test_http_api_is_throttled() -> None:
    settings = RESOURCES["HttpApi"]["Properties"]["DefaultRouteSettings"]
    assert settings == {
        "ThrottlingRateLimit": {"Ref": "ApiThrottlingRateLimit"},
        "ThrottlingBurstLimit": {"Ref": "ApiThrottlingBurstLimit"},
    }
    parameters = TEMPLATE["Parameters"]
    assert (parameters["ApiThrottlingRateLimit"]["Default"], parameters["ApiThrottlingBurstLimit"]["Default"]) == (
        100,
        200,
    )


def test_only_the_http_functions_are_behind_the_api() -> None:
    for name in HTTP_FUNCTIONS:
        events = function_property(name, "Events")
        assert events, name
        assert all(e["Type"] == "HttpApi" and e["Properties"]["ApiId"] == {"Ref": "HttpApi"} for e in events.values())
    assert function_property(INDEXER, "Events") is None
    assert function_property(TOOL_CALLS, "Events") is None
    assert {e["Type"] for e in function_property(RECOVERY, "Events").values()} == {"SQS", "ScheduleV2"}
    assert "Events" not in TEMPLATE["Globals"]["Function"]
    # Nothing grants a service the right to invoke it, and the API's own definition does not name it.
    assert not any(r["Type"] == "AWS::Lambda::Permission" and _references(r, INDEXER) for r in RESOURCES.values())
    assert not _references(RESOURCES["HttpApi"], INDEXER)
    assert not _references(TEMPLATE["Globals"], INDEXER)
    # Only the job submitters (their environment) and their roles (the invoke permission) name the indexer (and
    # the alarms that read its metrics, which grant nothing).
    referrers = {name for name, r in _non_alarms() if name != INDEXER and _references(r, INDEXER)}
    assert referrers == JOB_SUBMITTERS | {_role_of(name) for name in JOB_SUBMITTERS}


def test_layer_matches_the_functions() -> None:
    layer = RESOURCES["CoreLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Properties"]["CompatibleRuntimes"] == [RUNTIME]
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
    # sam build copies ContentUri before it runs its Makefile's `build-CoreLayer`: a folder holding only that
    # Makefile, whose target builds the layer from the repository with the build script.
    assert layer["Properties"]["ContentUri"] == "infra/sam/"
    assert sorted(p.name for p in (REPO_ROOT / "infra" / "sam").iterdir()) == ["Makefile"]
    makefile = (REPO_ROOT / "infra" / "sam" / "Makefile").read_text(encoding="utf-8")
    build_layer = r'^build-CoreLayer:\n\tbash "\$\(REPO_ROOT\)/infra/build-layer\.sh" "\$\(ARTIFACTS_DIR\)"$'
    assert re.search(build_layer, makefile, re.M)
    assert 'build_artifacts.py" layer' in (REPO_ROOT / "infra" / "build-layer.sh").read_text(encoding="utf-8")


def test_build_script_targets_the_template() -> None:
    script = build_script()
    # What `make build-CoreLayer` builds when sam calls it (no overrides) is what the functions run on.
    assert (script.DEFAULT_ARCH, "python" + script.DEFAULT_PYTHON) == ("arm64", RUNTIME)
    target = script.template_target(TEMPLATE)
    assert (target.arch, target.python, target.glibc) == ("arm64", "3.13", script.DEFAULT_GLIBC)
    # Amazon Linux 2023 (the python3.12+ runtimes) has glibc 2.34: wheels may need up to that, and every
    # dependency has manylinux_2_28 aarch64 wheels (numpy and google-re2 have no manylinux2014 ones).
    assert target.platforms()[0] == "manylinux_2_28_aarch64"
    assert "manylinux2014_aarch64" in target.platforms()
    assert script.UNZIPPED_LIMIT == 262_144_000  # Lambda: 250 MB unzipped, layers included


def _references(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        ref = value.get("Ref")
        # SAM's referenceable properties: `!Ref Function.Alias` is the function's alias.
        if isinstance(ref, str) and (ref == name or ref.startswith(name + ".")):
            return True
        getatt = value.get("Fn::GetAtt")
        if isinstance(getatt, list) and getatt and getatt[0] == name:
            return True
        sub = value.get("Fn::Sub")
        template = sub[0] if isinstance(sub, list) and sub else sub
        if isinstance(template, str) and ("${" + name + "}" in template or "${" + name + "." in template):
            return True
        return any(_references(v, name) for v in value.values())
    if isinstance(value, list):
        return any(_references(v, name) for v in value)
    return False


def function_environment(name: str) -> dict[str, Any]:
    """The function's variables as SAM merges them: its own over ``Globals``."""
    return GLOBAL_ENV | FUNCTIONS[name]["Properties"].get("Environment", {}).get("Variables", {})


# Template parameter -> the setting it configures, on every function.
PARAMETER_ENV = {
    "LogLevel": "MCPBRIDGE_LOG_LEVEL",
    "AllowedOrigins": "MCPBRIDGE_ALLOWED_ORIGINS",
    "FrontendUrls": "MCPBRIDGE_FRONTEND_URLS",
    "SsrfAllowlist": "MCPBRIDGE_SSRF_ALLOWLIST",
    "EmbeddingProvider": "MCPBRIDGE_EMBEDDING_PROVIDER",
    "EmbeddingModel": "MCPBRIDGE_EMBEDDING_MODEL",
    "EmbeddingDimensions": "MCPBRIDGE_EMBEDDING_DIMENSIONS",
    "LlmProvider": "MCPBRIDGE_LLM_PROVIDER",
    "LlmModel": "MCPBRIDGE_LLM_MODEL",
}


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_environment(name: str) -> None:
    env = function_environment(name)
    assert env["MCPBRIDGE_BACKEND"] == "aws"
    assert env["MCPBRIDGE_TABLE_NAME"] == {"Ref": "Table"}
    assert _references(env["MCPBRIDGE_KMS_KEY_ID"], "SecretsKey")
    assert env["MCPBRIDGE_BUCKET_NAME"] == {"Ref": "Bucket"}
    for parameter, variable in PARAMETER_ENV.items():
        assert env[variable] == {"Ref": parameter}, variable
    # The API depends on the functions; a function referencing the API would be a circular dependency.
    assert not _references(env, "HttpApi")
    if name in JOB_SUBMITTERS:
        # The alias ARN: the jobs run the published version under the alias's EventInvokeConfig.
        assert env["MCPBRIDGE_INDEXER_FUNCTION"] == {"Ref": f"{INDEXER}.Alias"}
    else:
        assert "MCPBRIDGE_INDEXER_FUNCTION" not in env
        assert not _references(env, INDEXER)


def test_requests_behind_the_api_have_a_budget_inside_api_gateways_limit() -> None:
    # HTTP APIs end an integration after 30 s and the functions after 29 s: what a request waits on upstreams (tool
    # calls, models, catalog pulls) ends sooner, with room for the store and the function itself.
    for name in FUNCTIONS:
        budget = function_environment(name).get("MCPBRIDGE_REQUEST_BUDGET_SECONDS")
        if name in HTTP_FUNCTIONS:
            assert budget is not None, name
            assert 0 < float(budget) <= function_property(name, "Timeout") - 5, name
        else:
            # The indexer, the tool-call steps and job recovery are not waited on by a person: no budget.
            assert budget is None, name
    assert "request_budget_seconds" in Settings.model_fields


def test_globals_environment_does_not_name_the_indexer() -> None:
    # The indexer inherits Globals: referencing it there would make it depend on itself.
    assert not _references(GLOBAL_ENV, INDEXER)
    assert "MCPBRIDGE_INDEXER_FUNCTION" not in GLOBAL_ENV


def test_environment_variables_are_settings() -> None:
    prefix = Settings.model_config["env_prefix"]
    assert prefix == "MCPBRIDGE_"
    fields = {prefix + field.upper() for field in Settings.model_fields}
    # Passed ahead of the setting that will read it (the OAuth redirect targets); Settings ignores it until then.
    not_yet_read = {"MCPBRIDGE_FRONTEND_URLS"}
    for name in FUNCTIONS:
        variables = {v for v in function_environment(name) if v.startswith("MCPBRIDGE_")}
        assert variables - not_yet_read <= fields, f"{name}: {sorted(variables - fields)} are not settings"


def test_parameters() -> None:
    parameters = TEMPLATE["Parameters"]
    assert set(PARAMETER_ENV) <= set(parameters)
    # Every provider the settings know, except those that cannot run on Lambda: the local embedder (and `auto`,
    # which means it when installed) is an optional x86-64 extra the arm64 layer does not hold.
    not_on_lambda = {"EmbeddingProvider": ["auto", "local"], "LlmProvider": []}
    for provider, excluded in not_on_lambda.items():
        field = Settings.model_fields[provider.replace("Provider", "").lower() + "_provider"]
        known = [value for value in typing.get_args(field.annotation) if value not in excluded]
        assert parameters[provider]["AllowedValues"] == known, provider
        assert set(excluded) <= set(typing.get_args(field.annotation)), provider
    assert parameters["EmbeddingProvider"]["Default"] == "bedrock"
    assert parameters["EmbeddingModel"]["Default"] == "amazon.titan-embed-text-v2:0"
    assert parameters["EmbeddingDimensions"]["Default"] == 512
    assert parameters["EmbeddingDimensions"]["AllowedValues"] == [256, 512, 1024]
    assert parameters["LlmProvider"]["Default"] == "none"
    assert parameters["LlmModel"]["Default"] == "anthropic.claude-3-5-haiku-20241022-v1:0"
    assert parameters["SsrfAllowlist"]["Default"] == ""
    # Credentials of OpenAI-compatible providers are not parameters (they would sit in the stack in clear text).
    assert not any("key" in p.lower() or "url" in p.lower() for p in parameters if p != "FrontendUrls")
    assert not any(v.endswith(("_API_KEY", "_BASE_URL")) for v in GLOBAL_ENV)
    assert TEMPLATE["Conditions"] == {
        "EmbeddingOnBedrock": {"Fn::Equals": [{"Ref": "EmbeddingProvider"}, "bedrock"]},
        "LlmOnBedrock": {"Fn::Equals": [{"Ref": "LlmProvider"}, "bedrock"]},
        "ResumesAgentCallbacks": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AgentStateMachineArns"}, ""]}]},
        "NotifiesAlarms": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AlarmTopicArn"}, ""]}]},
        "HasAllowedOrigins": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AllowedOrigins"}, ""]}]},
        "ReservesApiConcurrency": {"Fn::Not": [{"Fn::Equals": [{"Ref": "ApiReservedConcurrency"}, -1]}]},
        "ReservesIndexerConcurrency": {"Fn::Not": [{"Fn::Equals": [{"Ref": "IndexerReservedConcurrency"}, -1]}]},
        "SearchesOnLance": {"Fn::Equals": [{"Ref": "SearchEngine"}, "lance"]},
        "ProvisionsSearch": {
            "Fn::And": [
                {"Condition": "SearchesOnLance"},
                {"Fn::Not": [{"Fn::Equals": [{"Ref": "SearchProvisionedConcurrency"}, 0]}]},
            ]
        },
        "ReadsSettingsSecret": {"Fn::Not": [{"Fn::Equals": [{"Ref": "SettingsSecretArn"}, ""]}]},
    }
    # Every parameter says what it is for and has a default: a first deploy needs no answers.
    for name, parameter in parameters.items():
        assert parameter.get("Description"), name
        assert "Default" in parameter, name


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_logs_to_its_own_log_group(name: str) -> None:
    group = function_property(name, "LoggingConfig")["LogGroup"]["Ref"]
    assert RESOURCES[group]["Type"] == "AWS::Logs::LogGroup"
    assert RESOURCES[group]["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}
    others = {function_property(other, "LoggingConfig")["LogGroup"]["Ref"] for other in FUNCTIONS if other != name}
    assert group not in others


def test_every_log_group_keeps_logs_as_long_as_the_parameter_says() -> None:
    groups = {name: r for name, r in RESOURCES.items() if r["Type"] == "AWS::Logs::LogGroup"}
    assert "HttpApiAccessLogGroup" in groups
    for name, group in groups.items():
        assert group["Properties"]["RetentionInDays"] == {"Ref": "LogRetentionDays"}, name
    parameter = TEMPLATE["Parameters"]["LogRetentionDays"]
    assert parameter["Default"] == 30
    assert 30 in parameter["AllowedValues"]
    assert 3653 in parameter["AllowedValues"]


# ------------------------------------------------------------------------------------------------ IAM


_NO_VALUE = {"Ref": "AWS::NoValue"}


def _branches(statement: Any) -> list[dict[str, Any]]:
    """The statements a list entry may become: both sides of an ``Fn::If`` (minus ``AWS::NoValue``), or itself."""
    if isinstance(statement, dict) and set(statement) == {"Fn::If"}:
        _, when_true, when_false = statement["Fn::If"]
        return [s for branch in (when_true, when_false) if branch != _NO_VALUE for s in _branches(branch)]
    return [statement]


def _statements(value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        statements = value.get("Statement")
        if statements is not None:
            for i, entry in enumerate(statements if isinstance(statements, list) else [statements]):
                for statement in _branches(entry):
                    yield f"{path}/Statement/{i}", statement
        for key, child in value.items():
            if key != "Statement":
                yield from _statements(child, f"{path}/{key}")
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _statements(child, f"{path}/{i}")


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _wildcard_allowed(path: str, statement: dict[str, Any]) -> bool:
    section, name = path.split("/")[1:3]
    # In a KMS key policy, Resource "*" means "this key".
    if section == "Resources" and RESOURCES[name]["Type"] == "AWS::KMS::Key" and "/KeyPolicy/" in path:
        return True
    # X-Ray's write and sampling actions, and Textract's synchronous ones, support no resource-level permissions.
    return all(str(action).startswith(("xray:", "textract:")) for action in _as_list(statement["Action"]))


def test_no_wildcard_resources_except_where_aws_requires_them() -> None:
    statements = list(_statements(TEMPLATE))
    assert len(statements) > 10  # the walk found the policies
    offenders = [
        path
        for path, statement in statements
        if statement.get("Effect") == "Allow"
        and any(r == "*" for r in _as_list(statement.get("Resource", [])))
        and not _wildcard_allowed(path, statement)
    ]
    assert offenders == []
    assert not any("NotResource" in statement or "NotAction" in statement for _, statement in statements)


def _role_of(function_name: str) -> str:
    role = function_property(function_name, "Role")
    assert set(role) == {"Fn::GetAtt"}
    assert role["Fn::GetAtt"][1] == "Arn"
    name: str = role["Fn::GetAtt"][0]
    return name


def _role_statements(function_name: str) -> list[dict[str, Any]]:
    """Every statement the function's role may hold (conditional ones included)."""
    return [
        statement
        for policy in RESOURCES[_role_of(function_name)]["Properties"]["Policies"]
        for entry in policy["PolicyDocument"]["Statement"]
        for statement in _branches(entry)
    ]


def _role_actions(function_name: str) -> set[str]:
    return {
        action
        for statement in _role_statements(function_name)
        if statement["Effect"] == "Allow"
        for action in _as_list(statement["Action"])
    }


def test_every_function_has_its_own_role() -> None:
    roles = [_role_of(name) for name in FUNCTIONS]
    assert len(set(roles)) == len(roles)
    for role in roles:
        assert RESOURCES[role]["Type"] == "AWS::IAM::Role"


def test_roles_grant_what_each_function_needs_and_no_more() -> None:
    assert function_property("ResolutionsFunction", "Policies") is None  # explicit roles, no SAM-generated ones
    kms_read = {"kms:Decrypt", "kms:DescribeKey"}
    kms_rw = kms_read | {"kms:GenerateDataKey"}
    # Documents (blobs) and index files: objects in the SSE-KMS bucket, so S3 access comes with the key's data-key
    # actions; ListBucket turns a missing object into 404 rather than 403.
    s3_rw = {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    for name in (*DOCUMENT_WRITERS, INDEXER):
        actions = _role_actions(name)
        assert kms_rw <= actions, name
        assert {a for a in actions if a.startswith("s3:")} == s3_rw, name
    for name in ("OAuthCallbackFunction", "AuthorizationServerFunction"):
        oauth = _role_actions(name)
        assert kms_rw <= oauth, name
        assert not any(a.startswith("s3:") for a in oauth), name
    assert not any(a.startswith(("states:", "lambda:")) for a in _role_actions("AuthorizationServerFunction"))
    resolutions = _role_actions("ResolutionsFunction")
    assert {a for a in resolutions if a.startswith("kms:")} == kms_read
    assert not any(a.startswith("s3:") for a in resolutions)
    table_actions = {
        "dynamodb:GetItem",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
        "dynamodb:Query",
        "dynamodb:DescribeTable",
    }
    # The job-recovery function reads documents and their waiting list and moves them: nothing else.
    recovery = {"dynamodb:GetItem", "dynamodb:UpdateItem", "dynamodb:Query"}
    for name in FUNCTIONS:
        actions = _role_actions(name)
        wanted = recovery if name == RECOVERY else table_actions
        assert {a for a in actions if a.startswith("dynamodb:")} == wanted, name
        assert not any(a.endswith("*") for a in actions), name
    assert not any(a.startswith(("s3:", "kms:", "states:", "bedrock:")) for a in _role_actions(RECOVERY))


def test_only_the_job_submitters_may_invoke_the_indexer_and_only_it() -> None:
    indexer_arns = [{"Fn::GetAtt": [INDEXER, "Arn"]}, {"Fn::Sub": "${" + INDEXER + ".Arn}:*"}]
    for name in FUNCTIONS:
        lambda_statements = [
            s for s in _role_statements(name) if any(str(a).startswith("lambda:") for a in _as_list(s["Action"]))
        ]
        if name in JOB_SUBMITTERS:
            (statement,) = lambda_statements
            assert statement["Effect"] == "Allow"
            assert _as_list(statement["Action"]) == ["lambda:InvokeFunction"]
            # The function, its versions and its alias: the alias ARN is what the functions are given.
            assert _as_list(statement["Resource"]) == indexer_arns
            assert "Condition" not in statement
        else:
            assert lambda_statements == [], name
    # Nor may anything else in the template (a resource policy, another role); the tool-call state machine's role
    # may invoke the tool-call function only (test_only_the_state_machine_invokes_the_tool_call_function).
    # The search function's grants (SearchIndexCallers, its own jobs) name it alone (test_search_function).
    granted = [
        path
        for path, statement in _statements(TEMPLATE)
        if any(str(a).startswith("lambda:") for a in _as_list(statement.get("Action", [])))
        and not path.startswith(f"/Resources/{STATE_MACHINE_ROLE}/")
        and not path.startswith(("/Resources/SearchIndexCallers/", "/Resources/SearchIndexRole/"))
    ]
    assert len(granted) == len(JOB_SUBMITTERS)
    assert all(path.split("/")[2] in {_role_of(name) for name in JOB_SUBMITTERS} for path in granted)


def _foundation_model(parameter: str) -> dict[str, str]:
    return {"Fn::Sub": "arn:${AWS::Partition}:bedrock:${AWS::Region}::foundation-model/${" + parameter + "}"}


def test_bedrock_access_is_conditional_and_per_model() -> None:
    # Statements exist only when that provider is bedrock, and name the one configured model.
    expected = {
        "EmbeddingOnBedrock": ("BedrockEmbeddingModel", _foundation_model("EmbeddingModel")),
        "LlmOnBedrock": ("BedrockLlmModel", _foundation_model("LlmModel")),
    }
    uses = {
        "AdminApiFunction": {"EmbeddingOnBedrock", "LlmOnBedrock"},  # query embeddings, answers
        "McpEndpointFunction": {"EmbeddingOnBedrock", "LlmOnBedrock"},
        INDEXER: {"EmbeddingOnBedrock", "LlmOnBedrock"},  # document embeddings; answers of ask run as Tasks
        RECOVERY: set(),
        "OAuthCallbackFunction": set(),
        "AuthorizationServerFunction": set(),
        "ResolutionsFunction": set(),
        TOOL_CALLS: set(),
    }
    assert set(uses) == set(FUNCTIONS)
    for name, conditions in uses.items():
        found = set()
        for policy in RESOURCES[_role_of(name)]["Properties"]["Policies"]:
            for entry in policy["PolicyDocument"]["Statement"]:
                bedrock = [
                    s for s in _branches(entry) if any(str(a).startswith("bedrock:") for a in _as_list(s["Action"]))
                ]
                if not bedrock:
                    continue
                condition, when_true, when_false = entry["Fn::If"]
                assert when_false == _NO_VALUE
                sid, resource = expected[condition]
                # Converse is authorised by bedrock:InvokeModel.
                assert when_true == {
                    "Sid": sid,
                    "Effect": "Allow",
                    "Action": "bedrock:InvokeModel",
                    "Resource": resource,
                }
                found.add(condition)
        assert found == conditions, name


# The functions that use secret settings: the models' API keys (query and document embeddings, answers) and the
# sign-in client secret of the authorization server.
SETTINGS_SECRET_READERS = {"AdminApiFunction", "McpEndpointFunction", INDEXER, "AuthorizationServerFunction"}


def test_settings_secret_is_a_conditional_parameter_read_by_the_functions_that_use_secrets() -> None:
    parameter = TEMPLATE["Parameters"]["SettingsSecretArn"]
    assert parameter["Type"] == "String"
    assert parameter["Default"] == ""
    pattern = re.compile(parameter["AllowedPattern"])
    assert pattern.fullmatch("")
    assert pattern.fullmatch("arn:aws:secretsmanager:eu-west-1:123456789012:secret:mcpbridge/settings-AbC123")
    assert not pattern.fullmatch("arn:aws:secretsmanager:eu-west-1:123456789012:secret:mcpbridge/settings")  # partial
    assert not pattern.fullmatch("arn:aws:ssm:eu-west-1:123456789012:parameter/mcpbridge-AbC123")
    assert TEMPLATE["Conditions"]["ReadsSettingsSecret"] == {
        "Fn::Not": [{"Fn::Equals": [{"Ref": "SettingsSecretArn"}, ""]}]
    }
    assert "MCPBRIDGE_SETTINGS_SECRET_ARN" not in GLOBAL_ENV
    assert "settings_secret_arn" in Settings.model_fields
    conditional_arn = {"Fn::If": ["ReadsSettingsSecret", {"Ref": "SettingsSecretArn"}, _NO_VALUE]}
    for name in FUNCTIONS:
        variable = function_environment(name).get("MCPBRIDGE_SETTINGS_SECRET_ARN")
        assert variable == (conditional_arn if name in SETTINGS_SECRET_READERS else None), name


def test_settings_secret_readers_may_get_that_one_secret_and_only_they() -> None:
    expected = {
        "Fn::If": [
            "ReadsSettingsSecret",
            {
                "Sid": "SettingsSecret",
                "Effect": "Allow",
                "Action": "secretsmanager:GetSecretValue",
                "Resource": {"Ref": "SettingsSecretArn"},
            },
            _NO_VALUE,
        ]
    }
    for name in FUNCTIONS:
        entries = [
            entry
            for policy in RESOURCES[_role_of(name)]["Properties"]["Policies"]
            for entry in policy["PolicyDocument"]["Statement"]
            if any(
                str(a).startswith("secretsmanager:") for s in _branches(entry) for a in _as_list(s.get("Action", []))
            )
        ]
        assert entries == ([expected] if name in SETTINGS_SECRET_READERS else []), name
    # Nothing else in the template grants Secrets Manager actions, nor references the secret beyond these.
    granted = [
        path
        for path, statement in _statements(TEMPLATE)
        if any(str(a).startswith("secretsmanager:") for a in _as_list(statement.get("Action", [])))
    ]
    assert sorted(path.split("/")[2] for path in granted) == sorted(_role_of(n) for n in SETTINGS_SECRET_READERS)


def test_bucket_is_private_encrypted_and_tls_only() -> None:
    bucket = RESOURCES["Bucket"]["Properties"]
    assert set(bucket["PublicAccessBlockConfiguration"].values()) == {True}
    assert len(bucket["PublicAccessBlockConfiguration"]) == 4
    assert bucket["OwnershipControls"] == {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]}
    assert bucket["VersioningConfiguration"] == {"Status": "Enabled"}
    assert bucket["BucketEncryption"]["ServerSideEncryptionConfiguration"]
    (deny,) = RESOURCES["BucketPolicy"]["Properties"]["PolicyDocument"]["Statement"]
    assert deny["Effect"] == "Deny"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    assert RESOURCES["SecretsKey"]["Properties"]["EnableKeyRotation"] is True


# ------------------------------------------------------------------------------------------------ tool-call workflow

MACHINE_PROPS: dict[str, Any] = RESOURCES[STATE_MACHINE]["Properties"]
MACHINE_NAME = {"Fn::Sub": "${AWS::StackName}-tool-calls"}
# The state machine's ARN built from its name (what the tool-call function's role and environment use: a !Ref would
# be a cycle, since the state machine references the function).
NAMED_MACHINE_ARN = {
    "Fn::Sub": "arn:${AWS::Partition}:states:${AWS::Region}:${AWS::AccountId}:stateMachine:${AWS::StackName}-tool-calls"
}
LAMBDA_SERVICE_ERRORS = {
    "Lambda.ServiceException",
    "Lambda.AWSLambdaException",
    "Lambda.SdkClientException",
    "Lambda.TooManyRequestsException",
}
INVOKE = "arn:${Partition}:states:::lambda:invoke"
WAIT = "arn:${Partition}:states:::lambda:invoke.waitForTaskToken"
TASK_STATES = {
    "Prepare",
    "WaitForApproval",
    "ApprovalTimedOut",
    "WaitForOAuth",
    "OAuthTimedOut",
    "Invoke",
    "Finish",
    "RecordFailure",
}
RESUME_ACTIONS = {"states:SendTaskSuccess", "states:SendTaskFailure"}


def asl_definition() -> dict[str, Any]:
    text = Path(REPO_ROOT, MACHINE_PROPS["DefinitionUri"]).read_text(encoding="utf-8")
    definition: dict[str, Any] = json.loads(text)
    return definition


def _payload(state: Mapping[str, Any]) -> dict[str, Any]:
    parameters = state["Parameters"]
    assert parameters["FunctionName"] == "${ToolCallsFunctionArn}"
    assert set(parameters) == {"FunctionName", "Payload"}
    payload: dict[str, Any] = parameters["Payload"]
    return payload


def _targets(state: Mapping[str, Any]) -> set[str]:
    targets = {state[key] for key in ("Next", "Default") if key in state}
    targets |= {choice["Next"] for choice in state.get("Choices", [])}
    targets |= {catcher["Next"] for catcher in state.get("Catch", [])}
    return targets


def test_state_machine_resource() -> None:
    machine = RESOURCES[STATE_MACHINE]
    assert machine["Type"] == "AWS::Serverless::StateMachine"
    assert MACHINE_PROPS["Type"] == "STANDARD"  # waits of up to a year, exactly-once steps, a history to inspect
    assert MACHINE_PROPS["Name"] == MACHINE_NAME
    assert MACHINE_PROPS["DefinitionUri"] == "infra/tool_call_state_machine.asl.json"
    # The live alias: the tasks run the published version.
    assert MACHINE_PROPS["DefinitionSubstitutions"] == {
        "ToolCallsFunctionArn": {"Ref": f"{TOOL_CALLS}.Alias"},
        "Partition": {"Ref": "AWS::Partition"},
    }
    assert MACHINE_PROPS["Role"] == {"Fn::GetAtt": [STATE_MACHINE_ROLE, "Arn"]}
    assert "Policies" not in MACHINE_PROPS  # the explicit role only
    assert MACHINE_PROPS["Tracing"] == {"Enabled": True}
    assert Path(REPO_ROOT, function_property(TOOL_CALLS, "CodeUri")) == REPO_ROOT / "functions" / "tool_calls"


def test_state_machine_definition_is_valid_and_complete() -> None:
    text = Path(REPO_ROOT, MACHINE_PROPS["DefinitionUri"]).read_text(encoding="utf-8")
    definition = json.loads(text)
    # Every placeholder is substituted by the template, and every substitution is used.
    assert set(re.findall(r"\$\{(\w+)\}", text)) == set(MACHINE_PROPS["DefinitionSubstitutions"])
    states: dict[str, Any] = definition["States"]
    assert definition["StartAt"] == "Prepare"
    assert set(states) == TASK_STATES | {"Route", "Done", "FinishFailed"}
    assert states["Done"] == {"Type": "Succeed"}
    # The other way out: a Finish that failed for good, once RecordFailure has noted it on the call.
    assert states["FinishFailed"]["Type"] == "Fail"
    assert states["FinishFailed"]["Error"] == "ToolCall.FinishFailed"
    for name, state in states.items():
        assert _targets(state) <= set(states), name
        assert ("End" in state) is False, name  # the ways out are Done and FinishFailed
    reachable, todo = set(), ["Prepare"]
    while todo:
        name = todo.pop()
        if name not in reachable:
            reachable.add(name)
            todo.extend(_targets(states[name]))
    assert reachable == set(states)

    # Parsed by the ASL interpreter moto ports from LocalStack (what the functional tests execute).
    from moto.stepfunctions.parser.asl.parse.asl_parser import AmazonStateLanguageParser

    arn = "arn:aws:lambda:eu-west-1:123456789012:function:tool-calls:live"
    AmazonStateLanguageParser.parse(text.replace("${ToolCallsFunctionArn}", arn).replace("${Partition}", "aws"))


def test_state_machine_flow() -> None:
    states: dict[str, Any] = asl_definition()["States"]
    ids = {"call_id.$": "$.call_id", "workspace_id.$": "$.workspace_id"}
    route = {"next.$": "$.Payload.next"}

    prepare = states["Prepare"]
    assert (prepare["Resource"], _payload(prepare)) == (INVOKE, {"step": "prepare", **ids})
    assert (prepare["ResultSelector"], prepare["ResultPath"], prepare["Next"]) == (route, "$.route", "Route")

    choices = {(c["Variable"], c["StringEquals"]): c["Next"] for c in states["Route"]["Choices"]}
    assert states["Route"]["Type"] == "Choice"
    assert choices == {
        ("$.route.next", "approval"): "WaitForApproval",
        ("$.route.next", "oauth"): "WaitForOAuth",
        ("$.route.next", "invoke"): "Invoke",
    }
    assert states["Route"]["Default"] == "Finish"

    for wait, kind, timed_out in (
        ("WaitForApproval", "approval", "ApprovalTimedOut"),
        ("WaitForOAuth", "oauth", "OAuthTimedOut"),
    ):
        state = states[wait]
        assert state["Resource"] == WAIT
        assert _payload(state) == {"step": "await", "kind": kind, **ids, "task_token.$": "$$.Task.Token"}
        # The timeout comes from the execution's input (per agent); the resolution output is not kept.
        assert state["TimeoutSecondsPath"] == f"$.{kind}_timeout_seconds"
        assert "TimeoutSeconds" not in state
        assert state["ResultPath"] is None
        # After the wait, Prepare reads the record again (an approved call may still wait for OAuth).
        assert state["Next"] == "Prepare"
        assert [(c["ErrorEquals"], c["Next"]) for c in state["Catch"]] == [
            (["States.Timeout"], timed_out),
            (["States.ALL"], "Finish"),
        ]
        timeout = states[timed_out]
        assert (timeout["Resource"], _payload(timeout)) == (INVOKE, {"step": "timeout", "kind": kind, **ids})
        assert (timeout["ResultSelector"], timeout["ResultPath"], timeout["Next"]) == (route, "$.route", "Route")

    invoke = states["Invoke"]
    assert (invoke["Resource"], _payload(invoke)) == (INVOKE, {"step": "invoke", **ids})
    # Routed like Prepare: finish, or an OAuth wait when the token was refused as too narrow (SEP-835 step-up).
    assert (invoke["ResultSelector"], invoke["ResultPath"], invoke["Next"]) == (route, "$.route", "Route")
    assert [(c["ErrorEquals"], c["Next"]) for c in invoke["Catch"]] == [(["States.ALL"], "Finish")]
    # An upstream call is never replayed: only a throttled invocation (Lambda ran nothing) is tried again.
    assert [r["ErrorEquals"] for r in invoke["Retry"]] == [["Lambda.TooManyRequestsException"]]

    finish = states["Finish"]
    assert (finish["Resource"], _payload(finish), finish["Next"]) == (INVOKE, {"step": "finish", **ids}, "Done")
    assert finish["OutputPath"] == "$.Payload"  # the outcome is the execution's output
    # A Finish that fails after its retries is recorded on the call, then the execution fails.
    assert finish["Catch"] == [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.finish_error", "Next": "RecordFailure"}]
    record = states["RecordFailure"]
    assert (record["Resource"], record["Next"], record["ResultPath"]) == (INVOKE, "FinishFailed", None)
    assert _payload(record) == {"step": "fail", **ids, "error.$": "$.finish_error.Error"}
    assert "Catch" not in record  # it fails the execution (alarm tool-calls-failed) if it cannot record it either

    for name in TASK_STATES:
        state = states[name]
        assert state["Type"] == "Task", name
        if name not in ("Invoke", "Finish", "RecordFailure"):
            assert state["Catch"][-1] == {"ErrorEquals": ["States.ALL"], "ResultPath": "$.error", "Next": "Finish"}


def _subclasses(cls: type) -> Iterator[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


# The error names under which the steps' transient failures reach the state machine: Lambda reports an unhandled
# exception by its class name (see mcpbridge.agent.lambda_steps), and ErrorEquals matches names exactly.
# Only the error tree's own classes: a module may subclass one for its internal use (never raised to a step).
TRANSIENT_ERRORS = {
    cls.__name__ for cls in _subclasses(errors.MCPBridgeError) if cls.retryable and cls.__module__ == errors.__name__
}


def test_transient_errors_are_the_retryable_ones() -> None:
    assert {"RateLimited", "UpstreamError", "Unavailable"} == TRANSIENT_ERRORS


def test_every_task_retries_transient_errors_except_a_call_that_may_have_run() -> None:
    states: dict[str, Any] = asl_definition()["States"]
    for name in TASK_STATES:
        retriers = states[name]["Retry"]
        retried = [set(retrier["ErrorEquals"]) for retrier in retriers]
        for retrier in retriers:
            # Bounded: a wait task's attempts each restart its timeout; a step that gives up goes to Finish.
            assert retrier["MaxAttempts"] <= 3, name
            assert retrier.get("MaxDelaySeconds", retrier["IntervalSeconds"]) <= 30, name
            # Never a timeout (a wait that ran out is an outcome) nor a catch-all.
            assert not set(retrier["ErrorEquals"]) & {"States.ALL", "States.Timeout", "States.TaskFailed"}, name
        if name == "Invoke":
            # An upstream call is never replayed: only a throttled invocation (Lambda ran nothing) is tried again.
            # Lambda's other service errors may hide a response lost after the call, and the product's transient
            # errors may be raised after the request went out.
            assert retried == [{"Lambda.TooManyRequestsException"}], name
        else:
            # Every other step reads the call's record and decides afresh: safe to run again.
            assert retried == [LAMBDA_SERVICE_ERRORS, TRANSIENT_ERRORS], name
    # A Finish that fails after its retries is recorded on the call (RecordFailure), then fails the execution,
    # which ToolCallsFailedAlarm reports.
    assert states["Finish"]["Catch"][0]["Next"] == "RecordFailure"
    assert _alarms_on("AWS/States", "ExecutionsFailed", {"StateMachineArn": {"Ref": STATE_MACHINE}})


def test_state_machine_tasks_outlast_the_function() -> None:
    # A task that gave up while its invocation still ran would let Finish race it.
    limit = function_property(TOOL_CALLS, "Timeout")
    states = asl_definition()["States"]
    for name in TASK_STATES:
        if states[name]["Resource"] == INVOKE:
            assert states[name]["TimeoutSeconds"] > limit, name


def _states_statements(value: Any) -> list[tuple[str, dict[str, Any]]]:
    return [
        (path, statement)
        for path, statement in _statements(value)
        if any(str(a).startswith("states:") for a in _as_list(statement.get("Action", [])))
    ]


def test_only_the_state_machine_invokes_the_tool_call_function() -> None:
    role = RESOURCES[STATE_MACHINE_ROLE]["Properties"]
    (trust,) = role["AssumeRolePolicyDocument"]["Statement"]
    assert trust["Principal"] == {"Service": "states.amazonaws.com"}
    assert trust["Condition"] == {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        "ArnLike": {"aws:SourceArn": NAMED_MACHINE_ARN},
    }
    statements = {s["Sid"]: s for policy in role["Policies"] for s in policy["PolicyDocument"]["Statement"]}
    assert set(statements) == {"InvokeToolCalls", "XRay"}
    invoke = statements["InvokeToolCalls"]
    assert (invoke["Effect"], invoke["Action"]) == ("Allow", "lambda:InvokeFunction")
    assert invoke["Resource"] == [{"Fn::GetAtt": [TOOL_CALLS, "Arn"]}, {"Fn::Sub": "${" + TOOL_CALLS + ".Arn}:*"}]
    # No other role, resource policy or event source reaches the function.
    assert not any(r["Type"] == "AWS::Lambda::Permission" and _references(r, TOOL_CALLS) for r in RESOURCES.values())
    referrers = {name for name, r in _non_alarms() if name != TOOL_CALLS and _references(r, TOOL_CALLS)}
    assert referrers == {STATE_MACHINE, STATE_MACHINE_ROLE}


def test_state_machine_permissions_are_least_privilege() -> None:
    machine = {"Ref": STATE_MACHINE}
    agents = {"Fn::Split": [",", {"Ref": "AgentStateMachineArns"}]}
    expected: dict[str, dict[str, Any]] = {
        "AdminApiFunction": {"StartToolCalls": ("states:StartExecution", machine), "ResumeToolCalls": machine},
        "ResolutionsFunction": {"ResumeToolCalls": machine},
        "OAuthCallbackFunction": {"ResumeToolCalls": machine},
        # Published external tools: a call that waits for a person starts its execution and answers at once.
        "McpEndpointFunction": {"StartToolCalls": ("states:StartExecution", machine)},
        "AuthorizationServerFunction": {},
        TOOL_CALLS: {"ResumeToolCalls": NAMED_MACHINE_ARN},
        INDEXER: {"ResumeToolCalls": machine},  # a workspace's purge ends the executions of its paused calls
        RECOVERY: {},
    }
    # Who finishes a call resumes the agent's own callback token: the admin API (a call that ran at once) and the
    # steps; only on the state machines the operator listed.
    finishers = {"AdminApiFunction", TOOL_CALLS}
    assert set(expected) == set(FUNCTIONS)
    for name, grants in expected.items():
        role = _role_of(name)
        found: dict[str, Any] = {}
        for policy in RESOURCES[role]["Properties"]["Policies"]:
            for entry in policy["PolicyDocument"]["Statement"]:
                for statement in _branches(entry):
                    if not any(str(a).startswith("states:") for a in _as_list(statement["Action"])):
                        continue
                    assert statement["Effect"] == "Allow"
                    assert "Condition" not in statement
                    if statement["Sid"] == "ResumeAgentCallbacks":
                        assert entry["Fn::If"][0] == "ResumesAgentCallbacks"
                        assert entry["Fn::If"][2] == _NO_VALUE
                        assert set(_as_list(statement["Action"])) == RESUME_ACTIONS
                        assert statement["Resource"] == agents
                        found["ResumeAgentCallbacks"] = True
                    elif statement["Sid"] == "ResumeToolCalls":
                        assert set(_as_list(statement["Action"])) == RESUME_ACTIONS, name
                        found["ResumeToolCalls"] = statement["Resource"]
                    else:
                        found[statement["Sid"]] = (statement["Action"], statement["Resource"])
        wanted = dict(grants)
        if name in finishers:
            wanted["ResumeAgentCallbacks"] = True
        assert found == wanted, name
    # Nothing else in the template grants Step Functions actions (other roles, resource policies).
    allowed_roles = {_role_of(name) for name, grants in expected.items() if grants}
    assert {path.split("/")[2] for path, _ in _states_statements(TEMPLATE)} == allowed_roles


def test_state_machine_arn_reaches_the_functions_that_use_it() -> None:
    # The indexer resumes the executions of the paused calls a workspace purge cancels.
    users = {"AdminApiFunction", "ResolutionsFunction", "OAuthCallbackFunction", "McpEndpointFunction", INDEXER}
    for name in FUNCTIONS:
        env = function_environment(name)
        if name in users:
            assert env["MCPBRIDGE_STATE_MACHINE_ARN"] == {"Ref": STATE_MACHINE}, name
        elif name == TOOL_CALLS:
            assert env["MCPBRIDGE_STATE_MACHINE_ARN"] == NAMED_MACHINE_ARN
        else:
            assert "MCPBRIDGE_STATE_MACHINE_ARN" not in env, name
    assert "MCPBRIDGE_STATE_MACHINE_ARN" not in GLOBAL_ENV
    assert "state_machine_arn" in Settings.model_fields
    # The function and the role that name the state machine without referencing it use its actual name.
    assert NAMED_MACHINE_ARN["Fn::Sub"].split(":stateMachine:", 1)[1] == MACHINE_NAME["Fn::Sub"]


def test_tool_call_function_role() -> None:
    actions = _role_actions(TOOL_CALLS)
    assert {a for a in actions if a.startswith("kms:")} == {"kms:GenerateDataKey", "kms:Decrypt", "kms:DescribeKey"}
    # Tool catalog snapshots live in the bucket.
    assert {a for a in actions if a.startswith("s3:")} == {
        "s3:ListBucket",
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
    }
    assert not any(a.startswith(("lambda:", "bedrock:")) for a in actions)
    assert {a for a in actions if a.startswith("states:")} == RESUME_ACTIONS


# ------------------------------------------------------------------------------------------------ moto


def test_create_aws_resources_matches_the_template(monkeypatch: pytest.MonkeyPatch) -> None:
    set_fake_aws_env(monkeypatch)
    with mock_aws():
        resources = create_aws_resources(table_name="mcpbridge-test")
        dynamodb = boto3.client("dynamodb", region_name="eu-west-1")
        table = dynamodb.describe_table(TableName=resources.table_name)["Table"]
        assert table["KeySchema"] == TABLE["KeySchema"]
        assert sorted(table["AttributeDefinitions"], key=lambda d: d["AttributeName"]) == sorted(
            TABLE["AttributeDefinitions"], key=lambda d: d["AttributeName"]
        )
        described = by_index_name(table["GlobalSecondaryIndexes"])
        assert set(described) == set(INDEX_KEYS)
        for name, index in by_index_name(TABLE["GlobalSecondaryIndexes"]).items():
            assert described[name]["KeySchema"] == index["KeySchema"]
            assert described[name]["Projection"] == index["Projection"]
        ttl = dynamodb.describe_time_to_live(TableName=resources.table_name)["TimeToLiveDescription"]
        assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": TTL_ATTR}

        key = boto3.client("kms", region_name="eu-west-1").describe_key(KeyId=resources.kms_key_id)["KeyMetadata"]
        assert key["Enabled"] is True

        s3 = boto3.client("s3", region_name="eu-west-1")
        s3.head_bucket(Bucket=resources.bucket_name)
        assert s3.get_bucket_versioning(Bucket=resources.bucket_name)["Status"] == "Enabled"

        env = resources.settings_env()
        assert env["MCPBRIDGE_TABLE_NAME"] == "mcpbridge-test"
        assert "AWS_ENDPOINT_URL" not in env


def test_tool_call_events_are_published_by_the_functions_that_start_or_resolve_calls_only() -> None:
    publishers = {
        path.split("/")[1]
        for path, statement in _statements(RESOURCES)
        if "events:PutEvents" in _as_list(statement.get("Action", []))
    }
    assert publishers == {"AdminApiRole", "McpEndpointRole", "OAuthCallbackRole", "ResolutionsRole", "ToolCallsRole"}
    for path, statement in _statements(RESOURCES):
        if "events:PutEvents" in _as_list(statement.get("Action", [])):
            assert "event-bus/${EventBusName}" in str(statement["Resource"]), path
    variables = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"]
    assert variables["MCPBRIDGE_EVENT_BUS_NAME"] == {"Ref": "EventBusName"}


_SURFACE_FUNCTIONS = {
    "admin_api": "AdminApiFunction",
    "oauth_callback": "OAuthCallbackFunction",
    "resolutions": "ResolutionsFunction",
}


def _api_routes() -> list[tuple[str, str, str]]:
    """(method, path pattern, function) of every HttpApi event."""
    routes = []
    for name, resource in RESOURCES.items():
        for event in (resource.get("Properties", {}).get("Events") or {}).values():
            if event.get("Type") == "HttpApi":
                routes.append((event["Properties"]["Method"].upper(), event["Properties"]["Path"], name))
    return routes


def _gateway_match(method: str, path: str) -> str | None:
    """The function API Gateway picks for a request: the most specific matching route (greedy ones last)."""
    import re

    candidates = []
    for route_method, pattern, function in _api_routes():
        if route_method not in ("ANY", method):
            continue
        regex = re.sub(r"\{[^}+]+\+\}", ".+", re.sub(r"\{[^}+]+\}", "[^/]+", pattern))
        if re.fullmatch(regex, path):
            greedy = "+}" in pattern
            literal = sum(1 for segment in pattern.split("/") if segment and not segment.startswith("{"))
            candidates.append((greedy, -literal, route_method == "ANY", function))
    return min(candidates)[3] if candidates else None


def test_every_route_of_every_surface_reaches_its_function() -> None:
    from fastapi.routing import APIRoute

    from mcpbridge.http.apps import _SURFACES, _routers

    for surface, function in _SURFACE_FUNCTIONS.items():
        for router in _routers(_SURFACES[surface]):
            for route in router.routes:
                assert isinstance(route, APIRoute)
                concrete = route.path.replace("{", "").replace("}", "").replace(":path", "")
                for method in route.methods:
                    assert _gateway_match(method, concrete) == function, (surface, method, route.path)
    # The MCP endpoint function's app has no router: it serves /mcp/{endpoint_id} alone (mcpbridge.http.mcp.app).
    for method in ("POST", "DELETE", "GET"):
        assert _gateway_match(method, "/mcp/ep_x") == "McpEndpointFunction", method
    # ... and its server card, for any method (GET and HEAD read it, OPTIONS is a browser's preflight).
    for method in ("GET", "HEAD", "OPTIONS", "POST"):
        assert _gateway_match(method, "/mcp/ep_x/server-card") == "McpEndpointFunction", method


# ------------------------------------------------------------------------------------------------ failures, alarms

# Event sources through which Lambda invokes a function asynchronously (SAM event types).
ASYNC_EVENT_TYPES = {
    "S3",
    "SNS",
    "EventBridgeRule",
    "CloudWatchEvent",
    "Schedule",
    "ScheduleV2",
    "IoTRule",
    "CloudWatchLogs",
}


def _asynchronously_invoked() -> set[str]:
    """Functions something invokes with InvocationType Event: the code's job submitters (the functions named by a
    ``MCPBRIDGE_*_FUNCTION`` variable: LambdaJobs invokes them with ``Event``) and async event sources."""
    invoked = set()
    for name in FUNCTIONS:
        for variable, value in function_environment(name).items():
            if variable.endswith("_FUNCTION"):
                invoked |= {target for target in FUNCTIONS if _references(value, target)}
        events = function_property(name, "Events") or {}
        if any(event["Type"] in ASYNC_EVENT_TYPES for event in events.values()):
            invoked.add(name)
    return invoked


def _queue_is_kept_and_tls_only(queue_name: str) -> None:
    queue = RESOURCES[queue_name]
    assert queue["Type"] == "AWS::SQS::Queue"
    # Encrypted at rest, and kept long enough to be read after a weekend (SQS keeps 14 days at most).
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert queue["Properties"]["MessageRetentionPeriod"] == 14 * 24 * 3600
    # The queue refuses plain HTTP, like the bucket.
    policy = RESOURCES[f"{queue_name}Policy"]["Properties"]
    assert policy["Queues"] == [{"Ref": queue_name}]
    (deny,) = policy["PolicyDocument"]["Statement"]
    assert (deny["Effect"], deny["Condition"]) == ("Deny", {"Bool": {"aws:SecureTransport": "false"}})


def _sqs_statements() -> list[tuple[str, dict[str, Any]]]:
    return [
        (path.split("/")[2], statement)
        for path, statement in _statements(TEMPLATE)
        if statement.get("Effect") == "Allow"
        and any(str(a).startswith("sqs:") for a in _as_list(statement.get("Action", [])))
    ]


def test_every_asynchronous_invocation_has_a_failure_destination() -> None:
    invoked = _asynchronously_invoked()
    # The indexer (jobs), the job-recovery function (its schedule).
    assert invoked == {INDEXER, RECOVERY}
    destinations = {}
    for name in invoked:
        config = function_property(name, "EventInvokeConfig")
        assert config["MaximumRetryAttempts"] <= 2, name
        on_failure = config["DestinationConfig"]["OnFailure"]
        assert on_failure["Type"] == "SQS", name
        queue_name = on_failure["Destination"]["Fn::GetAtt"][0]
        assert on_failure["Destination"] == {"Fn::GetAtt": [queue_name, "Arn"]}
        _queue_is_kept_and_tls_only(queue_name)
        destinations[name] = queue_name
        # Lambda sends the record with the function's own role, to that queue only; nobody else sends to it.
        senders = [
            (role, statement["Resource"])
            for role, statement in _sqs_statements()
            if "sqs:SendMessage" in _as_list(statement["Action"])
        ]
        assert (_role_of(name), {"Fn::GetAtt": [queue_name, "Arn"]}) in senders
        assert [role for role, resource in senders if resource == {"Fn::GetAtt": [queue_name, "Arn"]}] == [
            _role_of(name)
        ]
        assert _alarms_on("AWS/Lambda", "DestinationDeliveryFailures", {"FunctionName": {"Ref": name}}) or (
            name == RECOVERY  # a lost sweep is replaced by the next one, 5 minutes later
        )
    assert destinations == {INDEXER: FAILED_JOBS_QUEUE, RECOVERY: REDRIVE_QUEUE}
    # Every record ends where someone sees it: consumed, or in a queue whose depth is alarmed.
    assert _alarms_on(
        "AWS/SQS", "ApproximateNumberOfMessagesVisible", {"QueueName": {"Fn::GetAtt": [REDRIVE_QUEUE, "QueueName"]}}
    )


def test_the_failure_queue_is_consumed_and_what_is_not_settled_is_redriven() -> None:
    (source,) = [e for e in function_property(RECOVERY, "Events").values() if e["Type"] == "SQS"]
    assert source["Properties"]["Queue"] == {"Fn::GetAtt": [FAILED_JOBS_QUEUE, "Arn"]}
    assert source["Properties"]["BatchSize"] == 10
    # Records the function could not settle are reported back, not the whole batch retried.
    assert source["Properties"]["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    queue = RESOURCES[FAILED_JOBS_QUEUE]["Properties"]
    # Lambda requires the visibility timeout to cover the function's; it advises six times.
    assert queue["VisibilityTimeout"] >= 6 * function_property(RECOVERY, "Timeout")
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [REDRIVE_QUEUE, "Arn"]},
        "maxReceiveCount": 3,
    }
    # The consumer's role may read and delete the failure queue's messages, and only its role.
    consumers = [
        (role, statement)
        for role, statement in _sqs_statements()
        if set(_as_list(statement["Action"])) & {"sqs:ReceiveMessage", "sqs:DeleteMessage"}
    ]
    assert [role for role, _ in consumers] == [_role_of(RECOVERY)]
    ((_, consume),) = consumers
    assert set(consume["Action"]) == {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"}
    assert consume["Resource"] == {"Fn::GetAtt": [FAILED_JOBS_QUEUE, "Arn"]}
    # Resubmitted and re-driven jobs go to the indexer's alias, like every other submitter's.
    assert function_environment(RECOVERY)["MCPBRIDGE_INDEXER_FUNCTION"] == {"Ref": f"{INDEXER}.Alias"}


def test_the_sweep_runs_on_a_schedule() -> None:
    (schedule,) = [e for e in function_property(RECOVERY, "Events").values() if e["Type"] == "ScheduleV2"]
    properties = schedule["Properties"]
    assert properties["ScheduleExpression"] == "rate(5 minutes)"
    assert json.loads(properties["Input"]) == {"task": "sweep"}  # not an SQS event: the handler sweeps
    # The deadline it applies is longer than Lambda keeps and retries an asynchronous job (1 h + 3 x 15 min).
    indexer = function_property(INDEXER, "EventInvokeConfig")
    attempts = indexer["MaximumRetryAttempts"] + 1
    longest = indexer["MaximumEventAgeInSeconds"] + attempts * function_property(INDEXER, "Timeout")
    assert Settings.model_fields["indexing_deadline_seconds"].default > longest
    assert "MCPBRIDGE_INDEXING_DEADLINE_SECONDS" not in function_environment(RECOVERY)


def test_bucket_expires_the_versions_of_deleted_and_replaced_objects() -> None:
    rules = {rule["Id"]: rule for rule in RESOURCES["Bucket"]["Properties"]["LifecycleConfiguration"]["Rules"]}
    assert all(rule["Status"] == "Enabled" for rule in rules.values())
    # The whole bucket (documents/, catalogs/, and anything stored later): a deleted document's source and text, or
    # a replaced version, expire after the retention; the delete markers left alone then go too.
    everything = rules["ExpireNoncurrentVersions"]
    assert "Prefix" not in everything
    assert "TagFilters" not in everything
    assert everything["NoncurrentVersionExpiration"] == {"NoncurrentDays": {"Ref": "NoncurrentVersionRetentionDays"}}
    assert everything["ExpiredObjectDeleteMarker"] is True
    assert TEMPLATE["Parameters"]["NoncurrentVersionRetentionDays"]["Default"] == 30
    # Index files are rewritten on every indexing run: their old versions go sooner (the earlier expiry wins).
    indexes = rules["ExpireOldIndexVersions"]
    assert (indexes["Prefix"], indexes["NoncurrentVersionExpiration"]) == ("indexes/", {"NoncurrentDays": 7})
    assert indexes["ExpiredObjectDeleteMarker"] is True
    assert rules["AbortIncompleteMultipartUploads"]["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 7}
    # What an abandoned large-document upload left (uploads/<ws>/<upload>, copied to documents/ on completion).
    from mcpbridge.knowledge.uploads import UPLOAD_SECONDS, upload_blob

    abandoned = rules["ExpireAbandonedUploads"]
    assert upload_blob("ws", "upl").startswith(abandoned["Prefix"])
    assert abandoned["ExpirationInDays"] * 24 * 3600 > UPLOAD_SECONDS  # never an upload still open
    assert abandoned["NoncurrentVersionExpiration"] == {"NoncurrentDays": 1}


def test_browsers_of_the_allowed_origins_may_post_uploads_to_the_bucket() -> None:
    cors = RESOURCES["Bucket"]["Properties"]["CorsConfiguration"]
    condition, rules, otherwise = cors["Fn::If"]
    assert (condition, otherwise) == ("HasAllowedOrigins", _NO_VALUE)
    (rule,) = rules["CorsRules"]
    assert rule["AllowedMethods"] == ["POST"]  # the presigned form; nothing is read from a browser
    assert rule["AllowedOrigins"] == {"Fn::Split": [",", {"Ref": "AllowedOrigins"}]}


def test_documents_in_a_request_fit_what_api_gateway_and_lambda_carry() -> None:
    # Lambda takes at most 6 MB (6,291,456 bytes) of request; API Gateway base64-encodes a file (4/3 larger) inside
    # a JSON event with headers around it. Larger documents go straight to the bucket, up to the per-document limit.
    in_request = int(GLOBAL_ENV["MCPBRIDGE_MAX_REQUEST_DOCUMENT_BYTES"])
    assert in_request * 4 / 3 + 64 * 1024 <= 6_291_456
    assert "MCPBRIDGE_MAX_DOCUMENT_BYTES" not in GLOBAL_ENV
    assert Settings.model_fields["max_document_bytes"].default >= 100 * 1024 * 1024


def _dimensions(alarm: Mapping[str, Any]) -> dict[str, Any]:
    return {d["Name"]: d["Value"] for d in alarm.get("Dimensions", [])}


def _alarms_on(namespace: str, metric: str, dimensions: Mapping[str, Any]) -> list[str]:
    return [
        name
        for name, alarm in ALARMS.items()
        if (alarm.get("Namespace"), alarm.get("MetricName")) == (namespace, metric)
        and _dimensions(alarm) == dict(dimensions)
    ]


def test_every_alarm_notifies_the_topic_when_there_is_one() -> None:
    notify = {"Fn::If": ["NotifiesAlarms", [{"Ref": "AlarmTopicArn"}], _NO_VALUE]}
    assert ALARMS
    names = []
    for name, alarm in ALARMS.items():
        assert alarm["AlarmActions"] == notify, name
        assert alarm["OKActions"] == notify, name
        assert alarm["TreatMissingData"] == "notBreaching", name  # no traffic is not a failure
        assert alarm["AlarmDescription"], name
        assert alarm["EvaluationPeriods"] >= alarm["DatapointsToAlarm"] >= 1, name
        names.append(alarm["AlarmName"]["Fn::Sub"])
    assert all(name.startswith("${AWS::StackName}-") for name in names)
    assert len(set(names)) == len(names)
    assert TEMPLATE["Parameters"]["AlarmTopicArn"]["Default"] == ""


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_every_function_has_error_and_throttle_alarms(name: str) -> None:
    for metric in ("Errors", "Throttles"):
        (alarm,) = _alarms_on("AWS/Lambda", metric, {"FunctionName": {"Ref": name}})
        assert (ALARMS[alarm]["Statistic"], ALARMS[alarm]["Threshold"]) == ("Sum", 1), alarm
        assert ALARMS[alarm]["ComparisonOperator"] == "GreaterThanOrEqualToThreshold", alarm


def test_stack_alarms_exist() -> None:
    expected = [
        ("AWS/ApiGateway", "5xx", (("ApiId", {"Ref": "HttpApi"}),)),
        (
            "AWS/SQS",
            "ApproximateNumberOfMessagesVisible",
            (("QueueName", {"Fn::GetAtt": [REDRIVE_QUEUE, "QueueName"]}),),
        ),
        ("AWS/Lambda", "DestinationDeliveryFailures", (("FunctionName", {"Ref": INDEXER}),)),
        ("AWS/Lambda", "AsyncEventAge", (("FunctionName", {"Ref": INDEXER}),)),
        ("AWS/States", "ExecutionsFailed", (("StateMachineArn", {"Ref": STATE_MACHINE}),)),
        ("mcpbridge", "IndexingBacklog", (("service", {"Ref": "AWS::StackName"}),)),
    ]
    for namespace, metric, dimensions in expected:
        assert len(_alarms_on(namespace, metric, dict(dimensions))) == 1, (namespace, metric)
    per_function = 2 * len(FUNCTIONS)
    assert len(ALARMS) == per_function + len(expected)
    # Every alarm watches something of this stack.
    for name, alarm in ALARMS.items():
        for value in _dimensions(alarm).values():
            referenced = value.get("Ref") or value.get("Fn::GetAtt", [None])[0]
            assert referenced in RESOURCES or referenced == "AWS::StackName", name


def test_indexing_backlog_alarm_reads_the_metric_the_code_emits() -> None:
    # Powertools Metrics (EMF) takes its namespace and the "service" dimension from these variables.
    assert GLOBAL_ENV["POWERTOOLS_METRICS_NAMESPACE"] == "mcpbridge"
    assert GLOBAL_ENV["POWERTOOLS_SERVICE_NAME"] == {"Ref": "AWS::StackName"}  # one set of metrics per stack
    (name,) = _alarms_on("mcpbridge", "IndexingBacklog", {"service": GLOBAL_ENV["POWERTOOLS_SERVICE_NAME"]})
    alarm = ALARMS[name]
    assert alarm["Namespace"] == GLOBAL_ENV["POWERTOOLS_METRICS_NAMESPACE"]
    assert (alarm["Statistic"], alarm["Threshold"]) == ("Maximum", {"Ref": "IndexingBacklogThreshold"})
    assert alarm["Period"] * alarm["EvaluationPeriods"] == 900  # a backlog that lasts, not a burst
    assert TEMPLATE["Parameters"]["IndexingBacklogThreshold"]["Default"] == 100


def test_search_function() -> None:
    """The search engine runs in one container-image function (its packages exceed a zip's 250 MB), invoked by the
    functions that touch knowledge bases, with its own least-privilege role."""
    search = RESOURCES["SearchIndexFunction"]
    assert search["Type"] == "AWS::Lambda::Function"  # Globals (Runtime, Layers) would not apply to an image
    # Only with SearchEngine=lance, with the image pushed beforehand (no Metadata: sam build builds no image).
    assert search["Condition"] == "SearchesOnLance"
    assert "Metadata" not in search
    package_type = search["Properties"]["PackageType"]["Fn::FindInMap"]
    assert TEMPLATE["Mappings"][package_type[0]][package_type[1]][package_type[2]] == "Image"
    assert search["Properties"]["Code"] == {"ImageUri": {"Ref": "SearchImageUri"}}
    image = TEMPLATE["Parameters"]["SearchImageUri"]
    assert image["Default"] == ""
    pattern = re.compile(image["AllowedPattern"])
    digest = "@sha256:" + "0" * 64
    for uri in ("", "123456789012.dkr.ecr.eu-west-1.amazonaws.com/mcpbridge/search-index" + digest,
                "123456789012.dkr.ecr.eu-west-1.amazonaws.com/search:v1"):  # fmt: skip
        assert pattern.fullmatch(uri), uri
    for uri in ("search-index:latest", "public.ecr.aws/lambda/python:3.13", "docker.io/library/x" + digest):
        assert not pattern.fullmatch(uri), uri
    (rule,) = TEMPLATE["Rules"].values()
    assert rule["RuleCondition"] == {"Fn::Equals": [{"Ref": "SearchEngine"}, "lance"]}
    assert rule["Assertions"][0]["Assert"] == {"Fn::Not": [{"Fn::Equals": [{"Ref": "SearchImageUri"}, ""]}]}
    for lance_only in ("SearchIndexRole", "SearchIndexLogGroup", "IndexCommitsTable", "SearchIndexCallers"):
        assert RESOURCES[lance_only]["Condition"] == "SearchesOnLance", lance_only
    assert (Path(__file__).parents[2] / "functions/search_index/Dockerfile").is_file()
    assert search["Properties"]["Architectures"] == TEMPLATE["Globals"]["Function"]["Architectures"]
    env = search["Properties"]["Environment"]["Variables"]
    assert env["MCPBRIDGE_SEARCH_ENGINE"] == "lance"  # the function holds the engine, whatever the default
    assert env["MCPBRIDGE_LANCE_COMMIT_TABLE"] == {"Ref": "IndexCommitsTable"}
    assert "MCPBRIDGE_SEARCH_FUNCTION" not in env  # it holds the engine itself
    assert GLOBAL_ENV["MCPBRIDGE_SEARCH_ENGINE"] == {"Ref": "SearchEngine"}
    callers = RESOURCES["SearchIndexCallers"]["Properties"]
    assert callers["Roles"] == [
        {"Ref": _role_of(name)} for name in ("AdminApiFunction", "McpEndpointFunction", INDEXER, "JobRecoveryFunction")
    ]
    (invoke, stage) = callers["PolicyDocument"]["Statement"]
    assert invoke["Action"] == "lambda:InvokeFunction"
    assert invoke["Resource"] == [
        {"Fn::GetAtt": ["SearchIndexFunction", "Arn"]},
        {"Fn::Sub": "${SearchIndexFunction.Arn}:*"},
    ]
    assert stage["Resource"] == {"Fn::Sub": "${Bucket.Arn}/index-requests/*"}
    commits = RESOURCES["IndexCommitsTable"]["Properties"]
    assert [k["AttributeName"] for k in commits["KeySchema"]] == ["base_uri", "version"]
    assert RESOURCES["SearchIndexAlias"]["Properties"]["ProvisionedConcurrencyConfig"] == {
        "ProvisionedConcurrentExecutions": {"Ref": "SearchProvisionedConcurrency"}
    }
