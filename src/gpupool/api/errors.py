"""API bodies the server answers with about itself: errors (and the 422 body built from
pydantic's errors) and health."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupool.api.fields import _Out


class ErrorDetail(_Out):
    field: str | None
    message: str


class ErrorOut(_Out):
    detail: str
    errors: list[ErrorDetail] = []


class Health(_Out):
    status: str
    version: str
    task_isolation: str | None = None
    """Local executor: `bubblewrap` (tasks sandboxed; a `working_dir` must lie under a task
    root) or `none`; None for other executors."""


def validation_error_out(items: Iterable[Mapping[str, Any]]) -> ErrorOut:
    """Pydantic's errors as the API's 422 body: one `field: message` per problem. The server
    answers with it and the CLI builds the same text when it checks input before sending."""
    details = []
    for item in items:
        location = [str(part) for part in item.get("loc", ()) if part != "body"]
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        details.append(ErrorDetail(field=".".join(location) or None, message=message))
    summary = "; ".join(f"{d.field}: {d.message}" if d.field else d.message for d in details)
    return ErrorOut(detail=f"invalid request: {summary}", errors=details)
