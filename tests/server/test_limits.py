"""The input limits (gpupool.api.limits, docs/security.md#limits) as properties: whatever text
arrives, the validators answer (never crash), and what they accept is within the limits and has
no control characters; every string of every request model has a maximum length."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from gpupool.api import limits, schemas

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# Text that often holds what must be refused: control characters, C1, long runs.
awkward = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0, max_codepoint=0x9F),
        st.characters(),
    ),
    max_size=80,
) | st.builds(lambda c, n: c * n, st.sampled_from(["a", "\x00", "é"]), st.integers(0, 10_000))


def in_models() -> list[type[BaseModel]]:
    return [
        model
        for model in vars(schemas).values()
        if isinstance(model, type) and issubclass(model, schemas._In) and model is not schemas._In
    ]


def unbounded_strings(node: Any, path: str = "") -> list[str]:
    """JSON-schema paths of strings without maxLength (enums and patterns of names aside)."""
    found = []
    if isinstance(node, dict):
        if node.get("type") == "string" and "maxLength" not in node and "enum" not in node:
            found.append(path)
        if node.get("type") == "object" and node.get("additionalProperties", False) is not False:
            names = node.get("propertyNames", {})
            if "maxLength" not in names:
                found.append(f"{path}.<key>")
        for key, value in node.items():
            found += unbounded_strings(value, f"{path}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += unbounded_strings(value, f"{path}[{index}]")
    return found


@pytest.mark.parametrize("model", in_models(), ids=lambda model: model.__name__)
def test_every_string_of_every_request_model_has_a_max_length(model: type[BaseModel]) -> None:
    assert unbounded_strings(model.model_json_schema()) == []


def test_all_request_models_are_checked() -> None:
    names = {model.__name__ for model in in_models()}
    assert {"WorkloadIn", "NodeIn", "ProjectIn", "UserIn", "TokenIn", "LoginIn"} <= names


@given(awkward)
def test_plain_text_refuses_every_control_character(text: str) -> None:
    try:
        accepted = limits.plain_text(text)
    except ValueError as error:
        assert CONTROL.search(text)
        assert "remove it" in str(error)
    else:
        assert accepted == text and not CONTROL.search(accepted)


@given(awkward)
def test_script_text_lets_only_tab_and_newline_through(text: str) -> None:
    try:
        accepted = limits.script_text(text)
    except ValueError:
        assert CONTROL.search(text.replace("\t", "").replace("\n", ""))
    else:
        assert not CONTROL.search(accepted.replace("\t", "").replace("\n", ""))


@settings(max_examples=200, deadline=None)
@given(
    command=st.lists(awkward, max_size=300),
    env=st.dictionaries(awkward, awkward, max_size=300),
    working_dir=st.none() | awkward,
    gpu=st.one_of(st.floats(allow_nan=True), awkward),
)
def test_a_submission_is_accepted_only_within_the_limits(
    command: list[str], env: dict[str, str], working_dir: str | None, gpu: float | str
) -> None:
    body = {"name": "w", "project": "p", "gpu": gpu, "command": command, "env": env}
    if working_dir is not None:
        body["working_dir"] = working_dir
    try:
        workload = schemas.WorkloadIn.model_validate(body)
    except ValidationError as error:
        out = schemas.validation_error_out(error.errors())
        assert out.detail and out.errors
        return
    assert len(workload.command) <= limits.COMMAND_MAX_ARGS
    assert sum(map(len, workload.command)) <= limits.COMMAND_TOTAL_MAX
    assert len(workload.env) <= limits.ENV_MAX_VARS
    assert sum(len(k) + len(v) for k, v in workload.env.items()) <= limits.ENV_TOTAL_MAX
    for text in [*workload.command, *workload.env.values()]:
        assert len(text) <= max(limits.COMMAND_ARG_MAX, limits.ENV_VALUE_MAX)
        assert not CONTROL.search(text.replace("\t", "").replace("\n", ""))
    for text in [*workload.env, workload.working_dir or ""]:
        assert not CONTROL.search(text)
    assert len(workload.working_dir or "") <= limits.WORKING_DIR_MAX


@settings(max_examples=200, deadline=None)
@given(
    labels=st.dictionaries(awkward, awkward, max_size=80),
    model=st.none() | awkward,
    label=awkward,
)
def test_nodes_and_tokens_are_accepted_only_within_the_limits(
    labels: dict[str, str], model: str | None, label: str
) -> None:
    try:
        node = schemas.NodeIn.model_validate(
            {"name": "n", "gpu_count": 1, "labels": labels, "gpu_model": model}
        )
    except ValidationError:
        pass
    else:
        assert len(node.labels) <= limits.LABELS_MAX
        for text in [*node.labels, *node.labels.values(), node.gpu_model or ""]:
            assert not CONTROL.search(text) and len(text) <= limits.MODEL_MAX
    try:
        token = schemas.TokenIn.model_validate({"label": label})
    except ValidationError:
        pass
    else:
        assert not CONTROL.search(token.label) and len(token.label) <= limits.TOKEN_LABEL_MAX
