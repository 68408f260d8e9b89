// Projects: the department tree with quota, fair share, holding, demand, borrowed, lent,
// limit and weight; each project's allocation vs utilization over time; admins edit quota,
// limit and weight in place.

import { api, get } from "../api.js";
import { TimeChart } from "../chart.js";
import { gpus, h, learnProjects, projectColour, replace } from "../dom.js";
import { fetchHistory, historyChart, rangeControl } from "./overview.js";

// Borrowed: what a project holds above its quota. Lent: the part of its unused quota that
// others' borrowing is using now. Borrowing first takes capacity no quota covers; the rest
// comes out of unused quotas, each project lending in proportion to what it leaves unused.
export function lending(top) {
  const rows = top.projects;
  const quotaTotal = rows.reduce((sum, p) => sum + p.quota_gpu_milli, 0);
  const borrowed = (p) => Math.max(0, p.allocated_gpu_milli - p.quota_gpu_milli);
  const unused = (p) => Math.max(0, p.quota_gpu_milli - p.allocated_gpu_milli);
  const borrowedTotal = rows.reduce((sum, p) => sum + borrowed(p), 0);
  const unusedTotal = rows.reduce((sum, p) => sum + unused(p), 0);
  const fromQuotas = Math.max(0, borrowedTotal - Math.max(0, top.capacity_gpu_milli - quotaTotal));
  const share = unusedTotal ? Math.min(1, fromQuotas / unusedTotal) : 0;
  const out = new Map();
  for (const p of rows) {
    out.set(p.name, { holding: p.allocated_gpu_milli, borrowed: borrowed(p), lent: Math.round(unused(p) * share) });
  }
  return out;
}

const amount = (a) => (a ? a.gpu_milli : null);
const limitOf = (row) => (row.limit && row.limit.gpu_milli !== null ? row.limit.gpu_milli : null);
const HEADS = ["Name", "Quota", "Fair share", "Holding", "Demand", "Borrowed", "Lent", "Limit", "Weight"];
const HELP =
  "Fair share: what the scheduler would give the project now. Borrowed: GPUs held above the quota. " +
  "Lent: the part of the project's unused quota that other projects' borrowing uses now (borrowing " +
  "first uses capacity no quota covers); it comes back when the project needs it.";

// A quota or limit is replaced whole: keep the CPU and memory parts the page does not edit.
function keepOthers(change, old) {
  if (old && old.cpu_milli) change.cpu_milli = old.cpu_milli;
  if (old && old.memory_mib) change.memory = old.memory_mib;
  return change;
}

export function mount(ctx) {
  const admin = ctx.session.isAdmin;
  let editing = null;
  let range = "24h";
  let last = null;
  const status = h("div", { role: "status", "data-testid": "project-warnings" });
  const capacityNote = h("p", { class: "warning", "data-testid": "capacity-warning", hidden: true });
  const table = h("div", { class: "table-wrap" });
  const charts = h("div", { class: "chart-grid", "data-testid": "project-charts" });
  const chartObjects = new Map();
  const ranges = rangeControl(range, (value) => {
    range = value;
    ranges.show(range);
    ctx.refreshNow();
  });
  ctx.main.append(
    h("h1", {}, "Projects"),
    capacityNote,
    status,
    table,
    h(
      "p",
      { class: "muted small" },
      HELP,
      admin ? "" : " You see your own projects; others appear on the overview as usage only.",
    ),
    h(
      "section",
      { class: "panel" },
      h("div", { class: "panel-head" }, h("h2", {}, "Allocation vs utilization"), ranges.element),
      charts,
    ),
  );

  function numberCell(value) {
    return h("td", { class: "num" }, gpus(value));
  }

  function editCells(row) {
    const field = (key, label, value, attrs = {}) => {
      const id = `${key}-${row.name}`;
      const input = h("input", {
        id,
        type: "number",
        min: "0",
        step: "any",
        value: value ?? "",
        class: "short",
        "data-testid": `edit-${key}`,
        ...attrs,
      });
      return { input, cell: h("td", {}, h("label", { for: id, class: "sr-only" }, label), input) };
    };
    const limit = limitOf(row);
    return {
      quota: field("quota", `Quota of ${row.name} (GPUs)`, row.quota.gpu_milli / 1000),
      limit: field("limit", `Limit of ${row.name} (GPUs; empty: none)`, limit === null ? "" : limit / 1000, {
        placeholder: "none",
      }),
      weight: field("weight", `Over-quota weight of ${row.name}`, row.over_quota_weight, { step: "1" }),
    };
  }

  async function save(row, fields) {
    const body = {};
    const quota = fields.quota.input.value.trim();
    if (quota !== "" && Number(quota) * 1000 !== row.quota.gpu_milli) {
      body.quota = keepOthers({ gpu: Number(quota) }, row.quota);
    }
    const limit = fields.limit.input.value.trim();
    if (limit === "" && row.limit) body.limit = null;
    else if (limit !== "" && Number(limit) * 1000 !== limitOf(row)) {
      body.limit = keepOthers({ gpu: Number(limit) }, row.limit);
    }
    const weight = fields.weight.input.value.trim();
    if (weight !== "" && Number(weight) !== row.over_quota_weight) body.over_quota_weight = Number(weight);
    const path = `/${row.kind === "department" ? "departments" : "projects"}/${encodeURIComponent(row.name)}`;
    try {
      const out = Object.keys(body).length ? await api("PATCH", path, body) : row;
      editing = null;
      replace(
        status,
        h("p", { class: "note" }, `Saved ${row.name}.`),
        out.warnings.map((w) => h("p", { class: "warning", "data-testid": "server-warning" }, w)),
      );
    } catch (error) {
      const text = `Could not change ${row.name}: ${error.message}`;
      replace(status, h("p", { class: "error", role: "alert", "data-testid": "edit-error" }, text));
    }
    await ctx.refreshNow();
  }

  function rowFor(row, numbers, depth) {
    const isEditing = editing === row.name;
    const fields = isEditing ? editCells(row) : null;
    const department = row.kind === "department";
    const name = h(
      "td",
      { class: depth ? "indent" : "" },
      department ? h("strong", {}, row.name) : row.name,
      department ? h("span", { class: "badge" }, "department") : null,
    );
    const stopEditing = () => {
      editing = null;
      render();
    };
    const cells = [
      name,
      fields ? fields.quota.cell : numberCell(row.quota.gpu_milli),
      numberCell(amount(row.fair_share)),
      numberCell(numbers.holding),
      numberCell(amount(row.demand)),
      numberCell(numbers.borrowed),
      numberCell(numbers.lent),
      fields ? fields.limit.cell : h("td", { class: "num" }, limitOf(row) === null ? "none" : gpus(limitOf(row))),
      fields ? fields.weight.cell : h("td", { class: "num" }, String(row.over_quota_weight)),
    ];
    if (admin) {
      const button = (text, attrs, onclick) => h("button", { type: "button", onclick, ...attrs }, text);
      const actions = isEditing
        ? [
            button("Save", { class: "primary", "data-testid": "save-project" }, () => save(row, fields)),
            button("Cancel", { class: "quiet" }, stopEditing),
          ]
        : [
            button("Edit", { class: "quiet", "data-testid": "edit-project", "aria-label": `Edit ${row.name}` }, () => {
              editing = row.name;
              render();
            }),
          ];
      cells.push(h("td", {}, h("div", { class: "actions" }, actions)));
    }
    const tr = h("tr", { "data-testid": "project-row", "data-name": row.name, class: row.kind }, cells);
    if (isEditing) {
      tr.addEventListener("keydown", (event) => {
        if (event.key === "Enter") save(row, fields);
        if (event.key === "Escape") stopEditing();
      });
    }
    return tr;
  }

  function render() {
    if (!last) return;
    const { departments, projects, top } = last;
    const numbers = lending(top);
    const byDept = new Map();
    for (const p of projects) {
      const key = p.department || "";
      if (!byDept.has(key)) byDept.set(key, []);
      byDept.get(key).push(p);
    }
    const rows = [];
    for (const d of departments) {
      const children = byDept.get(d.name) || [];
      if (!admin && !children.length) continue;
      const sum = (key) => children.reduce((total, c) => total + ((numbers.get(c.name) || {})[key] || 0), 0);
      const holding = sum("holding");
      rows.push(rowFor(d, { holding, borrowed: Math.max(0, holding - d.quota.gpu_milli), lent: sum("lent") }, 0));
      for (const p of children) rows.push(rowFor(p, numbers.get(p.name) || {}, 1));
    }
    for (const p of byDept.get("") || []) rows.push(rowFor(p, numbers.get(p.name) || {}, 0));
    const heads = admin ? [...HEADS, "Change"] : HEADS;
    const head = h("tr", {}, heads.map((t, i) => h("th", { scope: "col", class: i && i < 9 ? "num" : "" }, t)));
    replace(
      table,
      rows.length
        ? h(
            "table",
            { "data-testid": "projects-table" },
            h("caption", { class: "sr-only" }, "Departments and projects, in GPUs"),
            h("thead", {}, head),
            h("tbody", {}, rows),
          )
        : h("p", { class: "muted" }, "No projects yet. An admin creates them with gpupool project create."),
    );
    // Admins see every project, so they can be told when the quotas promise more than exists.
    const total = [...departments, ...(byDept.get("") || [])].reduce((sum, r) => sum + r.quota.gpu_milli, 0);
    capacityNote.hidden = !(admin && total > top.capacity_gpu_milli);
    capacityNote.textContent =
      `Quotas add up to ${gpus(total)} GPUs, more than the cluster's ${gpus(top.capacity_gpu_milli)}: ` +
      "they cannot all be guaranteed at once.";
  }

  function renderCharts(history, visible) {
    if (!history) return replace(charts, h("p", { class: "muted" }, "No history yet: the server records it every minute."));
    const series = history.projects.filter((p) => visible.has(p.key)).sort((a, b) => a.key.localeCompare(b.key));
    if (!series.length) return replace(charts, h("p", { class: "muted" }, "No allocation recorded in this range."));
    const figures = [];
    for (const p of series) {
      let chart = chartObjects.get(p.key);
      if (!chart) {
        const label = `GPUs allocated and utilized by ${p.key} over time`;
        chart = new TimeChart({ label, small: true, testid: "project-chart" });
        chartObjects.set(p.key, chart);
      }
      figures.push(h("figure", { "data-project": p.key }, h("figcaption", {}, p.key), chart.element));
    }
    replace(charts, figures);
    for (const p of series) {
      const stacks = [{ label: "allocated", values: p.allocated_gpu, colour: projectColour(p.key) }];
      const lines = [
        { label: "requested", values: p.requested_gpu, colour: "--muted", dash: true, width: 1 },
        { label: "utilized", values: p.utilized_gpu, colour: "--util", width: 2 },
      ];
      chartObjects.get(p.key).update(historyChart(history, stacks, lines));
    }
  }

  return {
    title: "Projects",
    async refresh() {
      const [departments, projects, top, history] = await Promise.all([
        get("/departments"),
        get("/projects"),
        get("/top"),
        fetchHistory(range, null),
      ]);
      if (!ctx.isCurrent()) return;
      learnProjects(top.projects.map((p) => p.name));
      last = { departments, projects, top };
      if (editing === null) render();
      renderCharts(history, new Set(projects.map((p) => p.name)));
    },
  };
}
