"""The dashboard in a real browser against a real server: logging in (pasted token, login
link), logging out, the overview's numbers against the API, and what a researcher may see."""

from __future__ import annotations

import re

from browserhelp import (
    Page,
    expect,
    log_in,
    number,
    open_page,
    project,
    ready,
    researcher,
    submit,
    wait_status,
)

from liveserver import LiveServer, wait_for


def test_admin_logs_in_with_a_pasted_token_sees_every_page_and_logs_out(
    page: Page, server: LiveServer
) -> None:
    log_in(page, server, server.admin_token)
    expect(page.get_by_test_id("whoami")).to_have_text("admin (admin)")
    for route in ("projects", "workloads", "nodes", "overview"):
        page.get_by_role("link", name=route.capitalize(), exact=True).click()
        ready(page, route)
        expect(page.get_by_role("link", name=route.capitalize(), exact=True)).to_have_attribute(
            "aria-current", "page"
        )
    # A reload keeps the session (the cookie), and the page asks the server who it is.
    page.reload()
    ready(page, "overview")
    expect(page.get_by_test_id("whoami")).to_have_text("admin (admin)")

    page.get_by_role("button", name="Log out").click()
    ready(page, "login")
    expect(page.get_by_text("You are logged out.")).to_be_visible()
    page.reload()
    ready(page, "login")  # the server forgot the session


def test_a_wrong_token_is_refused_with_a_reason(page: Page, server: LiveServer) -> None:
    page.goto(server.url + "/")
    ready(page, "login")
    page.get_by_label("Access token").fill("gp_not-a-token")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_test_id("login-error")).to_contain_text("does not know this token")


def test_a_login_link_logs_in_and_leaves_no_token_in_the_address_bar(
    page: Page, server: LiveServer
) -> None:
    page.goto(f"{server.url}/#login={server.admin_token}")
    ready(page, "overview")
    assert server.admin_token not in page.url
    assert page.evaluate("location.hash") == "#/overview"
    expect(page.get_by_test_id("whoami")).to_have_text("admin (admin)")


def test_the_overview_shows_what_the_api_reports(page: Page, server: LiveServer) -> None:
    with server.client() as http:
        project(http, "ov", quota=2)
        submit(http, "ov", "whole", gpu=1)
        submit(http, "ov", "half", gpu=0.5)
        # 8 GPUs together: the whole 2x4 cluster, never free while "whole" runs (a request no
        # node could ever run is refused at submit)
        submit(http, "ov", "too-big", gpu=4, tasks=2)
        wait_status(http, "ov", "whole", "running")
        wait_status(http, "ov", "half", "running")
        wait_for(lambda: http.get("/api/v1/top").json()["allocated_gpu_milli"] == 1500)
        top = http.get("/api/v1/top").json()

    log_in(page, server, server.admin_token)
    expect(page.get_by_test_id("total-capacity")).to_have_text(
        number(top["capacity_gpu_milli"] / 1000)
    )
    expect(page.get_by_test_id("total-allocated")).to_have_text(
        number(top["allocated_gpu_milli"] / 1000)
    )
    expect(page.get_by_test_id("total-running")).to_have_text("2")
    expect(page.get_by_test_id("total-pending")).to_have_text("1")
    expect(page.get_by_test_id("total-pending-gpu")).to_have_text("8")
    expect(page.get_by_test_id("pending-list")).to_contain_text("ov/too-big")

    # The chart's latest point is the history endpoint's last known point: catch the very
    # answer the page renders (the current minute's average moves as samples come in).
    with page.expect_response(re.compile(r"/api/v1/history\?range=24h")) as answer:
        page.get_by_test_id("range-24h").click()
    history = answer.value.json()
    known = [i for i, value in enumerate(history["allocated_gpu"]) if value is not None]
    assert known, "the history has no point yet"
    last = known[-1]
    expect(page.get_by_test_id("latest-allocated")).to_have_text(
        number(history["allocated_gpu"][last])
    )
    expect(page.get_by_test_id("latest-capacity")).to_have_text(
        number(history["capacity_gpu"][last])
    )
    expect(page.get_by_test_id("latest-utilized")).to_have_text(
        number(history["utilized_gpu"][last])
    )
    at = history["times"][last]
    expect(page.get_by_test_id("chart-latest")).to_have_attribute(
        "data-time", str(int(at)) if float(at).is_integer() else repr(at)
    )
    assert history["capacity_gpu"][last] == top["capacity_gpu_milli"] / 1000
    expect(page.get_by_test_id("range-24h")).to_have_attribute("aria-pressed", "true")
    expect(page.get_by_test_id("idle-share")).to_contain_text("GPU-hours")

    # Drag across the chart: the page asks for that window by start and end, and offers a reset.
    box = page.get_by_test_id("chart").bounding_box()
    assert box is not None
    with page.expect_request(re.compile(r"/api/v1/history\?start=\d+&end=\d+")):
        page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] / 2)
        page.mouse.down()
        page.mouse.move(box["x"] + box["width"] * 0.97, box["y"] + box["height"] / 2, steps=5)
        page.mouse.up()
    expect(page.get_by_test_id("zoom-reset")).to_be_visible()
    with page.expect_request(re.compile(r"/api/v1/history\?range=24h")):
        page.get_by_test_id("zoom-reset").click()
    expect(page.get_by_test_id("zoom-reset")).to_be_hidden()


def test_a_researcher_sees_only_their_projects_work(page: Page, server: LiveServer) -> None:
    with server.client() as http:
        project(http, "mine", quota=2)
        project(http, "theirs", quota=2)
        submit(http, "mine", "my-job", gpu=0.5)
        submit(http, "theirs", "secret-job", gpu=0.5)
        submit(http, "theirs", "secret-wait", gpu=4, tasks=2)  # waits: the jobs above run
        wait_status(http, "mine", "my-job", "running")
        wait_status(http, "theirs", "secret-job", "running")
    _, token = researcher(server, ["mine"])

    log_in(page, server, token)
    expect(page.get_by_test_id("whoami")).to_contain_text("(researcher)")
    secrets = ("secret-job", "secret-wait")

    open_page(page, server, "workloads", "workloads")
    rows = page.get_by_test_id("workload-row")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-name", "my-job")
    expect(page.get_by_test_id("filter-project").locator("option")).to_have_text(["any", "mine"])

    open_page(page, server, "nodes", "nodes")
    segments = page.get_by_test_id("segment")
    expect(page.locator("[data-testid=segment][data-project=theirs]")).to_have_count(1)
    expect(page.locator("[data-testid=segment][data-workload=my-job]")).to_have_count(1)
    assert (
        page.locator("[data-testid=segment][data-project=theirs]").get_attribute("data-workload")
        is None
    )
    assert segments.count() == 2
    expect(page.get_by_text("theirs (usage only)").first).to_be_visible()

    open_page(page, server, "overview", "overview")
    open_page(page, server, "projects", "projects")
    expect(page.get_by_test_id("project-row")).to_have_count(1)
    expect(page.get_by_test_id("edit-project")).to_have_count(0)  # admins only

    for route, name in (("workloads", "workloads"), ("nodes", "nodes"), ("overview", "overview")):
        open_page(page, server, route, name)
        html = page.content()
        for secret in secrets:
            assert secret not in html, f"{secret} shown to a researcher on #{route}"


def test_an_admin_edits_a_quota_in_place_and_sees_the_warning(
    page: Page, server: LiveServer
) -> None:
    with server.client() as http:
        made = http.post("/api/v1/departments", json={"name": "dept", "quota": {"gpu": 2}})
        assert made.status_code == 201
        project(http, "team-a", quota=1, department="dept")
        project(http, "team-b", quota=1, department="dept")
    log_in(page, server, server.admin_token)
    open_page(page, server, "projects", "projects")
    row = page.locator("[data-testid=project-row][data-name=team-a]")
    row.get_by_role("button", name="Edit team-a").click()
    row.get_by_label("Quota of team-a (GPUs)").fill("3")
    row.get_by_label("Over-quota weight of team-a").fill("2")
    row.get_by_role("button", name="Save").click()
    warned = page.get_by_test_id("server-warning").filter(has_text="more than its quota of 2")
    expect(warned).to_be_visible()
    with server.client() as http:
        changed = http.get("/api/v1/projects/team-a").json()
    assert changed["quota"]["gpu_milli"] == 3000
    assert changed["over_quota_weight"] == 2
    expect(row.locator("td").nth(1)).to_have_text("3")
