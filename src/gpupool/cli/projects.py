"""The project commands: `projects` (every project's share, for everyone) and the admin
groups `project` (create, set, delete) and `department` (create)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Group
from rich.markup import escape

from gpupool.cli.common import (
    JsonOption,
    amount_gpus,
    connect,
    fail,
    handled,
    show,
    stdout,
    table,
)

if TYPE_CHECKING:
    from gpupool.api.schemas import ProjectOut, ProjectPatch

__all__ = ["department_app", "project_app", "project_table", "projects"]


def project_table(projects: Sequence[ProjectOut]) -> Group:
    rows = table(
        "NAME", "KIND", "DEPARTMENT", "QUOTA>", "FAIR SHARE>", "HOLDING>", "DEMAND>", "LIMIT>",
        "WEIGHT>", "PRIORITY>", title="Projects (GPUs)",
    )  # fmt: skip
    warnings = []
    for p in projects:
        rows.add_row(
            p.name,
            p.kind,
            p.department or "-",
            amount_gpus(p.quota),
            amount_gpus(p.fair_share),
            amount_gpus(p.holding),
            amount_gpus(p.demand),
            amount_gpus(p.limit),
            str(p.over_quota_weight),
            str(p.priority),
        )
        warnings += p.warnings
    said = [f"[yellow]warning:[/] {escape(w)}" for w in dict.fromkeys(warnings)]
    return Group(rows, *said)


def projects(
    departments: Annotated[
        bool, typer.Option("--departments", help="List the departments instead.")
    ] = False,
    json_output: JsonOption = False,
) -> None:
    """Projects: quota, fair share, holding, demand, limit, weight and priority (GPUs)."""
    with connect() as client:
        rows = client.departments() if departments else client.projects()
    show(rows, json_output, lambda: project_table(rows))


project_app = typer.Typer(help="Create, change or delete projects (admin).", no_args_is_help=True)
department_app = typer.Typer(help="Create departments (admin).", no_args_is_help=True)

QuotaOption = Annotated[str | None, typer.Option(metavar="GPUS", help="Guaranteed GPUs (4, 2.5).")]
WeightOption = Annotated[int | None, typer.Option(help="Over-quota weight (default 1).")]
LimitOption = Annotated[str | None, typer.Option(metavar="GPUS", help="At most this many GPUs.")]
NoLimitOption = Annotated[bool, typer.Option("--no-limit", help="Remove the limit.")]
MinRuntimeOption = Annotated[
    int | None, typer.Option("--min-runtime", metavar="SECONDS", help="Not preempted before.")
]
PriorityOption = Annotated[int | None, typer.Option(help="Over-quota priority (default 0).")]


def _policy_fields(
    quota_gpu: str | None, weight: int | None, limit_gpu: str | None, priority: int | None
) -> dict[str, object]:
    """The given fields of a project or department body (a field not given is left out)."""
    fields: dict[str, object] = {
        "quota": None if quota_gpu is None else {"gpu": quota_gpu},
        "over_quota_weight": weight,
        "limit": None if limit_gpu is None else {"gpu": limit_gpu},
        "priority": priority,
    }
    return {key: value for key, value in fields.items() if value is not None}


def _patch(fields: dict[str, object], no_limit: bool) -> ProjectPatch:
    from gpupool.api.schemas import ProjectPatch

    if no_limit:
        if "limit" in fields:
            fail("give --limit-gpu or --no-limit, not both")
        fields["limit"] = None
    if not fields:
        fail("nothing to change: give at least one of the options (see --help)")
    with handled():
        return ProjectPatch.model_validate(fields)


@project_app.command("create")
def project_create(
    name: Annotated[str, typer.Argument(help="Project name.")],
    department: Annotated[str | None, typer.Option(help="Parent department.")] = None,
    quota_gpu: QuotaOption = None,
    weight: WeightOption = None,
    limit_gpu: LimitOption = None,
    priority: PriorityOption = None,
    min_runtime_s: MinRuntimeOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create a project."""
    from gpupool.api.schemas import ProjectIn

    fields = _policy_fields(quota_gpu, weight, limit_gpu, priority)
    extra = {"department": department, "min_runtime_s": min_runtime_s}
    fields |= {key: value for key, value in extra.items() if value is not None}
    with handled():
        spec = ProjectIn.model_validate({"name": name} | fields)
    with connect() as client:
        created = client.create_project(spec)
    show(created, json_output, lambda: project_table([created]))


@project_app.command("set")
def project_set(
    name: Annotated[str, typer.Argument(help="Project name.")],
    quota_gpu: QuotaOption = None,
    weight: WeightOption = None,
    limit_gpu: LimitOption = None,
    no_limit: NoLimitOption = False,
    priority: PriorityOption = None,
    min_runtime_s: MinRuntimeOption = None,
    json_output: JsonOption = False,
) -> None:
    """Change a project's quota, weight, limit or priority; other fields keep their values."""
    fields = _policy_fields(quota_gpu, weight, limit_gpu, priority)
    if min_runtime_s is not None:
        fields["min_runtime_s"] = min_runtime_s
    patch = _patch(fields, no_limit)
    with connect() as client:
        changed = client.update_project(name, patch)
    show(changed, json_output, lambda: project_table([changed]))


@project_app.command("delete")
def project_delete(name: Annotated[str, typer.Argument(help="Project name.")]) -> None:
    """Delete a project (the server refuses while it has workloads)."""
    with connect() as client:
        client.delete_project(name)
    stdout().print(f"Deleted project {escape(name)}")


@department_app.command("create")
def department_create(
    name: Annotated[str, typer.Argument(help="Department name.")],
    quota_gpu: QuotaOption = None,
    weight: WeightOption = None,
    limit_gpu: LimitOption = None,
    priority: PriorityOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create a department (projects join it with `project create --department`)."""
    from gpupool.api.schemas import DepartmentIn

    fields = _policy_fields(quota_gpu, weight, limit_gpu, priority)
    with handled():
        spec = DepartmentIn.model_validate({"name": name} | fields)
    with connect() as client:
        created = client.create_department(spec)
    show(created, json_output, lambda: project_table([created]))
