"""Workloads and nodes pages in a real browser: actions change the workload in the API, a
pending workload says why, the submit form submits, the table filters and sorts, and two
fractions on one device show as two segments of it."""

from __future__ import annotations

from collections import defaultdict

from browserhelp import (
    Page,
    expect,
    log_in,
    open_page,
    project,
    ready,
    submit,
    wait_status,
    workload,
)

from liveserver import LiveServer, wait_for


def test_suspend_and_resume_from_the_page_change_the_workload(
    page: Page, server: LiveServer
) -> None:
    with server.client() as http:
        project(http, "act", quota=1)
        submit(http, "act", "job", gpu=1)
        wait_status(http, "act", "job", "running")
        log_in(page, server, server.admin_token)
        open_page(page, server, "workloads/act/job", "workload")
        expect(page.get_by_test_id("status")).to_have_text("running")
        expect(page.get_by_test_id("resume")).to_have_count(0)

        page.get_by_role("button", name="Suspend").click()
        wait_status(http, "act", "job", "suspended")
        expect(page.get_by_test_id("status")).to_have_text("suspended")
        expect(page.get_by_test_id("pending-reason")).to_contain_text("suspended by admin")
        expect(page.get_by_test_id("suspend")).to_have_count(0)

        page.get_by_role("button", name="Resume").click()
        wait_status(http, "act", "job", "pending", "running")
        expect(page.get_by_test_id("status")).to_have_text("running")
        events = [e["kind"] for e in workload(http, "act", "job")["events"]]
        assert "suspended" in events and "resumed" in events
        expect(page.get_by_test_id("timeline")).to_contain_text("resumed")
        expect(page.get_by_test_id("log")).to_contain_text("simulated task job/0 started")

        page.get_by_role("button", name="Delete").click()
        page.get_by_role("button", name="Yes, delete").click()
        wait_for(lambda: http.get("/api/v1/workloads/act/job").status_code == 404)
        expect(page.get_by_test_id("gone")).to_be_visible()


def test_a_pending_workload_shows_its_reason(page: Page, server: LiveServer) -> None:
    with server.client() as http:
        project(http, "wait", quota=1)
        submit(http, "wait", "blocker", gpu=1)  # runs until deleted
        submit(http, "wait", "huge", gpu=4, tasks=2)  # the whole cluster: waits behind it
        wait_for(
            lambda: "cycle" not in (workload(http, "wait", "huge")["pending_reason"] or "cycle"),
            what="the scheduler's reason",
        )
        reason = workload(http, "wait", "huge")["pending_reason"]
    log_in(page, server, server.admin_token)
    open_page(page, server, "workloads?status=pending", "workloads")
    row = page.locator("[data-testid=workload-row][data-name=huge]")
    expect(row.get_by_test_id("reason")).to_have_text(reason)
    expect(row.get_by_test_id("state")).to_have_text("pending")
    row.get_by_role("link", name="huge").click()
    ready(page, "workload")
    expect(page.get_by_test_id("pending-reason")).to_have_text(f"Why it waits: {reason}")


def test_the_submit_form_submits_and_the_table_filters_and_sorts(
    page: Page, server: LiveServer
) -> None:
    with server.client() as http:
        project(http, "form", quota=2)
        submit(http, "form", "alpha", gpu=0.25, duration_s=0.1)
        submit(http, "form", "zeta", gpu=1)
    log_in(page, server, server.admin_token)
    open_page(page, server, "workloads", "workloads")
    page.get_by_role("link", name="Submit a workload").click()
    ready(page, "submit")
    page.get_by_label("Name").fill("from-page")
    page.get_by_label("Project").select_option("form")
    page.get_by_label("GPUs per task").fill("2")
    page.get_by_label("GPU memory per task").fill("8G")
    page.get_by_role("button", name="Submit").click()
    expect(page.get_by_test_id("submit-error")).to_contain_text("gpu or gpu_memory, not both")
    page.get_by_label("GPU memory per task").fill("")
    page.get_by_label("Command").fill("python train.py --note 'two words'")
    page.get_by_label("Environment").fill("SEED=7")
    page.get_by_role("button", name="Submit").click()
    ready(page, "workload")
    with server.client() as http:
        made = workload(http, "form", "from-page")
    assert made["gpu_amount"] == 2 and made["submitted_by"] == "admin"
    assert made["command"] == ["python", "train.py", "--note", "two words"]
    assert made["env"] == {"SEED": "7"}

    open_page(page, server, "workloads", "workloads")
    rows = page.get_by_test_id("workload-row")
    expect(rows).to_have_count(3)
    page.get_by_test_id("sort-name").click()
    expect(rows.first).to_have_attribute("data-name", "alpha")
    page.get_by_test_id("sort-name").click()
    expect(rows.first).to_have_attribute("data-name", "zeta")
    page.get_by_label("Search by name").fill("PAGE")
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-name", "from-page")
    page.get_by_label("Search by name").fill("")
    page.get_by_label("State").select_option("completed")
    expect(rows).to_have_count(1)
    expect(rows.first.get_by_test_id("exit-code")).to_have_text("0")
    assert "status=completed" in page.url


def test_the_node_filter_offers_every_node_once_the_table_is_drawn(
    page: Page, server: LiveServer
) -> None:
    """The table does not wait for the node names (GET /names, read after it is drawn); a node
    chosen in the route is kept while they load."""
    with server.client() as http:
        project(http, "where", quota=1)
        submit(http, "where", "here", gpu=1)
        wait_status(http, "where", "here", "running")
        nodes = http.get("/api/v1/names").json()["nodes"]
        listed = http.get("/api/v1/workloads", params={"project": "where"}).json()["items"]
        node = listed[0]["placement"][0]["node"]
    log_in(page, server, server.admin_token)
    open_page(page, server, "workloads", "workloads")
    node_filter = page.get_by_test_id("filter-node")
    expect(node_filter.locator("option")).to_have_text(["any", *nodes])
    node_filter.select_option(node)
    expect(page.locator("[data-testid=workload-row][data-name=here]")).to_have_count(1)
    assert f"node={node}" in page.url

    open_page(page, server, f"workloads?node={node}&project=where", "workloads")
    expect(node_filter).to_have_value(node)
    expect(page.get_by_test_id("filter-project")).to_have_value("where")
    expect(node_filter.locator("option")).to_have_text(["any", *nodes])
    expect(page.get_by_test_id("workload-row")).to_have_count(1)


def test_two_fractions_on_one_device_are_two_segments_of_it(page: Page, server: LiveServer) -> None:
    with server.client() as http:
        project(http, "frac", quota=1)
        submit(http, "frac", "left", gpu=0.5)
        submit(http, "frac", "right", gpu=0.5)
        wait_status(http, "frac", "left", "running")
        wait_status(http, "frac", "right", "running")
        holders: dict[tuple[str, int], set[str]] = defaultdict(set)
        for node in http.get("/api/v1/nodes").json():
            for device in node["devices"]:
                for share in device["shares"]:
                    holders[(node["name"], device["index"])].add(share["workload"])
    shared = [key for key, names in holders.items() if names == {"left", "right"}]
    assert shared, f"the scheduler did not put both halves on one device: {dict(holders)}"
    node, index = shared[0]

    log_in(page, server, server.admin_token)
    open_page(page, server, "nodes", "nodes")
    device = page.locator(f"[data-testid=device][data-node='{node}'][data-index='{index}']")
    segments = device.get_by_test_id("segment")
    expect(segments).to_have_count(2)
    assert sorted(s.get_attribute("data-workload") or "" for s in segments.all()) == [
        "left",
        "right",
    ]
    assert [s.get_attribute("data-milli") for s in segments.all()] == ["500", "500"]
    expect(page.get_by_test_id("legend")).to_contain_text("frac")
