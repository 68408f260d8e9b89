// One workload: state and pending reason, actions the caller may take, tasks, the event
// timeline and a live tail of a task's log (read from an offset at every refresh).

import { api, get, query } from "../api.js";
import { clock, duration, h, replace, request } from "../dom.js";
import { placement, runtime } from "./workloads.js";

const LOG_KEEP = 256 * 1024;
const TASK_HEADS = ["Task", "State", "Node", "Devices", "Started", "Finished", "Exit", "Note"];

export function mount(ctx) {
  const { project, name } = ctx.args;
  const base = `/workloads/${encodeURIComponent(project)}/${encodeURIComponent(name)}`;
  const may = ctx.session.mayUse(project);
  let logTask = 0;
  let logOffset = 0;
  let logDone = false;
  let confirming = false;
  const header = h("div", { class: "title-row inline" });
  const actions = h("div", { class: "actions", "data-testid": "actions" });
  const message = h("div", { role: "status" });
  const reason = h("p", { class: "callout", "data-testid": "pending-reason", hidden: true });
  const facts = h("dl", { class: "facts", "data-testid": "facts" });
  const tasks = h("div", { class: "table-wrap" });
  const events = h("ol", { class: "timeline", "data-testid": "timeline" });
  const log = h("pre", { class: "log", "data-testid": "log", tabindex: "0", "aria-label": "Task log" });
  const logState = h("p", { class: "muted small", "data-testid": "log-state" });
  const taskPicker = h("div", { class: "field" });

  ctx.main.append(
    h("p", {}, h("a", { href: "#/workloads" }, "← All workloads")),
    header,
    actions,
    message,
    reason,
    h("section", { class: "panel" }, h("h2", {}, "Details"), facts),
    h("section", { class: "panel" }, h("h2", {}, "Tasks"), tasks),
    h("section", { class: "panel" }, h("div", { class: "panel-head" }, h("h2", {}, "Log"), taskPicker), log, logState),
    h("section", { class: "panel" }, h("h2", {}, "Events"), events),
  );

  async function act(verb, path, method = "POST") {
    try {
      await api(method, base + path);
      replace(message, h("p", { class: "note" }, `${verb}: ${project}/${name}.`));
    } catch (error) {
      const text = `Could not ${verb.toLowerCase()}: ${error.message}`;
      replace(message, h("p", { class: "error", role: "alert", "data-testid": "action-error" }, text));
    }
    confirming = false;
    await ctx.refreshNow();
  }

  function renderActions(w) {
    if (!may) return replace(actions);
    const button = (text, testid, className, onclick) =>
      h("button", { type: "button", class: className, "data-testid": testid, onclick }, text);
    const confirm = (on) => {
      confirming = on;
      renderActions(w);
      if (on) actions.querySelector("[data-testid=confirm-delete]").focus();
    };
    const buttons = [];
    if (w.status === "pending" || w.status === "running") {
      buttons.push(button("Suspend", "suspend", "", () => act("Suspended", "/suspend")));
    }
    if (w.status === "suspended") {
      buttons.push(button("Resume", "resume", "primary", () => act("Resumed", "/resume")));
    }
    if (w.status !== "deleting" && confirming) {
      buttons.push(
        h("span", {}, `Delete ${name} and stop its tasks? `),
        button("Yes, delete", "confirm-delete", "danger", () => act("Deleted", "", "DELETE")),
        button("Cancel", "cancel-delete", "quiet", () => confirm(false)),
      );
    } else if (w.status !== "deleting") {
      buttons.push(button("Delete", "delete", "danger", () => confirm(true)));
    }
    replace(actions, buttons);
  }

  function fact(term, value, testid) {
    const text = value === null || value === undefined || value === "" ? "–" : String(value);
    return [h("dt", {}, term), h("dd", testid ? { "data-testid": testid } : {}, text)];
  }

  function renderFacts(w) {
    const exits = w.task_list.filter((t) => t.exit_code !== null).map((t) => `task ${t.task_index}: ${t.exit_code}`);
    replace(
      facts,
      fact("Type", w.type),
      fact("Request", request(w)),
      fact("Tasks", w.min_available ? `${w.tasks} (at least ${w.min_available} together)` : w.tasks),
      fact("Priority", w.priority),
      fact("Preemptible", w.preemptible ? "yes" : "no"),
      fact("Placement", placement({ ...w, placement: w.task_list.filter((t) => t.state !== "done") })),
      fact("Submitted", `${clock(w.submitted_at)} by ${w.submitted_by || "?"}`),
      fact("Runtime", runtime(w)),
      fact("Preemptions", w.preemptions, "preemptions"),
      fact("Exit codes", exits.join(", ")),
      fact("Command", w.command.join(" ")),
      fact("Image", w.image),
      fact("Environment", Object.keys(w.env).join(", ")),
      w.duration_s ? fact("Simulated duration", duration(w.duration_s)) : null,
    );
  }

  function renderTasks(w) {
    if (!w.task_list.length) return replace(tasks, h("p", { class: "muted" }, "No task has started yet."));
    replace(
      tasks,
      h(
        "table",
        { "data-testid": "tasks-table" },
        h("thead", {}, h("tr", {}, TASK_HEADS.map((t) => h("th", { scope: "col" }, t)))),
        h(
          "tbody",
          {},
          w.task_list.map((t) =>
            h(
              "tr",
              {},
              [
                String(t.task_index),
                t.state,
                t.node,
                t.devices.join(", "),
                clock(t.started_at),
                clock(t.finished_at),
                t.exit_code === null ? "–" : String(t.exit_code),
                t.reason || "",
              ].map((cell) => h("td", {}, cell)),
            ),
          ),
        ),
      ),
    );
  }

  function renderEvents(w) {
    replace(
      events,
      [...w.events].reverse().map((e) =>
        h(
          "li",
          { "data-testid": "event" },
          h("time", { datetime: new Date(e.at * 1000).toISOString() }, clock(e.at)),
          h("span", { class: "kind" }, e.kind),
          e.message,
          e.node ? ` (on ${e.node})` : "",
        ),
      ),
    );
  }

  function renderPicker(w) {
    if (w.tasks <= 1 || taskPicker.childElementCount) return;
    const options = Array.from({ length: Math.min(w.tasks, 1000) }, (_, i) => h("option", { value: String(i) }, `task ${i}`));
    const picker = h("select", { id: "log-task", "data-testid": "log-task" }, options);
    picker.addEventListener("change", () => {
      logTask = Number(picker.value);
      logOffset = 0;
      logDone = false;
      log.textContent = "";
      ctx.refreshNow();
    });
    replace(taskPicker, h("label", { for: "log-task" }, "Task"), picker);
  }

  async function tail() {
    if (logDone) return;
    const chunk = await get(`${base}/logs${query({ task: logTask, offset: logOffset })}`);
    if (!ctx.isCurrent()) return;
    const follow = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    if (chunk.text) {
      const text = log.textContent + chunk.text;
      log.textContent = text.length > LOG_KEEP ? text.slice(text.length - LOG_KEEP) : text;
    }
    logOffset = chunk.next_offset;
    logDone = chunk.complete;
    logState.textContent = logDone
      ? "The task has ended: this is its whole log."
      : `Following (${logOffset.toLocaleString("en-US")} bytes so far).`;
    if (follow) log.scrollTop = log.scrollHeight;
  }

  return {
    title: `${project}/${name}`,
    async refresh() {
      let w;
      try {
        w = await get(base);
      } catch (error) {
        if (error.status !== 404) throw error;
        replace(header, h("h1", {}, `${project}/${name}`));
        replace(actions);
        const text = "This workload does not exist (any more): it may have been deleted. Its events stay in the event log.";
        replace(message, h("p", { class: "note", "data-testid": "gone" }, text));
        return;
      }
      if (!ctx.isCurrent()) return;
      replace(
        header,
        h("h1", {}, h("span", { class: "muted" }, `${w.project} / `), w.name),
        h("span", { class: `state big ${w.status}`, "data-testid": "status" }, w.status),
      );
      if (!confirming) renderActions(w);
      const waiting = w.status === "pending" || w.status === "suspended";
      reason.hidden = !waiting;
      const why = w.pending_reason || "waiting for the next scheduling cycle";
      reason.textContent = waiting ? `Why it waits: ${why}` : "";
      renderFacts(w);
      renderTasks(w);
      renderEvents(w);
      renderPicker(w);
      try {
        await tail();
      } catch (error) {
        logState.textContent = `Could not read the log: ${error.message}`;
      }
    },
  };
}
