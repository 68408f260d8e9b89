"""`ApiSession`, what every `GpupoolClient` call goes through: the connection, one request, and
reading its answer into a model (or raising the `ClientError` that says why not)."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from gpupool import __version__
from gpupool.client.config import effective_config
from gpupool.client.errors import ApiError, ServerUnreachable, error_from_response

M = TypeVar("M", bound=BaseModel)
Params = dict[str, str | int | float | list[str] | None]


def _body(model: BaseModel) -> Any:
    """The JSON body of a request model: only the fields that were set (PATCH semantics)."""
    return model.model_dump(mode="json", exclude_unset=True)


class ApiSession:
    """The plumbing of `GpupoolClient` (its base class): see there for the arguments."""

    def __init__(
        self,
        base_url: str,
        token: str | None,
        timeout_s: float = 30,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        headers = {"User-Agent": f"gpupool-cli/{__version__}", "Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=timeout_s, transport=transport
        )

    @classmethod
    def from_config(
        cls,
        environ: Mapping[str, str] | None = None,
        timeout_s: float = 30,
        *,
        transport: httpx.BaseTransport | None = None,
    ) -> Self:
        """A client for the server and token the CLI uses: the config file (`$GPUPOOL_CONFIG`,
        else ~/.config/gpupool/config.json) with `GPUPOOL_SERVER` and `GPUPOOL_TOKEN` on top.
        `environ` replaces `os.environ`. Raises `NotLoggedInError` (a `ConfigError`) when no
        server or no token is configured, `ConfigError` when the file cannot be read."""
        server, token = effective_config(environ).login()
        return cls(server, token, timeout_s, transport=transport)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections; the client cannot be used afterwards."""
        self._http.close()

    # -- plumbing ---------------------------------------------------------------------------

    def _request(
        self, method: str, path: str, *, params: Params | None = None, json: Any = None
    ) -> httpx.Response:
        query = {k: v for k, v in (params or {}).items() if v is not None}
        try:
            response = self._http.request(method, path, params=query, json=json)
        except httpx.TimeoutException:
            raise ServerUnreachable(
                self.base_url, f"no answer within {self.timeout_s:g} s"
            ) from None
        except httpx.TransportError as error:
            raise ServerUnreachable(self.base_url, str(error) or type(error).__name__) from None
        except httpx.InvalidURL as error:
            raise ServerUnreachable(self.base_url, f"not a valid URL: {error}") from None
        if response.is_error:
            raise error_from_response(response)
        return response

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise self._unexpected(response, "not JSON") from None

    def _unexpected(self, response: httpx.Response, why: str) -> ApiError:
        request = response.request
        return ApiError(
            response.status_code,
            f"unexpected answer to {request.method} {request.url.path} ({why}); "
            "is the server the same version as this client?",
        )

    def _one(self, model: type[M], response: httpx.Response) -> M:
        try:
            return model.model_validate(self._json(response))
        except ValidationError as error:
            raise self._unexpected(response, f"{error.error_count()} field(s) differ") from None

    def _many(self, model: type[M], response: httpx.Response) -> list[M]:
        body = self._json(response)
        if not isinstance(body, list):
            raise self._unexpected(response, "not a list")
        try:
            return [model.model_validate(item) for item in body]
        except ValidationError as error:
            raise self._unexpected(response, f"{error.error_count()} field(s) differ") from None

    def _get(self, model: type[M], path: str, params: Params | None = None) -> M:
        return self._one(model, self._request("GET", path, params=params))

    def _post(self, model: type[M], path: str, body: BaseModel | None = None) -> M:
        json = None if body is None else _body(body)
        return self._one(model, self._request("POST", path, json=json))
