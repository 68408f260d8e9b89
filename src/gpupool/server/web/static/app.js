// The dashboard's shell: session (login, login link, logout), hash routes, the 5-second
// refresh that pauses while the tab is hidden, the theme, the error banner.

import { ApiError, api, get, setCsrfToken, whenUnauthorized } from "./api.js";
import * as login from "./pages/login.js";
import * as nodes from "./pages/nodes.js";
import * as overview from "./pages/overview.js";
import * as projects from "./pages/projects.js";
import * as submit from "./pages/submit.js";
import * as workload from "./pages/workload.js";
import * as workloads from "./pages/workloads.js";

export const REFRESH_MS = 5000;

const main = document.querySelector("main");
const nav = document.querySelector("nav");
const banner = document.querySelector("[data-testid=banner]");
const whoami = document.querySelector("[data-testid=whoami]");
const logoutButton = document.querySelector("[data-testid=logout]");
const themeButton = document.querySelector("[data-testid=theme-toggle]");

let session = null;
let generation = 0;
let current = null;
let timer = null;
let missedWhileHidden = false;

// Routes: #/overview, #/projects, #/workloads?..., #/workloads/<project>/<name>, #/submit,
// #/nodes. Query parameters after "?" are the page's filters.
function parseRoute() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, search] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = Object.fromEntries(new URLSearchParams(search || ""));
  if (parts[0] === "workloads" && parts.length === 3) {
    const args = { project: parts[1], name: parts[2] };
    return { page: workload, name: "workload", nav: "workloads", args, params };
  }
  const pages = { overview, projects, workloads, nodes, submit };
  const name = pages[parts[0]] ? parts[0] : "overview";
  return { page: pages[name], name, nav: name === "submit" ? "workloads" : name, args: {}, params };
}

export function navigate(hash) {
  if (location.hash === hash) route();
  else location.hash = hash;
}

function setBanner(message) {
  banner.hidden = !message;
  banner.textContent = message || "";
}

function context(my) {
  return {
    main,
    session,
    navigate,
    setBanner,
    // Refresh now (after an action), then carry on every REFRESH_MS.
    refreshNow: () => refresh(my),
    isCurrent: () => my === generation,
  };
}

async function route() {
  const my = ++generation;
  clearTimeout(timer);
  if (current && current.dispose) current.dispose();
  current = null;
  delete main.dataset.ready;
  setBanner("");
  if (!session) return showLogin();
  const target = parseRoute();
  for (const link of nav.querySelectorAll("a")) {
    if (link.dataset.page === target.nav) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  main.replaceChildren();
  const view = target.page.mount({ ...context(my), args: target.args, params: target.params });
  current = { ...view, name: target.name };
  document.title = `${view.title || target.name} · gpupool`;
  await refresh(my, true);
}

// One refresh of the current page at a time: a refresh asked for while one runs (an action
// right after a poll began) runs when it ends, so the page never shows older data last.
async function refresh(my, first = false) {
  const view = current;
  if (my !== generation || !view) return;
  if (view.running) {
    view.again = true;
    return;
  }
  clearTimeout(timer);
  view.running = true;
  try {
    await view.refresh();
    if (my === generation) setBanner("");
  } catch (error) {
    if (my === generation && !(error instanceof ApiError && error.status === 401)) {
      setBanner(`Could not refresh: ${error.message}`);
    }
  } finally {
    view.running = false;
  }
  if (my !== generation) return;
  if (first) main.dataset.ready = view.name;
  if (view.again) {
    view.again = false;
    return refresh(my);
  }
  timer = setTimeout(() => {
    if (document.hidden) missedWhileHidden = true;
    else refresh(my);
  }, REFRESH_MS);
}

document.addEventListener("visibilitychange", () => {
  if (!document.hidden && missedWhileHidden) {
    missedWhileHidden = false;
    refresh(generation);
  }
});

// Session -------------------------------------------------------------------------------

function setSession(value) {
  session = value;
  setCsrfToken(value ? value.csrf_token : null);
  nav.hidden = !value;
  logoutButton.hidden = !value;
  whoami.textContent = value ? `${value.user} (${value.role})` : "";
  if (value) {
    session.isAdmin = value.role === "admin";
    session.mayUse = (project) => session.isAdmin || value.projects.includes(project);
  }
}

function showLogin(message) {
  generation++;
  clearTimeout(timer);
  setSession(null);
  current = null;
  delete main.dataset.ready;
  main.replaceChildren();
  login.mount({ main, message, onToken: logIn });
  main.dataset.ready = "login";
  document.title = "Log in · gpupool";
}

async function logIn(token) {
  const value = await api("POST", "/session", { token });
  await start(value);
}

// Nothing is read before the page's own reads: each page asks for what it shows, all at once.
// Pages that colour projects learn every project's name first (from /top or /names), so that
// a project has the same colour on every page.
async function start(value) {
  setSession(value);
  if (!location.hash || location.hash.startsWith("#/login")) history.replaceState(null, "", "#/overview");
  await route();
}

logoutButton.addEventListener("click", async () => {
  try {
    await api("DELETE", "/session");
  } catch (error) {
    if (!(error instanceof ApiError && error.status === 401)) return setBanner(`Could not log out: ${error.message}`);
  }
  history.replaceState(null, "", "#/overview");
  showLogin("You are logged out.");
});

whenUnauthorized(() => {
  if (session) showLogin("Your session has ended (expired or logged out elsewhere): log in again.");
});

// Theme: the system's preference until the toggle is used, then the choice (kept locally).
function systemDark() {
  return window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
}

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme;
  const dark = theme ? theme === "dark" : systemDark();
  themeButton.textContent = dark ? "Light" : "Dark";
  themeButton.setAttribute("aria-label", dark ? "Switch to light theme" : "Switch to dark theme");
  window.dispatchEvent(new Event("gpupool-theme"));
}

themeButton.addEventListener("click", () => {
  const dark = document.documentElement.dataset.theme
    ? document.documentElement.dataset.theme === "dark"
    : systemDark();
  const next = dark ? "light" : "dark";
  try {
    localStorage.setItem("gpupool-theme", next);
  } catch {
    // Private windows may refuse storage: the choice then lasts for this page only.
  }
  applyTheme(next);
});

// Start: a login link (#login=TOKEN) first, else the session cookie, else the login form.
async function boot() {
  let stored = null;
  try {
    stored = localStorage.getItem("gpupool-theme");
  } catch {
    stored = null;
  }
  applyTheme(stored === "dark" || stored === "light" ? stored : null);
  window.addEventListener("hashchange", () => {
    if (session) route();
  });
  const match = location.hash.match(/^#login=(.+)$/);
  if (match) {
    // The token must not stay in the address bar or the history: remove it before anything.
    history.replaceState(null, "", location.pathname + "#/overview");
    try {
      await logIn(decodeURIComponent(match[1]));
    } catch (error) {
      showLogin(`The login link did not work: ${error.message}`);
    }
    return;
  }
  try {
    await start(await get("/session"));
  } catch (error) {
    const loggedOut = error instanceof ApiError && error.status === 401;
    showLogin(loggedOut ? null : `Could not reach the server: ${error.message}`);
  }
}

boot();

