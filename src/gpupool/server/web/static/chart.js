// A time chart on <canvas>: stacked areas (allocation by project) under lines (utilization,
// capacity). A null value is a gap, never a zero. Hover or arrow keys show a tooltip; dragging
// across the chart selects a time range to zoom into (the page refetches that range).

import { axisTime, clock, cssColour, h, trim } from "./dom.js";

const PAD = { left: 46, right: 14, top: 12, bottom: 28 };
const live = new Set();

function redrawAll() {
  for (const chart of live) {
    if (chart.canvas.isConnected) chart.draw();
    else live.delete(chart);
  }
}
window.addEventListener("resize", redrawAll);
window.addEventListener("gpupool-theme", redrawAll);

function niceStep(max, ticks) {
  const raw = max / ticks;
  const power = 10 ** Math.floor(Math.log10(raw));
  for (const factor of [1, 2, 2.5, 5, 10]) if (raw <= factor * power) return factor * power;
  return 10 * power;
}

export class TimeChart {
  // label: what the chart shows, for screen readers; onZoom(start, end) after a drag.
  constructor({ label, onZoom, small = false, testid = "chart" }) {
    this.onZoom = onZoom;
    this.data = null;
    this.hover = null;
    this.drag = null;
    this.canvas = h("canvas", {
      class: small ? "chart small" : "chart",
      tabindex: "0",
      role: "img",
      "aria-label": label,
      "data-testid": testid,
    });
    this.tooltip = h("div", { class: "tooltip", role: "status", hidden: true });
    this.element = h("div", { class: "chart-box" }, this.canvas, this.tooltip);
    this.canvas.addEventListener("pointermove", (event) => this.pointerMove(event));
    this.canvas.addEventListener("pointerleave", () => this.setHover(null));
    this.canvas.addEventListener("pointerdown", (event) => this.pointerDown(event));
    this.canvas.addEventListener("pointerup", (event) => this.pointerUp(event));
    this.canvas.addEventListener("keydown", (event) => this.key(event));
    this.canvas.addEventListener("blur", () => this.setHover(null));
    live.add(this);
  }

  // data: {times, step, start, end, stacks: [{label, values, colour}], lines: [{label,
  // values, colour, dash}]}; a colour is a CSS custom property of the theme ("--util"), read
  // at each draw so that a theme switch recolours the chart.
  update(data) {
    this.data = data;
    const points = data.times.length;
    if (this.hover !== null && this.hover >= points) this.hover = null;
    this.draw();
  }

  geometry() {
    const width = this.canvas.clientWidth || 600;
    const height = this.canvas.clientHeight || 240;
    return { width, height, plotW: width - PAD.left - PAD.right, plotH: height - PAD.top - PAD.bottom };
  }

  x(time) {
    const { plotW } = this.geometry();
    const { start, end } = this.data;
    return PAD.left + ((time - start) / Math.max(1, end - start)) * plotW;
  }

  indexAt(clientX) {
    if (!this.data || !this.data.times.length) return null;
    const rect = this.canvas.getBoundingClientRect();
    const { plotW } = this.geometry();
    const { start, end } = this.data;
    const time = start + ((clientX - rect.left - PAD.left) / plotW) * (end - start);
    let best = 0;
    this.data.times.forEach((t, i) => {
      const middle = t + this.data.step / 2;
      if (Math.abs(middle - time) < Math.abs(this.data.times[best] + this.data.step / 2 - time)) best = i;
    });
    return best;
  }

  timeAt(clientX) {
    const rect = this.canvas.getBoundingClientRect();
    const { plotW } = this.geometry();
    const { start, end } = this.data;
    const fraction = Math.min(1, Math.max(0, (clientX - rect.left - PAD.left) / plotW));
    return start + fraction * (end - start);
  }

  stackTotals() {
    const { times, stacks } = this.data;
    return times.map((_, i) => {
      const known = stacks.filter((s) => s.values[i] !== null && s.values[i] !== undefined);
      return known.length ? known.reduce((sum, s) => sum + s.values[i], 0) : null;
    });
  }

  draw() {
    const canvas = this.canvas;
    const { width, height, plotW, plotH } = this.geometry();
    const ratio = window.devicePixelRatio || 1;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const ink = cssColour("--muted");
    const grid = cssColour("--grid");
    ctx.font = "11px system-ui, sans-serif";
    if (!this.data || !this.data.times.length) {
      ctx.fillStyle = ink;
      ctx.fillText("no data for this range yet", PAD.left + 8, PAD.top + plotH / 2);
      return;
    }
    const { times, step, stacks, lines } = this.data;
    const totals = this.stackTotals();
    let max = 1;
    for (const value of totals) if (value !== null) max = Math.max(max, value);
    for (const line of lines) for (const v of line.values) if (v !== null && v !== undefined) max = Math.max(max, v);
    const tick = niceStep(max * 1.08, 4);
    const top = Math.ceil((max * 1.08) / tick) * tick;
    const y = (value) => PAD.top + plotH - (value / top) * plotH;
    this.y = y;
    // Grid and axes.
    ctx.strokeStyle = grid;
    ctx.fillStyle = ink;
    ctx.lineWidth = 1;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (let v = 0; v <= top + 1e-9; v += tick) {
      ctx.beginPath();
      ctx.moveTo(PAD.left, Math.round(y(v)) + 0.5);
      ctx.lineTo(PAD.left + plotW, Math.round(y(v)) + 0.5);
      ctx.stroke();
      ctx.fillText(trim(v, 1), PAD.left - 6, y(v));
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    const labels = Math.max(2, Math.floor(plotW / 120));
    for (let k = 0; k <= labels; k++) {
      const t = this.data.start + ((this.data.end - this.data.start) * k) / labels;
      ctx.textAlign = k === 0 ? "left" : k === labels ? "right" : "center";
      ctx.fillText(axisTime(t, this.data.end - this.data.start), this.x(t), PAD.top + plotH + 8);
    }
    const mid = (i) => this.x(times[i] + step / 2);
    // Stacked areas: a run of known points is one polygon.
    const base = times.map(() => 0);
    for (const stack of stacks) {
      const upper = times.map((_, i) => (totals[i] === null ? null : base[i] + (stack.values[i] ?? 0)));
      ctx.fillStyle = cssColour(stack.colour);
      ctx.globalAlpha = 0.75;
      for (const run of runs(upper)) {
        ctx.beginPath();
        run.forEach((i, n) => (n ? ctx.lineTo(mid(i), y(upper[i])) : ctx.moveTo(mid(i), y(upper[i]))));
        for (const i of [...run].reverse()) ctx.lineTo(mid(i), y(base[i]));
        ctx.closePath();
        ctx.fill();
      }
      ctx.globalAlpha = 1;
      upper.forEach((v, i) => (base[i] = v ?? base[i]));
    }
    for (const line of lines) {
      ctx.strokeStyle = cssColour(line.colour);
      ctx.lineWidth = line.width || 2;
      ctx.setLineDash(line.dash ? [6, 4] : []);
      for (const run of runs(line.values)) {
        ctx.beginPath();
        run.forEach((i, n) => (n ? ctx.lineTo(mid(i), y(line.values[i])) : ctx.moveTo(mid(i), y(line.values[i]))));
        if (run.length === 1) ctx.arc(mid(run[0]), y(line.values[run[0]]), 1.5, 0, 2 * Math.PI);
        ctx.stroke();
      }
      ctx.setLineDash([]);
    }
    if (this.hover !== null) {
      ctx.strokeStyle = ink;
      ctx.lineWidth = 1;
      ctx.beginPath();
      ctx.moveTo(Math.round(mid(this.hover)) + 0.5, PAD.top);
      ctx.lineTo(Math.round(mid(this.hover)) + 0.5, PAD.top + plotH);
      ctx.stroke();
    }
    if (this.drag && this.drag.moved) {
      const [a, b] = [this.drag.from, this.drag.to].sort((p, q) => p - q);
      ctx.fillStyle = cssColour("--accent");
      ctx.globalAlpha = 0.18;
      ctx.fillRect(a, PAD.top, b - a, plotH);
      ctx.globalAlpha = 1;
    }
  }

  localX(event) {
    return event.clientX - this.canvas.getBoundingClientRect().left;
  }

  pointerMove(event) {
    if (this.drag) {
      this.drag.to = this.localX(event);
      this.drag.moved = this.drag.moved || Math.abs(this.drag.to - this.drag.from) > 5;
    }
    this.setHover(this.indexAt(event.clientX));
  }

  pointerDown(event) {
    if (!this.data || !this.onZoom || event.button !== 0) return;
    this.canvas.setPointerCapture(event.pointerId);
    this.drag = { from: this.localX(event), to: this.localX(event), startX: event.clientX, moved: false };
  }

  pointerUp(event) {
    const drag = this.drag;
    this.drag = null;
    if (!drag || !drag.moved) return this.draw();
    const a = this.timeAt(Math.min(drag.startX, event.clientX));
    const b = this.timeAt(Math.max(drag.startX, event.clientX));
    this.draw();
    if (b - a >= 60) this.onZoom(Math.floor(a), Math.ceil(b));
  }

  key(event) {
    if (!this.data || !this.data.times.length) return;
    const last = this.data.times.length - 1;
    if (event.key === "ArrowLeft") this.setHover(this.hover === null ? last : Math.max(0, this.hover - 1));
    else if (event.key === "ArrowRight") this.setHover(this.hover === null ? last : Math.min(last, this.hover + 1));
    else if (event.key === "Escape") this.setHover(null);
    else return;
    event.preventDefault();
  }

  setHover(index) {
    this.hover = index;
    this.draw();
    if (index === null || !this.data) {
      this.tooltip.hidden = true;
      return;
    }
    const { times, step, stacks, lines } = this.data;
    const rows = [];
    for (const line of lines) rows.push([line.label, line.values[index], line.colour]);
    for (const stack of [...stacks].reverse()) {
      if (stack.values[index]) rows.push([stack.label, stack.values[index], stack.colour]);
    }
    this.tooltip.replaceChildren(
      h("div", { class: "tip-time" }, `${clock(times[index])} – ${clock(times[index] + step)}`),
      ...rows.map(([label, value, colour]) => {
        const swatch = h("span", { class: "swatch", "aria-hidden": "true" });
        swatch.style.background = `var(${colour})`;
        const text = value === null || value === undefined ? "unknown" : `${trim(value)} GPU`;
        return h("div", {}, swatch, `${label}: ${text}`);
      }),
    );
    this.tooltip.hidden = false;
    const x = this.x(times[index] + step / 2);
    const { width } = this.geometry();
    const left = x > width / 2 ? x - this.tooltip.offsetWidth - 12 : x + 12;
    this.tooltip.style.left = `${Math.max(0, left)}px`;
    this.tooltip.style.top = `${PAD.top}px`;
  }
}

// Runs of consecutive indices whose value is known.
function runs(values) {
  const out = [];
  let current = [];
  values.forEach((value, i) => {
    if (value === null || value === undefined) {
      if (current.length) out.push(current);
      current = [];
    } else current.push(i);
  });
  if (current.length) out.push(current);
  return out;
}
