// jobqueue dashboard: plain JavaScript, no build step, no third-party code.
//
// The overview polls GET /dashboard/overview (one cached snapshot on the server shared by every
// viewer) and derives rates, the failure rate and processing-time percentiles from the
// differences between successive snapshots, over sliding windows. The jobs and dead-letter views
// page through the REST API with keyset cursors (never loading the whole table) and send the API
// key the operator typed (kept in this browser's localStorage only).
"use strict";

(() => {
  const POLL_MS = 1000;
  const HISTORY_S = 180;       // snapshots kept for the chart
  const CHART_S = 60;          // the chart's time span
  const RATE_WINDOW_S = 6;     // rates are averaged over this window (workers report every ~2 s)
  const STATS_WINDOW_S = 60;   // failure rate and percentiles: the last minute
  const PAGE = 50;
  const ROUTES = window.JOBQUEUE_ROUTES || {};

  const state = {
    key: localStorage.getItem("jobqueue.apiKey") || "",
    history: [],
    last: null,
    view: "overview",
    jobs: { cursor: null, filters: {}, selected: null },
    dead: { cursor: null, filters: {}, selected: null },
  };

  // --- small helpers ------------------------------------------------------------------------

  const $ = (selector) => document.querySelector(selector);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "onclick") node.addEventListener("click", value);
      else if (name === "className") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const fmtInt = (n) => (n === null || n === undefined ? "–" : Math.round(n).toLocaleString("en-US"));
  function fmtRate(n) {
    if (n === null || n === undefined || !isFinite(n)) return "–";
    return n >= 100 ? fmtInt(n) : n.toFixed(1);
  }
  const fmtPct = (x) => (x === null || x === undefined || !isFinite(x) ? "–" : (x * 100).toFixed(x < 0.1 ? 2 : 1) + " %");
  function fmtMs(ms) {
    if (ms === null || ms === undefined || !isFinite(ms)) return "–";
    if (ms >= 60000) return (ms / 60000).toFixed(1) + " min";
    if (ms >= 1000) return (ms / 1000).toFixed(2) + " s";
    return (ms >= 10 ? ms.toFixed(0) : ms.toFixed(2)) + " ms";
  }
  function fmtAge(seconds) {
    if (!seconds) return "–";
    if (seconds < 60) return seconds.toFixed(1) + " s";
    if (seconds < 3600) return (seconds / 60).toFixed(1) + " min";
    return (seconds / 3600).toFixed(1) + " h";
  }
  function fmtTime(iso) {
    if (!iso) return "–";
    const d = new Date(iso), pad = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }
  const shortId = (id) => String(id).slice(0, 8);

  function banner(message, kind) {
    const node = $("#banner");
    if (!message) { node.hidden = true; return; }
    node.textContent = message;
    node.className = "banner" + (kind ? " " + kind : "");
    node.hidden = false;
  }

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function api(method, path, body) {
    const headers = { Accept: "application/json" };
    if (state.key) headers.Authorization = "Bearer " + state.key;
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const text = await response.text();
    let data = null;
    if (text) { try { data = JSON.parse(text); } catch (_) { data = { message: text }; } }
    if (!response.ok) {
      const detail = (data && (data.message || data.detail || data.error)) || response.statusText;
      throw new ApiError(response.status, `${response.status}: ${detail}`);
    }
    return data;
  }

  function needKey(what) {
    if (state.key) return false;
    banner(`Enter an API key (top right) to ${what}.`, "info");
    return true;
  }

  function route(name, params) {
    const template = ROUTES[name];
    return template.replace(/\{(\w+)\}/g, (_, key) => encodeURIComponent(params[key]));
  }

  function query(params) {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(params)) if (value !== "" && value !== null && value !== undefined) search.set(name, value);
    const text = search.toString();
    return text ? "?" + text : "";
  }

  // --- windowed figures from successive snapshots ---------------------------------------------

  function windowStart(seconds) {
    const history = state.history;
    if (history.length < 2) return null;
    const last = history[history.length - 1];
    let first = history[0];
    for (const entry of history) { if (last.t - entry.t <= seconds) { first = entry; break; } }
    return first === last ? history[history.length - 2] : first;
  }

  function rate(pick, seconds, atIndex) {
    const history = state.history;
    const end = atIndex === undefined ? history.length - 1 : atIndex;
    if (end < 1) return null;
    let start = end - 1;
    while (start > 0 && history[end].t - history[start - 1].t <= seconds) start -= 1;
    const dt = history[end].t - history[start].t;
    return dt > 0 ? Math.max(pick(history[end]) - pick(history[start]), 0) / dt : null;
  }

  function quantile(q, bounds, counts) {
    const total = counts.reduce((a, b) => a + b, 0);
    if (!total) return null;
    const rank = q * total;
    let seen = 0;
    for (let i = 0; i < counts.length; i += 1) {
      if (seen + counts[i] >= rank && counts[i] > 0) {
        if (i >= bounds.length) return bounds[bounds.length - 1];  // the overflow bucket: at least its bound
        const lower = i === 0 ? 0 : bounds[i - 1];
        return lower + (bounds[i] - lower) * ((rank - seen) / counts[i]);
      }
      seen += counts[i];
    }
    return bounds[bounds.length - 1];
  }

  // --- overview -----------------------------------------------------------------------------

  async function poll() {
    try {
      if (needKey("see the figures (an admin key; the figures show hosts, processes and queues)")) {
        setLive(false, "no API key");
        return;
      }
      const overview = await api("GET", ROUTES.overview);
      onOverview(overview);
      setLive(true);
    } catch (error) {
      setLive(false, error.message);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  function setLive(ok, message) {
    const node = $("#live");
    node.className = "live " + (ok ? "ok" : "stale");
    node.textContent = ok ? "live · " + new Date().toLocaleTimeString() : "offline: " + message;
  }

  function onOverview(o) {
    const t = Date.parse(o.measured_at) / 1000;
    const last = state.history[state.history.length - 1];
    if (!last || t > last.t) {
      state.history.push({ t, submitted: o.submitted, processed: o.processed, failed: o.failed, buckets: o.buckets });
      while (state.history.length && t - state.history[0].t > HISTORY_S) state.history.shift();
    }
    state.last = o;
    renderCards(o);
    renderChart();
    renderQueues(o.queues);
    renderWorkers(o.workers);
    renderTypes(o.job_types);
  }

  function setText(selector, text, className) {
    const node = $(selector);
    node.textContent = text;
    if (className !== undefined) node.className = node.className.split(" ")[0] + (className ? " " + className : "");
  }

  function renderCards(o) {
    setText("#m-depth", fmtInt(o.depth));
    setText("#m-depth-sub", `${fmtInt(o.scheduled)} scheduled · ${fmtInt(o.retrying)} retrying · ${fmtInt(o.processing)} running`);
    setText("#m-submit-rate", fmtRate(rate((h) => h.submitted, RATE_WINDOW_S)));
    setText("#m-submitted", `${fmtInt(o.submitted)} submitted in all`);
    setText("#m-done-rate", fmtRate(rate((h) => h.processed - h.failed, RATE_WINDOW_S)));
    setText("#m-processed", `${fmtInt(o.processed - o.failed)} completed · ${fmtInt(o.processed)} attempts`);

    const start = windowStart(STATS_WINDOW_S);
    const end = state.history[state.history.length - 1];
    let failure = null, sub = "all time";
    let counts = o.buckets, span = "all time";
    if (start && end.processed > start.processed) {
      failure = (end.failed - start.failed) / (end.processed - start.processed);
      sub = "last minute";
      counts = end.buckets.map((c, i) => c - (start.buckets[i] || 0));
      span = "last minute";
    } else if (o.processed > 0) {
      failure = o.failed / o.processed;
    }
    setText("#m-failure", fmtPct(failure), failure === null ? "" : failure > 0.05 ? "bad" : failure > 0.01 ? "warn" : "good");
    setText("#m-failure-sub", `${sub} · ${fmtInt(o.failed)} failed attempts`);

    const alive = o.workers.filter((w) => w.alive).length;
    setText("#m-workers", String(o.worker_count), o.worker_count < 2 ? "warn" : "");
    setText("#m-utilization", `utilization ${fmtPct(o.utilization)} · ${o.workers.length - alive} gone`);
    setText("#m-dead", fmtInt(o.dead), o.dead > 500 ? "bad" : "");
    setText("#m-dead-sub", o.dead ? "see Dead letters" : "none");
    setText("#m-p99", "p99 " + fmtMs(quantile(0.99, o.bounds_ms, counts)));
    setText("#m-p50", `p50 ${fmtMs(quantile(0.5, o.bounds_ms, counts))} · ${span}`);
  }

  function renderChart() {
    const canvas = $("#chart");
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (!width || !height) return;
    if (canvas.width !== Math.round(width * ratio)) { canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio); }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);

    const history = state.history;
    const now = history.length ? history[history.length - 1].t : Date.now() / 1000;
    const series = { sub: [], done: [], fail: [] };
    for (let i = 1; i < history.length; i += 1) {
      if (now - history[i].t > CHART_S) continue;
      series.sub.push([history[i].t, rate((h) => h.submitted, RATE_WINDOW_S, i)]);
      series.done.push([history[i].t, rate((h) => h.processed - h.failed, RATE_WINDOW_S, i)]);
      series.fail.push([history[i].t, rate((h) => h.failed, RATE_WINDOW_S, i)]);
    }
    const peak = Math.max(1, ...series.sub.map((p) => p[1] || 0), ...series.done.map((p) => p[1] || 0));
    const top = niceCeiling(peak);
    const left = 56, right = 10, upper = 10, bottom = 22;
    const plotW = width - left - right, plotH = height - upper - bottom;
    const x = (t) => left + plotW * (1 - (now - t) / CHART_S);
    const y = (v) => upper + plotH * (1 - v / top);

    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#6b7585";
    ctx.strokeStyle = "#e5e7eb";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i += 1) {
      const value = (top / 4) * i;
      ctx.beginPath(); ctx.moveTo(left, y(value)); ctx.lineTo(width - right, y(value)); ctx.stroke();
      ctx.textAlign = "right"; ctx.fillText(fmtRate(value), left - 6, y(value) + 4);
    }
    ctx.textAlign = "center";
    for (let s = 0; s <= CHART_S; s += 15) ctx.fillText(s === 0 ? "now" : `-${s}s`, x(now - s), height - 6);

    const colors = { sub: "#3b82f6", done: "#16a34a", fail: "#dc2626" };
    for (const name of ["sub", "done", "fail"]) {
      const points = series[name].filter((p) => p[1] !== null);
      if (points.length < 2) continue;
      ctx.strokeStyle = colors[name];
      ctx.lineWidth = 2;
      ctx.beginPath();
      points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
      ctx.stroke();
    }
  }

  function niceCeiling(value) {
    const magnitude = Math.pow(10, Math.floor(Math.log10(value)));
    for (const step of [1, 2, 2.5, 5, 10]) if (step * magnitude >= value) return step * magnitude;
    return 10 * magnitude;
  }

  function replaceRows(table, rows) {
    const body = $(table + " tbody");
    body.replaceChildren(...rows);
  }

  function renderQueues(queues) {
    replaceRows("#queues", queues.map((q) => {
      const p = q.depth_by_priority;
      const toggle = el("button", {
        className: "admin", "data-queue": q.queue,
        onclick: () => setPaused(q.queue, !q.paused),
      }, q.paused ? "Resume" : "Pause");
      return el("tr", { "data-queue": q.queue },
        el("td", {}, q.queue),
        el("td", { className: "num depth" }, fmtInt(q.depth)),
        el("td", { className: "mono" }, `${fmtInt(p.critical)} / ${fmtInt(p.high)} / ${fmtInt(p.normal)} / ${fmtInt(p.low)}`),
        el("td", { className: "num" }, fmtInt(q.scheduled)),
        el("td", { className: "num" }, fmtInt(q.retrying)),
        el("td", { className: "num" }, fmtInt(q.processing)),
        el("td", { className: q.processing_age_seconds > 900 ? "bad" : "" }, q.processing ? fmtAge(q.processing_age_seconds) : "–"),
        el("td", { className: "num" }, fmtInt(q.dead)),
        el("td", { className: q.oldest_age_seconds > 600 ? "bad" : "" }, fmtAge(q.oldest_age_seconds)),
        el("td", {}, el("span", { className: "pill " + (q.paused ? "paused" : "running") }, q.paused ? "paused" : "active")),
        el("td", {}, toggle));
    }));
  }

  function renderWorkers(workers) {
    replaceRows("#workers", workers.map((w) => el("tr", {},
      el("td", { className: "mono", title: `${w.host} pid ${w.pid}` }, w.id),
      el("td", {}, el("span", { className: "pill " + w.status }, w.status)),
      el("td", {}, w.queues.join(", ")),
      el("td", { className: "num" }, w.concurrency),
      el("td", {}, el("span", { className: "bar" }, el("span", { style: `width:${Math.min(100, w.utilization * 100).toFixed(0)}%` })), fmtPct(w.utilization)),
      el("td", { className: "num" }, fmtInt(w.jobs_processed)),
      el("td", { className: "num" }, fmtInt(w.jobs_failed)),
      el("td", { className: "num " + (w.stuck_handlers > 0 ? "bad" : ""), title: "handlers past their deadline still holding a thread" }, fmtInt(w.stuck_handlers)),
      el("td", {}, w.heartbeat_age_seconds.toFixed(0) + " s ago"))));
  }

  function renderTypes(types) {
    replaceRows("#types", types.map((t) => el("tr", {},
      el("td", {}, t.queue), el("td", {}, t.job_type),
      el("td", { className: "num" }, fmtInt(t.processed)),
      el("td", { className: "num" }, fmtInt(t.failed)),
      el("td", { className: "num" }, fmtInt(t.dead)),
      el("td", { className: "num" }, fmtMs(t.mean_ms)))));
  }

  async function setPaused(queue, paused) {
    if (needKey("pause or resume a queue")) return;
    try {
      await api("POST", route(paused ? "pause" : "resume", { queue }));
      banner(`Queue ${queue} ${paused ? "paused" : "resumed"}.`, "info");
    } catch (error) {
      banner(`Could not ${paused ? "pause" : "resume"} ${queue}: ${error.message}`);
    }
  }

  // --- jobs and dead letters: keyset-paginated lists with a detail panel ----------------------

  function listParams(kind) {
    const filters = state[kind].filters;
    const params = { limit: PAGE, queue: filters.queue, job_type: filters.job_type };
    if (kind === "jobs") { params.state = filters.state; params.priority = filters.priority; }
    if (state[kind].cursor) params.cursor = state[kind].cursor;
    return params;
  }

  async function loadList(kind, append) {
    if (needKey(kind === "dead" ? "see dead letters" : "list jobs")) return;
    if (!append) state[kind].cursor = null;
    try {
      const page = await api("GET", (kind === "dead" ? ROUTES.dlq : ROUTES.jobs) + query(listParams(kind)));
      const jobs = page.jobs || [];
      state[kind].cursor = page.next_cursor || null;
      const rows = jobs.map((job) => (kind === "dead" ? deadRow(job) : jobRow(job)));
      const body = $(`#${kind === "dead" ? "dead" : "jobs"} tbody`);
      if (append) body.append(...rows); else body.replaceChildren(...rows);
      $(`#${kind}-more`).hidden = !state[kind].cursor;
      $(`#${kind}-empty`).hidden = body.children.length > 0;
      banner(null);
    } catch (error) {
      banner(`Could not load ${kind === "dead" ? "dead letters" : "jobs"}: ${error.message}`);
    }
  }

  function jobRow(job) {
    return el("tr", { className: "clickable", "data-id": job.id, onclick: () => showJob("jobs", job.id) },
      el("td", { className: "mono", title: job.id }, shortId(job.id)),
      el("td", {}, job.job_type), el("td", {}, job.queue), el("td", {}, job.priority),
      el("td", {}, el("span", { className: "pill " + job.state }, job.state)),
      el("td", { className: "num" }, `${job.attempts}/${job.max_attempts}`),
      el("td", {}, fmtTime(job.created_at)));
  }

  function deadRow(job) {
    const message = job.last_error_type ? `${job.last_error_type}: ${job.last_error || ""}` : "";
    return el("tr", { className: "clickable", "data-id": job.id, onclick: () => showJob("dead", job.id) },
      el("td", { className: "mono", title: job.id }, shortId(job.id)),
      el("td", {}, job.job_type), el("td", {}, job.queue),
      el("td", { className: "num" }, `${job.attempts}/${job.max_attempts}`),
      el("td", { title: message }, message.length > 40 ? message.slice(0, 39) + "…" : message),
      el("td", {}, fmtTime(job.finished_at)),
      el("td", {}, el("button", { className: "admin retry", "data-id": job.id, onclick: (event) => { event.stopPropagation(); retryJob(job.id); } }, "Retry")));
  }

  function pre(value) {
    return el("pre", {}, value === null || value === undefined ? "—" : typeof value === "string" ? value : JSON.stringify(value, null, 2));
  }

  async function showJob(kind, id) {
    const panel = $(kind === "dead" ? "#dead-detail" : "#job-detail");
    for (const row of document.querySelectorAll(`#${kind === "dead" ? "dead" : "jobs"} tbody tr`)) row.classList.toggle("selected", row.dataset.id === id);
    try {
      const job = await api("GET", route("job", { id }));
      const errors = job.errors || [];
      panel.replaceChildren(
        el("h2", {}, `${job.job_type} · ${job.state}`),
        el("dl", {},
          el("dt", {}, "id"), el("dd", { className: "mono" }, job.id),
          el("dt", {}, "queue"), el("dd", {}, job.queue),
          el("dt", {}, "priority"), el("dd", {}, job.priority),
          el("dt", {}, "attempts"), el("dd", {}, `${job.attempts} of ${job.max_attempts}`),
          el("dt", {}, "created"), el("dd", {}, fmtTime(job.created_at)),
          el("dt", {}, "run at"), el("dd", {}, fmtTime(job.run_at)),
          el("dt", {}, "finished"), el("dd", {}, fmtTime(job.finished_at)),
          el("dt", {}, "duration"), el("dd", {}, fmtMs(job.duration_ms)),
          el("dt", {}, "producer"), el("dd", {}, job.producer_id || "—"),
          el("dt", {}, "idempotency key"), el("dd", {}, job.idempotency_key || "—")),
        el("h2", {}, "Payload"), pre(job.payload),
        el("h2", {}, "Result"), pre(job.result !== undefined && job.result !== null ? job.result : job.final_error),
        el("h2", {}, `Attempts with errors (${errors.length})`),
        ...errors.map((e) => el("div", { className: "attempt" },
          el("strong", {}, `#${e.attempt} ${e.error_type}: `), e.message,
          el("div", { className: "muted" }, `${fmtTime(e.failed_at)} on ${e.worker_id || "?"}`),
          e.traceback ? pre(e.traceback) : null)),
        ...(job.state === "dead_letter"
          ? [el("button", { className: "admin retry", onclick: () => retryJob(job.id) }, "Retry this job")] : []));
      panel.hidden = false;
    } catch (error) {
      banner(`Could not load job ${id}: ${error.message}`);
    }
  }

  async function retryJob(id) {
    if (needKey("retry a job")) return;
    try {
      await api("POST", route("retry", { id }));
      banner(`Job ${shortId(id)} is back in its queue.`, "info");
      $("#dead-detail").hidden = true;
      loadList("dead", false);
    } catch (error) {
      banner(`Could not retry ${shortId(id)}: ${error.message}`);
    }
  }

  // Destructive actions arm on the first click and run on the second (no blocking dialogs).
  function twoClicks(button, label, action) {
    button.addEventListener("click", async () => {
      if (!button.classList.contains("armed")) {
        button.classList.add("armed");
        button.textContent = "Click again to confirm";
        setTimeout(() => { button.classList.remove("armed"); button.textContent = label; }, 4000);
        return;
      }
      button.classList.remove("armed");
      button.textContent = label;
      await action();
    });
  }

  async function bulk(name, method, verb) {
    if (needKey(verb + " dead letters")) return;
    const filters = state.dead.filters;
    try {
      const result = await api(method, ROUTES[name] + query({ queue: filters.queue, job_type: filters.job_type }));
      banner(`${verb[0].toUpperCase() + verb.slice(1)}: ${result ? result.count : 0} dead job(s).`, "info");
      loadList("dead", false);
    } catch (error) {
      banner(`Could not ${verb}: ${error.message}`);
    }
  }

  // --- wiring ---------------------------------------------------------------------------------

  function show(view) {
    state.view = view;
    for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === view);
    for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== "view-" + view;
    banner(null);
    if (view === "jobs") loadList("jobs", false);
    if (view === "dead") loadList("dead", false);
    if (view === "overview") renderChart();
  }

  function start() {
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));
    $("#api-key").value = state.key;
    $("#key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      state.key = $("#api-key").value.trim();
      localStorage.setItem("jobqueue.apiKey", state.key);
      banner(state.key ? "API key saved in this browser." : "API key cleared.", "info");
      if (state.view !== "overview") show(state.view);
    });
    $("#job-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      state.jobs.filters = { state: $("#f-state").value, priority: $("#f-priority").value,
                             queue: $("#f-queue").value.trim(), job_type: $("#f-type").value.trim() };
      loadList("jobs", false);
    });
    $("#dead-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      state.dead.filters = { queue: $("#d-queue").value.trim(), job_type: $("#d-type").value.trim() };
      loadList("dead", false);
    });
    $("#jobs-more").addEventListener("click", () => loadList("jobs", true));
    $("#dead-more").addEventListener("click", () => loadList("dead", true));
    twoClicks($("#dead-retry-all"), "Retry all matching", () => bulk("retryAll", "POST", "retry"));
    twoClicks($("#dead-purge"), "Purge all matching", () => bulk("purge", "DELETE", "purge"));
    window.addEventListener("resize", renderChart);
    poll();
  }

  start();
})();
