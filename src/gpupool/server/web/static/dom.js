// Small DOM and formatting helpers. Text always goes in as text nodes, never parsed as HTML,
// so names from the server cannot inject markup.

export function h(tag, props, ...children) {
  const element = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key.startsWith("on")) element.addEventListener(key.slice(2), value);
    else if (key === "text") element.textContent = value;
    else if (key === "class") element.className = value;
    else if (key === "value") element.value = value;
    else if (key === "checked" || key === "selected") element[key] = Boolean(value);
    else element.setAttribute(key, value === true ? "" : String(value));
  }
  append(element, children);
  return element;
}

function append(element, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function replace(element, ...children) {
  element.replaceChildren();
  append(element, children);
  return element;
}

export function svg(tag, attributes) {
  const element = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [key, value] of Object.entries(attributes || {})) element.setAttribute(key, value);
  return element;
}

// Numbers --------------------------------------------------------------------------------

export function gpus(milli) {
  if (milli === null || milli === undefined) return "–";
  return trim(milli / 1000);
}

export function trim(value, digits = 2) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const rounded = Number(value.toFixed(digits));
  return rounded.toLocaleString("en-US", { maximumFractionDigits: digits });
}

// GPU-hours: one decimal, but two significant digits below 1 so a short run does not read "0".
export function hours(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  if (value === 0 || Math.abs(value) >= 1) return trim(value, 1);
  return Number(value.toPrecision(2)).toLocaleString("en-US", { maximumFractionDigits: 6 });
}

export function percent(share) {
  if (share === null || share === undefined) return "–";
  return `${Math.round(share * 100)}%`;
}

export function mib(value) {
  if (value === null || value === undefined) return "–";
  if (value >= 1024) return `${trim(value / 1024, 1)} GiB`;
  return `${value} MiB`;
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || seconds < 0) return "–";
  const s = Math.floor(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m ${s % 60}s`;
  if (s < 86400) return `${Math.floor(s / 3600)}h ${Math.floor((s % 3600) / 60)}m`;
  return `${Math.floor(s / 86400)}d ${Math.floor((s % 86400) / 3600)}h`;
}

export function clock(epoch) {
  if (!epoch) return "–";
  const date = new Date(epoch * 1000);
  const now = new Date();
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" });
  if (date.toDateString() === now.toDateString()) return time;
  return `${date.toLocaleDateString([], { month: "short", day: "numeric" })} ${time}`;
}

// A chart axis label: the time of day, with the date when the axis spans days.
export function axisTime(epoch, span) {
  const date = new Date(epoch * 1000);
  const time = date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  if (span < 2 * 86400) return time;
  return date.toLocaleDateString([], { month: "short", day: "numeric" }) + (span < 8 * 86400 ? ` ${time}` : "");
}

export function nowSeconds() {
  return Date.now() / 1000;
}

// What a workload asks for per task, in words: "1 GPU", "0.5 GPU (up to 0.8)", "8 GiB of GPU".
export function request(workload) {
  let each;
  if (workload.gpu_kind === "whole") each = `${workload.gpu_amount} GPU`;
  else if (workload.gpu_kind === "fraction") {
    each = `${gpus(workload.gpu_amount)} GPU`;
    if (workload.gpu_limit_milli) each += ` (up to ${gpus(workload.gpu_limit_milli)})`;
  } else each = `${mib(workload.gpu_amount)} of GPU memory`;
  return workload.tasks > 1 ? `${workload.tasks} × ${each}` : each;
}

// Colours per project: the same project gets the same colour on every page of a session,
// assigned in order of the sorted project names first seen.
const PALETTE_SIZE = 12;
const colourOf = new Map();

export function learnProjects(names) {
  for (const name of [...names].sort()) {
    if (!colourOf.has(name)) colourOf.set(name, colourOf.size % PALETTE_SIZE);
  }
}

export function colourIndex(project) {
  if (!colourOf.has(project)) learnProjects([project]);
  return colourOf.get(project);
}

// The colour as a CSS value, for canvas drawing (the page's CSS defines --p0..--p11).
export function cssColour(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim() || "#888";
}

// The theme's custom property holding the project's colour.
export function projectColour(project) {
  return `--p${colourIndex(project)}`;
}

export function legend(projects) {
  return h(
    "ul",
    { class: "legend", "data-testid": "legend", "aria-label": "Project colours" },
    projects.map((name) =>
      h("li", {}, h("span", { class: `swatch c${colourIndex(name)}`, "aria-hidden": "true" }), name),
    ),
  );
}
