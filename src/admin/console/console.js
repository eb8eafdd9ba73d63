// tollgate's operator console: signs in with the admin key, reads the admin
// API (/admin/v1/...) every few seconds and draws keys, orgs, open holds and
// spend charts; searches keys by id prefix on the server, a page at a time;
// creates, disables, enables and rotates keys, changes caps and books
// refunds.
//
// Every value from the API is put on the page with textContent or as an
// attribute of an element made here, never parsed as HTML: a key id or
// metadata holding markup shows as text.
"use strict";

const KEY_STORE = "tollgate.adminKey";
const PAGE_SIZE = 100;
// The API answers at most this many items per call.
const MAX_LIMIT = 1000;
const REFRESH_MS = 3000;
// How long typing pauses before the search box asks the server.
const SEARCH_DELAY_MS = 200;
const SVG = "http://www.w3.org/2000/svg";

const state = {
  // The keys shown: those whose id starts with `shownPrefix`, as far as the
  // pages loaded reach; `keysNext` is where the next page starts.
  keys: [],
  keysNext: null,
  keyRows: new Map(),
  shownPrefix: "",
  // Why the server refused the search shown ("" when it did not).
  searchRefused: "",
  // The latest prefix asked for; answers come back in any order, so each
  // is checked against these counters and dropped when something newer
  // was asked for (`searchSeq`) or shown (`keysSeq`).
  search: "",
  searchSeq: 0,
  keysSeq: 0,
  searchTimer: null,
  orgs: [],
  orgsNext: null,
  refreshing: false,
  // A refresh asked for while one runs (after a change): run once more.
  again: false,
  timer: null,
};

const $ = (id) => document.getElementById(id);

// === the admin key ===

// sessionStorage: the key lives as long as this tab, and no other tab or
// later visit sees it.
function adminKey() {
  return sessionStorage.getItem(KEY_STORE);
}

class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// One admin API call on this origin; the parsed body, or an ApiError with
// the API's own message.
async function api(method, path, body) {
  const headers = { Authorization: `Bearer ${adminKey()}` };
  const init = { method, headers, cache: "no-store", credentials: "omit" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const response = await fetch(`/admin/v1/${path}`, init);
  const text = await response.text();
  let parsed = null;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch {
    parsed = null;
  }
  if (!response.ok) {
    const error = parsed && parsed.error ? parsed.error : {};
    throw new ApiError(response.status, error.message || `HTTP ${response.status}`, error.code || "");
  }
  return parsed;
}

function signIn(event) {
  event.preventDefault();
  const input = $("admin-key");
  sessionStorage.setItem(KEY_STORE, input.value.trim());
  input.value = "";
  start();
}

function signOut(message) {
  sessionStorage.removeItem(KEY_STORE);
  if (state.timer !== null) {
    clearInterval(state.timer);
    state.timer = null;
  }
  clearTimeout(state.searchTimer);
  state.searchTimer = null;
  state.keys = [];
  state.keysNext = null;
  state.search = "";
  state.shownPrefix = "";
  state.searchRefused = "";
  state.searchSeq += 1;
  $("key-search").value = "";
  markBusy();
  state.orgs = [];
  state.keyRows.clear();
  $("keys-body").replaceChildren();
  $("orgs-body").replaceChildren();
  $("console").hidden = true;
  $("sign-out").hidden = true;
  $("sign-in").hidden = false;
  hideSecret();
  showMessage($("sign-in-error"), message || "");
  $("status").textContent = "";
}

async function start() {
  showMessage($("sign-in-error"), "");
  $("sign-in").hidden = true;
  $("console").hidden = false;
  $("sign-out").hidden = false;
  await refresh();
  if (adminKey() !== null && state.timer === null) {
    state.timer = setInterval(refresh, REFRESH_MS);
  }
}

// === formatting ===

// µUSD (an integer) as dollars, exact: no float arithmetic on money.
function usd(micros) {
  if (micros === null || micros === undefined) return "–";
  const negative = micros < 0;
  const abs = Math.abs(micros);
  const whole = Math.floor(abs / 1e6);
  let fraction = String(abs % 1e6).padStart(6, "0").replace(/0+$/, "");
  if (fraction.length < 2) fraction = fraction.padEnd(2, "0");
  return `${negative ? "-" : ""}$${whole}.${fraction}`;
}

function when(rfc3339) {
  if (!rfc3339) return "–";
  return rfc3339.replace("T", " ").replace(/:\d\dZ$/, "Z");
}

function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function svg(tag, attributes) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes || {})) {
    node.setAttribute(name, String(value));
  }
  return node;
}

function showMessage(node, message) {
  node.textContent = message;
  node.hidden = !message;
}

function showError(error) {
  showMessage($("error"), error ? error.message : "");
}

// A bar of cap: spent, then reserved, then what remains; with the numbers
// beside it as text.
function budgetCell(budget, cap) {
  const cell = el("td", null, "budget");
  if (!budget) {
    cell.append(el("span", "budget unavailable", "muted"));
    return cell;
  }
  const total = Math.max(cap, 1);
  const spent = Math.min(budget.spent_usd_micros, total);
  const reserved = Math.min(budget.reserved_usd_micros, total - spent);
  const bar = svg("svg", { class: "bar", viewBox: "0 0 100 8", preserveAspectRatio: "none", role: "img" });
  bar.append(svg("rect", { class: "bar-cap", x: 0, y: 0, width: 100, height: 8 }));
  bar.append(svg("rect", { class: "bar-spent", x: 0, y: 0, width: (spent / total) * 100, height: 8 }));
  bar.append(
    svg("rect", { class: "bar-reserved", x: (spent / total) * 100, y: 0, width: (reserved / total) * 100, height: 8 }),
  );
  const title = svg("title");
  title.textContent = `${usd(budget.spent_usd_micros)} spent, ${usd(budget.reserved_usd_micros)} reserved of ${usd(cap)}`;
  bar.append(title);
  cell.append(bar);
  const numbers = el("div", null, "numbers");
  numbers.append(
    el("span", `${usd(budget.spent_usd_micros)} spent`, "spent"),
    el("span", `${usd(budget.reserved_usd_micros)} held`, "reserved"),
    el("span", `${usd(budget.remaining_usd_micros)} left of ${usd(cap)}`, "remaining"),
  );
  cell.append(numbers);
  return cell;
}

// === keys ===

function keysQuery(prefix, limit, after) {
  const query = new URLSearchParams({ limit: String(limit) });
  if (prefix) query.set("prefix", prefix);
  if (after !== null) query.set("after", after);
  return query;
}

// The first `count` keys whose id starts with `prefix` (every key for ""),
// 1000 at a time, the API's most: `{keys, next}`, or `{refused}` with the
// API's reason when it turns the prefix down (400: no id could start so).
async function fetchKeys(prefix, count) {
  const keys = [];
  let next = null;
  try {
    do {
      const limit = Math.min(MAX_LIMIT, Math.max(count - keys.length, 1));
      const page = await api("GET", `keys?${keysQuery(prefix, limit, next)}`);
      keys.push(...page.keys);
      next = page.next;
    } while (next !== null && keys.length < count);
  } catch (error) {
    if (prefix && error instanceof ApiError && error.status === 400) {
      return { refused: error.message };
    }
    throw error;
  }
  return { keys, next };
}

function showKeys(prefix, answer) {
  state.shownPrefix = prefix;
  state.keys = answer.refused ? [] : answer.keys;
  state.keysNext = answer.refused ? null : answer.next;
  state.searchRefused = answer.refused || "";
  state.keysSeq += 1;
  renderKeys();
  markBusy();
}

// The keys table is busy while a search is typed or unanswered.
function markBusy() {
  const busy = state.searchTimer !== null || state.search !== state.shownPrefix;
  $("keys").setAttribute("aria-busy", String(busy));
}

// Reads again every page of the search loaded so far, so a refresh shows
// as many keys as before. Dropped if, meanwhile, another search was asked
// for or the list changed (a page added): it would undo that.
async function loadKeys() {
  const [searchSeq, keysSeq, prefix] = [state.searchSeq, state.keysSeq, state.search];
  const count = prefix === state.shownPrefix ? Math.max(state.keys.length, PAGE_SIZE) : PAGE_SIZE;
  const answer = await fetchKeys(prefix, count);
  if (searchSeq === state.searchSeq && keysSeq === state.keysSeq) {
    showKeys(prefix, answer);
  }
}

// Typing in the search box: once it pauses, ask the server.
function searchSoon() {
  clearTimeout(state.searchTimer);
  $("keys").setAttribute("aria-busy", "true");
  state.searchTimer = setTimeout(searchKeys, SEARCH_DELAY_MS);
}

async function searchKeys() {
  state.searchTimer = null;
  // No id holds a space: one typed at either end is not part of the search.
  const prefix = $("key-search").value.trim();
  if (prefix === state.search) {
    // Asked for already: shown, or its answer is on the way.
    markBusy();
    return;
  }
  state.search = prefix;
  state.searchSeq += 1;
  const searchSeq = state.searchSeq;
  try {
    const answer = await fetchKeys(prefix, PAGE_SIZE);
    // Only the latest search's answer is shown; an older one is stale.
    if (searchSeq === state.searchSeq) showKeys(prefix, answer);
  } catch (error) {
    // Unanswered, it stays busy: the next refresh asks again.
    if (searchSeq === state.searchSeq) handle(error);
  }
}

function keyRow(key) {
  let row = state.keyRows.get(key.id);
  if (!row) {
    row = el("tr");
    row.dataset.id = key.id;
    const actions = el("td", null, "actions");
    const toggle = el("button", null, "toggle");
    toggle.type = "button";
    toggle.addEventListener("click", () => toggleKey(row.key));
    const cap = el("button", "Cap…", "cap");
    cap.type = "button";
    cap.addEventListener("click", () => changeCap(row.key));
    const rotate = el("button", "Rotate", "rotate");
    rotate.type = "button";
    rotate.addEventListener("click", () => rotateKey(row.key));
    const refund = el("button", "Refund…", "refund");
    refund.type = "button";
    refund.addEventListener("click", () => refundKey(row.key));
    actions.append(toggle, cap, rotate, refund);
    row.actions = actions;
    state.keyRows.set(key.id, row);
  }
  row.key = key;
  const budget = key.budget;
  const source = el("td", key.source);
  const disabled = el("td", key.disabled ? "disabled" : "active", key.disabled ? "state off" : "state on");
  row.classList.toggle("disabled", Boolean(key.disabled));
  const [toggle, cap, rotate, refund] = row.actions.children;
  toggle.textContent = key.disabled ? "Enable" : "Disable";
  // The API refuses to change a key of the config file (409): say so here.
  const fromConfig = key.source === "config";
  for (const button of [toggle, cap, rotate]) {
    button.disabled = fromConfig;
    button.title = fromConfig ? "from the config file: change it there" : "";
  }
  refund.disabled = false;
  const idCell = el("td", key.id, "id");
  if (key.metadata && Object.keys(key.metadata).length > 0) {
    idCell.title = JSON.stringify(key.metadata);
  }
  row.replaceChildren(
    idCell,
    el("td", key.org || "–"),
    source,
    budgetCell(budget, key.cap_usd_micros),
    el("td", key.period),
    el("td", when(budget && budget.resets_at)),
    disabled,
    row.actions,
  );
  return row;
}

function renderKeys() {
  const seen = new Set(state.keys.map((key) => key.id));
  for (const id of state.keyRows.keys()) {
    if (!seen.has(id)) state.keyRows.delete(id);
  }
  // Rows are kept and updated in place, so a refresh never swaps a button
  // out from under a click.
  $("keys-body").replaceChildren(...state.keys.map(keyRow));
  const count = $("keys-count");
  count.classList.toggle("error", Boolean(state.searchRefused));
  count.classList.toggle("muted", !state.searchRefused);
  const prefix = state.shownPrefix;
  const which = prefix ? ` starting with “${prefix}”` : "";
  if (state.searchRefused) {
    count.textContent = state.searchRefused;
  } else if (state.keys.length === 0) {
    count.textContent = `no key${which}`;
  } else {
    const more = state.keysNext !== null ? ", more on the server" : "";
    const noun = state.keys.length === 1 ? "key" : "keys";
    count.textContent = `${state.keys.length} ${noun}${which} loaded${more}`;
  }
  $("keys-more").hidden = state.keysNext === null;
}

// The next page of the search shown. Dropped if, meanwhile, another search
// was asked for or a refresh moved where the list ends (keys were made or
// deleted): it would no longer follow on; the button stays for another go.
async function moreKeys() {
  const [searchSeq, prefix, after] = [state.searchSeq, state.shownPrefix, state.keysNext];
  if (after === null) return;
  try {
    const page = await api("GET", `keys?${keysQuery(prefix, PAGE_SIZE, after)}`);
    if (searchSeq !== state.searchSeq || after !== state.keysNext) return;
    state.keys.push(...page.keys);
    state.keysNext = page.next;
    state.keysSeq += 1;
    renderKeys();
  } catch (error) {
    handle(error);
  }
}

async function createKey(event) {
  event.preventDefault();
  const form = event.target;
  const data = new FormData(form);
  const body = { cap_usd: data.get("cap_usd").trim(), period: data.get("period") };
  for (const name of ["id", "org"]) {
    const value = data.get(name).trim();
    if (value) body[name] = value;
  }
  try {
    const made = await api("POST", "keys", body);
    showSecret(`Secret of ${made.key.id}`, made.secret);
    form.reset();
    showError(null);
    await refresh();
  } catch (error) {
    handle(error);
  }
}

async function toggleKey(key) {
  try {
    await api("PATCH", `keys/${encodeURIComponent(key.id)}`, { disabled: !key.disabled });
    showError(null);
    await refresh();
  } catch (error) {
    handle(error);
  }
}

async function rotateKey(key) {
  if (!window.confirm(`Rotate ${key.id}? Its current secret stops working at once.`)) return;
  try {
    const rotated = await api("POST", `keys/${encodeURIComponent(key.id)}/rotate`);
    showSecret(`New secret of ${key.id}`, rotated.secret);
    showError(null);
    await refresh();
  } catch (error) {
    handle(error);
  }
}

function changeCap(key) {
  ask(`New cap of ${key.id}`, "cap (USD)", usd(key.cap_usd_micros).replace("$", ""), false, async (amount) => {
    await api("PATCH", `keys/${encodeURIComponent(key.id)}`, { cap_usd: amount });
  });
}

function refundKey(key) {
  ask(`Refund to ${key.id}`, "refund (USD)", "", true, async (amount, note) => {
    await api("POST", "adjustments", { key: key.id, amount_usd: `-${amount}`, note });
  });
}

// === secrets ===

function showSecret(title, secret) {
  $("secret-title").textContent = title;
  $("secret-value").textContent = secret;
  $("secret-copy").textContent = "Copy";
  $("secret-box").hidden = false;
}

function hideSecret() {
  $("secret-value").textContent = "";
  $("secret-box").hidden = true;
}

async function copySecret() {
  const secret = $("secret-value").textContent;
  try {
    await navigator.clipboard.writeText(secret);
    $("secret-copy").textContent = "Copied";
  } catch {
    // No clipboard permission (an insecure origin, a headless browser):
    // select the text so that a keyboard copy takes it.
    const range = document.createRange();
    range.selectNodeContents($("secret-value"));
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    $("secret-copy").textContent = "Selected: copy with Ctrl+C";
  }
}

// === the amount dialog ===

// A decimal dollar amount as the API takes it: no sign, at most 6 places.
const AMOUNT = /^\d+(\.\d{1,6})?$/;

let dialogAction = null;

function ask(title, amountName, amount, withNote, action) {
  $("dialog-title").textContent = title;
  $("dialog-amount-name").textContent = amountName;
  $("dialog-amount").value = amount;
  $("dialog-note").value = "";
  $("dialog-note-label").hidden = !withNote;
  $("dialog-note").required = withNote;
  showMessage($("dialog-error"), "");
  dialogAction = action;
  $("dialog").showModal();
  $("dialog-amount").focus();
}

async function dialogSubmit(event) {
  event.preventDefault();
  const amount = $("dialog-amount").value.trim();
  if (!AMOUNT.test(amount)) {
    showMessage($("dialog-error"), "an amount in dollars, like 12.50 (at most 6 decimals)");
    return;
  }
  try {
    await dialogAction(amount, $("dialog-note").value.trim());
    $("dialog").close();
    showError(null);
    await refresh();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      $("dialog").close();
      handle(error);
    } else {
      showMessage($("dialog-error"), error.message);
    }
  }
}

// === orgs ===

async function loadOrgs(count) {
  const orgs = [];
  let after = null;
  let next = null;
  do {
    const limit = Math.min(MAX_LIMIT, Math.max(count - orgs.length, 1));
    const query = new URLSearchParams({ limit: String(limit) });
    if (after !== null) query.set("after", after);
    const page = await api("GET", `orgs?${query}`);
    orgs.push(...page.orgs);
    next = page.next;
    after = next;
  } while (next !== null && orgs.length < count);
  state.orgs = orgs;
  state.orgsNext = next;
}

function renderOrgs() {
  const rows = state.orgs.map((org) => {
    const row = el("tr");
    row.append(
      el("td", org.id, "id"),
      el("td", org.source),
      budgetCell(org.budget, org.cap_usd_micros),
      el("td", org.period),
      el("td", when(org.budget && org.budget.resets_at)),
    );
    return row;
  });
  $("orgs-body").replaceChildren(...rows);
  $("orgs-more").hidden = state.orgsNext === null;
}

async function moreOrgs() {
  try {
    const query = new URLSearchParams({ limit: String(PAGE_SIZE), after: state.orgsNext });
    const page = await api("GET", `orgs?${query}`);
    state.orgs.push(...page.orgs);
    state.orgsNext = page.next;
    renderOrgs();
  } catch (error) {
    handle(error);
  }
}

// === holds ===

async function loadHolds() {
  const holds = await api("GET", `reservations?limit=${PAGE_SIZE}`);
  const rows = holds.reservations.map((hold) => {
    const row = el("tr");
    row.append(
      el("td", hold.exec_id, "id"),
      el("td", hold.key),
      el("td", hold.org || "–"),
      el("td", usd(hold.amount_usd_micros)),
      el("td", when(hold.started_at)),
      el("td", when(hold.deadline)),
    );
    return row;
  });
  if (rows.length === 0) {
    const row = el("tr");
    const cell = el("td", "no call is holding money now", "muted");
    cell.colSpan = 6;
    row.append(cell);
    rows.push(row);
  }
  $("holds-body").replaceChildren(...rows);
  const shown = holds.open > rows.length ? `, ${holds.reservations.length} shown` : "";
  $("holds-summary").textContent = `${holds.open} open, ${usd(holds.held_usd_micros)} held${shown}`;
}

// === spend charts ===

// Horizontal bars, one per group, scaled to the largest; labels as SVG text
// (textContent), so a model name is never markup.
function chart(container, rows, label) {
  if (rows.length === 0) {
    container.replaceChildren(el("p", "no spend in this period", "muted"));
    return;
  }
  const rowHeight = 22;
  const labelWidth = 150;
  const barWidth = 260;
  const width = labelWidth + barWidth + 170;
  const height = rows.length * rowHeight + 4;
  const largest = Math.max(...rows.map((row) => row.cost_usd_micros), 1);
  const drawing = svg("svg", { class: "chart-svg", viewBox: `0 0 ${width} ${height}`, width, height, role: "img" });
  rows.forEach((row, index) => {
    const y = index * rowHeight + 2;
    const name = svg("text", { x: labelWidth - 6, y: y + 14, "text-anchor": "end", class: "chart-label" });
    name.textContent = label(row.group);
    const length = Math.max((Math.max(row.cost_usd_micros, 0) / largest) * barWidth, 1);
    const bar = svg("rect", { x: labelWidth, y: y + 3, width: length, height: rowHeight - 8, class: "chart-bar" });
    const tip = svg("title");
    tip.textContent = `${label(row.group)}: ${usd(row.cost_usd_micros)}, ${row.calls} calls`;
    bar.append(tip);
    const value = svg("text", { x: labelWidth + length + 6, y: y + 14, class: "chart-value" });
    value.textContent = `${usd(row.cost_usd_micros)} · ${row.calls} ${row.calls === 1 ? "call" : "calls"}`;
    drawing.append(name, bar, value);
  });
  container.replaceChildren(drawing);
}

async function loadSpend() {
  const [days, models] = await Promise.all([api("GET", "spend?group_by=day"), api("GET", "spend?group_by=model")]);
  chart($("chart-day"), days.rows, (group) => group);
  // An adjustment is money on no model.
  chart($("chart-model"), models.rows, (group) => group || "(adjustments)");
}

// === refresh ===

function handle(error) {
  if (error instanceof ApiError && error.status === 401) {
    signOut("That admin key was refused: sign in again.");
    return;
  }
  showError(error);
}

async function refresh() {
  if (adminKey() === null) return;
  if (state.refreshing) {
    state.again = true;
    return;
  }
  state.refreshing = true;
  state.again = false;
  try {
    await Promise.all([
      loadKeys(),
      loadOrgs(Math.max(state.orgs.length, PAGE_SIZE)).then(renderOrgs),
      loadHolds(),
      loadSpend(),
    ]);
    $("status").textContent = `updated ${new Date().toLocaleTimeString()}`;
    $("status").classList.remove("stale");
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) {
      handle(error);
    } else {
      // Keep what is shown; say it is old and why.
      $("status").textContent = `not updated: ${error.message}`;
      $("status").classList.add("stale");
    }
  } finally {
    state.refreshing = false;
  }
  if (state.again) {
    await refresh();
  }
}

// === wiring ===

function wire() {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => signOut(""));
  $("create-key-form").addEventListener("submit", createKey);
  $("key-search").addEventListener("input", searchSoon);
  $("keys-more").addEventListener("click", moreKeys);
  $("orgs-more").addEventListener("click", moreOrgs);
  $("secret-copy").addEventListener("click", copySecret);
  $("secret-dismiss").addEventListener("click", hideSecret);
  $("dialog-form").addEventListener("submit", dialogSubmit);
  $("dialog-cancel").addEventListener("click", () => $("dialog").close());
  if (adminKey() !== null) {
    start();
  }
}

document.addEventListener("DOMContentLoaded", wire);
