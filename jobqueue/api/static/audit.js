// jobqueue audit log page: plain JavaScript, no build step, no third-party code.
//
// Pages through GET /admin/audit newest first with its sealed cursor ("Load more"), with the
// listing's filters. Every value is written as text (textContent), never as markup: targets and
// details hold names producers chose. The API key is the one the dashboard keeps in this
// browser's localStorage (or typed here).
"use strict";

(() => {
  const ROUTE = "/admin/audit";
  const PAGE = 50;
  const MAX_FETCHES_PER_PAGE = 10;  // a page may be short (the server examines a bounded stretch)
  const state = { key: localStorage.getItem("jobqueue.apiKey") || "", cursor: null, filters: {} };
  const $ = (selector) => document.querySelector(selector);

  function cell(text, className) {
    const td = document.createElement("td");
    if (className) td.className = className;
    td.textContent = text === null || text === undefined ? "–" : String(text);
    return td;
  }

  function banner(text, kind) {
    const node = $("#banner");
    node.hidden = !text;
    node.textContent = text || "";
    node.className = "banner" + (kind ? " " + kind : "");
  }

  async function api(path) {
    const headers = { Accept: "application/json" };
    if (state.key) headers.Authorization = "Bearer " + state.key;
    const response = await fetch(path, { headers });
    const data = await response.json().catch(() => null);
    if (!response.ok) throw new Error(`${response.status}: ${(data && (data.message || data.error)) || response.statusText}`);
    return data;
  }

  function origin(entry) {
    const via = entry.api_key_id ? `key ${entry.api_key_id.slice(0, 8)}` : entry.db_role;
    const where = entry.client_addr ? `${via} ${entry.client_addr}` : via;
    return entry.application_name ? `${where} (${entry.application_name})` : where;
  }

  function row(entry) {
    const tr = document.createElement("tr");
    tr.append(
      cell(entry.seq, "num"),
      cell(new Date(entry.at).toLocaleString()),
      cell(entry.actor),
      cell(entry.action, "mono"),
      cell(entry.target, "mono"),
      cell(origin(entry)),
      cell(Object.keys(entry.details || {}).length ? JSON.stringify(entry.details) : null, "details mono"),
    );
    tr.title = `hash ${entry.hash}`;
    return tr;
  }

  function query() {
    const search = new URLSearchParams();
    for (const [name, value] of Object.entries(state.filters)) if (value) search.set(name, value);
    if (state.cursor) search.set("cursor", state.cursor);
    return search.toString();
  }

  async function load(more) {
    if (!state.key) { banner("Enter an API key (top right) to read the audit log.", "info"); return; }
    const body = $("#audit tbody");
    if (!more) { body.replaceChildren(); state.cursor = null; }
    let shown = 0;
    try {
      for (let fetched = 0; fetched < MAX_FETCHES_PER_PAGE && shown < PAGE; fetched++) {
        const search = query();
        const page = await api(`${ROUTE}?limit=${PAGE - shown}${search ? "&" + search : ""}`);
        for (const entry of page.entries) body.append(row(entry));
        shown += page.entries.length;
        state.cursor = page.next_cursor;
        if (!state.cursor) break;
      }
      banner(null);
    } catch (error) {
      banner(`Could not read the audit log: ${error.message}`);
    }
    $("#audit-more").hidden = !state.cursor;
    $("#audit-empty").hidden = body.children.length > 0;
  }

  function start() {
    $("#api-key").value = state.key;
    $("#key-form").addEventListener("submit", (event) => {
      event.preventDefault();
      state.key = $("#api-key").value.trim();
      localStorage.setItem("jobqueue.apiKey", state.key);
      load(false);
    });
    $("#audit-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      const since = $("#a-since").value;
      state.filters = {
        actor: $("#a-actor").value.trim(),
        action: $("#a-action").value.trim(),
        target: $("#a-target").value.trim(),
        since: since ? new Date(since).toISOString() : "",
      };
      load(false);
    });
    $("#audit-more").addEventListener("click", () => load(true));
    load(false);
  }

  start();
})();
