"""Read a user's file: its text, then YAML with the line of every key and list item.

PyYAML's `safe_load` forgets where things were, so the text is `compose`d into nodes (which
carry `start_mark`), and plain Python data is built from those nodes together with a map from
key path (`("workloads", 2, "gpu")`) to line. A key written twice in one mapping is refused
(`safe_load` would keep the last silently), aliases are expanded within a bound, and every
problem is a `UserFileError` naming the file and line, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml
from yaml.constructor import SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from gpupool.userfiles.errors import KeyPath, UserFileError, format_key_path

__all__ = [
    "MAX_DEPTH",
    "MAX_VALUES",
    "Lines",
    "YamlDocument",
    "read_text",
    "read_yaml",
    "yaml_kind",
]

MAX_VALUES = 200_000
"""Values one YAML file may expand to: aliases are expanded, and this bounds the work a few
nested `*alias`es can ask for."""
MAX_DEPTH = 64
"""Lists and mappings nested in one another; no file of ours needs more than a handful."""


def read_text(path: str | os.PathLike[str], *, kind: str = "file", row_key: str = "") -> str:
    """The UTF-8 text of the file at `path`; `UserFileError` if it cannot be read.

    `kind` names the file in the message for a directory (`a scenario file`); a byte that is not
    UTF-8 is reported on its line, with `row_key` as the key (`row` for a table's rows).
    """
    shown = os.fspath(path)
    try:
        data = Path(shown).read_bytes()
    except FileNotFoundError:
        raise UserFileError(
            shown, None, "", "no such file (cannot read the file); check the path"
        ) from None
    except IsADirectoryError:
        raise UserFileError(
            shown, None, "", f"cannot read the file: it is a directory, not {kind}"
        ) from None
    except OSError as exc:
        raise UserFileError(shown, None, "", f"cannot read the file: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UserFileError(
            shown, line, row_key, f"not UTF-8 text ({exc.reason}); save the file as UTF-8"
        ) from None


class Lines:
    """Line numbers (1-based) of every key and list item, by key path."""

    def __init__(self) -> None:
        self._lines: dict[KeyPath, int] = {}

    def add(self, path: KeyPath, node: Node) -> None:
        self._lines[path] = node.start_mark.line + 1

    def of(self, path: Sequence[str | int]) -> int | None:
        """The line of `path`, or of its nearest ancestor the file has (a missing key's map)."""
        key = tuple(path)
        while key:
            if key in self._lines:
                return self._lines[key]
            key = key[:-1]
        return self._lines.get((), 1)


@dataclass(frozen=True, slots=True)
class YamlDocument:
    """One YAML document as plain data (dicts, lists, scalars), with where each part was."""

    path: str
    data: object
    lines: Lines

    def error(self, loc: Sequence[str | int], message: str) -> UserFileError:
        """A problem with the value at `loc`, on its line."""
        return UserFileError(self.path, self.lines.of(loc), format_key_path(loc), message)


def read_yaml(text: str, path: str) -> YamlDocument:
    """One YAML document from `text`; `path` is only used in messages."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = None if mark is None else mark.line + 1
        what = "; ".join(part for part in (exc.context, exc.problem) if part)
        started = exc.context_mark
        if started is not None and exc.problem_mark is not None and started.line + 1 != line:
            what += f" (the construct started on line {started.line + 1})"
        if "expected a single document" in what:
            what += "; a file holds one YAML document: remove the `---` and what follows it"
        raise UserFileError(path, line, "", f"YAML syntax error: {what}") from None
    except yaml.YAMLError as exc:
        raise UserFileError(path, None, "", f"YAML syntax error: {exc}") from None
    except RecursionError:
        raise UserFileError(
            path, None, "", f"nested too deeply; at most {MAX_DEPTH} levels of lists and mappings"
        ) from None
    lines = Lines()
    if root is None:
        return YamlDocument(path, None, lines)
    lines.add((), root)
    return YamlDocument(path, _Walker(path, lines).build(root, ()), lines)


def yaml_kind(value: object) -> str:
    """What a YAML value is, in a user's words: `list`, `mapping`, `number`, ..."""
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "mapping"
    if isinstance(value, bool):
        return "true/false value"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "text value"
    return type(value).__name__


class _Walker:
    """Builds plain data from composed YAML nodes, recording lines and refusing duplicate keys."""

    def __init__(self, path: str, lines: Lines) -> None:
        self._path = path
        self._lines = lines
        self._constructor = SafeConstructor()
        self._open: set[int] = set()
        self._count = 0

    def _error(self, node: Node, path: KeyPath, message: str) -> UserFileError:
        return UserFileError(self._path, node.start_mark.line + 1, format_key_path(path), message)

    def build(self, node: Node, path: KeyPath) -> object:
        self._count += 1
        if self._count > MAX_VALUES:
            raise self._error(
                node, path, f"the file expands to too many values (more than {MAX_VALUES:,})"
            )
        if isinstance(node, ScalarNode):
            return self._scalar(node, path)
        if id(node) in self._open:
            raise self._error(node, path, "an alias refers to itself (`*name`)")
        if len(self._open) >= MAX_DEPTH:
            raise self._error(
                node, path, f"nested too deeply; at most {MAX_DEPTH} levels of lists and mappings"
            )
        self._open.add(id(node))
        try:
            if isinstance(node, SequenceNode):
                items: list[object] = []
                for index, item in enumerate(node.value):
                    self._lines.add((*path, index), item)
                    items.append(self.build(item, (*path, index)))
                return items
            if isinstance(node, MappingNode):
                return self._mapping(node, path)
        finally:
            self._open.discard(id(node))
        raise self._error(node, path, "unsupported YAML node")

    def _scalar(self, node: ScalarNode, path: KeyPath) -> object:
        try:
            return self._constructor.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self._error(node, path, f"bad value: {exc}") from None

    def _mapping(self, node: MappingNode, path: KeyPath) -> dict[object, object]:
        seen: dict[object, int] = {}
        for key_node, _ in node.value:
            if isinstance(key_node, ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
                key = self._scalar(key_node, path)
                line = key_node.start_mark.line + 1
                if key in seen:
                    raise self._error(
                        key_node,
                        (*path, str(key)),
                        f"key `{key}` appears twice in this mapping (first on line {seen[key]}); "
                        "keep one",
                    )
                seen[key] = line
        try:
            self._constructor.flatten_mapping(node)  # YAML merge keys (`<<: *defaults`)
        except yaml.YAMLError as exc:
            raise self._error(node, path, str(exc)) from None
        result: dict[object, object] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode):
                raise self._error(
                    key_node, path, "a key must be a plain name, not a list or mapping"
                )
            key = self._scalar(key_node, path)
            if not isinstance(key, str | int):
                key = str(key)
            self._lines.add((*path, key), key_node)
            result[key] = self.build(value_node, (*path, key))
        return result
