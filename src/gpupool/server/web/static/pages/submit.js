// Submit a workload: the fields of `gpupool submit`, sent as POST /api/v1/workloads. The
// server's 422 names the field; the message is shown next to it.

import { ApiError, api, get } from "../api.js";
import { h, replace } from "../dom.js";

// Split a command line like a shell does for the simple cases: spaces separate arguments,
// quotes group them, a backslash escapes the next character.
export function splitCommand(text) {
  const out = [];
  let current = "";
  let quote = null;
  let started = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "\\" && quote !== "'" && i + 1 < text.length) {
      current += text[++i];
      started = true;
    } else if (quote) {
      if (c === quote) quote = null;
      else current += c;
    } else if (c === "'" || c === '"') {
      quote = c;
      started = true;
    } else if (/\s/.test(c)) {
      if (started) out.push(current);
      current = "";
      started = false;
    } else {
      current += c;
      started = true;
    }
  }
  if (quote) throw new Error(`the command has an unclosed ${quote} quote`);
  if (started) out.push(current);
  return out;
}

function pairs(text, what) {
  const out = {};
  for (const line of text.split("\n").map((l) => l.trim()).filter(Boolean)) {
    const at = line.indexOf("=");
    if (at < 1) throw new Error(`${what}: "${line}" is not KEY=VALUE`);
    out[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  return out;
}

const FIELDS = [
  // [key, label, type, help, attributes]
  ["name", "Name", "text", "lower-case letters, digits, '.', '_', '-'", { required: true, maxlength: "63" }],
  ["gpu", "GPUs per task", "text", "whole devices (1, 2) or a fraction (0.5); or give GPU memory instead", {}],
  ["gpu_memory", "GPU memory per task", "text", "instead of GPUs, like 8G", {}],
  ["gpu_limit", "Fraction may burst to", "text", "for a fraction: up to this while the device is idle (0.8)", {}],
  ["tasks", "Tasks", "number", "default 1", { min: "1", max: "10000" }],
  ["min_available", "Tasks that must start together", "number", "a gang; default all", { min: "1" }],
  ["priority", "Priority", "number", "inside the project; default by type", {}],
  ["cpu_milli", "CPU (millicores)", "number", "per task", { min: "0" }],
  ["memory", "Memory", "text", "per task, like 16G", {}],
  ["command", "Command", "text", "as in a shell: python train.py --epochs 3", {}],
  ["image", "Container image", "text", "Kubernetes only; default: the server's", {}],
  ["duration_s", "Simulated duration (s)", "number", "simulated nodes only: how long tasks run", { step: "any" }],
  ["grace_period_s", "Grace period (s)", "number", "time to stop before a kill; default 30", { min: "0" }],
];

const TYPES = ["train", "interactive", "inference"].map((t) => [t, t]);
const PREEMPTIBLE = [
  ["", "by type (train: yes)"],
  ["true", "yes"],
  ["false", "no"],
];
const SELECTOR_HELP = "label=value1,value2, one per line (like nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3)";

export function mount(ctx) {
  const inputs = {};
  const errors = {};
  // One labelled control with its help and the place its error goes.
  const field = (key, label, input, help, wide = false) => {
    const id = `s-${key}`;
    input.id = id;
    input.dataset.testid = `submit-${key}`;
    input.setAttribute("aria-describedby", `${id}-help ${id}-error`);
    inputs[key] = input;
    errors[key] = h("span", { id: `${id}-error`, class: "error small", role: "alert" });
    return h(
      "div",
      { class: wide ? "field wide" : "field" },
      h("label", { for: id }, label),
      input,
      h("span", { id: `${id}-help`, class: "muted small" }, help || ""),
      errors[key],
    );
  };
  const control = (key, label, type, help, attrs) => field(key, label, h("input", { name: key, type, ...attrs }), help);
  const choice = (key, label, values) =>
    field(key, label, h("select", {}, values.map(([value, text]) => h("option", { value }, text))));
  const area = (key, label, help) => field(key, label, h("textarea", { rows: "3" }), help, true);
  const general = h("p", { class: "error", role: "alert", "data-testid": "submit-error" });
  const form = h(
    "form",
    { class: "submit-form", "data-testid": "submit-form", novalidate: true },
    control(...FIELDS[0]),
    choice("project", "Project", []),
    choice("type", "Type", TYPES),
    FIELDS.slice(1).map((f) => control(...f)),
    choice("preemptible", "Preemptible", PREEMPTIBLE),
    area("env", "Environment", "KEY=VALUE, one per line"),
    area("node_selector", "Node selector", SELECTOR_HELP),
    general,
    h(
      "div",
      { class: "actions" },
      h("button", { type: "submit", class: "primary", "data-testid": "submit-button" }, "Submit"),
      h("a", { href: "#/workloads", class: "button quiet" }, "Cancel"),
    ),
  );
  ctx.main.append(
    h("h1", {}, "Submit a workload"),
    h("p", { class: "muted" }, "The same fields as ", h("code", {}, "gpupool submit"), "."),
    form,
  );

  function body() {
    const out = { name: inputs.name.value.trim(), project: inputs.project.value, type: inputs.type.value };
    for (const key of ["gpu", "gpu_memory", "gpu_limit", "memory", "image"]) {
      const value = inputs[key].value.trim();
      if (value) out[key] = value;
    }
    for (const key of ["tasks", "min_available", "priority", "cpu_milli", "duration_s", "grace_period_s"]) {
      const value = inputs[key].value.trim();
      if (value) out[key] = Number(value);
    }
    if (inputs.preemptible.value) out.preemptible = inputs.preemptible.value === "true";
    const command = inputs.command.value.trim();
    if (command) out.command = splitCommand(command);
    const env = pairs(inputs.env.value, "environment");
    if (Object.keys(env).length) out.env = env;
    const selector = pairs(inputs.node_selector.value, "node selector");
    const values = (text) => text.split(",").map((v) => v.trim()).filter(Boolean);
    const selectors = Object.fromEntries(Object.entries(selector).map(([key, text]) => [key, values(text)]));
    if (Object.keys(selectors).length) out.node_selector = selectors;
    return out;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    for (const span of Object.values(errors)) span.textContent = "";
    general.textContent = "";
    let payload;
    try {
      payload = body();
    } catch (error) {
      general.textContent = error.message;
      return;
    }
    try {
      const out = await api("POST", "/workloads", payload);
      ctx.navigate(`#/workloads/${encodeURIComponent(out.project)}/${encodeURIComponent(out.name)}`);
    } catch (error) {
      let placed = false;
      for (const item of error instanceof ApiError ? error.errors : []) {
        const key = (item.field || "").split(".")[0];
        if (errors[key]) {
          errors[key].textContent = item.message;
          placed = true;
        }
      }
      general.textContent = placed ? "Some fields need a fix (see above)." : error.message;
      const wrong = Object.keys(errors).find((key) => errors[key].textContent);
      if (wrong) inputs[wrong].focus();
    }
  });

  return {
    title: "Submit",
    async refresh() {
      if (inputs.project.childElementCount) return;
      const names = ctx.session.isAdmin ? (await get("/projects")).map((p) => p.name) : ctx.session.projects;
      if (!ctx.isCurrent()) return;
      replace(inputs.project, [...names].sort().map((n) => h("option", { value: n }, n)));
      if (!names.length) {
        general.textContent = "You are not a member of any project: ask an admin to add you (gpupool user projects).";
      }
    },
  };
}
