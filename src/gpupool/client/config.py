"""The CLI's config file: the server URL, the token and the default project.

The file is JSON at `$GPUPOOL_CONFIG`, else `~/.config/gpupool/config.json`, written with mode
0600 because it holds a token. The environment variables `GPUPOOL_SERVER`, `GPUPOOL_TOKEN` and
`GPUPOOL_PROJECT` override the file's values (an empty variable counts as unset).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from urllib.parse import urlsplit

from gpupool.api.schemas import NAME_PATTERN

__all__ = [
    "CONFIG_ENV",
    "ENV_OVERRIDES",
    "ClientConfig",
    "ConfigError",
    "NotLoggedInError",
    "check_project_name",
    "config_path",
    "effective_config",
    "normalize_server",
    "read_config",
    "write_config",
]

CONFIG_ENV = "GPUPOOL_CONFIG"
ENV_OVERRIDES = {"server": "GPUPOOL_SERVER", "token": "GPUPOOL_TOKEN", "project": "GPUPOOL_PROJECT"}
LOGIN_HINT = "run `gpupool login --server URL --token TOKEN`"


class ConfigError(Exception):
    """The config file cannot be read or written, or a value in it is not valid."""


class NotLoggedInError(ConfigError):
    """No server or no token is configured."""


@dataclass(frozen=True, slots=True)
class ClientConfig:
    """What the CLI needs to reach the server; any field may be missing."""

    server: str | None = None
    token: str | None = None
    project: str | None = None

    def login(self) -> tuple[str, str]:
        """The server URL and token, or `NotLoggedInError` saying how to log in."""
        if not self.server or not self.token:
            missing = "no server" if not self.server else "no token"
            raise NotLoggedInError(f"not logged in ({missing} configured): {LOGIN_HINT}")
        return self.server, self.token


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    """`$GPUPOOL_CONFIG`, else `~/.config/gpupool/config.json`."""
    env = os.environ if environ is None else environ
    chosen = env.get(CONFIG_ENV)
    if chosen:
        return Path(chosen).expanduser()
    return Path.home() / ".config" / "gpupool" / "config.json"


def read_config(path: Path) -> ClientConfig:
    """The file's values alone; a missing file is an empty config."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ClientConfig()
    except OSError as error:
        raise ConfigError(f"cannot read the config file {path}: {error.strerror}") from None
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as error:
        raise ConfigError(
            f"the config file {path} is not valid JSON (line {error.lineno}: {error.msg}); "
            f"fix it or delete it and {LOGIN_HINT}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"the config file {path} must hold a JSON object")
    values: dict[str, str | None] = {}
    for field in fields(ClientConfig):
        value = data.get(field.name)
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"the config file {path}: `{field.name}` must be a string")
        values[field.name] = value or None
    return ClientConfig(**values)


def write_config(config: ClientConfig, path: Path) -> None:
    """Write `config` to `path` with mode 0600, atomically (a temporary file, then a rename)."""
    data = {f.name: getattr(config, f.name) for f in fields(ClientConfig)}
    text = json.dumps({k: v for k, v in data.items() if v is not None}, indent=2) + "\n"
    temporary = path.with_name(f".{path.name}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            os.fchmod(file.fileno(), 0o600)
            file.write(text)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise ConfigError(f"cannot write the config file {path}: {error.strerror}") from None


def effective_config(environ: Mapping[str, str] | None = None) -> ClientConfig:
    """The file's values with the `GPUPOOL_*` environment variables applied on top."""
    env = os.environ if environ is None else environ
    config = read_config(config_path(env))
    overrides = {key: env[var] for key, var in ENV_OVERRIDES.items() if env.get(var)}
    if "server" in overrides:
        overrides["server"] = normalize_server(overrides["server"])
    return replace(config, **overrides)


def normalize_server(url: str) -> str:
    """`url` without a trailing slash, or `ConfigError` unless it is an http(s) URL."""
    text = url.strip().rstrip("/")
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"the server must be a URL like http://127.0.0.1:8000 (got {url!r})")
    return text


def check_project_name(name: str) -> str:
    """`name` if it can be a project name, else `ConfigError` saying what a name looks like."""
    if len(name) > 63 or not re.fullmatch(NAME_PATTERN, name):
        raise ConfigError(
            f"{name!r} is not a project name: lower-case letters, digits, '.', '_' and '-', "
            "starting and ending with a letter or digit"
        )
    return name
