"""One way to read a user's file: YAML with line numbers -> pydantic model, one error type.

`read_text` reads a file (or says why it cannot be read), `read_yaml` turns YAML text into
plain data with the line of every key, `validate` checks that data against a pydantic model,
and every problem on the way is a `UserFileError` that names the file, the line and the key and
says how to fix it. Scenario files (`gpupool what-if`), `gpupool simulate`'s cluster and
workload files, the openb trace's CSV files and `gpupool submit -f` workload files all read
through here; `models` holds the pydantic models the file formats share (nodes, projects,
quotas). This package sits at the edge: it imports the core's model, never a driver.
"""

from gpupool.userfiles.errors import KeyPath, UserFileError, format_key_path
from gpupool.userfiles.validation import show_input, unknown_key, unknown_name, validate
from gpupool.userfiles.yamlfile import (
    MAX_DEPTH,
    MAX_VALUES,
    Lines,
    YamlDocument,
    read_text,
    read_yaml,
    yaml_kind,
)

__all__ = [
    "MAX_DEPTH",
    "MAX_VALUES",
    "KeyPath",
    "Lines",
    "UserFileError",
    "YamlDocument",
    "format_key_path",
    "read_text",
    "read_yaml",
    "show_input",
    "unknown_key",
    "unknown_name",
    "validate",
    "yaml_kind",
]
