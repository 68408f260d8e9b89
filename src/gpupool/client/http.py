"""`GpupoolClient`: one typed method per endpoint of the gpupool HTTP API (version 1).

Every method returns the pydantic models of `gpupool.api.schemas` (or None for a call that
answers nothing). An error answer raises `ApiError` (status, detail, field errors); no answer at
all raises `ServerUnreachable`; both are `ClientError`s. The guide is docs/python-client.md.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel, ValidationError

from gpupool import __version__
from gpupool.api.schemas import (
    DepartmentIn,
    DeviceHistoryOut,
    DryRunOut,
    ErrorDetail,
    ErrorOut,
    EventOut,
    Health,
    HistoryOut,
    HistoryRange,
    LogChunk,
    NamesOut,
    NodeIn,
    NodeOut,
    ProjectIn,
    ProjectOut,
    ProjectPatch,
    ProjectSeries,
    ProjectsIn,
    TokenIn,
    TokenInfo,
    TokenOut,
    TopOut,
    UsageOut,
    UserIn,
    UserOut,
    WorkloadDetail,
    WorkloadIn,
    WorkloadOut,
    WorkloadPage,
    WorkloadStatus,
    WorkloadType,
)
from gpupool.client.config import effective_config

__all__ = [
    "FINISHED",
    "ApiError",
    "ClientError",
    "GpupoolClient",
    "ServerUnreachable",
    "SortOrder",
    "UsageBy",
    "WaitTimeout",
    "WorkloadSort",
]

M = TypeVar("M", bound=BaseModel)
Params = dict[str, str | int | float | list[str] | None]

UsageBy = Literal["device", "project", "workload"]
"""What `GpupoolClient.usage` groups by."""
WorkloadSort = Literal["name", "submitted_at", "status", "project", "gpu"]
"""The keys `GpupoolClient.list_workloads` sorts by (default: submission order)."""
SortOrder = Literal["asc", "desc"]

FINISHED: frozenset[WorkloadStatus] = frozenset({WorkloadStatus.COMPLETED, WorkloadStatus.FAILED})
"""The statuses a workload does not leave on its own: what `GpupoolClient.wait` waits for."""


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


def _segment(name: str) -> str:
    return quote(name, safe="")


def _workload_path(project: str, name: str) -> str:
    return f"/api/v1/workloads/{_segment(project)}/{_segment(name)}"


def _body(model: BaseModel) -> Any:
    """The JSON body of a request model: only the fields that were set (PATCH semantics)."""
    return model.model_dump(mode="json", exclude_unset=True)


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


class GpupoolClient:
    """A synchronous client of one gpupool server; use it as a context manager or `close()` it.

    `base_url` is like http://127.0.0.1:8000; `token` is sent as a bearer token (only `health`
    needs none). `transport` replaces the network (tests); `timeout_s` bounds every request.
    `GpupoolClient.from_config()` reads both from the CLI's config file and environment.
    """

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

    # -- service ----------------------------------------------------------------------------

    def health(self) -> Health:
        return self._get(Health, "/health")

    def metrics_text(self) -> str:
        """The Prometheus exposition text of `/metrics`."""
        return self._request("GET", "/metrics").text

    def whoami(self) -> UserOut:
        return self._get(UserOut, "/api/v1/whoami")

    def top(self) -> TopOut:
        return self._get(TopOut, "/api/v1/top")

    def events(
        self,
        project: str | None = None,
        workload: str | None = None,
        after_id: int | None = None,
        limit: int | None = None,
    ) -> list[EventOut]:
        params: Params = {
            "project": project,
            "workload": workload,
            "after_id": after_id,
            "limit": limit,
        }
        return self._many(EventOut, self._request("GET", "/api/v1/events", params=params))

    # -- departments and projects -----------------------------------------------------------

    def usage(self, by: UsageBy = "project", minutes: int = 60, bucket_s: int = 300) -> UsageOut:
        """Per-minute samples of the last `minutes` (at most 14 days), per workload too."""
        params: Params = {"by": by, "minutes": minutes, "bucket_s": bucket_s}
        return self._get(UsageOut, "/api/v1/usage", params)

    def history(
        self,
        range_: HistoryRange | str | None = None,
        start: float | None = None,
        end: float | None = None,
        *,
        project_series: Sequence[ProjectSeries | str] | None = None,
    ) -> HistoryOut:
        """The history store: `range_` (1h, 24h, 7d, 30d; the server's default is 24h) back
        from now, or `start`/`end` (seconds since epoch). `project_series`: only these of each
        project's series (`allocated`, `utilized`, `requested`; default all three); the others
        come back null."""
        params: Params = {"range": range_, "start": start, "end": end}
        if project_series:
            params["project_series"] = [str(s) for s in project_series]
        return self._get(HistoryOut, "/api/v1/history", params)

    def device_history(
        self,
        range_: HistoryRange | str | None = None,
        start: float | None = None,
        end: float | None = None,
    ) -> DeviceHistoryOut:
        """Each device over the window: allocation, utilization, peak memory, GPU-hours."""
        params: Params = {"range": range_, "start": start, "end": end}
        return self._get(DeviceHistoryOut, "/api/v1/history/devices", params)

    def names(self) -> NamesOut:
        """Every project's and node's name, sorted (cheap: nothing else is read)."""
        return self._get(NamesOut, "/api/v1/names")

    def departments(self) -> list[ProjectOut]:
        return self._many(ProjectOut, self._request("GET", "/api/v1/departments"))

    def department(self, name: str) -> ProjectOut:
        return self._get(ProjectOut, f"/api/v1/departments/{_segment(name)}")

    def create_department(self, department: DepartmentIn) -> ProjectOut:
        return self._post(ProjectOut, "/api/v1/departments", department)

    def update_department(self, name: str, patch: ProjectPatch) -> ProjectOut:
        path = f"/api/v1/departments/{_segment(name)}"
        return self._one(ProjectOut, self._request("PATCH", path, json=_body(patch)))

    def delete_department(self, name: str) -> None:
        self._request("DELETE", f"/api/v1/departments/{_segment(name)}")

    def projects(self) -> list[ProjectOut]:
        return self._many(ProjectOut, self._request("GET", "/api/v1/projects"))

    def project(self, name: str) -> ProjectOut:
        return self._get(ProjectOut, f"/api/v1/projects/{_segment(name)}")

    def create_project(self, project: ProjectIn) -> ProjectOut:
        return self._post(ProjectOut, "/api/v1/projects", project)

    def update_project(self, name: str, patch: ProjectPatch) -> ProjectOut:
        path = f"/api/v1/projects/{_segment(name)}"
        return self._one(ProjectOut, self._request("PATCH", path, json=_body(patch)))

    def delete_project(self, name: str) -> None:
        self._request("DELETE", f"/api/v1/projects/{_segment(name)}")

    # -- nodes ------------------------------------------------------------------------------

    def nodes(self) -> list[NodeOut]:
        return self._many(NodeOut, self._request("GET", "/api/v1/nodes"))

    def node(self, name: str) -> NodeOut:
        return self._get(NodeOut, f"/api/v1/nodes/{_segment(name)}")

    def create_node(self, node: NodeIn) -> NodeOut:
        return self._post(NodeOut, "/api/v1/nodes", node)

    # -- workloads --------------------------------------------------------------------------

    def submit(self, workload: WorkloadIn) -> WorkloadOut:
        return self._post(WorkloadOut, "/api/v1/workloads", workload)

    def dry_run(self, workload: WorkloadIn) -> DryRunOut:
        """Where `workload` would run now, or why it would wait; nothing is stored."""
        return self._post(DryRunOut, "/api/v1/workloads/dry-run", workload)

    def list_workloads(
        self,
        project: str | None = None,
        status: WorkloadStatus | str | None = None,
        type: WorkloadType | str | None = None,
        limit: int = 100,
        offset: int = 0,
        *,
        user: str | None = None,
        node: str | None = None,
        q: str | None = None,
        sort: WorkloadSort | None = None,
        order: SortOrder | None = None,
    ) -> WorkloadPage:
        """One page of the workloads the caller may see (`limit` 1 to 10,000 from `offset`);
        `total` counts every match. Filters: `project`, `status`, `type`, `user` (who submitted
        it), `node` (has a live task there), `q` (a substring of the name, any case). `sort`
        (default: submission order) and `order` (`asc`, `desc`)."""
        params: Params = {
            "project": project,
            "status": status,
            "type": type,
            "limit": limit,
            "offset": offset,
            "user": user,
            "node": node,
            "q": q,
            "sort": sort,
            "order": order,
        }
        return self._get(WorkloadPage, "/api/v1/workloads", params)

    def iter_workloads(
        self,
        project: str | None = None,
        status: WorkloadStatus | str | None = None,
        type: WorkloadType | str | None = None,
        *,
        user: str | None = None,
        node: str | None = None,
        q: str | None = None,
        sort: WorkloadSort | None = None,
        order: SortOrder | None = None,
        page_size: int = 500,
    ) -> Iterator[WorkloadOut]:
        """Every workload `list_workloads` matches, a page of `page_size` at a time."""
        offset = 0
        while True:
            page = self.list_workloads(
                project,
                status,
                type,
                page_size,
                offset,
                user=user,
                node=node,
                q=q,
                sort=sort,
                order=order,
            )
            yield from page.items
            offset += len(page.items)
            if not page.items or offset >= page.total:
                return

    def describe(self, project: str, name: str) -> WorkloadDetail:
        """The workload with its tasks (every run: node, devices, exit code) and its events."""
        return self._get(WorkloadDetail, _workload_path(project, name))

    def wait(
        self,
        project: str,
        name: str,
        until: Collection[WorkloadStatus | str] = FINISHED,
        *,
        timeout_s: float = 600,
        poll_interval_s: float = 1.0,
    ) -> WorkloadDetail:
        """Poll `describe` until the workload's status is one of `until` (default: completed
        or failed) and return it; `WaitTimeout` after `timeout_s`. An `ApiError` (a workload
        deleted meanwhile: 404) ends the wait too."""
        deadline = time.monotonic() + timeout_s
        wanted = {str(status) for status in until}
        while True:
            detail = self.describe(project, name)
            if detail.status in wanted:
                return detail
            left = deadline - time.monotonic()
            if left <= 0:
                raise WaitTimeout(project, name, detail.status, timeout_s)
            time.sleep(min(poll_interval_s, left))

    def suspend(self, project: str, name: str) -> WorkloadOut:
        """Stop a pending or running workload's tasks and keep it (`suspended`); 409 else."""
        return self._post(WorkloadOut, f"{_workload_path(project, name)}/suspend")

    def resume(self, project: str, name: str) -> WorkloadOut:
        """Make a suspended workload pending again; 409 when it is not suspended."""
        return self._post(WorkloadOut, f"{_workload_path(project, name)}/resume")

    def delete(self, project: str, name: str) -> WorkloadOut:
        """Ask the workload to stop; it answers `deleting` and goes away once its tasks stopped."""
        return self._one(WorkloadOut, self._request("DELETE", _workload_path(project, name)))

    def logs(
        self,
        project: str,
        name: str,
        task: int = 0,
        offset: int = 0,
        *,
        run: int | None = None,
        since: float | None = None,
        tail: int | None = None,
    ) -> LogChunk:
        """Up to 1 MiB of the log of task `task` from byte `offset`; `next_offset` continues it.
        `run`: only that run (1 = the first start); `since` (seconds since epoch): only runs
        still running then; `tail`: start at the last `tail` lines instead of `offset`."""
        params: Params = {"task": task, "offset": offset}
        for key, value in (("run", run), ("since", since), ("tail", tail)):
            if value is not None:
                params[key] = value
        return self._get(LogChunk, f"{_workload_path(project, name)}/logs", params)

    def iter_log(
        self,
        project: str,
        name: str,
        task: int = 0,
        *,
        run: int | None = None,
        since: float | None = None,
        tail: int | None = None,
        follow: bool = False,
        poll_interval_s: float = 1.0,
    ) -> Iterator[str]:
        """The text of a task's log, page after page (`logs` pages of up to 1 MiB). Without
        `follow` it ends at the log's current end; with it, it polls every `poll_interval_s`
        until the task has ended and its whole log is read. `run`, `since`, `tail`: as `logs`.
        A chunk may end inside a line: join the pieces (`"".join(...)`) before splitting."""
        offset: int | None = None
        while True:
            chunk = self.logs(
                project,
                name,
                task,
                offset or 0,
                run=run,
                since=since,
                tail=tail if offset is None else None,
            )
            offset = chunk.next_offset
            if chunk.text:
                yield chunk.text
            if chunk.complete:
                return
            if not chunk.text:
                if not follow:
                    return
                time.sleep(poll_interval_s)

    # -- users ------------------------------------------------------------------------------

    def users(self) -> list[UserOut]:
        return self._many(UserOut, self._request("GET", "/api/v1/users"))

    def create_user(self, user: UserIn) -> UserOut:
        return self._post(UserOut, "/api/v1/users", user)

    def set_user_projects(self, name: str, projects: list[str]) -> UserOut:
        path = f"/api/v1/users/{_segment(name)}/projects"
        body = _body(ProjectsIn(projects=projects))
        return self._one(UserOut, self._request("PUT", path, json=body))

    def create_token(
        self, name: str, label: str = "cli", expires_in_s: int | None = None
    ) -> TokenOut:
        """A new token for `name` (shown once), expiring after `expires_in_s` (None: never)."""
        body = TokenIn(label=label, expires_in_s=expires_in_s)
        return self._post(TokenOut, f"/api/v1/users/{_segment(name)}/tokens", body)

    def delete_user(self, name: str) -> None:
        self._request("DELETE", f"/api/v1/users/{_segment(name)}")

    def tokens(self, user: str | None = None) -> list[TokenInfo]:
        """Every token (admins), or `user`'s; ids, labels and dates, never the tokens."""
        params: Params = {} if user is None else {"user": user}
        return self._many(TokenInfo, self._request("GET", "/api/v1/tokens", params=params))

    def revoke_token(self, token_id: int) -> None:
        self._request("DELETE", f"/api/v1/tokens/{token_id}")
