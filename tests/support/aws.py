"""AWS test helpers: read ``template.yaml`` and create the resources it describes, through boto3.

Tests build their DynamoDB table from the template's ``Table`` resource (``table_create_kwargs``), so the schema under
test can never drift from the one that is deployed. ``create_aws_resources`` works inside ``moto.mock_aws()`` (no
``endpoint_url``) and against a moto server (``endpoint_url="http://127.0.0.1:PORT"``); either way the caller supplies
fake credentials (``set_fake_aws_env``).
"""

from __future__ import annotations

import copy
import functools
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import yaml

if TYPE_CHECKING:
    import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
TEMPLATE_PATH = REPO_ROOT / "template.yaml"

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SECURITY_TOKEN": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "eu-west-1",
}


def set_fake_aws_env(monkeypatch: pytest.MonkeyPatch, region: str = "eu-west-1") -> None:
    """Fake credentials and a region, and no profile or endpoint override leaking in from the developer's shell."""
    for name, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("AWS_REGION", region)
    for name in (
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_KMS",
        "AWS_ENDPOINT_URL_DYNAMODB",
    ):
        monkeypatch.delenv(name, raising=False)


# ------------------------------------------------------------------------------------------------ template


class CfnLoader(yaml.SafeLoader):
    """A SafeLoader that turns CloudFormation short-form tags into their long form (``!Ref x`` -> ``{"Ref": x}``)."""


def _construct(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    raise yaml.constructor.ConstructorError(None, None, f"unexpected node {node!r}", node.start_mark)


def _register(tag: str, key: str) -> None:
    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
        return {key: _construct(loader, node)}

    CfnLoader.add_constructor(tag, construct)


def _construct_getatt(loader: yaml.SafeLoader, node: yaml.Node) -> dict[str, Any]:
    value = _construct(loader, node)
    if isinstance(value, str):  # !GetAtt Resource.Attribute (the attribute may itself contain dots)
        resource, _, attribute = value.partition(".")
        value = [resource, attribute]
    return {"Fn::GetAtt": value}


_register("!Ref", "Ref")
_register("!Condition", "Condition")
for _name in (
    "And",
    "Base64",
    "Cidr",
    "Equals",
    "FindInMap",
    "GetAZs",
    "If",
    "ImportValue",
    "Join",
    "Length",
    "Not",
    "Or",
    "Select",
    "Split",
    "Sub",
    "ToJsonString",
    "Transform",
):
    _register(f"!{_name}", f"Fn::{_name}")
CfnLoader.add_constructor("!GetAtt", _construct_getatt)


def parse_template(text: str) -> dict[str, Any]:
    """Parse CloudFormation YAML text into plain dicts and lists."""
    document = yaml.load(text, Loader=CfnLoader)  # noqa: S506 - CfnLoader is a SafeLoader subclass
    if not isinstance(document, dict):
        raise ValueError("a CloudFormation template must be a mapping")
    return document


def load_template(path: Path | str | None = None) -> dict[str, Any]:
    """The parsed template (the repository's ``template.yaml`` by default); a fresh copy on every call."""
    return copy.deepcopy(_parsed(str(Path(path or TEMPLATE_PATH).resolve())))


@functools.lru_cache(maxsize=4)
def _parsed(path: str) -> dict[str, Any]:
    # Pure-Python YAML takes a quarter of a second on this template; every AWS fixture reads it.
    return parse_template(Path(path).read_text(encoding="utf-8"))


def _table_properties(template: dict[str, Any] | None = None) -> dict[str, Any]:
    resource = (template or load_template())["Resources"]["Table"]
    if resource["Type"] != "AWS::DynamoDB::Table":
        raise ValueError(f"Resources.Table is a {resource['Type']}, not an AWS::DynamoDB::Table")
    properties: dict[str, Any] = resource["Properties"]
    return properties


def table_create_kwargs(table_name: str, template: dict[str, Any] | None = None) -> dict[str, Any]:
    """Keyword arguments for ``dynamodb.create_table`` describing the template's ``Table``, named ``table_name``."""
    properties = _table_properties(template)
    kwargs: dict[str, Any] = {
        "TableName": table_name,
        "KeySchema": copy.deepcopy(properties["KeySchema"]),
        "AttributeDefinitions": copy.deepcopy(properties["AttributeDefinitions"]),
        "BillingMode": properties.get("BillingMode", "PROVISIONED"),
    }
    indexes = [
        {"IndexName": index["IndexName"], "KeySchema": index["KeySchema"], "Projection": index["Projection"]}
        for index in properties.get("GlobalSecondaryIndexes", [])
    ]
    if indexes:
        kwargs["GlobalSecondaryIndexes"] = copy.deepcopy(indexes)
    return kwargs


def ttl_attribute(template: dict[str, Any] | None = None) -> str:
    """The attribute DynamoDB expires items on, per the template."""
    spec = _table_properties(template)["TimeToLiveSpecification"]
    name: str = spec["AttributeName"]
    return name


# ------------------------------------------------------------------------------------------------ resources


@dataclass(frozen=True)
class AwsResources:
    table_name: str
    kms_key_id: str
    """The key's ARN, as the deployed functions receive it in ``MCPBRIDGE_KMS_KEY_ID``."""
    bucket_name: str
    region: str = "eu-west-1"
    endpoint_url: str | None = None
    state_machine_arn: str = ""
    """The tool-call state machine (``create_aws_resources(tool_call_workflow=True)``), else empty."""
    tool_calls_function: str = ""
    """The tool-call function's name, to route with ``tests.support.stepfunctions.route_lambda_invocations``."""

    def settings_env(self) -> dict[str, str]:
        """``MCPBRIDGE_*`` variables that point ``mcpbridge.settings.Settings`` at these resources."""
        env = {
            "MCPBRIDGE_BACKEND": "aws",
            "MCPBRIDGE_TABLE_NAME": self.table_name,
            "MCPBRIDGE_KMS_KEY_ID": self.kms_key_id,
            "MCPBRIDGE_BUCKET_NAME": self.bucket_name,
            "MCPBRIDGE_AWS_REGION": self.region,
        }
        if self.endpoint_url:
            env["AWS_ENDPOINT_URL"] = self.endpoint_url
        if self.state_machine_arn:
            env["MCPBRIDGE_STATE_MACHINE_ARN"] = self.state_machine_arn
        return env


def create_aws_resources(
    *,
    table_name: str = "mcpbridge",
    endpoint_url: str | None = None,
    region: str = "eu-west-1",
    tool_call_workflow: bool = False,
) -> AwsResources:
    """Create the table (with TTL on), a KMS key and an encrypted, versioned S3 bucket, like ``template.yaml``.

    ``tool_call_workflow``: also the tool-call function and state machine (``tests.support.stepfunctions``); moto
    executes it only under ``mock_aws(config=MOTO_WORKFLOW_CONFIG)``, and runs the function's steps only where
    ``route_lambda_invocations`` routes it."""

    dynamodb = boto3.client("dynamodb", region_name=region, endpoint_url=endpoint_url)
    dynamodb.create_table(**table_create_kwargs(table_name))
    dynamodb.get_waiter("table_exists").wait(TableName=table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
    dynamodb.update_time_to_live(
        TableName=table_name, TimeToLiveSpecification={"AttributeName": ttl_attribute(), "Enabled": True}
    )

    kms = boto3.client("kms", region_name=region, endpoint_url=endpoint_url)
    key_arn: str = kms.create_key(Description=f"mcpbridge test key for {table_name}")["KeyMetadata"]["Arn"]

    s3 = boto3.client("s3", region_name=region, endpoint_url=endpoint_url)
    bucket_name = f"mcpbridge-test-{uuid.uuid4().hex[:16]}"
    if region == "us-east-1":
        s3.create_bucket(Bucket=bucket_name)
    else:
        location: Any = {"LocationConstraint": region}  # the stubs type it as a Literal of region names
        s3.create_bucket(Bucket=bucket_name, CreateBucketConfiguration=location)
    s3.put_bucket_versioning(Bucket=bucket_name, VersioningConfiguration={"Status": "Enabled"})
    s3.put_bucket_encryption(
        Bucket=bucket_name,
        ServerSideEncryptionConfiguration={
            "Rules": [
                {
                    "ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms", "KMSMasterKeyID": key_arn},
                    "BucketKeyEnabled": True,
                }
            ]
        },
    )
    workflow = None
    if tool_call_workflow:
        from tests.support.stepfunctions import create_tool_call_workflow

        workflow = create_tool_call_workflow(stack_name=table_name, region=region, endpoint_url=endpoint_url)
    return AwsResources(
        table_name=table_name,
        kms_key_id=key_arn,
        bucket_name=bucket_name,
        region=region,
        endpoint_url=endpoint_url,
        state_machine_arn=workflow.state_machine_arn if workflow else "",
        tool_calls_function=workflow.function_name if workflow else "",
    )
