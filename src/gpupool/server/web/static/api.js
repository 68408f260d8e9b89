// Calls to /api/v1 with the session cookie. Every change carries the session's CSRF token in
// the X-CSRF-Token header; the token lives in memory only (fetched again with GET /session
// after a reload), never in storage a script of another page could read.

let csrfToken = null;
let onUnauthorized = () => {};

export function setCsrfToken(token) {
  csrfToken = token;
}

export function whenUnauthorized(callback) {
  onUnauthorized = callback;
}

export class ApiError extends Error {
  constructor(status, detail, errors) {
    super(detail);
    this.status = status;
    this.errors = errors || [];
  }
}

export async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && csrfToken) headers["X-CSRF-Token"] = csrfToken;
  let response;
  try {
    response = await fetch("/api/v1" + path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      cache: "no-store",
    });
  } catch (error) {
    throw new ApiError(0, "the server did not answer (is gpupool server running?): " + error.message);
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const detail = (data && data.detail) || `HTTP ${response.status} from ${path}`;
    if (response.status === 401 && path !== "/session") onUnauthorized();
    throw new ApiError(response.status, detail, data && data.errors);
  }
  return data;
}

export const get = (path) => api("GET", path);

export function query(params) {
  const parts = [];
  for (const [key, value] of Object.entries(params)) {
    if (value === undefined || value === null || value === "") continue;
    parts.push(encodeURIComponent(key) + "=" + encodeURIComponent(value));
  }
  return parts.length ? "?" + parts.join("&") : "";
}
