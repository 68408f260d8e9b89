// Overview: the cluster now (from /top) and over time (from /history): allocation stacked by
// project, utilization and capacity as lines, range buttons and drag-to-zoom.

import { get, query } from "../api.js";
import { TimeChart } from "../chart.js";
import {
  clock,
  duration,
  gpus,
  h,
  hours,
  learnProjects,
  legend,
  nowSeconds,
  percent,
  projectColour,
  replace,
  trim,
} from "../dom.js";

export const RANGES = ["1h", "24h", "7d", "30d"];
const RANGE_WORDS = {
  "1h": "the last hour",
  "24h": "the last 24 hours",
  "7d": "the last 7 days",
  "30d": "the last 30 days",
};

// History as chart data; shared with the projects page.
export function historyChart(history, stacks, lines) {
  const { times, start, end } = history;
  return { times, step: history.step_s, start, end, stacks, lines };
}

// `series`: each project's series to ask for (all three by default; the overview draws only
// allocation, a third of the answer).
export async function fetchHistory(range, zoom, series) {
  const window = zoom ? { start: zoom.start, end: zoom.end } : { range };
  try {
    return await get("/history" + query({ ...window, project_series: series }));
  } catch (error) {
    if (error.status === 404) return null; // no history recorded (or no history store) yet
    throw error;
  }
}

// The 1h / 24h / 7d / 30d buttons; `show(range)` marks the one in use (none while zoomed).
export function rangeControl(initial, onPick) {
  const buttons = RANGES.map((value) =>
    h("button", { type: "button", class: "seg", "data-testid": `range-${value}`, onclick: () => onPick(value) }, value),
  );
  const element = h("div", { class: "segmented", role: "group", "aria-label": "Time range" }, buttons);
  const show = (range) => {
    for (const button of buttons) button.setAttribute("aria-pressed", String(button.textContent === range));
  };
  show(initial);
  return { element, show };
}

function lastKnown(values) {
  for (let i = values.length - 1; i >= 0; i--) if (values[i] !== null && values[i] !== undefined) return i;
  return null;
}

function card(label, testid, help) {
  const value = h("dd", { "data-testid": testid }, "–");
  const element = h("div", { class: "card" }, h("dt", {}, label), value, h("dd", { class: "muted small" }, help));
  return { value, element };
}

export function mount(ctx) {
  let range = RANGES.includes(ctx.params.range) ? ctx.params.range : "1h";
  let zoom = null;
  const cards = {
    capacity: card("Capacity", "total-capacity", "GPUs on ready nodes"),
    allocated: card("Allocated", "total-allocated", "GPUs held by running work"),
    utilized: card("Utilized", "total-utilized", "GPUs busy, last 5 minutes"),
    running: card("Running", "total-running", "workloads"),
    pending: card("Pending", "total-pending", "workloads waiting"),
    pendingGpu: card("Pending demand", "total-pending-gpu", "GPUs asked for, not held"),
  };
  const idle = h("p", { class: "callout", "data-testid": "idle-share" });
  const chart = new TimeChart({
    label: "GPUs allocated by project (stacked), utilized and capacity over time",
    onZoom: (start, end) => {
      zoom = { start, end };
      ctx.refreshNow();
    },
  });
  const ranges = rangeControl(range, (value) => {
    range = value;
    zoom = null;
    history.replaceState(null, "", `#/overview?range=${value}`);
    ctx.refreshNow();
  });
  const reset = h("button", { type: "button", class: "quiet", "data-testid": "zoom-reset", hidden: true }, "Reset zoom");
  reset.addEventListener("click", () => {
    zoom = null;
    ctx.refreshNow();
  });
  const chartNote = h("p", { class: "muted small", "data-testid": "chart-note" });
  const latest = h("p", { class: "latest", "data-testid": "chart-latest" });
  const legendBox = h("div", {});
  const pendingList = h("div", { "data-testid": "pending-list" });

  ctx.main.append(
    h("h1", {}, "Overview"),
    h("dl", { class: "cards" }, Object.values(cards).map((c) => c.element)),
    idle,
    h(
      "section",
      { class: "panel", "aria-labelledby": "chart-title" },
      h("div", { class: "panel-head" }, h("h2", { id: "chart-title" }, "GPUs over time"), ranges.element, reset),
      chart.element,
      latest,
      legendBox,
      chartNote,
    ),
    h(
      "section",
      { class: "panel", "aria-labelledby": "pending-title" },
      h("h2", { id: "pending-title" }, "Waiting longest"),
      pendingList,
    ),
  );

  function renderTop(top) {
    const known = top.projects.filter((p) => p.utilized_gpu_milli !== null && p.utilized_gpu_milli !== undefined);
    const utilized = known.length ? known.reduce((sum, p) => sum + p.utilized_gpu_milli, 0) : null;
    const sum = (value) => top.projects.reduce((total, p) => total + value(p), 0);
    cards.capacity.value.textContent = gpus(top.capacity_gpu_milli);
    cards.allocated.value.textContent = gpus(top.allocated_gpu_milli);
    cards.utilized.value.textContent = utilized === null ? "unknown" : gpus(utilized);
    cards.running.value.textContent = String(sum((p) => p.running));
    cards.pending.value.textContent = String(sum((p) => p.pending));
    cards.pendingGpu.value.textContent = gpus(sum((p) => Math.max(0, p.requested_gpu_milli - p.allocated_gpu_milli)));
  }

  function renderIdle(data, words) {
    const allocated = hours(data.allocated_gpu_hours);
    if (data.idle_allocated_share === null || data.idle_allocated_share === undefined) {
      replace(idle, `Utilization was not measured in ${words}, so how much of the ${allocated} allocated GPU-hours sat idle is unknown.`);
      return;
    }
    const idleHours = hours(data.idle_allocated_gpu_hours);
    replace(
      idle,
      h("strong", { "data-testid": "idle-percent" }, percent(data.idle_allocated_share)),
      ` of allocated GPU-hours were idle in ${words} `,
      `(${idleHours} of ${allocated} GPU-hours allocated, ${hours(data.utilized_gpu_hours)} utilized).`,
    );
  }

  function renderLatest(data) {
    const i = lastKnown(data.allocated_gpu);
    if (i === null) return replace(latest, "No allocation recorded in this range.");
    const utilized = data.utilized_gpu[i];
    const pending = data.pending_workloads[i] ?? 0;
    replace(
      latest,
      `Latest (${clock(data.times[i])}): `,
      h("span", { "data-testid": "latest-allocated" }, trim(data.allocated_gpu[i])),
      " GPUs allocated, ",
      h("span", { "data-testid": "latest-utilized" }, utilized === null ? "unknown" : trim(utilized)),
      " utilized, capacity ",
      h("span", { "data-testid": "latest-capacity" }, trim(data.capacity_gpu[i])),
      ", ",
      h("span", { "data-testid": "latest-pending" }, trim(pending, 1)),
      pending === 1 ? " workload pending." : " workloads pending.",
    );
    latest.dataset.time = String(data.times[i]);
  }

  function renderHistory(data) {
    ranges.show(zoom ? null : range);
    reset.hidden = !zoom;
    if (!data) {
      const now = nowSeconds();
      chart.update({ times: [], step: 60, start: now - 3600, end: now, stacks: [], lines: [] });
      replace(idle, "No history yet: the server records allocation and utilization every minute; come back in a minute or two.");
      replace(latest);
      replace(legendBox);
      return;
    }
    const projects = [...data.projects].sort((a, b) => a.key.localeCompare(b.key));
    const stacks = projects.map((p) => ({ label: p.key, values: p.allocated_gpu, colour: projectColour(p.key) }));
    chart.update(
      historyChart(data, stacks, [
        { label: "capacity", values: data.capacity_gpu, colour: "--capacity", dash: true, width: 1.5 },
        { label: "utilized", values: data.utilized_gpu, colour: "--util", width: 2.5 },
      ]),
    );
    replace(
      legendBox,
      legend(projects.map((p) => p.key)),
      h("p", { class: "muted small" }, "Areas: GPUs allocated by project. Solid line: GPUs utilized. Dashed: capacity. Gaps: no data."),
    );
    renderIdle(data, zoom ? `${clock(zoom.start)} – ${clock(zoom.end)}` : RANGE_WORDS[range]);
    renderLatest(data);
    chartNote.textContent =
      `Each point averages ${duration(data.step_s)}. ` + "Drag across the chart to zoom in; arrow keys step through the points.";
  }

  function renderPending(page) {
    if (!page.items.length) return replace(pendingList, h("p", { class: "muted" }, "Nothing is waiting."));
    const href = (w) => `#/workloads/${encodeURIComponent(w.project)}/${encodeURIComponent(w.name)}`;
    const items = page.items.map((w) =>
      h(
        "li",
        {},
        h("a", { href: href(w) }, `${w.project}/${w.name}`),
        ` waiting ${duration(nowSeconds() - w.submitted_at)}: `,
        h("span", { class: "reason" }, w.pending_reason || "waiting for the next scheduling cycle"),
      ),
    );
    const more = h("a", { href: "#/workloads?status=pending" }, `All ${page.total} pending workloads you can see`);
    replace(pendingList, h("ul", { class: "plain" }, items), page.total > items.length ? h("p", { class: "small" }, more) : null);
  }

  return {
    title: "Overview",
    async refresh() {
      const [top, data, pending] = await Promise.all([
        get("/top"),
        fetchHistory(range, zoom, "allocated"),
        get("/workloads" + query({ status: "pending", sort: "submitted_at", order: "asc", limit: 5 })),
      ]);
      if (!ctx.isCurrent()) return;
      learnProjects(top.projects.map((p) => p.name));
      renderTop(top);
      renderHistory(data);
      renderPending(pending);
    },
  };
}
