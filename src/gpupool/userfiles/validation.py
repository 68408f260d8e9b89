"""Check plain YAML data against a pydantic model and explain what is wrong in a user's words.

Every problem pydantic finds is reported at once (in `UserFileError.also`), each with its line,
its key path and a message that says what was expected: an unknown key with the likely one it
was meant to be and the keys allowed there, a missing key, a number where text was expected.
An unknown key comes before the "missing" it usually causes (a misspelt `gpu:` for `gpus:`);
otherwise problems come in line order.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import pydantic

from gpupool.userfiles.errors import KeyPath, UserFileError, format_key_path
from gpupool.userfiles.yamlfile import YamlDocument, yaml_kind

__all__ = ["show_input", "unknown_key", "unknown_name", "validate"]

M = TypeVar("M", bound=pydantic.BaseModel)


def validate(
    document: YamlDocument,
    model: type[M],
    expected: str,
    hints: Mapping[KeyPath, str] | None = None,
    wrong: Mapping[KeyPath, str] | None = None,
) -> M:
    """`document`'s data as `model`; `UserFileError` naming every problem otherwise.

    `expected` says what the file as a whole is (`a cluster file is a mapping with ...`), for a
    file that is not a mapping at all; `hints` add a fix to a missing key's message by its path
    (`{("version",): "add `version: 1` at the top"}`); `wrong` replaces the message for any
    other problem with the value at a path (`{got}` in it is what the file has).
    """
    data = document.data
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {yaml_kind(data)}"
        raise UserFileError(document.path, 1, "", f"{expected} (got {got})")
    try:
        return model.model_validate(data)
    except pydantic.ValidationError as exc:
        raise _schema_error(exc, document, model, hints or {}, wrong or {}) from None


def _schema_error(
    exc: pydantic.ValidationError,
    document: YamlDocument,
    model: type[pydantic.BaseModel],
    hints: Mapping[KeyPath, str],
    wrong: Mapping[KeyPath, str],
) -> UserFileError:
    errors = exc.errors(include_url=False)
    unknown_lines: dict[KeyPath, int] = {}
    for error in errors:
        if error["type"] == "extra_forbidden":
            loc = tuple(error["loc"])
            at = document.lines.of(loc) or 0
            unknown_lines[loc[:-1]] = min(unknown_lines.get(loc[:-1], at), at)
    ranked: list[tuple[int, int, UserFileError]] = []
    for error in errors:
        loc = tuple(error["loc"])
        key_path, message = _explain(error, loc, model, hints, wrong)
        line = document.lines.of(loc)
        rank = (line or 0, 0)
        if error["type"] == "missing" and loc[:-1] in unknown_lines:
            rank = (unknown_lines[loc[:-1]], 1)  # after the misspelt key that explains it
        ranked.append((*rank, UserFileError(document.path, line, key_path, message)))
    ranked.sort(key=lambda item: item[:2])
    first, *rest = (problem for _, _, problem in ranked)
    return UserFileError(first.path, first.line, first.key_path, first.message, tuple(rest))


def show_input(value: object) -> str:
    """A value as the user wrote it: `'text'`, `2`, `true`, `nothing`, `a mapping`."""
    if value is None:
        return "nothing"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def _explain(
    error: Mapping[str, Any],
    loc: KeyPath,
    model: type[pydantic.BaseModel],
    hints: Mapping[KeyPath, str],
    wrong: Mapping[KeyPath, str],
) -> tuple[str, str]:
    """Key path and a plain-words message for one pydantic error."""
    kind = error["type"]
    ctx = error.get("ctx") or {}
    value = error.get("input")
    got = show_input(value)
    path = format_key_path(loc)
    if kind == "extra_forbidden":
        return path, unknown_key(str(loc[-1]), _allowed_keys(model, loc[:-1]))
    if kind == "missing":
        hint = f" ({hints[loc]})" if loc in hints else ""
        return format_key_path(loc[:-1]), f"missing required key `{loc[-1]}`{hint}"
    if loc in wrong:
        return path, wrong[loc].format(got=got)
    if kind == "value_error":
        return path, str(ctx.get("error", error["msg"]))
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return path, f"expected a whole number (got {got})"
    if kind in ("greater_than_equal", "greater_than"):
        bound = ctx.get("ge", ctx.get("gt"))
        return path, f"must be at least {bound} (got {got})"
    if kind == "string_type":
        hint = f"; quote it if it is a name: '{value}'" if isinstance(value, int | float) else ""
        return path, f"expected text (got {got}){hint}"
    if kind == "string_too_short":
        return path, "must not be empty"
    if kind == "too_short":
        least = ctx.get("min_length", 1)
        return path, f"must list at least {least} item(s) (got {ctx.get('actual_length', 0)})"
    if kind == "bool_type":
        return path, f"expected true or false (got {got})"
    if kind == "literal_error":
        return path, f"must be {ctx.get('expected', '?')} (got {got})"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        return path, f"expected a mapping of keys like `{{key: value}}` (got {got})"
    if kind == "list_type":
        none = "; write [] for none" if value is None else ""
        return path, f"expected a list like `[a, b]` (got {got}{none})"
    return path, f"{error['msg']} (got {got})"


def unknown_key(key: str, allowed: Sequence[str]) -> str:
    """`unknown key `gpu`; did you mean `gpus`? (allowed here: name, gpus, ...)`."""
    message = f"unknown key `{key}`"
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        message += f"; did you mean `{close[0]}`?"
    if allowed:
        message += f" (allowed here: {', '.join(allowed)})"
    return message


def unknown_name(kind: str, name: str, known: Iterable[str]) -> str:
    """`unknown project `team-c`; did you mean `team-a`? (known projects: ...)`."""
    names = sorted(known)
    message = f"unknown {kind} `{name}`"
    close = difflib.get_close_matches(name, names, n=1)
    if close:
        message += f"; did you mean `{close[0]}`?"
    if not names:
        return message + f" (no {kind}s are defined)"
    shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
    return message + f" (known {kind}s: {shown})"


def _allowed_keys(root: type[pydantic.BaseModel], loc: KeyPath) -> list[str]:
    """The keys the schema allows at `loc`, found by walking the models' field annotations."""
    model: Any = root
    annotation: Any = None
    for part in loc:
        if annotation is None:
            if not (isinstance(model, type) and issubclass(model, pydantic.BaseModel)):
                return []
            field_info = model.model_fields.get(str(part))
            if field_info is None:
                return []
            annotation = field_info.annotation
        else:
            annotation = _element(annotation)
        model, annotation = _as_model(annotation)
    if isinstance(model, type) and issubclass(model, pydantic.BaseModel):
        return list(model.model_fields)
    return []


def _strip_optional(annotation: Any) -> Any:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        return options[0] if len(options) == 1 else annotation
    return annotation


def _element(annotation: Any) -> Any:
    annotation = _strip_optional(annotation)
    args = typing.get_args(annotation)
    return _strip_optional(args[-1]) if args else None


def _as_model(annotation: Any) -> tuple[Any, Any]:
    """(model, None) when `annotation` is a model, else (None, annotation) to descend into."""
    annotation = _strip_optional(annotation)
    if isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel):
        return annotation, None
    return None, annotation
