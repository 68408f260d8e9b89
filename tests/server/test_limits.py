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

from gpupool import units
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


# -- every field's rules, as properties: control characters, limits, names, quantities -------

C0_DEL_C1 = [chr(c) for c in [*range(0x20), *range(0x7F, 0xA0)]]
NOT_TAB_NEWLINE = [c for c in C0_DEL_C1 if c not in "\t\n"]
# Text with no control character (nor a lone surrogate, which is no text at all and which
# pydantic refuses as such): what a caller may send in any text field.
clean_char = st.characters(min_codepoint=0x20, exclude_categories=("Cs",)).filter(
    lambda c: not 0x7F <= ord(c) <= 0x9F
)
clean = st.text(alphabet=clean_char, max_size=40)


def _refusal(model: type[BaseModel], body: dict[str, Any]) -> dict[str, str]:
    """The API's 422 errors for `body` as {field: message}; {} if `model` accepts it."""
    try:
        model.model_validate(body)
    except ValidationError as error:
        out = schemas.validation_error_out(error.errors())
        return {item.field or "": item.message for item in out.errors}
    return {}


def _workload(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": "w", "project": "p", "gpu": 1, **changes}
    return {key: value for key, value in body.items() if value is not None}


def _node(**changes: Any) -> dict[str, Any]:
    return {"name": "n", "gpu_count": 1, **changes}


TEXT_FIELDS: list[tuple[str, type[BaseModel], Any, str, bool]] = [
    # id, model, body from one text, the field the error names, tab and newline allowed
    (
        "command argument",
        schemas.WorkloadIn,
        lambda t: _workload(command=["x", t]),
        "command.1",
        True,
    ),
    ("env value", schemas.WorkloadIn, lambda t: _workload(env={"V": t}), "env.V", True),
    ("working_dir", schemas.WorkloadIn, lambda t: _workload(working_dir=t), "working_dir", False),
    ("node label value", schemas.NodeIn, lambda t: _node(labels={"zone": t}), "labels.zone", False),
    ("gpu_model", schemas.NodeIn, lambda t: _node(gpu_model=t), "gpu_model", False),
    (
        "device uuid",
        schemas.NodeIn,
        lambda t: _node(devices=[{"index": 0, "memory_mib": 1, "uuid": t}]),
        "devices.0.uuid",
        False,
    ),
    ("token label", schemas.TokenIn, lambda t: {"label": t}, "label", False),
    ("login token", schemas.LoginIn, lambda t: {"token": t}, "token", False),
]


@pytest.mark.parametrize(
    ("model", "body", "field", "script"),
    [case[1:] for case in TEXT_FIELDS],
    ids=[case[0] for case in TEXT_FIELDS],
)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_control_character_is_refused_naming_the_field_and_the_character(
    model: type[BaseModel], body: Any, field: str, script: bool, data: st.DataObject
) -> None:
    before, after = data.draw(clean), data.draw(clean)
    control = data.draw(st.sampled_from(NOT_TAB_NEWLINE if script else C0_DEL_C1))
    text = (before + control + after)[:60] or control
    refused = _refusal(model, body(text))
    assert field in refused, refused
    first = next(c for c in text if c in C0_DEL_C1 and (not script or c not in "\t\n"))
    assert f"U+{ord(first):04X} at position {text.index(first)}" in refused[field]
    assert "remove it" in refused[field]


@pytest.mark.parametrize(
    ("model", "body", "field", "script"),
    [case[1:] for case in TEXT_FIELDS],
    ids=[case[0] for case in TEXT_FIELDS],
)
@settings(max_examples=60, deadline=None)
@given(
    text=st.text(alphabet=st.one_of(clean_char, st.sampled_from("\t\n")), min_size=1, max_size=60)
)
def test_clean_text_is_accepted_and_tab_newline_only_in_scripts(
    model: type[BaseModel], body: Any, field: str, script: bool, text: str
) -> None:
    refused = _refusal(model, body(text))
    if script or not ("\t" in text or "\n" in text):
        assert refused == {}
    else:
        assert field in refused and "U+000" in refused[field], refused


def _env_of_size(total: int) -> dict[str, str]:
    """Variables V000, V001, ... whose names and values add up to `total` characters."""
    env, left = {}, total
    while left > 0:
        value = min(limits.ENV_VALUE_MAX, left - 4)
        env[f"V{len(env):03d}"] = "x" * value
        left -= 4 + value
    return env


def _command_of_size(total: int) -> list[str]:
    whole, rest = divmod(total, limits.COMMAND_ARG_MAX)
    return ["x" * limits.COMMAND_ARG_MAX] * whole + (["x" * rest] if rest else [])


LIMITS: list[tuple[str, type[BaseModel], Any, int, str]] = [
    # id, model, body with a size of n, the limit (docs/security.md#limits), the field refused
    ("name", schemas.ProjectIn, lambda n: {"name": "n" * n}, limits.NAME_MAX, "name"),
    (
        "argument",
        schemas.WorkloadIn,
        lambda n: _workload(command=["x" * n]),
        limits.COMMAND_ARG_MAX,
        "command.0",
    ),
    (
        "arguments",
        schemas.WorkloadIn,
        lambda n: _workload(command=["x"] * n),
        limits.COMMAND_MAX_ARGS,
        "command",
    ),
    (
        "command size",
        schemas.WorkloadIn,
        lambda n: _workload(command=_command_of_size(n)),
        limits.COMMAND_TOTAL_MAX,
        "command",
    ),
    (
        "env value",
        schemas.WorkloadIn,
        lambda n: _workload(env={"V": "x" * n}),
        limits.ENV_VALUE_MAX,
        "env.V",
    ),
    (
        "env name",
        schemas.WorkloadIn,
        lambda n: _workload(env={"V" * n: ""}),
        limits.ENV_KEY_MAX,
        "env.<key>",
    ),
    (
        "env variables",
        schemas.WorkloadIn,
        lambda n: _workload(env={f"V{i}": "" for i in range(n)}),
        limits.ENV_MAX_VARS,
        "env",
    ),
    (
        "env size",
        schemas.WorkloadIn,
        lambda n: _workload(env=_env_of_size(n)),
        limits.ENV_TOTAL_MAX,
        "env",
    ),
    (
        "working_dir",
        schemas.WorkloadIn,
        lambda n: _workload(working_dir="/" * n),
        limits.WORKING_DIR_MAX,
        "working_dir",
    ),
    ("image", schemas.WorkloadIn, lambda n: _workload(image="i" * n), limits.IMAGE_MAX, "image"),
    (
        "gpu_memory text",
        schemas.WorkloadIn,
        lambda n: _workload(gpu=None, gpu_memory="8".rjust(n, "0")),
        limits.QUANTITY_MAX,
        "gpu_memory",
    ),
    (
        "memory text",
        schemas.WorkloadIn,
        lambda n: _workload(memory="8".rjust(n, "0")),
        limits.QUANTITY_MAX,
        "memory",
    ),
    (
        "gpu text",
        schemas.WorkloadIn,
        lambda n: _workload(gpu="1".rjust(n, "0")),
        limits.QUANTITY_MAX,
        "gpu",
    ),
    (
        "selector labels",
        schemas.WorkloadIn,
        lambda n: _workload(node_selector={f"k{i}": ["v"] for i in range(n)}),
        limits.SELECTOR_KEYS_MAX,
        "node_selector",
    ),
    (
        "selector values",
        schemas.WorkloadIn,
        lambda n: _workload(node_selector={"k": [f"v{i}" for i in range(n)]}),
        limits.SELECTOR_VALUES_MAX,
        "node_selector.k",
    ),
    (
        "selector key",
        schemas.WorkloadIn,
        lambda n: _workload(node_selector={"p" * (n - 64) + "/" + "n" * 63: ["v"]}),
        limits.LABEL_KEY_MAX,
        "node_selector.<key>",
    ),
    (
        "selector value",
        schemas.WorkloadIn,
        lambda n: _workload(node_selector={"k": ["v" * n]}),
        limits.LABEL_VALUE_MAX,
        "node_selector.k.0",
    ),
    (
        "node labels",
        schemas.NodeIn,
        lambda n: _node(labels={f"l{i}": "v" for i in range(n)}),
        limits.LABELS_MAX,
        "labels",
    ),
    (
        "node label value",
        schemas.NodeIn,
        lambda n: _node(labels={"l": "v" * n}),
        limits.LABEL_VALUE_MAX,
        "labels.l",
    ),
    (
        "gpu_model",
        schemas.NodeIn,
        lambda n: _node(gpu_model="m" * n),
        limits.MODEL_MAX,
        "gpu_model",
    ),
    (
        "devices",
        schemas.NodeIn,
        lambda n: _node(
            gpu_count=min(n, 1024), devices=[{"index": i, "memory_mib": 1} for i in range(n)]
        ),
        limits.DEVICES_MAX,
        "devices",
    ),
    ("token label", schemas.TokenIn, lambda n: {"label": "l" * n}, limits.TOKEN_LABEL_MAX, "label"),
    ("login token", schemas.LoginIn, lambda n: {"token": "t" * n}, limits.TOKEN_MAX, "token"),
    (
        "user projects",
        schemas.UserIn,
        lambda n: {"name": "u", "projects": [f"p{i}" for i in range(n)]},
        limits.NAME_LIST_MAX,
        "projects",
    ),
    (
        "quota memory text",
        schemas.ProjectIn,
        lambda n: {"name": "p", "quota": {"memory": "8".rjust(n, "0")}},
        limits.QUANTITY_MAX,
        "quota.memory",
    ),
]


@pytest.mark.parametrize(
    ("model", "body", "limit", "field"),
    [case[1:] for case in LIMITS],
    ids=[case[0] for case in LIMITS],
)
def test_a_size_at_the_limit_is_accepted_and_one_more_refused(
    model: type[BaseModel], body: Any, limit: int, field: str
) -> None:
    assert _refusal(model, body(limit)) == {}
    refused = _refusal(model, body(limit + 1))
    if field.endswith(".<key>"):
        prefix = field.removesuffix("<key>")
        assert [f for f in refused if f.startswith(prefix) and f.endswith("[key]")], refused
    else:
        assert field in refused, refused
    assert str(limit) in " ".join(refused.values()) or "pattern" in " ".join(refused.values())


@given(name=st.from_regex(schemas.NAME_PATTERN, fullmatch=True))
def test_every_name_the_pattern_allows_is_accepted(name: str) -> None:
    valid = len(name) <= limits.NAME_MAX
    assert (_refusal(schemas.ProjectIn, {"name": name}) == {}) == valid


@given(name=st.text(alphabet=st.sampled_from("az09._-A \x00é/"), max_size=70))
def test_a_name_is_accepted_exactly_when_it_matches_the_pattern(name: str) -> None:
    matches = re.fullmatch(schemas.NAME_PATTERN, name) is not None and "\n" not in name
    refused = _refusal(schemas.WorkloadIn, _workload(name=name))
    assert (refused == {}) == matches, refused
    if not matches:
        assert "name" in refused


@given(milli=st.integers(1, 999) | st.integers(1, 2_000_000).map(lambda n: n * 1000))
def test_a_gpu_amount_round_trips_through_its_text(milli: int) -> None:
    text = units.format_gpu_milli(milli)
    for written in (text, float(text) if milli < 1000 else int(text)):
        workload = schemas.WorkloadIn.model_validate(_workload(gpu=written))
        assert workload.gpu_amount is not None and workload.gpu_amount.milli == milli
    quota = schemas.AmountsIn.model_validate({"gpu": text})
    assert quota.gpu_milli == milli


UNIT_MIB = {"": 1, "M": 1, "Mi": 1, "MiB": 1, "G": 1024, "Gi": 1024, "GiB": 1024, "T": 1024**2}


@given(
    number=st.integers(1, units.MAX_AMOUNT),
    unit=st.sampled_from(sorted(UNIT_MIB)),
    lower=st.booleans(),
)
def test_a_memory_amount_round_trips_through_its_text(number: int, unit: str, lower: bool) -> None:
    """`500G`, `16Gi`, `512M` or MiB: parsed to MiB, any letter case, refused above the most
    the database stores; what is accepted is written back (as gpupool shows it) to the same."""
    text = f"{number}{unit.lower() if lower else unit}"
    mib = number * UNIT_MIB[unit]
    refused = _refusal(schemas.WorkloadIn, _workload(memory=text, gpu=None, gpu_memory=text))
    if mib > units.MAX_AMOUNT:
        assert set(refused) == {"gpu_memory", "memory"}
        assert "at most 2147483647 MiB" in refused["memory"]
        return
    assert refused == {}
    workload = schemas.WorkloadIn.model_validate(_workload(memory=text))
    assert workload.memory_mib == mib
    shown = f"{mib // 1024}G" if mib % 1024 == 0 else f"{mib}M"
    assert units.parse_memory_mib(shown) == mib


@pytest.mark.parametrize(
    ("text", "mib"), [("0.5G", 512), ("500G", 512_000), ("16Gi", 16_384), ("1.5T", 1_572_864)]
)
def test_the_documented_quantities_parse(text: str, mib: int) -> None:
    assert schemas.AmountsIn.model_validate({"memory": text}).memory_mib == mib
