// Baton's console: a page of plain JavaScript (no build step, no dependency) that uses
// only the public API, on the server's own origin. In the embedded tier without auth it
// acts as the local owner; elsewhere a user logs in and the session lives in an HttpOnly
// cookie, with the session's anti-CSRF token sent as `Baton-CSRF` on every change.
//
// Everything shown is put in the page as text (never as markup), so nothing a run, a tool
// or a tenant wrote can run here.

const ROLES = ["viewer", "member", "admin", "owner"];
/// Every event type a run's stream names (frames are named, so each is listened to).
const EVENT_TYPES = [
  "run.created", "message.appended", "message.queued", "turn.requested", "turn.started",
  "model.completed", "tool.intent", "tool.result", "tool.uncertain", "tool.resolved",
  "approval.requested", "approval.decided", "checkpoint.saved", "turn.completed",
  "turn.failed", "turn.interrupted", "run.updated", "run.cancel_requested", "run.cancelled",
  "run.completed", "run.failed", "run.deleted", "lease.acquired", "lease.released",
  "workspace.changed", "message.delta", "reasoning.delta", "tool.progress", "error",
];
const TERMINAL = new Set(["completed", "failed", "cancelled"]);

const session = { me: null, tenant: null, role: null, csrf: null };
let leave = () => {}; // what the current view stops when another replaces it
let generation = 0; // the current view's number: a view that is no longer current draws nothing

/// Whether the view that called [`current`] is still the one shown.
function current() {
  const mine = generation;
  return () => mine === generation;
}

// --- the API -------------------------------------------------------------------------

class Problem extends Error {
  constructor(status, body) {
    super((body && body.detail) || `HTTP ${status}`);
    this.status = status;
    this.code = body && body.code;
  }
}

async function api(method, path, body, retried = false) {
  const headers = { accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  if (session.csrf && method !== "GET") headers["baton-csrf"] = session.csrf;
  if (session.tenant && session.me && session.me.user) headers["baton-tenant"] = session.tenant;
  const res = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  const data = text ? JSON.parse(text) : null;
  if (!res.ok) {
    // A login in another tab replaced the session cookie: take its anti-CSRF token, once.
    if (res.status === 403 && data && data.code === "csrf_failed" && !retried) {
      const me = await api("GET", "/v1/me");
      session.csrf = me.csrf_token;
      return api(method, path, body, true);
    }
    throw new Problem(res.status, data);
  }
  if (method !== "GET" && !path.endsWith("/stream-tickets")) flash("");
  return data;
}

/// The signed-in role is at least `role`.
function may(role) {
  return ROLES.indexOf(session.role) >= ROLES.indexOf(role);
}

// --- the page ------------------------------------------------------------------------

/// An element with attributes (`on…` are listeners) and children (strings become text).
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function show(...nodes) {
  // Called by a view after its reads: only the current one draws.
  const main = document.getElementById("main");
  main.replaceChildren(...nodes);
}

function flash(message) {
  const el = document.getElementById("flash");
  el.textContent = message || "";
  el.hidden = !message;
}

/// Runs `action`, showing its failure instead of throwing (the message stays until the
/// next view or the next change that succeeds).
async function attempt(action) {
  try {
    return await action();
  } catch (e) {
    flash(e.message);
    if (e.status === 401) await boot();
  }
}

function when(iso) {
  return iso ? new Date(iso).toLocaleString() : "";
}

function status(s) {
  return h("span", { class: `status ${s}` }, s.replace("_", " "));
}

// --- signing in ----------------------------------------------------------------------

async function boot() {
  leave();
  leave = () => {};
  generation += 1;
  try {
    const me = await api("GET", "/v1/me");
    signedIn(me);
    route();
  } catch (e) {
    if (e.status !== 401) return flash(e.message);
    session.me = null;
    document.getElementById("nav").hidden = true;
    document.getElementById("logout").hidden = true;
    document.getElementById("who").textContent = "";
    loginView();
  }
}

function signedIn(me) {
  session.me = me;
  session.csrf = me.csrf_token;
  const chosen = me.tenants.find((t) => t.tenant_id === sessionStorage.getItem("tenant"));
  const tenant = chosen || me.tenants[0];
  session.tenant = tenant ? tenant.tenant_id : null;
  session.role = tenant ? tenant.role : null;
  document.getElementById("nav").hidden = false;
  for (const a of document.querySelectorAll("nav a[data-role]")) a.hidden = !may(a.dataset.role);
  document.getElementById("logout").hidden = !me.user;
  const who = document.getElementById("who");
  who.replaceChildren(
    (me.user ? me.user.email : "local owner") + (tenant ? ` · ${tenant.name} · ${tenant.role}` : ""),
  );
  if (me.tenants.length > 1) {
    const pick = h("select", {
      "aria-label": "Tenant",
      onchange: (ev) => {
        sessionStorage.setItem("tenant", ev.target.value);
        boot();
      },
    }, me.tenants.map((t) => h("option", { value: t.tenant_id, selected: t.tenant_id === session.tenant }, t.name)));
    who.append(" ", pick);
  }
}

function loginView() {
  const email = h("input", { id: "email", type: "email", autocomplete: "username", required: true });
  const password = h("input", { id: "password", type: "password", autocomplete: "current-password", required: true });
  const form = h("form", {
    class: "login panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      attempt(async () => {
        await api("POST", "/v1/login", { email: email.value, password: password.value, cookie: true });
        await boot();
      });
    },
  },
  h("h1", {}, "Log in"),
  h("label", { for: "email" }, "Email"), email,
  h("label", { for: "password" }, "Password"), password,
  h("p", {}, h("button", { class: "primary", type: "submit" }, "Log in")));
  show(form);
  email.focus();
}

// --- views ---------------------------------------------------------------------------

function route() {
  leave();
  leave = () => {};
  generation += 1;
  flash("");
  const hash = location.hash || "#/runs";
  for (const a of document.querySelectorAll("nav a")) {
    a.toggleAttribute("aria-current", hash.startsWith(a.getAttribute("href")));
    if (a.hasAttribute("aria-current")) a.setAttribute("aria-current", "page");
  }
  const run = hash.match(/^#\/runs\/([0-9a-f-]{36})$/);
  if (run) return runView(run[1]);
  const view = {
    "#/agents": () => definitionsView(AGENTS),
    "#/tools": () => definitionsView(TOOLS),
    "#/secrets": secretsView,
    "#/keys": keysView,
    "#/members": membersView,
    "#/audit": auditView,
  }[hash];
  return attempt(view || runsView);
}

async function runsView() {
  const live = current();
  let stopped = false;
  let timer = null;
  leave = () => { stopped = true; clearInterval(timer); };
  const filter = h("select", { id: "status-filter", "aria-label": "Status" },
    h("option", { value: "" }, "any status"),
    ["queued", "running", "requires_action", "waiting", "completed", "failed", "cancelled"]
      .map((s) => h("option", { value: s }, s.replace("_", " "))));
  const search = h("input", { id: "search", type: "search", placeholder: "Search titles", "aria-label": "Search titles" });
  const counts = h("p", { class: "counts", "aria-live": "polite" });
  const body = h("tbody");
  const table = h("table", {}, h("thead", {}, h("tr", {},
    h("th", {}, "Run"), h("th", {}, "Status"), h("th", {}, "Turns"), h("th", {}, "Updated"))), body);
  const starter = may("member") ? await newRunForm() : null;
  if (!live()) return;
  show(h("h1", {}, "Runs"), starter, h("form", { class: "inline", onsubmit: (e) => e.preventDefault() }, filter, search), counts, table);

  let asked = 0; // only the answer to the latest question is drawn
  async function refresh() {
    const mine = ++asked;
    const params = new URLSearchParams({ limit: "100" });
    if (filter.value) params.set("status", filter.value);
    if (search.value.trim()) params.set("q", search.value.trim());
    const [page, waiting] = await Promise.all([
      api("GET", `/v1/runs?${params}`),
      api("GET", "/v1/runs?status=requires_action&limit=500"),
    ]);
    if (stopped || mine !== asked) return;
    const n = waiting.items.length;
    counts.textContent = `${n} run${n === 1 ? "" : "s"} need${n === 1 ? "s" : ""} action`;
    body.replaceChildren(...page.items.map((r) => h("tr", { "data-run": r.id },
      h("td", {}, h("a", { href: `#/runs/${r.id}` }, r.title || r.id)),
      h("td", {}, status(r.status)),
      h("td", {}, String(r.turn_count)),
      h("td", {}, when(r.updated_at)))));
    if (!page.items.length) body.replaceChildren(h("tr", {}, h("td", { colspan: 4, class: "muted" }, "No runs.")));
  }
  let typing = null;
  filter.addEventListener("change", () => attempt(refresh));
  search.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => attempt(refresh), 250);
  });
  await attempt(refresh);
  // Status changes show within a few seconds, whichever replica made them.
  if (!stopped) timer = setInterval(() => attempt(refresh), 2000);
}

async function newRunForm() {
  const agents = (await api("GET", "/v1/agents?limit=500")).items;
  const agent = h("select", { id: "run-agent" }, agents.map((a) => h("option", { value: a.id }, a.name)));
  const message = h("input", { id: "run-message", placeholder: "First message", size: 40 });
  return h("form", {
    class: "inline panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      attempt(async () => {
        const body = { agent_id: agent.value };
        if (message.value.trim()) body.message = message.value;
        const created = await api("POST", "/v1/runs", body);
        location.hash = `#/runs/${created.run.id}`;
      });
    },
  },
  h("div", {}, h("label", { for: "run-agent" }, "Agent"), agent),
  h("div", {}, h("label", { for: "run-message" }, "Message"), message),
  h("button", { class: "primary", type: "submit", disabled: !agents.length }, "Start run"));
}

/// A resource defined as JSON (agents, tools): its list, and for admins a form that
/// creates one or, from the list, changes one (each change is a new version).
const AGENTS = {
  title: "Agents", path: "/v1/agents", noun: "agent",
  fields: ["instructions", "provider", "tools", "limits"],
  sample: { instructions: "", provider: { kind: "scripted", replies: [{ content: "Hello!" }] }, tools: [] },
  detail: (a) => a.provider.kind,
};
const TOOLS = {
  title: "Tools", path: "/v1/tools", noun: "tool",
  fields: ["description", "input_schema", "effect", "idempotent", "requires_approval", "timeout_ms", "kind"],
  sample: { description: "", input_schema: { type: "object" }, effect: "read", kind: { kind: "client" } },
  detail: (t) => `${t.kind.kind} · ${t.effect}${t.requires_approval ? " · approval" : ""}`,
};

async function definitionsView(def) {
  const list = h("tbody");
  const editor = h("div");
  show(h("h1", {}, def.title), editor, h("table", {}, h("thead", {}, h("tr", {},
    h("th", {}, "Name"), h("th", {}, "Kind"), h("th", {}, "Version"), h("th", {}, "Updated"),
    h("th", {}, h("span", { class: "muted" }, ""))), list)));
  const edit = (item) => {
    if (!may("admin")) return;
    editor.replaceChildren(definitionForm(def, item, () => definitionsView(def)));
    editor.querySelector("input, textarea").focus();
  };
  edit(null);
  const page = await api("GET", `${def.path}?limit=500`);
  list.replaceChildren(...page.items.map((item) => h("tr", { "data-name": item.name },
    h("td", {}, item.name), h("td", {}, def.detail(item)), h("td", {}, String(item.version)),
    h("td", {}, when(item.updated_at)),
    h("td", {}, may("admin") ? h("button", { type: "button", onclick: () => edit(item) }, `Edit ${item.name}`) : null))));
}

function definitionForm(def, item, done) {
  const name = h("input", { id: "def-name", required: true, value: item ? item.name : "" });
  const body = item ? Object.fromEntries(def.fields.filter((f) => f in item).map((f) => [f, item[f]])) : def.sample;
  const spec = h("textarea", { id: "def-spec", spellcheck: "false", rows: 12 }, JSON.stringify(body, null, 2));
  return h("form", {
    class: "panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      attempt(async () => {
        let parsed;
        try {
          parsed = JSON.parse(spec.value);
        } catch (e) {
          throw new Error(`the definition is not JSON: ${e.message}`);
        }
        const sent = { ...parsed, name: name.value };
        if (item) await api("PUT", `${def.path}/${item.id}`, sent);
        else await api("POST", def.path, sent);
        await done();
      });
    },
  },
  h("h2", {}, item ? `Change ${item.name} (version ${item.version})` : `New ${def.noun}`),
  h("label", { for: "def-name" }, "Name"), name,
  h("label", { for: "def-spec" }, "Definition (JSON)"), spec,
  h("p", { class: "actions" },
    h("button", { class: "primary", type: "submit" }, item ? "Save new version" : `Create ${def.noun}`),
    item ? h("button", { type: "button", onclick: () => done() }, "Cancel") : null));
}

async function secretsView() {
  const name = h("input", { id: "secret-name", required: true, pattern: "[A-Za-z0-9_\\-]{1,64}" });
  const value = h("input", { id: "secret-value", type: "password", required: true, autocomplete: "off" });
  const list = h("ul");
  show(h("h1", {}, "Secrets"),
    h("p", { class: "muted" }, "Values are write-only: they are never shown again."),
    h("form", {
      class: "inline panel",
      onsubmit: (ev) => {
        ev.preventDefault();
        attempt(async () => {
          await api("PUT", `/v1/secrets/${encodeURIComponent(name.value)}`, { value: value.value });
          await secretsView();
        });
      },
    }, h("div", {}, h("label", { for: "secret-name" }, "Name"), name),
    h("div", {}, h("label", { for: "secret-value" }, "Value"), value),
    h("button", { class: "primary", type: "submit" }, "Set secret")), list);
  const page = await api("GET", "/v1/secrets");
  list.replaceChildren(...page.items.map((sec) => h("li", { "data-secret": sec.name }, `${sec.name} `,
    h("span", { class: "muted" }, `set ${when(sec.updated_at)} `),
    h("button", { type: "button", class: "danger", onclick: () => attempt(async () => {
      await api("DELETE", `/v1/secrets/${encodeURIComponent(sec.name)}`);
      await secretsView();
    }) }, `Delete ${sec.name}`))));
}

async function keysView() {
  const name = h("input", { id: "key-name", required: true });
  const role = h("select", { id: "key-role" }, ROLES.filter(may).map((r) => h("option", { value: r }, r)));
  const shown = h("div", { "aria-live": "polite" });
  const list = h("tbody");
  show(h("h1", {}, "API keys"), h("form", {
    class: "inline panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      attempt(async () => {
        const made = await api("POST", "/v1/api-keys", { name: name.value, role: role.value });
        await keysView();
        document.getElementById("key-shown").replaceChildren(
          h("p", {}, "The new key, shown this once: "), h("pre", { id: "new-key" }, made.token));
      });
    },
  }, h("div", {}, h("label", { for: "key-name" }, "Name"), name),
  h("div", {}, h("label", { for: "key-role" }, "Role"), role),
  h("button", { class: "primary", type: "submit" }, "Create key")),
  h("div", { id: "key-shown" }, shown),
  h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Name"), h("th", {}, "Role"), h("th", {}, "Prefix"),
    h("th", {}, "Last used"), h("th", {}, ""))), list));
  const page = await api("GET", "/v1/api-keys?limit=500");
  list.replaceChildren(...page.items.map((k) => h("tr", {},
    h("td", {}, k.name), h("td", {}, k.role), h("td", {}, k.prefix), h("td", {}, when(k.last_used_at) || "never"),
    h("td", {}, k.revoked_at ? "revoked" : h("button", { type: "button", class: "danger",
      onclick: () => attempt(async () => { await api("DELETE", `/v1/api-keys/${k.id}`); await keysView(); }) },
    `Revoke ${k.name}`)))));
}

async function membersView() {
  const email = h("input", { id: "invite-email", type: "email", required: true });
  const role = h("select", { id: "invite-role" }, ROLES.filter(may).map((r) => h("option", { value: r }, r)));
  const members = h("tbody");
  const invitations = h("tbody");
  show(h("h1", {}, "Members"), h("table", {}, h("thead", {}, h("tr", {},
    h("th", {}, "Email"), h("th", {}, "Role"), h("th", {}, ""))), members),
  h("h2", {}, "Invitations"),
  h("form", {
    class: "inline panel",
    onsubmit: (ev) => {
      ev.preventDefault();
      attempt(async () => {
        await api("POST", "/v1/invitations", { email: email.value, role: role.value });
        await membersView();
      });
    },
  }, h("div", {}, h("label", { for: "invite-email" }, "Email"), email),
  h("div", {}, h("label", { for: "invite-role" }, "Role"), role),
  h("button", { class: "primary", type: "submit" }, "Invite")),
  h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "Email"), h("th", {}, "Role"), h("th", {}, "State"),
    h("th", {}, ""))), invitations));
  const [people, invited] = await Promise.all([api("GET", "/v1/members?limit=500"), api("GET", "/v1/invitations?limit=100")]);
  members.replaceChildren(...people.items.map((m) => {
    const pick = h("select", { "aria-label": `Role of ${m.email}`,
      onchange: (ev) => attempt(async () => { await api("PUT", `/v1/members/${m.user_id}`, { role: ev.target.value }); await membersView(); }) },
    ROLES.map((r) => h("option", { value: r, selected: r === m.role }, r)));
    return h("tr", {}, h("td", {}, m.email), h("td", {}, pick),
      h("td", {}, h("button", { type: "button", class: "danger",
        onclick: () => attempt(async () => { await api("DELETE", `/v1/members/${m.user_id}`); await membersView(); }) },
      `Remove ${m.email}`)));
  }));
  invitations.replaceChildren(...invited.items.map((i) => h("tr", {},
    h("td", {}, i.email), h("td", {}, i.role), h("td", {}, i.state),
    h("td", {}, i.state === "pending" ? h("button", { type: "button", class: "danger",
      onclick: () => attempt(async () => { await api("DELETE", `/v1/invitations/${i.id}`); await membersView(); }) },
    `Revoke invitation of ${i.email}`) : null))));
}

async function auditView() {
  const list = h("tbody");
  show(h("h1", {}, "Audit"), h("table", {}, h("thead", {}, h("tr", {},
    h("th", {}, "When"), h("th", {}, "Who"), h("th", {}, "What"), h("th", {}, "Target"))), list));
  const page = await api("GET", "/v1/audit?limit=100");
  list.replaceChildren(...page.items.map((e) => h("tr", {},
    h("td", {}, when(e.at)), h("td", {}, e.actor), h("td", {}, e.action), h("td", {}, e.target))));
}

// --- one run -------------------------------------------------------------------------

async function runView(id) {
  const live = current();
  let stopped = false;
  let source = null;
  let retry = null;
  leave = () => { stopped = true; clearTimeout(retry); if (source) source.close(); };
  const title = h("h1", {}, "Run");
  const state = h("p", { "aria-live": "polite" });
  const conversation = h("section", { "aria-label": "Conversation", id: "conversation" });
  const receipts = h("section", { "aria-label": "Tool calls", id: "receipts" }, h("h2", {}, "Tool calls"));
  const controls = h("div", { class: "actions" });
  const composer = h("form", { class: "inline", id: "composer" });
  show(h("p", {}, h("a", { href: "#/runs" }, "← Runs")), title, state, controls,
    h("div", { class: "grid" }, h("div", {}, conversation, composer), h("div", { class: "panel" }, receipts)));

  const drafts = new Map(); // "turn/step" → the streaming reply: its attempt and element
  let last = 0; // the newest version shown: nothing at or below it is shown again
  let run = null;
  let backoff = 1000;

  function say(role, content, key) {
    const el = h("div", { class: `msg ${role}` }, h("span", { class: "who" }, role), content);
    conversation.append(el);
    return el;
  }

  async function refreshRun() {
    run = await api("GET", `/v1/runs/${id}`);
    title.textContent = run.title || `Run ${id}`;
    state.replaceChildren(status(run.status), ` · ${run.turn_count} turn(s) · version ${run.version}`,
      run.pending_actions ? ` · ${run.pending_actions} waiting for a decision` : "");
    controls.replaceChildren();
    composer.replaceChildren();
    if (may("member") && !TERMINAL.has(run.status)) {
      controls.append(h("button", { class: "danger", type: "button", id: "cancel",
        onclick: () => attempt(async () => {
          await api("POST", `/v1/runs/${id}/cancel`, { reason: "cancelled in the console" });
          await refreshRun();
        }) }, "Cancel run"));
      const text = h("input", { id: "message", "aria-label": "Message", placeholder: "Message", size: 40, required: true });
      composer.append(text, h("button", { class: "primary", type: "submit" }, "Send"));
      composer.onsubmit = (ev) => {
        ev.preventDefault();
        attempt(async () => {
          await api("POST", `/v1/runs/${id}/messages`, { content: text.value });
          text.value = "";
        });
      };
    }
  }

  async function refreshReceipts() {
    const page = await api("GET", `/v1/runs/${id}/receipts`);
    receipts.replaceChildren(h("h2", {}, "Tool calls"),
      ...(page.items.length ? page.items.map(receipt) : [h("p", { class: "muted" }, "None yet.")]));
  }

  function receipt(r) {
    const acts = h("div", { class: "actions" });
    const act = (label, path, body, cls) => h("button", {
      type: "button", class: cls, "data-action": label,
      onclick: () => attempt(async () => {
        await api("POST", path, body);
        await refreshReceipts();
        await refreshRun();
      }),
    }, label);
    if (may("member")) {
      if (r.state === "awaiting_approval" && r.approval_id) {
        acts.append(act("Approve", `/v1/runs/${id}/approvals/${r.approval_id}`, { approve: true }, "primary"),
          act("Deny", `/v1/runs/${id}/approvals/${r.approval_id}`, { approve: false, reason: "denied in the console" }, "danger"));
      }
      if (r.state === "uncertain") {
        const output = h("input", { "aria-label": `Output of ${r.tool}`, placeholder: "What it did (for complete)" });
        acts.append(output,
          h("button", { type: "button", class: "primary", "data-action": "Complete",
            onclick: () => attempt(async () => {
              await api("POST", `/v1/runs/${id}/receipts/${r.id}/resolve`, { resolution: "complete", output: output.value || "done" });
              await refreshReceipts();
            }) }, "Complete"),
          act("Retry", `/v1/runs/${id}/receipts/${r.id}/resolve`, { resolution: "retry" }),
          act("Skip", `/v1/runs/${id}/receipts/${r.id}/resolve`, { resolution: "skip" }, "danger"));
      }
      if (r.state === "awaiting_client") {
        const output = h("input", { "aria-label": `Output of ${r.tool}`, placeholder: "Tool output" });
        acts.append(output, h("button", { type: "button", class: "primary", "data-action": "Submit",
          onclick: () => attempt(async () => {
            await api("POST", `/v1/runs/${id}/tool-outputs`, { tool_outputs: [{ receipt_id: r.id, output: output.value }] });
            await refreshReceipts();
          }) }, "Submit output"));
      }
    }
    return h("div", { class: "receipt", "data-receipt": r.id, "data-state": r.state },
      h("strong", {}, r.tool), " ", h("span", { class: `state ${r.state}` }, r.state.replace("_", " ")),
      h("pre", { "aria-label": "Arguments" }, JSON.stringify(r.arguments, null, 2)),
      r.output ? h("pre", { "aria-label": "Output" }, r.output) : null,
      r.error ? h("pre", { "aria-label": "Error" }, `${r.error.code}: ${r.error.message}`) : null,
      acts);
  }

  /// One frame of the stream: durable events (with an id) once each, in order; deltas as
  /// they come.
  function onFrame(type, frame) {
    // A dropped connection is an `error` event too, one without data: `onerror` sees it.
    if (frame.data === undefined) return;
    const data = JSON.parse(frame.data);
    if (type === "message.delta") {
      conversation.dataset.deltas = String(Number(conversation.dataset.deltas || 0) + 1);
      const key = `${data.turn}/${data.step}`;
      let draft = drafts.get(key);
      if (draft && draft.attempt < data.attempt) {
        // A retried model stream starts its reply over.
        draft.el.remove();
        draft = null;
      }
      if (!draft) {
        draft = { attempt: data.attempt, el: say("assistant", "") };
        draft.el.classList.add("streaming");
        drafts.set(key, draft);
      }
      if (draft.attempt === data.attempt) draft.el.append(data.content);
      return;
    }
    if (type === "reasoning.delta" || type === "tool.progress") return;
    if (type === "error") return flash(`the stream was interrupted: ${data.detail || data.code}`);
    const version = Number(frame.lastEventId);
    if (!version || version <= last) return;
    last = version;
    // For whoever checks the page: the newest version shown, and how many were.
    conversation.dataset.version = String(version);
    conversation.dataset.events = String(Number(conversation.dataset.events || 0) + 1);
    const e = data.data || {};
    if (type === "message.appended") say("user", e.content);
    if (type === "model.completed") {
      const key = `${e.turn}/${e.step}`;
      if (drafts.has(key)) drafts.get(key).el.remove();
      drafts.delete(key);
      if (e.content) say("assistant", e.content).dataset.version = String(version);
    }
    if (type.startsWith("tool.") || type.startsWith("approval.")) attempt(refreshReceipts);
    if (type.startsWith("run.") || type.startsWith("turn.")) attempt(refreshRun);
  }

  /// Opens the run's stream after the newest event shown (nothing is lost or shown
  /// twice), with a ticket: `EventSource` sends no `Baton-Tenant` header, which a user of
  /// several tenants needs, and the ticket names the run's tenant. Any error closes it;
  /// it opens again with a new ticket, waiting longer each time, until the run ends.
  async function follow() {
    if (stopped) return;
    let ticket;
    try {
      ticket = await api("POST", `/v1/runs/${id}/stream-tickets`);
    } catch (e) {
      if (e.status === 401) return boot();
      if (e.status >= 400 && e.status < 500 && e.status !== 429) return flash(e.message);
      return again();
    }
    if (stopped) return;
    source = new EventSource(`${ticket.url}&after=${last}`);
    source.onopen = () => { backoff = 1000; };
    for (const type of EVENT_TYPES) source.addEventListener(type, (frame) => onFrame(type, frame));
    source.onerror = () => {
      source.close();
      again();
    };
  }

  async function again() {
    if (stopped) return;
    await attempt(refreshRun);
    if (stopped || (run && TERMINAL.has(run.status) && last >= run.version)) return;
    retry = setTimeout(follow, backoff);
    backoff = Math.min(backoff * 2, 15000);
  }

  await attempt(refreshRun);
  await attempt(refreshReceipts);
  if (live()) follow();
}

// --- start ---------------------------------------------------------------------------

document.getElementById("logout").addEventListener("click", () => attempt(async () => {
  await api("POST", "/v1/logout");
  session.csrf = null;
  await boot();
}));
window.addEventListener("hashchange", () => { if (session.me) route(); });
boot();
