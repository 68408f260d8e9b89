"""Departments and projects."""

from __future__ import annotations

from fastapi import APIRouter, Response

from gpupool.api.schemas import DepartmentIn, ProjectIn, ProjectOut, ProjectPatch
from gpupool.server.errors import ERROR_RESPONSES
from gpupool.server.services import projects
from gpupool.server.state import Caller, State

router = APIRouter(prefix="/api/v1", tags=["projects"], responses=ERROR_RESPONSES)


def _visible(caller: Caller, items: list[ProjectOut]) -> list[ProjectOut]:
    if caller.is_admin:
        return items
    return [p for p in items if p.kind == "department" or caller.may_use(p.name)]


@router.get("/projects")
def list_projects(state: State, caller: Caller) -> list[ProjectOut]:
    with state.read() as session:
        return _visible(caller, projects.list_views(session, False, state.loop.shares))


@router.get("/departments")
def list_departments(state: State, caller: Caller) -> list[ProjectOut]:
    with state.read() as session:
        return projects.list_views(session, True, state.loop.shares)


@router.post("/projects", status_code=201)
def create_project(body: ProjectIn, state: State, caller: Caller) -> ProjectOut:
    caller.require_admin("create projects")
    with state.write() as session:
        return projects.create(session, body, state.clock.now_s(), state.loop.shares, caller.name)


@router.post("/departments", status_code=201)
def create_department(body: DepartmentIn, state: State, caller: Caller) -> ProjectOut:
    caller.require_admin("create departments")
    with state.write() as session:
        return projects.create(session, body, state.clock.now_s(), state.loop.shares, caller.name)


def _get(state: State, caller: Caller, name: str, is_department: bool) -> ProjectOut:
    if not is_department:
        caller.require_project(name)
    with state.read() as session:
        row = projects.get_row(session, name, is_department)
        return projects.view(session, row, state.loop.shares)


@router.get("/projects/{name}")
def get_project(name: str, state: State, caller: Caller) -> ProjectOut:
    return _get(state, caller, name, False)


@router.get("/departments/{name}")
def get_department(name: str, state: State, caller: Caller) -> ProjectOut:
    return _get(state, caller, name, True)


def _patch(state: State, caller: Caller, name: str, body: ProjectPatch, dept: bool) -> ProjectOut:
    caller.require_admin("change quotas")
    with state.write() as session:
        row = projects.get_row(session, name, dept)
        return projects.update(
            session, row, body, state.loop.shares, state.clock.now_s(), caller.name
        )


@router.patch("/projects/{name}")
def patch_project(name: str, body: ProjectPatch, state: State, caller: Caller) -> ProjectOut:
    return _patch(state, caller, name, body, False)


@router.patch("/departments/{name}")
def patch_department(name: str, body: ProjectPatch, state: State, caller: Caller) -> ProjectOut:
    return _patch(state, caller, name, body, True)


def _delete(state: State, caller: Caller, name: str, is_department: bool) -> Response:
    caller.require_admin("delete projects")
    with state.write() as session:
        row = projects.get_row(session, name, is_department)
        projects.remove(session, row, state.clock.now_s(), caller.name)
    state.tokens.clear()
    return Response(status_code=204)


@router.delete("/projects/{name}", status_code=204)
def delete_project(name: str, state: State, caller: Caller) -> Response:
    return _delete(state, caller, name, False)


@router.delete("/departments/{name}", status_code=204)
def delete_department(name: str, state: State, caller: Caller) -> Response:
    return _delete(state, caller, name, True)
