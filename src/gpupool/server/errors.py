"""Errors the API answers with: a status, a sentence that says what was wrong and how to fix it,
and where possible the field."""

from __future__ import annotations

from typing import Any

from gpupool.api.schemas import ErrorOut

ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description}
    for status, description in (
        (401, "No token, or one the server does not know"),
        (403, "Not allowed for this user"),
        (404, "No such resource"),
        (409, "Conflicts with the current state (a name taken, a state that does not allow it)"),
        (413, "Request body above the server's limit of 1 MiB (docs/security.md#limits)"),
        (422, "Invalid input: each field error names the field and the fix"),
        (503, "The database is unavailable; nothing was changed: retry after Retry-After"),
    )
}
"""What every API route may answer besides success, for the OpenAPI schema."""


class ApiError(Exception):
    def __init__(self, status: int, detail: str, field: str | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field


def not_found(what: str, name: str, hint: str) -> ApiError:
    return ApiError(404, f"{what} {name!r} not found: {hint}")


def forbidden(detail: str) -> ApiError:
    return ApiError(403, detail)


def conflict(detail: str, field: str | None = None) -> ApiError:
    return ApiError(409, detail, field)


def invalid(detail: str, field: str | None = None) -> ApiError:
    return ApiError(422, detail, field)
