"""What README.md and infra/README.md say of the stack is what ``template.yaml`` creates: the number of functions for
each search engine, their alarms, and that the default stack has nothing a container runtime must build."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.support.aws import REPO_ROOT, load_template

TEMPLATE = load_template()
RESOURCES: dict[str, Any] = TEMPLATE["Resources"]
FUNCTION_TYPES = ("AWS::Serverless::Function", "AWS::Lambda::Function")
GUIDE = (REPO_ROOT / "infra" / "README.md").read_text(encoding="utf-8")
README = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9, "ten": 10}


def _value(expression: Any, parameters: dict[str, Any]) -> Any:
    if isinstance(expression, dict) and set(expression) == {"Ref"}:
        return parameters[expression["Ref"]]
    return expression


def condition_holds(name: str, parameters: dict[str, Any]) -> bool:
    """A condition of the template, evaluated for these parameter values (the functions it uses: Equals, Not, And,
    Or, Condition)."""

    def evaluate(expression: Any) -> bool:
        ((function, args),) = expression.items()
        if function == "Fn::Equals":
            left, right = (_value(a, parameters) for a in args)
            return str(left) == str(right)
        if function == "Fn::Not":
            return not evaluate(args[0])
        if function == "Fn::And":
            return all(evaluate(a) for a in args)
        if function == "Fn::Or":
            return any(evaluate(a) for a in args)
        if function == "Condition":
            return evaluate(TEMPLATE["Conditions"][args])
        raise AssertionError(f"condition function {function} is not evaluated here")

    return evaluate(TEMPLATE["Conditions"][name])


def stack(**overrides: Any) -> dict[str, dict[str, Any]]:
    """The resources a stack with the parameters' defaults (and these overrides) creates."""
    parameters = {name: p.get("Default") for name, p in TEMPLATE["Parameters"].items()} | overrides
    parameters |= {"AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012", "AWS::StackName": "s"}
    return {
        name: r for name, r in RESOURCES.items() if "Condition" not in r or condition_holds(r["Condition"], parameters)
    }


def functions(resources: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {name: r for name, r in resources.items() if r["Type"] in FUNCTION_TYPES}


def _is_image(resource: dict[str, Any]) -> bool:
    package_type = resource["Properties"].get("PackageType", "Zip")
    if isinstance(package_type, dict):  # !FindInMap [map, key, key]
        first, second, third = package_type["Fn::FindInMap"]
        package_type = TEMPLATE["Mappings"][first][second][third]
    return bool(package_type == "Image")


def prose(pattern: str) -> str:
    """A pattern whose spaces match any run of white space (the guides wrap their lines)."""
    return pattern.replace(" ", r"\s+")


def number(word: str) -> int:
    return NUMBERS.get(word.lower()) or int(word)


def test_the_default_stack_has_no_container_image() -> None:
    """`sam build` and `sam deploy` with the defaults need no container runtime: no image function, nothing that
    only Lance uses."""
    default = stack()
    assert TEMPLATE["Parameters"]["SearchEngine"]["Default"] == "files"
    assert not [name for name, r in functions(default).items() if _is_image(r)]
    lance_only = {"SearchIndexFunction", "SearchIndexRole", "SearchIndexLogGroup", "IndexCommitsTable"}
    assert not lance_only & set(default)
    assert lance_only <= set(stack(SearchEngine="lance"))
    assert [name for name, r in functions(stack(SearchEngine="lance")).items() if _is_image(r)] == [
        "SearchIndexFunction"
    ]
    # Nothing names a resource the stack does not have (a Ref to one fails the deploy).
    for name, resource in default.items():
        for absent in set(RESOURCES) - set(default):
            assert f"'{absent}'" not in _unconditional_references(resource), f"{name} references {absent}"


def _unconditional_references(value: Any) -> str:
    """``value`` as text, without the branches of ``!If`` on SearchesOnLance / ProvisionsSearch that a files stack
    does not take."""
    if isinstance(value, dict):
        if "Fn::If" in value and value["Fn::If"][0] in ("SearchesOnLance", "ProvisionsSearch"):
            return _unconditional_references(value["Fn::If"][2])
        return repr({k: _unconditional_references(v) for k, v in value.items()})
    if isinstance(value, list):
        return repr([_unconditional_references(v) for v in value])
    return repr(value)


@pytest.mark.parametrize("engine", ["files", "lance"])
def test_function_counts_of_the_guides_match_the_template(engine: str) -> None:
    counted = functions(stack(SearchEngine=engine))
    zipped = [name for name, r in counted.items() if not _is_image(r)]
    images = [name for name, r in counted.items() if _is_image(r)]
    # infra/README.md: "an HTTP API, eight Lambda functions sharing one layer (nine with `SearchEngine=lance`, ...".
    found = re.search(
        prose(r"an HTTP API, (\w+) Lambda functions sharing one layer \((\w+) with `SearchEngine=lance`"), GUIDE
    )
    assert found, "infra/README.md's first paragraph no longer counts the functions"
    assert number(found[1]) == len(functions(stack())), "functions of the default stack"
    assert number(found[2]) == len(functions(stack(SearchEngine="lance"))), "functions with SearchEngine=lance"
    found = re.search(prose(r"holds an HTTP API, (\w+) functions \("), README)
    assert found, "README.md no longer counts the functions"
    assert number(found[1]) == len(zipped) == len(functions(stack()))
    if engine == "lance":
        assert images == ["SearchIndexFunction"]
        ordinal = re.search(prose(r"with `SearchEngine=lance`, a (\w+): the search index"), README)
        assert ordinal
        assert ordinal[1] == {9: "ninth", 10: "tenth"}[len(counted)]


def test_alarm_counts_of_the_guide_match_the_template() -> None:
    alarms = [r["Properties"] for r in stack().values() if r["Type"] == "AWS::CloudWatch::Alarm"]
    errors = [a for a in alarms if a.get("MetricName") == "Errors" and a.get("Namespace") == "AWS/Lambda"]
    throttles = [a for a in alarms if a.get("MetricName") == "Throttles" and a.get("Namespace") == "AWS/Lambda"]
    for kind, found in (("errors", errors), ("throttles", throttles)):
        written = re.search(prose(rf"`<stack>-<function>-{kind}` \((\w+)\)"), GUIDE)
        assert written, f"infra/README.md no longer counts the {kind} alarms"
        assert number(written[1]) == len(found), kind


def test_the_make_targets_the_guides_name_exist() -> None:
    """Every `make <target>` of README.md and infra/README.md (in the text or a command block) is a target of the
    Makefile or of infra/sam/Makefile (the layer's and functions', which the guide names too)."""
    makefiles = (REPO_ROOT / "Makefile", REPO_ROOT / "infra" / "sam" / "Makefile")
    targets = {t for m in makefiles for t in re.findall(r"^([\w.-]+):", m.read_text(encoding="utf-8"), re.M)}
    named = set(re.findall(r"(?:`|^\s*)make ([a-z][\w-]*)", GUIDE + README, re.M))
    assert {"build", "search-image-push", "search-image-check", "oci-tools", "sam-build"} <= named
    assert named <= targets, f"not in the Makefile: {sorted(named - targets)}"
