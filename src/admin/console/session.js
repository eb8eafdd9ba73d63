// tollgate's operator console: signs in with the admin key, reads the admin
// API (/admin/v1/...) every few seconds and draws keys, orgs, open holds and
// spend charts; searches keys by id prefix on the server, a page at a time;
// creates, disables, enables and rotates keys, changes caps and books
// refunds; lists a key's customers.
//
// Every value from the API is put on the page with textContent or as an
// attribute of an element made here, never parsed as HTML: a key id or
// metadata holding markup shows as text.
//
// The script is served as one file, /admin/console.js, made at build time
// by concatenating its parts in order (src/admin/console.rs): this one (the
// state, the admin key, API calls, signing in and out), format.js, keys.js,
// views.js and refresh.js. They share one scope, as one script.
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
  // The keys whose customers are shown, by id: their first page of
  // `GET customers?key=`, or null while it loads.
  customers: new Map(),
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
  state.customers.clear();
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
