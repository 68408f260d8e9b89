// Nodes and GPUs: every device as a bar of the fractions that share it, coloured by project,
// with its utilization and memory, so that fragmentation shows. A researcher sees other
// projects' shares as usage only (the server leaves their workload names out).

import { get } from "../api.js";
import { colourIndex, gpus, h, learnProjects, legend, mib, replace } from "../dom.js";

const holder = (share) => (share.workload ? `${share.project}/${share.workload}` : `${share.project} (usage only)`);

function segment(share) {
  const text = `${holder(share)}: ${gpus(share.milli)} GPU`;
  const element = h(
    "span",
    {
      class: `segment c${colourIndex(share.project)}`,
      "data-testid": "segment",
      "data-project": share.project,
      "data-workload": share.workload || null,
      "data-milli": String(share.milli),
      title: text,
    },
    h("span", { class: "sr-only" }, text),
  );
  element.style.width = `${Math.min(100, share.milli / 10)}%`;
  return element;
}

function meter(label, fraction, text) {
  const fill = h("span", { class: "meter-fill" });
  fill.style.width = `${Math.max(0, Math.min(100, fraction * 100))}%`;
  return h(
    "div",
    { class: "meter-row" },
    h("span", { class: "meter-label" }, label),
    h("span", { class: "meter", role: "presentation" }, fill),
    h("span", { class: "meter-text" }, text),
  );
}

function memory(d) {
  if (d.memory_used_mib !== null && d.memory_used_mib !== undefined) {
    return meter("mem", d.memory_used_mib / d.memory_mib, `${mib(d.memory_used_mib)} of ${mib(d.memory_mib)}`);
  }
  // Not measured: what the allocation holds of it.
  const held = Math.min(1000, d.allocated_milli) / 1000;
  return meter("mem", held, `~${mib(Math.round(d.memory_mib * held))} held`);
}

function device(node, d) {
  const free = 1000 - Math.min(1000, d.allocated_milli);
  const util = d.utilization_percent;
  const sharing = d.shares.length ? `, shared by ${d.shares.map(holder).join(", ")}` : "";
  return h(
    "li",
    { class: "device", "data-testid": "device", "data-node": node.name, "data-index": String(d.index) },
    h(
      "div",
      { class: "device-head" },
      h("strong", {}, `GPU ${d.index}`),
      h("span", { class: "muted small" }, `${d.model || node.gpu_model || ""} ${mib(d.memory_mib)}`.trim()),
    ),
    h(
      "div",
      { class: "bar", role: "img", "aria-label": `GPU ${d.index}: ${gpus(d.allocated_milli)} of 1 allocated${sharing}` },
      d.shares.map(segment),
    ),
    h(
      "ul",
      { class: "holders small" },
      d.shares.map((s) =>
        h(
          "li",
          {},
          h("span", { class: `swatch c${colourIndex(s.project)}`, "aria-hidden": "true" }),
          `${holder(s)} ${gpus(s.milli)}`,
        ),
      ),
      free ? h("li", { class: "muted" }, `free ${gpus(free)}`) : null,
    ),
    meter("util", (util ?? 0) / 100, util === null || util === undefined ? "unknown" : `${util}%`),
    memory(d),
  );
}

export function fragmentation(nodes) {
  let free = 0;
  let stranded = 0;
  let partial = 0;
  for (const node of nodes) {
    if (node.state !== "ready") continue;
    for (const d of node.devices) {
      const left = Math.max(0, 1000 - d.allocated_milli);
      free += left;
      if (left > 0 && left < 1000) {
        stranded += left;
        partial += 1;
      }
    }
  }
  return { free, stranded, partial };
}

export function mount(ctx) {
  const summary = h("p", { class: "callout", "data-testid": "fragmentation" });
  const legendBox = h("div", {});
  const list = h("div", { class: "nodes", "data-testid": "nodes" });
  ctx.main.append(h("h1", {}, "Nodes and GPUs"), summary, legendBox, list);

  return {
    title: "Nodes",
    async refresh() {
      const [nodes, names] = await Promise.all([get("/nodes"), get("/names")]);
      if (!ctx.isCurrent()) return;
      learnProjects(names.projects);
      const { free, stranded, partial } = fragmentation(nodes);
      replace(
        summary,
        `${gpus(free)} GPUs free on ready nodes. `,
        partial
          ? `${gpus(stranded)} of that is split over ${partial} partly used device${partial > 1 ? "s" : ""}: ` +
              "usable by fractions only, not by a workload that needs a whole GPU."
          : "No device is partly used.",
      );
      const held = nodes.flatMap((n) => n.devices.flatMap((d) => d.shares.map((s) => s.project)));
      const projects = [...new Set(held)].sort();
      replace(legendBox, projects.length ? legend(projects) : null);
      if (!nodes.length) return replace(list, h("p", { class: "muted" }, "No nodes yet."));
      replace(
        list,
        nodes.map((node) =>
          h(
            "section",
            { class: "panel node", "data-testid": "node", "data-name": node.name },
            h(
              "div",
              { class: "panel-head" },
              h("h2", {}, node.name),
              h("span", { class: `state ${node.state === "ready" ? "running" : "failed"}` }, node.state),
              h(
                "span",
                { class: "muted" },
                `${gpus(node.allocated_gpu_milli)} of ${node.gpu_count} GPUs allocated · ${node.executor} executor`,
              ),
            ),
            h("ul", { class: "devices" }, node.devices.map((d) => device(node, d))),
          ),
        ),
      );
    },
  };
}
