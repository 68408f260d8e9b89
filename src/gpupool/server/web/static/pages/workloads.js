// Workloads: a filtered, sorted, searchable table, 50 to a page. Filters live in the URL
// (#/workloads?status=pending&sort=name), so a view can be bookmarked or shared.

import { get, query } from "../api.js";
import { duration, gpus, h, nowSeconds, replace, request } from "../dom.js";

export const PAGE_SIZE = 50;
const STATES = ["pending", "running", "completing", "suspended", "completed", "failed", "deleting"];
const TYPES = ["train", "interactive", "inference"];
const FILTERS = ["project", "status", "type", "user", "node", "q", "sort", "order", "page"];
const SELECTS = [
  ["f-project", "project"],
  ["f-status", "status"],
  ["f-type", "type"],
  ["f-node", "node"],
];
const CHOICES = { projects: ["f-project", "project"], nodes: ["f-node", "node"] };

export function workloadHref(w) {
  return `#/workloads/${encodeURIComponent(w.project)}/${encodeURIComponent(w.name)}`;
}

// "node-a: GPU 0, 1 · node-b: GPU 3", with the fraction for shared devices.
export function placement(w) {
  if (!w.placement || !w.placement.length) return "–";
  const byNode = new Map();
  for (const task of w.placement) {
    if (!byNode.has(task.node)) byNode.set(task.node, new Set());
    for (const device of task.devices) byNode.get(task.node).add(device);
  }
  const share = w.gpu_kind === "fraction" ? ` (${gpus(w.gpu_amount)} each)` : "";
  const nodes = [...byNode].map(([node, devices]) => `${node}: GPU ${[...devices].sort((a, b) => a - b).join(", ")}`);
  return nodes.join(" · ") + share;
}

export function runtime(w) {
  if (w.started_at) return duration((w.finished_at || nowSeconds()) - w.started_at);
  if (w.status === "pending") return `waiting ${duration(nowSeconds() - w.submitted_at)}`;
  return "–";
}

function choices(options, value) {
  // The chosen value stays an option while the list is still loading (or no longer has it).
  const all = value && !options.includes(value) ? [value, ...options] : options;
  return [h("option", { value: "" }, "any"), ...all.map((o) => h("option", { value: o, selected: o === value }, o))];
}

function select(id, label, options, value, testid) {
  return h(
    "div",
    { class: "field" },
    h("label", { for: id }, label),
    h("select", { id, "data-testid": testid }, choices(options, value)),
  );
}

function row(w) {
  const exit = w.exit_code === null || w.exit_code === undefined ? "–" : String(w.exit_code);
  const waiting = w.status === "pending" || w.status === "suspended";
  return h(
    "tr",
    { "data-testid": "workload-row", "data-name": w.name, "data-project": w.project, "data-status": w.status },
    h("td", { class: "name" }, h("a", { href: workloadHref(w) }, w.name)),
    h("td", {}, w.project),
    h("td", {}, w.type),
    h("td", {}, h("span", { class: `state ${w.status}`, "data-testid": "state" }, w.status)),
    h("td", {}, request(w)),
    h("td", { "data-testid": "placement" }, placement(w)),
    h("td", {}, runtime(w)),
    h("td", { class: "num" }, String(w.preemptions)),
    h("td", { class: "num", "data-testid": "exit-code" }, exit),
    h("td", { class: "reason", "data-testid": "reason" }, waiting ? w.pending_reason || "" : ""),
  );
}

export function mount(ctx) {
  const params = Object.fromEntries(FILTERS.filter((k) => ctx.params[k]).map((k) => [k, ctx.params[k]]));
  const page = () => Math.max(0, Number(params.page || 0) | 0);
  // Without a chosen sort: newest first.
  const sorting = () =>
    params.sort ? { sort: params.sort, order: params.order || "asc" } : { sort: "submitted_at", order: "desc" };
  const filterBox = h("form", { class: "filters", "data-testid": "filters", role: "search" });
  const summary = h("p", { class: "muted", role: "status", "data-testid": "page-summary" });
  const table = h("div", { class: "table-wrap" });
  const prev = h("button", { type: "button", "data-testid": "prev-page" }, "← Previous");
  const next = h("button", { type: "button", "data-testid": "next-page" }, "Next →");
  const canSubmit = ctx.session.isAdmin || ctx.session.projects.length > 0;
  // The filters' choices: projects come with the first page of rows; node names after the
  // table is drawn (GET /names), filled into the open list without redrawing the filters.
  let options = { projects: [], nodes: [] };
  let searchTimer = null;
  prev.addEventListener("click", () => go({ page: page() - 1 }));
  next.addEventListener("click", () => go({ page: page() + 1 }));
  filterBox.addEventListener("submit", (event) => event.preventDefault());

  ctx.main.append(
    h(
      "div",
      { class: "title-row" },
      h("h1", {}, "Workloads"),
      canSubmit
        ? h("a", { class: "button primary", href: "#/submit", "data-testid": "submit-link" }, "Submit a workload")
        : null,
    ),
    filterBox,
    summary,
    table,
    h("div", { class: "pager" }, prev, next),
  );

  function go(changes) {
    Object.assign(params, changes);
    if (!("page" in changes)) delete params.page;
    for (const key of Object.keys(params)) if (params[key] === "" || params[key] === 0) delete params[key];
    history.replaceState(null, "", "#/workloads" + query(params));
    ctx.refreshNow();
  }

  function renderFilters() {
    const focused = document.activeElement && document.activeElement.id;
    const text = (id, value, testid, attrs = {}) =>
      h("input", { id, type: "text", value: value || "", "data-testid": testid, maxlength: "63", ...attrs });
    const search = text("f-q", params.q, "search", { type: "search", placeholder: "part of a name" });
    search.addEventListener("input", () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => go({ q: search.value.trim() }), 300);
    });
    const user = text("f-user", params.user, "filter-user");
    user.addEventListener("change", () => go({ user: user.value.trim() }));
    replace(
      filterBox,
      h("div", { class: "field grow" }, h("label", { for: "f-q" }, "Search by name"), search),
      select("f-project", "Project", options.projects, params.project, "filter-project"),
      select("f-status", "State", STATES, params.status, "filter-status"),
      select("f-type", "Type", TYPES, params.type, "filter-type"),
      select("f-node", "Node", options.nodes, params.node, "filter-node"),
      h("div", { class: "field" }, h("label", { for: "f-user" }, "Submitted by"), user),
    );
    for (const [id, key] of SELECTS) {
      filterBox.querySelector("#" + id).addEventListener("change", (event) => go({ [key]: event.target.value }));
    }
    if (focused) {
      const again = filterBox.querySelector("#" + focused);
      if (again) again.focus();
    }
  }

  function sortHeader(label, key) {
    const { sort, order } = sorting();
    const active = sort === key;
    const ariaSort = active ? (order === "asc" ? "ascending" : "descending") : "none";
    const button = h(
      "button",
      { type: "button", class: "sort", "data-testid": `sort-${key}` },
      label,
      h("span", { "aria-hidden": "true" }, active ? (order === "asc" ? " ▲" : " ▼") : ""),
    );
    button.addEventListener("click", () => go({ sort: key, order: active && order === "asc" ? "desc" : "asc" }));
    return h("th", { scope: "col", "aria-sort": ariaSort }, button);
  }

  function renderTable(result) {
    const first = page() * PAGE_SIZE;
    const total = result.total.toLocaleString("en-US");
    summary.textContent = result.total
      ? `Showing ${first + 1}–${first + result.items.length} of ${total} workloads`
      : "No workloads match these filters.";
    prev.disabled = page() === 0;
    next.disabled = first + result.items.length >= result.total;
    if (!result.items.length) return replace(table);
    const plain = (label, className = "") => h("th", { scope: "col", class: className }, label);
    const head = h(
      "tr",
      {},
      sortHeader("Name", "name"),
      sortHeader("Project", "project"),
      plain("Type"),
      sortHeader("State", "status"),
      sortHeader("Request", "gpu"),
      plain("Placement"),
      sortHeader("Submitted / runtime", "submitted_at"),
      plain("Preempted", "num"),
      plain("Exit", "num"),
      plain("Why"),
    );
    replace(
      table,
      h(
        "table",
        { "data-testid": "workloads-table" },
        h("caption", { class: "sr-only" }, "Workloads"),
        h("thead", {}, head),
        h("tbody", {}, result.items.map(row)),
      ),
    );
  }

  // New choices for one select, in place: the other fields, their values and focus stay.
  function setChoices(key, values) {
    if (JSON.stringify(values) === JSON.stringify(options[key])) return;
    options = { ...options, [key]: values };
    const [id, param] = CHOICES[key];
    const element = filterBox.querySelector("#" + id);
    if (element) element.replaceChildren(...choices(values, params[param]));
  }

  function fillNodes() {
    get("/names").then(
      (names) => ctx.isCurrent() && setChoices("nodes", names.nodes),
      () => {}, // the node filter keeps its choices; the next refresh tries again
    );
  }

  return {
    title: "Workloads",
    async refresh() {
      const paging = { limit: PAGE_SIZE, offset: page() * PAGE_SIZE };
      const [result, projects] = await Promise.all([
        get("/workloads" + query({ ...params, ...sorting(), page: undefined, ...paging })),
        get("/projects"),
      ]);
      if (!ctx.isCurrent()) return;
      if (!filterBox.childElementCount) renderFilters();
      setChoices("projects", projects.map((p) => p.name).sort());
      renderTable(result);
      fillNodes();
    },
  };
}
