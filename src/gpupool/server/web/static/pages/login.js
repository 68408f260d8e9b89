// Log in by pasting a token: the server answers with an HttpOnly session cookie.

import { h } from "../dom.js";

export function mount({ main, message, onToken }) {
  const error = h("p", { class: "error", role: "alert", "data-testid": "login-error", hidden: true });
  const input = h("input", {
    id: "token",
    name: "token",
    type: "password",
    autocomplete: "off",
    spellcheck: "false",
    required: true,
    "data-testid": "token-input",
    "aria-describedby": "token-help",
  });
  const button = h("button", { type: "submit", class: "primary", "data-testid": "login-button" }, "Log in");
  const form = h(
    "form",
    { class: "login", "data-testid": "login-form" },
    h("h1", {}, "Log in to gpupool"),
    message ? h("p", { class: "note", role: "status" }, message) : null,
    h("label", { for: "token" }, "Access token"),
    input,
    h(
      "p",
      { id: "token-help", class: "muted" },
      "Paste a token (gp_…). The first admin's is in the server's data directory (",
      h("code", {}, "admin-token"),
      "); ",
      h("code", {}, "gpupool user token NAME"),
      " issues one (an admin for anyone, a user for themself). The page keeps no token: it is ",
      "exchanged for a session cookie.",
    ),
    error,
    button,
  );
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const token = input.value.trim();
    if (!token) return;
    button.disabled = true;
    error.hidden = true;
    try {
      await onToken(token);
    } catch (failure) {
      error.textContent =
        failure.status === 401
          ? "The server does not know this token: check that it was copied whole, or ask an admin for a new one."
          : `Could not log in: ${failure.message}`;
      error.hidden = false;
      button.disabled = false;
      input.focus();
    }
  });
  main.replaceChildren(form);
  input.focus();
}
