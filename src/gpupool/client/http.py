"""`GpupoolClient`: one typed method per endpoint of the gpupool HTTP API (version 1).

Every method returns the pydantic models of `gpupool.api.schemas` (or None for a call that
answers nothing). An error answer raises `ApiError` (status, detail, field errors); no answer at
all raises `ServerUnreachable`; both are `ClientError`s. The guide is docs/python-client.md.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Sequence
from typing import Literal
from urllib.parse import quote

from gpupool.api.schemas import (
    DepartmentIn,
    DeviceHistoryOut,
    DryRunOut,
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
from gpupool.client.errors import ApiError, ClientError, ServerUnreachable, WaitTimeout
from gpupool.client.session import ApiSession, Params, _body

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

UsageBy = Literal["device", "project", "workload"]
"""What `GpupoolClient.usage` groups by."""
WorkloadSort = Literal["name", "submitted_at", "status", "project", "gpu"]
"""The keys `GpupoolClient.list_workloads` sorts by (default: submission order)."""
SortOrder = Literal["asc", "desc"]

FINISHED: frozenset[WorkloadStatus] = frozenset({WorkloadStatus.COMPLETED, WorkloadStatus.FAILED})
"""The statuses a workload does not leave on its own: what `GpupoolClient.wait` waits for."""


def _segment(name: str) -> str:
    return quote(name, safe="")


def _workload_path(project: str, name: str) -> str:
    return f"/api/v1/workloads/{_segment(project)}/{_segment(name)}"


class GpupoolClient(ApiSession):
    """A synchronous client of one gpupool server; use it as a context manager or `close()` it.

    `base_url` is like http://127.0.0.1:8000; `token` is sent as a bearer token (only `health`
    needs none). `transport` replaces the network (tests); `timeout_s` bounds every request.
    `GpupoolClient.from_config()` reads both from the CLI's config file and environment.
    """

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
