"""The one reader of user files: YAML with lines, its limits, and schema errors in plain words."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from gpupool.userfiles import (
    MAX_DEPTH,
    MAX_VALUES,
    UserFileError,
    read_text,
    read_yaml,
    validate,
)


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    gpus: int


class File(BaseModel):
    model_config = ConfigDict(extra="forbid")
    version: int
    nodes: list[Node]


def error_of(text: str) -> UserFileError:
    with pytest.raises(UserFileError) as caught:
        validate(read_yaml(text, "f.yaml"), File, "a file is a mapping with version and nodes")
    return caught.value


def test_every_key_and_item_has_its_line() -> None:
    document = read_yaml("version: 1\nnodes:\n  - name: a\n    gpus: 2\n  - {name: b}\n", "f.yaml")
    assert document.data == {"version": 1, "nodes": [{"name": "a", "gpus": 2}, {"name": "b"}]}
    assert document.lines.of(("nodes", 0, "gpus")) == 4
    assert document.lines.of(("nodes", 1)) == 5
    assert document.lines.of(("nodes", 1, "gpus")) == 5  # missing: the line of its mapping
    assert (
        str(document.error(("nodes", 0, "gpus"), "too many")) == "f.yaml:4: nodes[0].gpus: too many"
    )


def test_a_key_written_twice_is_refused_with_both_lines() -> None:
    with pytest.raises(UserFileError) as caught:
        read_yaml("version: 1\nnodes: []\nversion: 2\n", "f.yaml")
    assert str(caught.value) == (
        "f.yaml:3: version: key `version` appears twice in this mapping (first on line 1); keep one"
    )


def test_merge_keys_and_aliases_are_expanded() -> None:
    text = "base: &b {gpus: 2}\nnodes:\n  - {<<: *b, name: a}\n  - *b\n"
    assert read_yaml(text, "f.yaml").data == {
        "base": {"gpus": 2},
        "nodes": [{"gpus": 2, "name": "a"}, {"gpus": 2}],
    }


def test_aliases_cannot_expand_without_bound() -> None:
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    with pytest.raises(UserFileError) as caught:
        read_yaml("\n".join(lines) + "\n", "bomb.yaml")
    assert f"expands to too many values (more than {MAX_VALUES:,})" in caught.value.message
    assert caught.value.line is not None


def test_nesting_is_bounded() -> None:
    deep = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
    with pytest.raises(UserFileError) as caught:
        read_yaml(f"nodes: {deep}\n", "deep.yaml")
    assert caught.value.line == 1
    assert f"nested too deeply; at most {MAX_DEPTH} levels" in caught.value.message
    with pytest.raises(UserFileError, match="nested too deeply"):
        read_yaml("[" * 5000 + "]" * 5000, "deeper.yaml")  # deeper than PyYAML's own recursion


def test_a_syntax_error_gives_the_line_and_where_the_construct_began() -> None:
    with pytest.raises(UserFileError) as caught:
        read_yaml("version: 1\nnodes: [\n  a,\nb: 2\n", "f.yaml")
    assert caught.value.line == 5  # where the parser gave up: the end of the file
    assert caught.value.message.startswith("YAML syntax error: while parsing a flow sequence")
    assert "(the construct started on line 2)" in caught.value.message


def test_two_documents_are_one_too_many() -> None:
    with pytest.raises(UserFileError) as caught:
        read_yaml("version: 1\n---\nversion: 2\n", "f.yaml")
    assert "expected a single document" in caught.value.message
    assert "remove the `---`" in caught.value.message


def test_an_unknown_key_comes_before_the_missing_one_it_explains() -> None:
    error = error_of("version: 1\nnodes:\n  - name: a\n    gpu: 2\n")
    assert [str(e) for e in error.all] == [
        "f.yaml:4: nodes[0].gpu: unknown key `gpu`; did you mean `gpus`? "
        "(allowed here: name, gpus)",
        "f.yaml:3: nodes[0]: missing required key `gpus`",
    ]
    assert error.explain() == "\n".join(str(e) for e in error.all)


def test_other_problems_come_in_line_order() -> None:
    error = error_of("nodes:\n  - {name: a, gpus: two}\nversion: x\n")
    assert [(e.line, e.key_path) for e in error.all] == [(2, "nodes[0].gpus"), (3, "version")]
    assert error.message == "expected a whole number (got 'two')"


@pytest.mark.parametrize(
    ("text", "got"), [("", "an empty file"), ("- 1\n", "a list"), ("3\n", "a number")]
)
def test_a_file_that_is_not_a_mapping(text: str, got: str) -> None:
    assert (
        str(error_of(text)) == f"f.yaml:1: a file is a mapping with version and nodes (got {got})"
    )


def test_hints_for_a_missing_key_and_messages_for_a_wrong_value() -> None:
    document = read_yaml("nodes: []\n", "f.yaml")
    with pytest.raises(UserFileError) as caught:
        validate(document, File, "-", hints={("version",): "add `version: 1` at the top"})
    assert caught.value.message == "missing required key `version` (add `version: 1` at the top)"
    document = read_yaml("version: two\nnodes: []\n", "f.yaml")
    with pytest.raises(UserFileError) as caught:
        validate(document, File, "-", wrong={("version",): "only version 1 (got {got})"})
    assert str(caught.value) == "f.yaml:1: version: only version 1 (got 'two')"


def test_reading_a_file(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("version: 1\n", encoding="utf-8")
    assert read_text(good) == "version: 1\n"
    with pytest.raises(UserFileError) as caught:
        read_text(tmp_path, kind="a cluster file")
    assert str(caught.value) == (
        f"{tmp_path}: cannot read the file: it is a directory, not a cluster file"
    )
    binary = tmp_path / "binary.csv"
    binary.write_bytes(b"a,b\n1,2\n\xff,3\n")
    with pytest.raises(UserFileError) as caught:
        read_text(binary, row_key="row")
    assert (caught.value.line, caught.value.key_path) == (3, "row")
    assert "not UTF-8 text" in caught.value.message and "save the file as UTF-8" in str(
        caught.value
    )
