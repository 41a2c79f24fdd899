// jobqueue dashboard: plain JavaScript, no build step, no third-party code.
//
// The overview polls GET /dashboard/overview (one cached snapshot on the server shared by every
// viewer) and derives rates, the failure rate and processing-time percentiles from the
// differences between successive snapshots, over sliding windows; the hour chart reads the
// per-minute history the maintenance leader keeps (GET /dashboard/history), so it is full after a
// reload. The job lists (all jobs, scheduled, retrying, dead letters) page through the REST API
// with keyset cursors (never loading the whole table); their rows and the detail panel cancel,
// delete (a job that has not started), and retry. The Schedules and Circuits views act on cron
// schedules and circuit breakers. Every call sends the API key the operator typed (kept in this
// browser's localStorage only). What could mislead an operator is said on the page: workers that
// stopped or were lost are kept apart from the live ones (and show no utilization), retries that
// no live worker can run are flagged (the overview's `unserved`), a schedule's error gives its
// reason, errors are shown whole.
"use strict";

(() => {
  const POLL_MS = 1000;
  const HISTORY_S = 180;       // snapshots kept for the chart
  const CHART_S = 60;          // the chart's time span
  const RATE_WINDOW_S = 6;     // rates are averaged over this window (workers report every ~2 s)
  const STATS_WINDOW_S = 60;   // failure rate and percentiles: the last minute
  const PAGE = 50;
  const MAX_FETCHES_PER_PAGE = 10;  // requests one "load" / "more" may make (see loadList)
  const HISTORY_MINUTES = 60;  // the hour chart's span
  const HISTORY_POLL_MS = 20000;
  const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  // The REST routes, from the page's JSON data block (no inline script: the page's policy forbids it).
  const ROUTES = JSON.parse(document.getElementById("jobqueue-routes").textContent);

  const state = {
    key: localStorage.getItem("jobqueue.apiKey") || "",
    history: [],
    serverHistory: null,  // per-minute rates from the server, null until first read
    running: null,        // worker id -> { running, jobs }, null when not read (yet)
    showGone: false,      // the stopped and lost workers' table is open
    polls: 0,
    last: null,
    view: "overview",
    jobs: { cursor: null, filters: {} },
    scheduled: { cursor: null, filters: {} },
    retrying: { cursor: null, filters: {} },
    dead: { cursor: null, filters: {} },
  };

  // --- small helpers ------------------------------------------------------------------------

  const $ = (selector) => document.querySelector(selector);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "onclick") node.addEventListener("click", value);
      else if (name === "className") node.className = value;
      else if (name === "style") Object.assign(node.style, value);  // CSSOM: a style attribute is refused by the page's policy
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
  // The random tail of a UUIDv7 (its head is the timestamp, the same for jobs of one millisecond).
  const shortId = (id) => "…" + String(id).slice(-8);
  // A queue, job type or worker name of any length: cut with an ellipsis (CSS), whole in the tooltip.
  const nameCell = (text, className) => el("td", { className: "name" + (className ? " " + className : ""), title: text },
                                           el("span", { className: "cut" }, text));

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

  // The newest snapshot at least `seconds` older than the last one, so the window covers the
  // whole span; the oldest one while the page has not yet seen that long (the label says so).
  function windowStart(seconds) {
    const history = state.history;
    if (history.length < 2) return null;
    const last = history[history.length - 1];
    let start = history[0];
    for (const entry of history) {
      if (last.t - entry.t >= seconds) start = entry; else break;
    }
    return start === last ? null : start;
  }

  function spanLabel(seconds, wanted) {
    return seconds >= wanted - 1.5 ? "last minute" : `last ${Math.round(seconds)} s (page open since)`;
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
      state.polls += 1;
      const [overview] = await Promise.all([
        api("GET", ROUTES.overview),
        state.view === "overview" && state.polls % 2 === 1 ? loadRunning() : null,
      ]);
      onOverview(overview);
      setLive(true);
    } catch (error) {
      setLive(false, error.message);
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  // What each worker runs now; on failure the column shows "–" rather than stale jobs.
  async function loadRunning() {
    try {
      state.running = (await api("GET", ROUTES.running)).workers;
    } catch (_) {
      state.running = null;
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
    markUnserved();
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
    let failure = null, sub, counts = o.buckets, span = "all time";
    if (start) {
      const label = spanLabel(end.t - start.t, STATS_WINDOW_S);
      const attempts = end.processed - start.processed, failed = end.failed - start.failed;
      if (attempts > 0) {
        failure = failed / attempts;
        counts = end.buckets.map((c, i) => c - (start.buckets[i] || 0));
        span = label;
      }
      sub = `${label} · ${fmtInt(failed)} failed of ${fmtInt(attempts)} attempts`;
    } else {
      sub = "waiting for a second snapshot";
    }
    if (failure === null && o.processed > 0) {
      failure = o.failed / o.processed;
      sub += ` · all time ${fmtInt(o.failed)} of ${fmtInt(o.processed)}`;
    }
    setText("#m-failure", fmtPct(failure), failure === null ? "" : failure > 0.05 ? "bad" : failure > 0.01 ? "warn" : "good");
    setText("#m-failure-sub", sub);

    const alive = o.workers.filter((w) => w.alive).length;
    setText("#m-workers", String(o.worker_count), o.worker_count < 2 ? "warn" : "");
    setText("#m-utilization", `utilization ${fmtPct(o.utilization)} · ${o.workers.length - alive} gone`);
    setText("#m-dead", fmtInt(o.dead), o.dead > 500 ? "bad" : "");
    setText("#m-dead-sub", o.dead ? "see Dead letters" : "none");
    setText("#m-p99", "p99 " + fmtMs(quantile(0.99, o.bounds_ms, counts)));
    setText("#m-p50", `p50 ${fmtMs(quantile(0.5, o.bounds_ms, counts))} · ${span}`);
  }

  // One line chart: series of [t, value] points over the `span` seconds before `now`, the x axis
  // labelled every `tick` seconds by `tickLabel(secondsAgo)`.
  function drawChart(canvas, series, { now, span, tick, tickLabel }) {
    const ratio = window.devicePixelRatio || 1;
    const width = canvas.clientWidth, height = canvas.clientHeight;
    if (!width || !height) return;
    if (canvas.width !== Math.round(width * ratio)) { canvas.width = Math.round(width * ratio); canvas.height = Math.round(height * ratio); }
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);

    // The axis fits what is drawn, failures included: a failure spike above the submitted and
    // completed lines ran off the top of a chart scaled to those two alone.
    const shown = (p) => p[1] !== null && now - p[0] <= span;
    const peak = Math.max(1, ...["sub", "done", "fail"].flatMap((name) => series[name].filter(shown).map((p) => p[1])));
    const top = niceCeiling(peak);
    canvas.dataset.yMax = String(top);
    const left = 56, right = 10, upper = 10, bottom = 22;
    const plotW = width - left - right, plotH = height - upper - bottom;
    const x = (t) => left + plotW * (1 - (now - t) / span);
    const y = (v) => upper + plotH * (1 - v / top);

    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#6b7585";
    ctx.strokeStyle = "#e5e7eb";
    ctx.lineWidth = 1;
    for (let i = 0; i <= 4; i += 1) {
      const value = (top / 4) * i;
      ctx.beginPath(); ctx.moveTo(left, y(value)); ctx.lineTo(width - right, y(value)); ctx.stroke();
      ctx.textAlign = "right"; ctx.fillText(axisLabel(value, top / 4), left - 6, y(value) + 4);
    }
    ctx.textAlign = "center";
    for (let s = 0; s <= span; s += tick) ctx.fillText(tickLabel(s), x(now - s), height - 6);

    const colors = { sub: "#3b82f6", done: "#16a34a", fail: "#dc2626" };
    for (const name of ["sub", "done", "fail"]) {
      const points = series[name].filter(shown);
      if (points.length < 2) continue;
      ctx.strokeStyle = colors[name];
      ctx.lineWidth = 2;
      ctx.beginPath();
      points.forEach(([t, v], i) => (i ? ctx.lineTo(x(t), y(v)) : ctx.moveTo(x(t), y(v))));
      ctx.stroke();
    }
  }

  function renderChart() {
    const history = state.history;
    const now = history.length ? history[history.length - 1].t : Date.now() / 1000;
    const series = { sub: [], done: [], fail: [] };
    for (let i = 1; i < history.length; i += 1) {
      if (now - history[i].t > CHART_S) continue;
      series.sub.push([history[i].t, rate((h) => h.submitted, RATE_WINDOW_S, i)]);
      series.done.push([history[i].t, rate((h) => h.processed - h.failed, RATE_WINDOW_S, i)]);
      series.fail.push([history[i].t, rate((h) => h.failed, RATE_WINDOW_S, i)]);
    }
    drawChart($("#chart"), series, { now, span: CHART_S, tick: 15, tickLabel: (s) => (s === 0 ? "now" : `-${s}s`) });
  }

  // The last hour from the server: one point per minute (the rate since the minute before).
  function renderHistoryChart() {
    const minutes = state.serverHistory || [];
    const series = { sub: [], done: [], fail: [] };
    for (const m of minutes) {
      const t = Date.parse(m.measured_at) / 1000;  // a minute's rate: up to its last sample
      series.sub.push([t, m.submitted_per_s]);
      series.done.push([t, m.completed_per_s]);
      series.fail.push([t, m.failed_per_s]);
    }
    drawChart($("#history-chart"), series, { now: Date.now() / 1000, span: HISTORY_MINUTES * 60, tick: 600,
                                              tickLabel: (s) => (s === 0 ? "now" : `-${s / 60} min`) });
    $("#history-note").textContent = state.serverHistory === null ? "not read yet"
      : minutes.length ? `${minutes.length} minute(s) recorded`
      : "no minutes recorded yet: the maintenance leader samples every 15 s";
  }

  async function readHistory() {
    if (!state.key) return;
    try {
      state.serverHistory = (await api("GET", ROUTES.history + query({ minutes: HISTORY_MINUTES }))).minutes;
      renderHistoryChart();
    } catch (error) {
      $("#history-note").textContent = "could not read the history: " + error.message;
    }
  }

  function historyLoop() {
    readHistory().finally(() => setTimeout(historyLoop, HISTORY_POLL_MS));
  }

  // An axis value with as many decimals as its step needs (0.25 read "0.3", 25 read "25.0").
  function axisLabel(value, step) {
    const digits = [0, 1, 2, 3].find((d) => Math.abs(step * 10 ** d - Math.round(step * 10 ** d)) < 1e-9) ?? 3;
    return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
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
      // The queues not listed by name, summed (the server lists the largest ones): not a queue to pause.
      const folded = q.other_queues !== undefined;
      const toggle = folded ? "" : el("button", {
        className: "admin", "data-queue": q.queue,
        onclick: () => setPaused(q.queue, !q.paused),
      }, q.paused ? "Resume" : "Pause");
      return el("tr", folded ? { className: "other-queues" } : { "data-queue": q.queue },
        folded ? el("td", { title: "the smaller queues, summed" }, `${fmtInt(q.other_queues)} other queues`) : nameCell(q.queue),
        el("td", { className: "num depth" }, fmtInt(q.depth)),
        el("td", { className: "mono" }, `${fmtInt(p.critical)} / ${fmtInt(p.high)} / ${fmtInt(p.normal)} / ${fmtInt(p.low)}`),
        el("td", { className: "num" }, fmtInt(q.scheduled)),
        el("td", { className: "num" }, fmtInt(q.retrying)),
        el("td", { className: "num" }, fmtInt(q.processing)),
        el("td", { className: q.processing_age_seconds > 900 ? "bad" : "" }, q.processing ? fmtAge(q.processing_age_seconds) : "–"),
        el("td", { className: "num" }, fmtInt(q.dead)),
        el("td", { className: q.oldest_age_seconds > 600 ? "bad" : "" }, fmtAge(q.oldest_age_seconds)),
        el("td", { className: "num" + (q.unserved ? " bad" : ""), title: q.unserved
          ? "no live worker of this queue has a handler for: " + q.unserved_job_types.join(", ") : "" }, fmtInt(q.unserved)),
        el("td", {}, folded ? "–" : el("span", { className: "pill " + (q.paused ? "paused" : "running") }, q.paused ? "paused" : "active")),
        el("td", {}, toggle));
    }));
  }

  function runningCell(w) {
    if (state.running === null) return el("td", { className: "num", title: "not read yet" }, "–");
    const found = state.running[w.id];
    if (!found) return el("td", { className: "running-now" }, "0");
    const more = found.running - found.jobs.length;
    return el("td", { className: "running-now" }, el("strong", {}, `${found.running} `),
      found.jobs.map((job) => el("a", { href: "#", className: "mono", "data-id": job.id,
                                         title: `${job.job_type} on ${job.queue}, attempt ${job.attempt}, started ${fmtTime(job.started_at)}`,
                                         onclick: (event) => { event.preventDefault(); findJob(job.id); } },
                                  `${shortId(job.id)} ${job.job_type}`)),
      more > 0 ? el("span", { className: "muted" }, `+${more} more`) : null);
  }

  // Live workers only, with their utilization; the stopped and lost ones of the last hour apart,
  // behind a toggle and without one (a worker that stopped still showed its last 23 %: not current).
  function renderWorkers(workers) {
    const live = workers.filter((w) => w.alive), gone = workers.filter((w) => !w.alive);
    replaceRows("#workers", live.map(liveWorkerRow));
    $("#workers-empty").hidden = live.length > 0;
    replaceRows("#workers-gone", gone.map(goneWorkerRow));
    const toggle = $("#workers-gone-toggle");
    toggle.hidden = gone.length === 0;
    toggle.textContent = `${state.showGone ? "Hide" : "Show"} ${gone.length} stopped or lost worker(s)`;
    toggle.setAttribute("aria-expanded", String(state.showGone));
    $("#workers-gone").hidden = !state.showGone || gone.length === 0;
  }

  const heartbeatCell = (w) => el("td", { title: `${w.host} pid ${w.pid}` },
    (w.heartbeat_age_seconds < 60 ? w.heartbeat_age_seconds.toFixed(0) + " s" : fmtAge(w.heartbeat_age_seconds)) + " ago");

  function liveWorkerRow(w) {
    return el("tr", { "data-worker": w.id },
      nameCell(w.id, "mono"),
      el("td", {}, el("span", { className: "pill " + w.status }, w.status)),
      nameCell(w.queues.join(", ")),
      el("td", { className: "num" }, w.concurrency),
      el("td", {}, el("span", { className: "bar" }, el("span", { style: { width: `${Math.min(100, w.utilization * 100).toFixed(0)}%` } })), fmtPct(w.utilization)),
      runningCell(w),
      el("td", { className: "num" }, fmtInt(w.jobs_processed)),
      el("td", { className: "num" }, fmtInt(w.jobs_failed)),
      el("td", { className: "num " + (w.stuck_handlers > 0 ? "bad" : ""), title: "handlers past their deadline still holding a thread" }, fmtInt(w.stuck_handlers)),
      heartbeatCell(w));
  }

  function goneWorkerRow(w) {
    return el("tr", { "data-worker": w.id },
      nameCell(w.id, "mono"),
      el("td", {}, el("span", { className: "pill " + w.status }, w.status)),
      nameCell(w.queues.join(", ")),
      el("td", { className: "num" }, w.concurrency),
      el("td", { className: "num" }, fmtInt(w.jobs_processed)),
      el("td", { className: "num" }, fmtInt(w.jobs_failed)),
      el("td", {}, fmtTime(w.started_at)),
      heartbeatCell(w));
  }

  function renderTypes(types) {
    replaceRows("#types", types.map((t) => el("tr", {},
      nameCell(t.queue), nameCell(t.job_type),
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

  // --- job lists: keyset-paginated, each with a detail panel ------------------------------------

  // Each list: the route it pages through, the filters it always sends, its row, and the prefix of
  // its filter inputs (#<prefix>-queue, #<prefix>-type).
  const LISTS = {
    jobs: { route: "jobs", fixed: {}, row: jobRow, what: "jobs" },
    scheduled: { route: "jobs", fixed: { state: "pending", scheduled: "true" }, row: scheduledRow, prefix: "s", what: "scheduled jobs" },
    retrying: { route: "jobs", fixed: { state: "failed" }, row: retryingRow, prefix: "r", what: "retrying jobs" },
    dead: { route: "dlq", fixed: {}, row: deadRow, prefix: "d", what: "dead letters" },
  };

  function listParams(kind) {
    const filters = state[kind].filters;
    const params = { ...LISTS[kind].fixed, limit: PAGE, queue: filters.queue, job_type: filters.job_type };
    if (kind === "jobs") { params.state = filters.state; params.priority = filters.priority; }
    if (state[kind].cursor) params.cursor = state[kind].cursor;
    return params;
  }

  async function loadList(kind, append) {
    if (needKey("list " + LISTS[kind].what)) return;
    if (!append) state[kind].cursor = null;
    try {
      // A page examines a bounded stretch of jobs, so a rare filter gives short pages with a
      // cursor: fetch on (a few more pages at most) until this one is full or the list ends,
      // each fetch asking only for what the page still lacks (a short page then a full one made
      // a page of 90 rows, and "more" appended as many).
      const jobs = [];
      for (let fetched = 0; fetched < MAX_FETCHES_PER_PAGE; fetched++) {
        const params = { ...listParams(kind), limit: PAGE - jobs.length };
        const page = await api("GET", ROUTES[LISTS[kind].route] + query(params));
        jobs.push(...(page.jobs || []));
        state[kind].cursor = page.next_cursor || null;
        if (!state[kind].cursor || jobs.length >= PAGE) break;
      }
      const rows = jobs.map((job) => LISTS[kind].row(job));
      const body = $(`#${kind} tbody`);
      if (append) body.append(...rows); else body.replaceChildren(...rows);
      $(`#${kind}-more`).hidden = !state[kind].cursor;
      $(`#${kind}-empty`).hidden = body.children.length > 0;
      if (kind === "retrying") markUnserved();
    } catch (error) {
      banner(`Could not load ${LISTS[kind].what}: ${error.message}`);
    }
  }

  // The actions a job in this state allows: cancel while it waits or runs, delete while it has
  // never started (the second click confirms), retry once dead.
  function jobActions(job, kind) {
    const buttons = [];
    if (["pending", "failed", "processing", "waiting"].includes(job.state)) {
      buttons.push(el("button", { className: "cancel", "data-id": job.id,
                                  onclick: (event) => { event.stopPropagation(); cancelJob(kind, job.id); } }, "Cancel"));
    }
    if (["pending", "waiting"].includes(job.state) && job.attempts === 0) {
      const button = el("button", { className: "admin danger delete", "data-id": job.id }, "Delete");
      button.addEventListener("click", (event) => { event.stopPropagation(); confirmThen(button, "Delete", () => deleteJob(kind, job.id)); });
      buttons.push(button);
    }
    if (job.state === "dead_letter") {
      buttons.push(el("button", { className: "admin retry", "data-id": job.id,
                                  onclick: (event) => { event.stopPropagation(); retryJob(kind, job.id); } }, "Retry"));
    }
    return buttons;
  }

  // A date and time that wraps, if the column is narrow, between the two and nowhere else.
  function timeCell(iso, className, ...more) {
    const [date, time] = fmtTime(iso).split(" ");
    return el("td", { className: "time" + (className ? " " + className : "") },
      el("span", {}, date), time ? " " : null, time ? el("span", {}, time) : null, ...more);
  }

  const idCell = (job) => el("td", { className: "mono", title: job.id }, shortId(job.id));
  // Kept in view at the right edge of its panel however wide the row (sticky, see the CSS).
  const actionsCell = (job, kind) => el("td", { className: "actions-cell" }, el("div", { className: "actions" }, jobActions(job, kind)));
  const rowOf = (kind, job, ...cells) => el("tr", { className: "clickable", "data-id": job.id, onclick: () => showJob(kind, job.id) }, ...cells);

  // The whole error, wrapped (it was cut at ~30 characters); a very long one is clamped to a few
  // lines, whole in the tooltip and in the detail panel.
  function errorText(job) {
    const message = job.last_error_type ? `${job.last_error_type}: ${job.last_error || ""}` : "";
    return el("td", { className: "error", title: message }, el("div", { className: "error-text" }, message));
  }

  function jobRow(job) {
    return rowOf("jobs", job, idCell(job), nameCell(job.job_type), nameCell(job.queue), el("td", {}, job.priority),
      el("td", {}, el("span", { className: "pill " + job.state }, job.state)),
      el("td", { className: "num" }, `${job.attempts}/${job.max_attempts}`),
      timeCell(job.created_at), actionsCell(job, "jobs"));
  }

  function scheduledRow(job) {
    return rowOf("scheduled", job, idCell(job), nameCell(job.job_type), nameCell(job.queue), el("td", {}, job.priority),
      timeCell(job.run_at, "run-at"), timeCell(job.created_at), actionsCell(job, "scheduled"));
  }

  function retryingRow(job) {
    const row = rowOf("retrying", job, idCell(job), nameCell(job.job_type), nameCell(job.queue),
      el("td", { className: "num" }, `${job.attempts}/${job.max_attempts}`), errorText(job),
      timeCell(job.run_at, "run-at", el("div", { className: "unserved-slot" })),
      actionsCell(job, "retrying"));
    Object.assign(row.dataset, { queue: job.queue, jobType: job.job_type, runAt: job.run_at });
    return row;
  }

  function deadRow(job) {
    return rowOf("dead", job, idCell(job), nameCell(job.job_type), nameCell(job.queue),
      el("td", { className: "num" }, `${job.attempts}/${job.max_attempts}`), errorText(job),
      timeCell(job.finished_at), actionsCell(job, "dead"));
  }

  // Why a job waiting to run may wait for ever, from the last overview (the server's `unserved`,
  // as /queues, /metrics and `jobqueue jobs list` count it): no live worker serves its queue, or
  // none of those that do has a handler for its type. Null when it is served, or not known yet.
  function unservedReason(queue, jobType) {
    const o = state.last;
    if (!o) return null;
    if (!o.workers.some((w) => w.alive && w.queues.includes(queue))) return `no live worker serves queue ${queue}`;
    const row = o.queues.find((q) => q.queue === queue);
    if (row && row.unserved_job_types.includes(jobType)) return `no live worker of queue ${queue} has a handler for ${jobType}`;
    return null;
  }

  function unservedNote(queue, jobType, runAt, tag) {
    const reason = unservedReason(queue, jobType);
    if (!reason) return null;
    const due = Date.parse(runAt) <= Date.now();
    return el(tag, { className: "unserved " + (due ? "bad" : "warn") }, (due ? "overdue: " : "") + reason);
  }

  // The Retrying rows' warnings, redone with every overview (a worker that starts clears them).
  function markUnserved() {
    let overdue = 0;
    for (const row of document.querySelectorAll("#retrying tbody tr")) {
      const note = unservedNote(row.dataset.queue, row.dataset.jobType, row.dataset.runAt, "div");
      if (note && note.classList.contains("bad")) overdue += 1;
      row.querySelector(".unserved-slot").replaceChildren(...(note ? [note] : []));
    }
    const summary = $("#retrying-unserved");
    summary.hidden = overdue === 0;
    summary.textContent = `${overdue} ${overdue === 1 ? "retry" : "retries"} on this page ${overdue === 1 ? "is" : "are"} overdue`
      + " on queues or job types no live worker serves: they wait until a worker that can run them starts.";
  }

  function pre(value) {
    return el("pre", {}, value === null || value === undefined ? "—" : typeof value === "string" ? value : JSON.stringify(value, null, 2));
  }

  // A completed job's result; a dead or cancelled job's final error under its own heading (it is
  // not a result); nothing to show for a job still waiting or running.
  function outcomeSection(job) {
    if (job.state === "completed") return [el("h2", {}, "Result"), pre(job.result)];
    if (job.final_error !== null && job.final_error !== undefined) return [el("h2", {}, "Final error"), pre(job.final_error)];
    return [el("h2", {}, "Result"), el("p", { className: "muted" }, `None yet: the job is ${job.state}.`)];
  }

  // What the running (or last) attempt reported with job.progress(): a bar when the total is known.
  function progressSection(job) {
    const p = job.progress;
    if (!p) return [];
    const share = p.total ? Math.min(100, (100 * p.done) / p.total) : null;
    const figures = p.total ? `${p.done} of ${p.total} (${share.toFixed(0)} %)` : `${p.done}`;
    return [el("h2", {}, "Progress"),
      share === null ? null : el("progress", { className: "job-progress", max: "100", value: String(share) }),
      el("p", {}, `${figures}${p.message ? ` — ${p.message}` : ""}`),
      el("p", { className: "muted" }, `attempt ${p.attempt}, reported ${fmtTime(p.at)}`)];
  }

  // A running job's detail is read again every 2 s while it stays on screen: its progress moves.
  let progressTimer = null;
  function followProgress(kind, job) {
    clearTimeout(progressTimer);
    if (job.state !== "processing" || !job.progress) return;
    progressTimer = setTimeout(() => {
      const panel = $(`#${kind}-detail`);
      if (!panel.hidden && panel.dataset.id === job.id) showJob(kind, job.id);
    }, 2000);
  }

  async function showJob(kind, id) {
    const panel = $(`#${kind}-detail`);
    for (const row of document.querySelectorAll(`#${kind} tbody tr`)) row.classList.toggle("selected", row.dataset.id === id);
    try {
      const job = await api("GET", route("job", { id }));
      const errors = job.errors || [];
      panel.replaceChildren(
        el("h2", {}, `${job.job_type} · ${job.state}${job.cancel_requested && job.state === "processing" ? " (cancel requested)" : ""}`),
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
          el("dt", {}, "idempotency key"), el("dd", {}, job.idempotency_key || "—"),
          el("dt", {}, "ordering key"), el("dd", {}, job.ordering_key || "—")),
        ...(["pending", "failed"].includes(job.state) ? [unservedNote(job.queue, job.job_type, job.run_at, "p")] : [])
          .filter(Boolean),  // replaceChildren would write a null as the text "null"
        el("div", { className: "actions" }, jobActions(job, kind)),
        ...progressSection(job),
        el("h2", {}, "Payload"), pre(job.payload),
        ...outcomeSection(job),
        el("h2", {}, `Attempts with errors (${errors.length})`),
        ...errors.map((e) => el("div", { className: "attempt" },
          el("strong", {}, `#${e.attempt} ${e.error_type}: `), e.message,
          el("div", { className: "muted" }, `${fmtTime(e.failed_at)} on ${e.worker_id || "?"}`),
          e.traceback ? pre(e.traceback) : null)));
      panel.dataset.id = job.id;
      panel.hidden = false;
      followProgress(kind, job);
      // Narrow windows put the panel under the list (see the CSS): bring it into view there.
      if (getComputedStyle(panel.parentElement).flexDirection === "column") panel.scrollIntoView({ block: "nearest" });
    } catch (error) {
      banner(`Could not load job ${id}: ${error.message}`);
    }
  }

  // Search by id: the Jobs view with that job's detail, whatever the filters show.
  function findJob(id) {
    const text = String(id).trim();
    if (!UUID.test(text)) { banner(`"${text}" is not a job id (a UUID such as 0190c2a4-…).`); return; }
    if (state.view !== "jobs") show("jobs");
    $("#f-id").value = text;
    showJob("jobs", text);
  }

  // After an action: the list again, and the detail (gone if the job is gone).
  async function refresh(kind, id, gone) {
    await loadList(kind, false);
    const panel = $(`#${kind}-detail`);
    if (panel.dataset.id === id) { if (gone) panel.hidden = true; else showJob(kind, id); }
  }

  async function act(what, id, kind, call, done) {
    if (needKey(what)) return;
    try {
      const result = await call();
      banner(done(result), "info");
      await refresh(kind, id, what === "delete a job");
    } catch (error) {
      banner(`Could not ${what} ${shortId(id)}: ${error.message}`);
    }
  }

  const cancelJob = (kind, id) => act("cancel a job", id, kind, () => api("POST", route("cancel", { id })),
    (r) => (r.outcome === "cancel_requested" ? `Job ${shortId(id)} is running: cancel requested, its handler is told.`
                                             : `Job ${shortId(id)} cancelled.`));
  const deleteJob = (kind, id) => act("delete a job", id, kind, () => api("DELETE", route("delete", { id })),
    () => `Job ${shortId(id)} deleted.`);
  const retryJob = (kind, id) => act("retry a job", id, kind, () => api("POST", route("retry", { id })),
    () => `Job ${shortId(id)} is back in its queue.`);

  // Destructive actions arm on the first click and run on the second (no blocking dialogs).
  function confirmThen(button, label, action) {
    if (!button.classList.contains("armed")) {
      button.classList.add("armed");
      button.textContent = "Click again to confirm";
      setTimeout(() => { button.classList.remove("armed"); button.textContent = label; }, 4000);
      return;
    }
    button.classList.remove("armed");
    button.textContent = label;
    action();
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

  // --- schedules and circuit breakers ----------------------------------------------------------

  async function loadTable(name, what, render) {
    if (needKey("see " + what)) return;
    try {
      const items = (await api("GET", ROUTES[name]))[name];
      replaceRows("#" + name, items.map(render));
      $(`#${name}-empty`).hidden = items.length > 0;
    } catch (error) {
      banner(`Could not load ${what}: ${error.message}`);
    }
  }

  async function change(what, call, done, reload) {
    if (needKey(what)) return;
    try {
      banner(done(await call()), "info");
    } catch (error) {
      banner(`Could not ${what}: ${error.message}`);
    }
    reload();
  }

  const loadSchedules = () => loadTable("schedules", "schedules (an admin key)", scheduleRow);

  function scheduleRow(sc) {
    const status = sc.error ? "error" : sc.enabled ? "enabled" : "paused";
    const toggle = sc.enabled
      ? el("button", { className: "admin pause", onclick: () => scheduleAction(sc.name, "schedulePause", "paused") }, "Pause")
      : el("button", { className: "admin resume", onclick: () => scheduleAction(sc.name, "scheduleResume", "resumed") }, "Resume");
    return el("tr", { "data-name": sc.name },
      nameCell(sc.name),
      el("td", { className: "mono", title: sc.timezone }, `${sc.cron} (${sc.timezone})`),
      nameCell(sc.job_type), nameCell(sc.queue),
      // An "error" badge with its reason beside it (it was only in a tooltip): the scheduler cannot use the row.
      el("td", { title: sc.error || "" },
        el("span", { className: "pill " + (status === "error" ? "dead_letter" : status) }, status),
        sc.error ? el("div", { className: "schedule-error" }, sc.error) : null),
      el("td", {}, sc.enabled ? fmtTime(sc.next_fire_at) : "–"),
      el("td", {}, fmtTime(sc.last_fire_at)),
      el("td", {}, el("div", { className: "actions" }, toggle,
        el("button", { className: "admin run", onclick: () => runSchedule(sc.name) }, "Run now"))));
  }

  const scheduleAction = (name, action, verb) => change(`${verb.replace(/d$/, "")} schedule ${name}`,
    () => api("POST", route(action, { name })), () => `Schedule ${name} ${verb}.`, loadSchedules);
  const runSchedule = (name) => change(`run schedule ${name}`, () => api("POST", route("scheduleRun", { name })),
    (r) => `Schedule ${name} enqueued job ${r.job_id}.`, loadSchedules);

  const loadCircuits = () => loadTable("circuits", "circuit breakers", circuitRow);

  function circuitRow(c) {
    const buttons = [];
    if (c.state !== "open" || !c.forced_by_admin) {
      buttons.push(el("button", { className: "admin danger open", onclick: () => circuitAction(c.name, "circuitOpen", "held open") }, "Hold open"));
    }
    if (c.state !== "closed") {
      buttons.push(el("button", { className: "admin close", onclick: () => circuitAction(c.name, "circuitClose", "closed") }, "Close"));
    }
    return el("tr", { "data-name": c.name },
      nameCell(c.name),
      el("td", {}, el("span", { className: "pill " + c.state }, c.state.replace("_", "-")),
        c.forced_by_admin ? el("span", { className: "muted" }, " by an admin") : null),
      el("td", { className: "num" }, `${fmtInt(c.failures)} / ${fmtInt(c.threshold)}`),
      el("td", {}, `${c.window_seconds} s`),
      el("td", {}, `${c.reset_after_seconds} s`),
      nameCell(c.job_types.join(", ")),
      el("td", {}, fmtTime(c.opened_at)),
      el("td", {}, el("div", { className: "actions" }, buttons)));
  }

  const circuitAction = (name, action, verb) => change(`change circuit ${name}`,
    () => api("POST", route(action, { name })), () => `Circuit ${name} ${verb}.`, loadCircuits);

  // --- wiring ---------------------------------------------------------------------------------

  function show(view) {
    state.view = view;
    for (const tab of document.querySelectorAll(".tab")) tab.classList.toggle("active", tab.dataset.view === view);
    for (const section of document.querySelectorAll(".view")) section.hidden = section.id !== "view-" + view;
    banner(null);
    if (LISTS[view]) loadList(view, false);
    if (view === "schedules") loadSchedules();
    if (view === "circuits") loadCircuits();
    if (view === "overview") { renderChart(); renderHistoryChart(); }
  }

  function filtersOf(kind) {
    const prefix = LISTS[kind].prefix;
    return { queue: $(`#${prefix}-queue`).value.trim(), job_type: $(`#${prefix}-type`).value.trim() };
  }

  function start() {
    for (const tab of document.querySelectorAll(".tab[data-view]")) tab.addEventListener("click", () => show(tab.dataset.view));
    $("#api-key").value = state.key;
    $("#key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      state.key = $("#api-key").value.trim();
      localStorage.setItem("jobqueue.apiKey", state.key);
      banner(state.key ? "API key saved in this browser." : "API key cleared.", "info");
      readHistory();
      if (state.view !== "overview") show(state.view);
    });
    $("#job-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      state.jobs.filters = { state: $("#f-state").value, priority: $("#f-priority").value,
                             queue: $("#f-queue").value.trim(), job_type: $("#f-type").value.trim() };
      loadList("jobs", false);
    });
    for (const kind of ["scheduled", "retrying", "dead"]) {
      $(`#${kind}-filters`).addEventListener("submit", (event) => {
        event.preventDefault();
        state[kind].filters = filtersOf(kind);
        loadList(kind, false);
      });
    }
    for (const kind of Object.keys(LISTS)) $(`#${kind}-more`).addEventListener("click", () => loadList(kind, true));
    $("#find-job").addEventListener("click", () => findJob($("#f-id").value));
    $("#workers-gone-toggle").addEventListener("click", () => {
      state.showGone = !state.showGone;
      if (state.last) renderWorkers(state.last.workers);
    });
    $("#f-id").addEventListener("keydown", (event) => {
      if (event.key === "Enter") { event.preventDefault(); findJob($("#f-id").value); }
    });
    const retryAll = $("#dead-retry-all"), purge = $("#dead-purge");
    retryAll.addEventListener("click", () => confirmThen(retryAll, "Retry all matching", () => bulk("retryAll", "POST", "retry")));
    purge.addEventListener("click", () => confirmThen(purge, "Purge all matching", () => bulk("purge", "DELETE", "purge")));
    window.addEventListener("resize", () => { renderChart(); renderHistoryChart(); });
    poll();
    historyLoop();
  }

  start();
})();
