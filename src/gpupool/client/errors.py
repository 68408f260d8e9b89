"""The errors `GpupoolClient` raises (all `ClientError`s), and the `ApiError` of an error answer."""

from __future__ import annotations

import httpx
from pydantic import ValidationError

from gpupool.api.schemas import ErrorDetail, ErrorOut, WorkloadStatus


class ClientError(Exception):
    """Base of the errors this client raises."""


class ApiError(ClientError):
    """The server answered with an error status.

    `status` is the HTTP status (401 no or unknown token, 403 not allowed, 404 not found, 409
    conflict: a name taken or a state that does not allow it, 422 invalid input), `detail` the
    server's sentence saying what was wrong and how to fix it, `errors` one `ErrorDetail`
    (`field`, `message`) per invalid field. `str(error)` is the detail and the field errors it
    does not already say.
    An answer this client cannot read also raises it, with the status of that answer.
    """

    def __init__(self, status: int, detail: str, errors: list[ErrorDetail] | None = None) -> None:
        self.status = status
        self.detail = detail
        self.errors = list(errors or [])
        lines = [detail] + [
            f"{e.field}: {e.message}" if e.field else e.message
            for e in errors or []
            if e.message not in detail  # a field error the detail already says, said once
        ]
        super().__init__("\n  ".join(lines))


class ServerUnreachable(ClientError):  # noqa: N818 - the name says it all
    """No answer from the server: nothing listens there, a network error or a timeout."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(
            f"cannot reach the gpupool server at {url} ({reason}); is `gpupool server` running "
            "there? Check the address with `gpupool config show`"
        )


class WaitTimeout(ClientError, TimeoutError):  # noqa: N818 - a TimeoutError, named like one
    """`GpupoolClient.wait` gave up: the workload did not reach a wanted status in time."""

    def __init__(self, project: str, name: str, status: WorkloadStatus, timeout_s: float) -> None:
        self.project = project
        self.name = name
        self.status = status
        """The last status seen."""
        self.timeout_s = timeout_s
        super().__init__(f"workload {project}/{name} is still {status} after {timeout_s:g} s")


def error_from_response(response: httpx.Response) -> ApiError:
    """The `ApiError` for an error answer: `ErrorOut`, FastAPI's default bodies, or plain text."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        try:
            out = ErrorOut.model_validate(body)
            return ApiError(status, out.detail, out.errors)
        except ValidationError:
            pass
        items = body.get("detail")
        if isinstance(items, list):  # FastAPI's default validation body
            errors = [
                ErrorDetail(
                    field=".".join(str(p) for p in item.get("loc", [])[1:]) or None,
                    message=str(item.get("msg", item)),
                )
                for item in items
                if isinstance(item, dict)
            ]
            return ApiError(status, "the request is not valid", errors)
    text = " ".join(response.text.split())[:200] or response.reason_phrase
    return ApiError(status, f"HTTP {status}: {text}")
