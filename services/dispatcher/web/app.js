// The sparkmill dashboard: plain JavaScript over the REST API (/v1/...), no build step.
// Hash routes: #/ (overview), #/jobs, #/jobs/<id>, #/taskmanagers. Every view re-renders from
// fresh API answers every refresh interval, so a running job's graph updates live.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
// State names are the server's (v1/config "states", made from sparkmill's state enums): this
// file keeps no list of its own. Empty until the configuration is loaded; refresh() loads it
// before it renders anything.
const NO_STATES = { job: [], "job-terminal": [], execution: [] };
let config = { "refresh-interval": 2000, "grafana-url": "", states: NO_STATES };
let timer = null;
let renderSeq = 0;

// -- helpers ---------------------------------------------------------------------------------

// The REST API wants a bearer token (rest.auth.token-file): asked for once, kept for this tab
// only (sessionStorage: gone when the tab closes, never sent to another site).
const TOKEN_KEY = "sparkmill-token";

class AuthError extends Error {}

async function api(path, options) {
  const token = window.sessionStorage.getItem(TOKEN_KEY);
  const request = { ...(options || {}) };
  if (token) request.headers = { ...(request.headers || {}), Authorization: `Bearer ${token}` };
  const response = await fetch("v1/" + path, request);
  const body = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (body.errors || [response.statusText]).join("; ");
    if (response.status === 401) {
      window.sessionStorage.removeItem(TOKEN_KEY);  // a wrong token is asked for again
      throw new AuthError(token ? `The token was refused: ${message}` : message);
    }
    throw new Error(`${response.status}: ${message}`);
  }
  return body;
}

function tokenForm(message) {
  const input = el("input", { id: "token-input", type: "password", autocomplete: "off",
    placeholder: "token", size: 48 });
  const form = el("form", { id: "token-form", class: "token-form" },
    el("h1", {}, "Sign in"),
    el("p", { class: "muted", id: "token-message" }, message),
    el("p", {}, "Paste a viewer or operator token of this cluster's REST token file ",
      el("span", { class: "mono" }, "rest.auth.token-file"), "."),
    input, " ", el("button", { id: "token-submit", type: "submit" }, "Sign in"));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!input.value.trim()) return;
    window.sessionStorage.setItem(TOKEN_KEY, input.value.trim());
    const error = await loadConfig();
    if (error instanceof AuthError) {
      document.getElementById("view").replaceChildren(tokenForm(error.message));
      document.getElementById("token-input").focus();
    } else {
      refresh();
    }
  });
  return form;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, value);
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function badge(state) {
  return el("span", { class: `badge state-${state}`, "data-state": state }, state);
}

function time(ms) {
  return ms > 0 ? new Date(ms).toLocaleTimeString() : "–";
}

function duration(ms) {
  if (ms < 0) return "–";
  const s = Math.round(ms / 1000);
  if (s < 60) return `${(ms / 1000).toFixed(s < 10 ? 1 : 0)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${s % 60} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function shortId(id) {
  return id ? id.slice(0, 8) : "";
}

// Only http(s) URLs become links: members announce their own metrics and REST URLs, and a
// "javascript:" one would run in the dashboard's origin. Anything else is shown as text.
function webUrl(href) {
  try {
    const url = new URL(href, window.location.href);
    return url.protocol === "http:" || url.protocol === "https:" ? url.href : null;
  } catch (_) {
    return null;
  }
}

function link(href, text, external) {
  if (external) {
    const safe = webUrl(href);
    return safe ? el("a", { href: safe, target: "_blank", rel: "noopener" }, text) : text;
  }
  return el("a", { href }, text);
}

function card(label, value, id) {
  return el("div", { class: "card", id },
    el("div", { class: typeof value === "string" ? "card-value card-text" : "card-value" },
      value === null || value === undefined ? "?" : value),
    el("div", { class: "card-label" }, label));
}

function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.length ? rows
      : [el("tr", {}, el("td", { colspan: headers.length, class: "muted" }, "none"))]));
}

// -- views -----------------------------------------------------------------------------------

function jobsTable(jobs) {
  const rows = jobs.slice().reverse().map((job) => el("tr", { "data-job-id": job.jid },
    el("td", {}, link(`#/jobs/${job.jid}`, job.name || "(unnamed)")),
    el("td", { class: "mono" }, shortId(job.jid)),
    el("td", { class: "job-state" }, badge(job.state)),
    el("td", {}, time(job["start-time"])),
    el("td", {}, duration(job.duration)),
    el("td", {}, `${job.tasks.finished} / ${job.tasks.total}`),
    el("td", {}, job.restarts)));
  return table(["Job", "ID", "Status", "Started", "Duration", "Tasks done", "Restarts"], rows,
    { id: "jobs-table" });
}

function servicesTable(services) {
  const order = ["dispatcher", "resource-manager", "job-master"];
  const sorted = services.slice().sort((a, b) =>
    order.indexOf(a.role) - order.indexOf(b.role) || Number(b.leader) - Number(a.leader));
  const rows = sorted.map((s) => el("tr", { "data-role": s.role },
    el("td", {}, s.role),
    el("td", {}, s.role === "job-master" ? el("span", { class: "badge neutral" }, "process")
      : s.leader ? el("span", { class: "badge leader" }, "leader")
        : el("span", { class: "badge standby" }, "standby")),
    el("td", { class: "mono" }, shortId(s.id)),
    el("td", { class: "mono" }, s.address),
    el("td", {}, `${s.host} (pid ${s.pid})`),
    el("td", {}, s["metrics-url"] ? link(s["metrics-url"], "metrics", true) : "–",
      s["rest-url"] ? [" · ", link(s["rest-url"], "dashboard", true)] : null)));
  return table(["Role", "", "ID", "Address", "Host", "Links"], rows, { id: "services-table" });
}

async function renderOverview(view) {
  const [overview, cluster, jobs] = await Promise.all([
    api("overview"), api("cluster"), api("jobs")]);
  return [
    el("h1", {}, "Cluster overview"),
    el("div", { class: "cards" },
      card("task executors", overview.taskmanagers, "card-taskmanagers"),
      card("slots total", overview["slots-total"], "card-slots-total"),
      card("slots free", overview["slots-available"], "card-slots-free"),
      card("jobs running", overview["jobs-running"], "card-jobs-running"),
      card("finished", overview["jobs-finished"]),
      card("failed", overview["jobs-failed"]),
      card("canceled", overview["jobs-cancelled"]),
      card("ZooKeeper", cluster.zookeeper, "card-zookeeper"),
      // Task executors the resource manager starts itself (resourcemanager.driver).
      overview.workers ? card(`workers (${overview.workers.driver} driver)`,
        `${overview.workers.registered} up, ${overview.workers.pending} starting`,
        "card-workers") : null),
    el("h2", {}, "Services"),
    servicesTable(cluster.services),
    el("h2", {}, "Jobs"),
    jobsTable(jobs.jobs),
  ];
}

async function renderJobs() {
  const jobs = await api("jobs");
  return [el("h1", {}, "Jobs"), jobsTable(jobs.jobs)];
}

// A task executor's metrics and, once its Spark session is up with spark.ui.enabled, its Spark UI
// (the API passes on http(s) URLs only).
function tmLinks(tm) {
  const links = [];
  if (tm["metrics-url"]) links.push(link(tm["metrics-url"], "metrics", true));
  if (tm["spark-ui-url"]) {
    if (links.length) links.push(" · ");
    links.push(link(tm["spark-ui-url"], "Spark UI", true));
  }
  return links.length ? links : "–";
}

async function renderTaskManagers() {
  const tms = await api("taskmanagers");
  const rows = tms.taskmanagers.map((tm) => el("tr", { "data-taskmanager": tm.id },
    el("td", { class: "mono" }, tm.id),
    el("td", { class: "mono" }, tm.path),
    el("td", {}, `${tm.host} (pid ${tm.pid})`),
    el("td", {}, `${tm.freeSlots} / ${tm.slotsNumber}`),
    el("td", {}, el("div", { class: "slots" }, tm.slots.map((slot) => el("span", {
      class: slot.free ? "slot free" : "slot busy",
      title: slot.free ? `slot ${slot.index}: free` : `slot ${slot.index}: job ${slot.jobId}`,
    })))),
    el("td", {}, duration(tm.timeSinceLastHeartbeat)),
    el("td", {}, tmLinks(tm))));
  return [el("h1", {}, "Task executors"),
    table(["ID", "Address", "Host", "Free / slots", "Slots", "Last heartbeat", "Links"], rows,
      { id: "taskmanagers-table" })];
}

async function cancelJob(jid, button) {
  if (!window.confirm("Cancel this job?")) return;
  button.disabled = true;
  button.textContent = "Cancelling…";
  try {
    await api(`jobs/${jid}?mode=cancel`, { method: "PATCH" });
  } catch (error) {
    window.alert(`Cancel failed: ${error.message}`);
  }
  refresh();
}

async function renderJob(view, jid) {
  const [job, exceptions] = await Promise.all([api(`jobs/${jid}`), api(`jobs/${jid}/exceptions`)]);
  const jm = job["job-master"];
  const running = !config.states["job-terminal"].includes(job.state);
  return [
    el("div", { class: "job-head" },
      el("h1", {}, job.name || "(unnamed)", " ", el("span", { id: "job-state" }, badge(job.state))),
      running ? el("button", { id: "cancel-job", class: "danger",
        onclick: (e) => cancelJob(jid, e.target) }, "Cancel job") : null),
    el("dl", { class: "facts" },
      el("dt", {}, "Job ID"), el("dd", { class: "mono" }, job.jid),
      el("dt", {}, "Started"), el("dd", {}, time(job["start-time"])),
      el("dt", {}, "Duration"), el("dd", {}, duration(job.duration)),
      el("dt", {}, "Restarts"), el("dd", { id: "job-restarts" }, job.restarts),
      ...speculationFacts(job),
      el("dt", {}, "JobMaster"), el("dd", { id: "job-master" }, jm
        ? [el("span", { class: "mono" }, `${shortId(jm.id)} @ ${jm.address}`),
          ` on ${jm.host} (pid ${jm.pid}) `,
          jm["metrics-url"] ? link(jm["metrics-url"], "metrics", true) : null]
        : job["job-master-address"] || "–")),
    job.failure ? el("div", { class: "failure", id: "job-failure" },
      el("strong", {}, "Failure: "), job.failure.message) : null,
    el("h2", {}, "Job graph"),
    el("div", { class: "graph-box" }, drawGraph(job)),
    el("h2", {}, "Subtasks"),
    subtasksTable(job),
    el("h2", {}, "Exceptions"),
    exceptionsView(exceptions),
  ];
}

// Speculative execution: attempts started and won, and the task executors blocked for the job.
function speculationFacts(job) {
  const started = job.vertices.reduce((n, v) => n + (v["speculative-attempts"] || 0), 0);
  const won = job.vertices.reduce((n, v) => n + (v["speculative-wins"] || 0), 0);
  const blocked = job["blocked-taskmanagers"] || [];
  const facts = [];
  if (started) {
    facts.push(el("dt", {}, "Speculative attempts"),
      el("dd", { id: "job-speculative" }, `${started} (${won} finished first)`));
  }
  if (blocked.length) {
    facts.push(el("dt", {}, "Blocked task executors"), el("dd", { id: "job-blocked" },
      blocked.map((b) => el("span", { class: "mono" }, `${shortId(b.id)} until ${time(b.until)} `))));
  }
  return facts;
}

function subtasksTable(job) {
  const rows = [];
  for (const vertex of job.vertices) {
    for (const st of vertex.subtasks) {
      rows.push(el("tr", { "data-vertex": vertex.name, "data-subtask": st.subtask },
        el("td", {}, vertex.name),
        el("td", {}, `${st.subtask + 1} / ${vertex.parallelism}`),
        el("td", {}, badge(st.status)),
        el("td", {}, `#${st.attempt}`,
          st["speculative-running"] ? ` (+${st["speculative-running"]} speculative)` : ""),
        el("td", { class: "mono" }, shortId(st["taskmanager-id"]) || "–"),
        el("td", {}, time(st["start-time"])),
        el("td", {}, time(st["end-time"])),
        el("td", {}, duration(st.duration)),
        el("td", {}, logLinks(job.jid, vertex, st))));
    }
  }
  return table(["Vertex", "Subtask", "Status", "Attempt", "Task executor", "Started", "Ended",
    "Duration", "Logs"], rows, { id: "subtasks-table" });
}

// One log link per attempt of the subtask (#0 .. the current one).
function logLinks(jid, vertex, st) {
  const links = [];
  for (let a = 0; a <= (st.attempt || 0); a += 1) {
    links.push(link(`#/jobs/${jid}/logs/${vertex.id}/${st.subtask}/${a}`, `#${a}`), " ");
  }
  return el("span", { class: "log-links" }, links);
}

async function renderLog(view, jid, vid, subtask, attempt) {
  const path = `jobs/${jid}/vertices/${vid}/subtasks/${subtask}/attempts/${attempt}/log`;
  let body;
  try {
    const chunk = await api(`${path}?offset=-262144`);
    body = [
      chunk["dropped-bytes"] || chunk["first-offset"]
        ? el("p", { class: "muted" }, `(older lines not shown: the log starts at byte `
          + `${chunk.offset}; the size cap dropped ${chunk["first-offset"]} bytes)`) : null,
      el("pre", { id: "attempt-log", class: "log" }, chunk.text || "(empty)"),
      el("p", { class: "muted" }, chunk.ended ? "The attempt has ended." : "The attempt runs; "
        + "this page refreshes."),
    ];
  } catch (error) {
    body = [el("p", { class: "failure", id: "attempt-log-error" }, error.message)];
  }
  return [
    el("p", {}, link(`#/jobs/${jid}`, "← job")),
    el("h1", {}, `Log of subtask ${Number(subtask) + 1}, attempt #${attempt}`),
    el("p", { class: "mono muted" }, `vertex ${vid}`),
    ...body,
  ];
}

function exceptionsView(exceptions) {
  const entries = exceptions.exceptionHistory.entries;
  if (!exceptions["root-exception"] && !entries.length) {
    return el("p", { class: "muted", id: "exceptions" }, "No exceptions.");
  }
  return el("div", { id: "exceptions" },
    exceptions["root-exception"] ? el("div", { class: "exception root" },
      el("div", { class: "exception-title" }, "Root cause"),
      el("pre", { id: "root-exception" }, exceptions["root-exception"])) : null,
    entries.map((e) => el("details", { class: "exception" },
      el("summary", {},
        el("span", { class: "muted" }, time(e.timestamp)), " ",
        el("strong", {}, e.taskName), ` attempt #${e.attempt} on `,
        el("span", { class: "mono" }, shortId(e.taskManagerId) || "?"), ": ",
        e.exceptionName ? `${e.exceptionName}: ` : "", e.message),
      el("pre", {}, e.stacktrace || e.message))));
}

// -- the job graph -------------------------------------------------------------------------------

// Layered layout: a vertex's column is its longest path from a source; rows keep the order of
// the plan within a column. Edges are cubic curves labelled with the distribution pattern.
function layout(nodes) {
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const level = new Map();
  const depth = (node, seen) => {
    if (level.has(node.id)) return level.get(node.id);
    if (seen.has(node.id)) return 0;
    seen.add(node.id);
    let d = 0;
    for (const input of node.inputs) {
      const source = byId.get(input.id);
      if (source) d = Math.max(d, depth(source, seen) + 1);
    }
    level.set(node.id, d);
    return d;
  };
  nodes.forEach((n) => depth(n, new Set()));
  const columns = [];
  for (const n of nodes) (columns[level.get(n.id)] ||= []).push(n);
  return { columns, level };
}

// Records and bytes in a short form: 1234567 -> "1.2M", bytes -> "1.2 MB".
function amount(n, unit) {
  const steps = unit === "B" ? ["B", "KB", "MB", "GB", "TB"] : ["", "k", "M", "G", "T"];
  let value = Number(n) || 0, i = 0;
  while (value >= 1000 && i < steps.length - 1) { value /= unit === "B" ? 1024 : 1000; i += 1; }
  const text = i === 0 ? String(Math.round(value)) : value.toFixed(value < 10 ? 1 : 0);
  return unit === "B" ? `${text} ${steps[i]}` : text + steps[i];
}

// What an edge carries: into a PySpark vertex, its partitioner (hash, broadcast, forward, ...:
// what the data plane does); else (test operators, which ignore partitioners) its distribution
// pattern; then the exchange (blocking, pipelined).
function edgeLabel(input, consumer) {
  const how = (consumer.operator === "spark" && input.partitioner)
    || (input.ship_strategy === "ALL_TO_ALL" ? "all-to-all" : "pointwise");
  return how + (input.exchange ? ` · ${input.exchange.toLowerCase()}` : "");
}

function drawGraph(job) {
  const W = 250, H = 122, GAP_X = 140, GAP_Y = 30, PAD = 24;
  const nodes = job.plan.nodes;
  const vertices = new Map(job.vertices.map((v) => [v.id, v]));
  const { columns } = layout(nodes);
  const tallest = Math.max(1, ...columns.map((c) => c.length));
  const width = PAD * 2 + columns.length * W + (columns.length - 1) * GAP_X;
  const height = PAD * 2 + tallest * H + (tallest - 1) * GAP_Y;
  const pos = new Map();
  columns.forEach((column, ci) => {
    const offset = (height - (column.length * H + (column.length - 1) * GAP_Y)) / 2;
    column.forEach((n, ri) => pos.set(n.id, { x: PAD + ci * (W + GAP_X), y: offset + ri * (H + GAP_Y) }));
  });
  // Scaled to the box's width (never above its natural size): the whole graph, sink and commit
  // included, is always in view; a graph too wide to read that way scrolls instead.
  const root = svg("svg", { id: "job-graph", viewBox: `0 0 ${width} ${height}`,
    preserveAspectRatio: "xMidYMin meet", role: "img", "aria-label": "job graph",
    style: `max-width: ${width}px; min-width: ${Math.min(width, 860)}px` });
  root.append(svg("defs", {}, svg("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 9, refY: 5,
    markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
  svg("path", { d: "M 0 0 L 10 5 L 0 10 z", class: "arrow-head" }))));
  for (const node of nodes) {
    const to = pos.get(node.id);
    for (const input of node.inputs) {
      const from = pos.get(input.id);
      if (!from) continue;
      const x1 = from.x + W, y1 = from.y + H / 2, x2 = to.x - 2, y2 = to.y + H / 2;
      const mx = (x1 + x2) / 2;
      const label = edgeLabel(input, node);
      root.append(svg("g", { class: "edge", "data-pattern": input.ship_strategy,
        "data-partitioner": input.partitioner || "" },
        svg("path", { d: `M ${x1} ${y1} C ${mx} ${y1}, ${mx} ${y2}, ${x2} ${y2}`,
          class: input.ship_strategy === "ALL_TO_ALL" ? "edge-line all" : "edge-line",
          "marker-end": "url(#arrow)" }),
        // Above the edge's flat start, so labels of edges fanning into one vertex never collide.
        svg("text", { x: x1 + 8, y: y1 - 7, class: "edge-label", "text-anchor": "start" },
          clip(label, 24))));
    }
  }
  for (const node of nodes) {
    const p = pos.get(node.id);
    const v = vertices.get(node.id)
      || { status: config.states.execution[0], tasks: {}, parallelism: node.parallelism };
    const g = svg("g", { class: `vertex state-${v.status}`, "data-vertex-name": node.description,
      "data-state": v.status, transform: `translate(${p.x},${p.y})` });
    g.append(svg("rect", { width: W, height: H, rx: 8, class: "vertex-box" }));
    g.append(svg("rect", { width: 6, height: H, rx: 3, class: "vertex-stripe" }));
    // The name has the first line to itself (the state is on the second): a long chain name is
    // clipped, never drawn over the state.
    g.append(svg("text", { x: 16, y: 24, class: "vertex-name" }, clip(node.description, 28)));
    g.append(svg("text", { x: 16, y: 43, class: "vertex-sub" },
      `${node.operator || "operator"} · p=${node.parallelism || "auto"}`));
    // How an automatic parallelism was decided, on hovering the vertex.
    if (v["parallelism-decision"]) g.append(svg("title", {}, v["parallelism-decision"]));
    g.append(svg("text", { x: W - 12, y: 43, class: "vertex-state", "text-anchor": "end" }, v.status));
    // A bar of the subtasks' states, then the non-zero counts as text.
    const total = Math.max(1, node.parallelism);
    let x = 16;
    const barW = W - 32;
    for (const state of config.states.execution) {
      const count = (v.tasks || {})[state] || 0;
      if (!count) continue;
      const w = (barW * count) / total;
      g.append(svg("rect", { x, y: 56, width: Math.max(w, 2), height: 10, class: `bar state-${state}` },
        svg("title", {}, `${count} ${state}`)));
      x += w;
    }
    const counts = config.states.execution.filter((s) => (v.tasks || {})[s])
      .map((s) => `${v.tasks[s]} ${s.toLowerCase()}`).join(" · ");
    g.append(svg("text", { x: 16, y: 88, class: "vertex-counts" }, clip(counts, 36)));
    const m = v.metrics || {};
    const io = `in ${amount(m["read-records"])} rec · ${amount(m["read-bytes"], "B")}   `
      + `out ${amount(m["write-records"])} rec · ${amount(m["write-bytes"], "B")}`;
    g.append(svg("text", { x: 16, y: 108, class: "vertex-io" }, io));
    g.append(svg("title", {}, `${node.description}\n${counts}\n${io}`));
    root.append(g);
  }
  return root;
}

function clip(text, n) {
  return text.length > n ? text.slice(0, n - 1) + "…" : text;
}

// -- routing ---------------------------------------------------------------------------------

function route() {
  const hash = window.location.hash.replace(/^#\/?/, "");
  const parts = hash.split("/").filter(Boolean);
  if (parts[0] === "jobs" && parts[1] && parts[2] === "logs") {
    return { nav: "jobs", render: (v) => renderLog(v, parts[1], parts[3], parts[4], parts[5]) };
  }
  if (parts[0] === "jobs" && parts[1]) return { nav: "jobs", render: (v) => renderJob(v, parts[1]) };
  if (parts[0] === "jobs") return { nav: "jobs", render: renderJobs };
  if (parts[0] === "taskmanagers") return { nav: "taskmanagers", render: renderTaskManagers };
  return { nav: "overview", render: renderOverview };
}

async function refresh() {
  clearTimeout(timer);
  const seq = ++renderSeq;
  const view = document.getElementById("view");
  const { nav, render } = route();
  document.querySelectorAll("[data-nav]").forEach((a) =>
    a.classList.toggle("active", a.dataset.nav === nav));
  try {
    if (!config.states.execution.length) {  // the first load failed: nothing to draw with
      const failure = await loadConfig();
      if (failure) throw failure;
    }
    const content = await render(view);
    if (seq !== renderSeq) return;  // a newer render started meanwhile
    const open = new Set([...view.querySelectorAll("details[open] summary")].map((s) => s.textContent));
    view.replaceChildren(...content.filter(Boolean));
    view.querySelectorAll("details summary").forEach((s) => {
      if (open.has(s.textContent)) s.parentElement.open = true;
    });
    document.getElementById("status-line").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    if (seq !== renderSeq) return;
    if (error instanceof AuthError) {  // no polling until a token is given
      view.replaceChildren(tokenForm(error.message));
      document.getElementById("token-input").focus();
      return;
    }
    view.replaceChildren(el("div", { class: "failure", id: "load-error" }, error.message));
  }
  timer = setTimeout(refresh, config["refresh-interval"]);
}

// The error of loading the configuration, if any (the view shows it, or asks for a token).
async function loadConfig() {
  let failure = null;
  try {
    config = { ...config, ...(await api("config")) };
  } catch (error) {
    failure = error;  // keep the defaults
  }
  const grafana = document.getElementById("grafana-link");
  if (config["grafana-url"]) {
    grafana.href = config["grafana-url"];
    grafana.hidden = false;
  }
  return failure;
}

async function start() {
  await loadConfig();
  window.addEventListener("hashchange", refresh);
  refresh();
}

start();
