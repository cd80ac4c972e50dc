"""``template.yaml`` agrees with the code: table schema, function code, runtime, IAM scope, and the test helpers."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from mcpbridge.domain.items import INDEX_KEYS, KEY_ATTRS, TTL_ATTR
from tests.support.aws import (
    REPO_ROOT,
    create_aws_resources,
    load_template,
    parse_template,
    set_fake_aws_env,
    table_create_kwargs,
    ttl_attribute,
)

TEMPLATE = load_template()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
TABLE: dict[str, Any] = RESOURCES["Table"]["Properties"]
FUNCTIONS = {name: r for name, r in RESOURCES.items() if r["Type"] == "AWS::Serverless::Function"}
RUNTIME = "python3.13"


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
    assert outputs["BucketName"]["Value"] == {"Ref": "Bucket"}


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


def test_there_are_four_functions() -> None:
    assert set(FUNCTIONS) == {
        "AdminApiFunction",
        "McpEndpointFunction",
        "OAuthCallbackFunction",
        "ResolutionsFunction",
    }


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
    assert function_property(name, "Timeout") < 30


def test_layer_matches_the_functions() -> None:
    layer = RESOURCES["CoreLayer"]
    assert layer["Type"] == "AWS::Serverless::LayerVersion"
    assert layer["Properties"]["CompatibleRuntimes"] == [RUNTIME]
    assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]
    assert layer["Metadata"] == {"BuildMethod": "makefile", "BuildArchitecture": "arm64"}
    assert (REPO_ROOT / "infra" / "build-layer.sh").is_file()


def _references(value: Any, name: str) -> bool:
    if isinstance(value, dict):
        if value.get("Ref") == name:
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


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_environment(name: str) -> None:
    env = TEMPLATE["Globals"]["Function"]["Environment"]["Variables"] | (
        FUNCTIONS[name]["Properties"].get("Environment", {}).get("Variables", {})
    )
    assert env["MCPBRIDGE_BACKEND"] == "aws"
    assert env["MCPBRIDGE_TABLE_NAME"] == {"Ref": "Table"}
    assert _references(env["MCPBRIDGE_KMS_KEY_ID"], "SecretsKey")
    assert env["MCPBRIDGE_BUCKET_NAME"] == {"Ref": "Bucket"}
    assert {"MCPBRIDGE_LOG_LEVEL", "MCPBRIDGE_ALLOWED_ORIGINS", "MCPBRIDGE_FRONTEND_URLS"} <= set(env)
    # The API depends on the functions; a function referencing the API would be a circular dependency.
    assert not _references(env, "HttpApi")


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function_logs_to_its_own_log_group(name: str) -> None:
    group = function_property(name, "LoggingConfig")["LogGroup"]["Ref"]
    assert RESOURCES[group]["Type"] == "AWS::Logs::LogGroup"
    assert RESOURCES[group]["Properties"]["RetentionInDays"] == 30


# ------------------------------------------------------------------------------------------------ IAM


def _statements(value: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        statements = value.get("Statement")
        if statements is not None:
            for i, statement in enumerate(statements if isinstance(statements, list) else [statements]):
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
    # X-Ray's write and sampling actions support no resource-level permissions.
    return all(str(action).startswith("xray:") for action in _as_list(statement["Action"]))


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


def _role_actions(function_name: str) -> set[str]:
    role = function_property(function_name, "Role")["Fn::GetAtt"][0]
    return {
        action
        for policy in RESOURCES[role]["Properties"]["Policies"]
        for statement in policy["PolicyDocument"]["Statement"]
        if statement["Effect"] == "Allow"
        for action in _as_list(statement["Action"])
    }


def test_roles_grant_what_each_function_needs_and_no_more() -> None:
    assert function_property("ResolutionsFunction", "Policies") is None  # explicit roles, no SAM-generated ones
    kms_read = {"kms:Decrypt", "kms:DescribeKey"}
    kms_rw = kms_read | {"kms:GenerateDataKey"}
    admin = _role_actions("AdminApiFunction")
    assert kms_rw <= admin
    assert {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"} <= admin
    mcp = _role_actions("McpEndpointFunction")
    assert kms_rw <= mcp
    assert "s3:GetObject" in mcp
    assert not {"s3:PutObject", "s3:DeleteObject"} & mcp
    oauth = _role_actions("OAuthCallbackFunction")
    assert kms_rw <= oauth
    assert not any(a.startswith("s3:") for a in oauth)
    resolutions = _role_actions("ResolutionsFunction")
    assert {a for a in resolutions if a.startswith("kms:")} == kms_read
    assert not any(a.startswith("s3:") for a in resolutions)
    for actions in (admin, mcp, oauth, resolutions):
        assert {"dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"} <= actions
        assert not any(a.endswith("*") for a in actions)


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
