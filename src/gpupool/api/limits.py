"""The API's input limits and its one rule for text: no control characters.

Every limit here is listed in docs/security.md#limits; change both together. The server refuses
anything above them with a 4xx that names the field and the limit, before it stores anything:
a NUL byte in a command or a 10 MB environment would otherwise be accepted and then fail, or slow
down, every scheduling cycle.
"""

from __future__ import annotations

import re

MAX_BODY_BYTES = 1 << 20
"""A request body (JSON) above this is answered 413 before it is parsed."""

NAME_MAX = 63
COMMAND_MAX_ARGS = 256
COMMAND_ARG_MAX = 4096
COMMAND_TOTAL_MAX = 64 * 1024
"""Characters of all the arguments together."""
ENV_MAX_VARS = 256
ENV_KEY_MAX = 128
ENV_VALUE_MAX = 8192
ENV_TOTAL_MAX = 64 * 1024
"""Characters of every name and value together."""
LABELS_MAX = 64
LABEL_KEY_MAX = 317
LABEL_VALUE_MAX = 63
SELECTOR_KEYS_MAX = 32
SELECTOR_VALUES_MAX = 64
WORKING_DIR_MAX = 1024
IMAGE_MAX = 512
QUANTITY_MAX = 32
"""A GPU, GPU-memory or memory amount written as text (`0.5`, `80G`)."""
MODEL_MAX = 128
"""A GPU model or device UUID."""
TOKEN_LABEL_MAX = 100
TOKEN_MAX = 200
TOKEN_LIFETIME_MIN_S = 60
TOKEN_LIFETIME_MAX_S = 365 * 24 * 3600
"""A token given an expiry lives at least a minute and at most a year (leave the expiry out
for one that never expires)."""
NAME_LIST_MAX = 1000
"""Projects given in one request (a user's projects)."""
DEVICES_MAX = 1024

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
"""C0 (U+0000-U+001F), DEL (U+007F) and C1 (U+0080-U+009F)."""
_CONTROL_BUT_TAB_NEWLINE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""The same but tab and newline, which a command's inline script (`python -c`) needs."""


def _refuse(value: str, index: int, allowed: str) -> ValueError:
    return ValueError(
        f"contains the control character U+{ord(value[index]):04X} at position {index}: "
        f"remove it (no control characters are allowed{allowed})"
    )


def plain_text(value: str) -> str:
    """`value` if it has no control character, else `ValueError` saying which and where."""
    found = _CONTROL.search(value)
    if found is not None:
        raise _refuse(value, found.start(), "")
    return value


def script_text(value: str) -> str:
    """Like `plain_text` but tab and newline pass: for command arguments and env values."""
    found = _CONTROL_BUT_TAB_NEWLINE.search(value)
    if found is not None:
        raise _refuse(value, found.start(), " but tab and newline")
    return value


def command_size(command: list[str]) -> list[str]:
    total = sum(len(argument) for argument in command)
    if total > COMMAND_TOTAL_MAX:
        raise ValueError(
            f"the command's arguments add up to {total} characters, above the limit of "
            f"{COMMAND_TOTAL_MAX}: put long scripts or data in a file under working_dir and "
            "pass its path"
        )
    return command


def env_size(env: dict[str, str]) -> dict[str, str]:
    total = sum(len(key) + len(value) for key, value in env.items())
    if total > ENV_TOTAL_MAX:
        raise ValueError(
            f"the environment adds up to {total} characters (names and values), above the "
            f"limit of {ENV_TOTAL_MAX}: put large settings in a file under working_dir and pass "
            "its path in a variable"
        )
    return env


def quantity_text(value: object) -> object:
    """An amount written as text is short: checked before it is parsed (as a number or text)."""
    if isinstance(value, str) and len(value) > QUANTITY_MAX:
        raise ValueError(
            f"is {len(value)} characters long, above the limit of {QUANTITY_MAX}: write an "
            "amount like 1, 0.5, 8G or 512M"
        )
    return value


def token_lifetime_s(value: int) -> int:
    """A token's `expires_in_s` within the limits, else the limits and the fix."""
    if not TOKEN_LIFETIME_MIN_S <= value <= TOKEN_LIFETIME_MAX_S:
        raise ValueError(
            f"is {value} s: a token may live from {TOKEN_LIFETIME_MIN_S} s to 365 days "
            f"({TOKEN_LIFETIME_MAX_S} s); leave the expiry out for a token that never expires"
        )
    return value
