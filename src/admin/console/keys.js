// The keys table: the server-side search a page at a time, each key's row
// and what it does (create, disable, enable, rotate, change the cap,
// refund, list its customers), the secret shown once, and the amount
// dialog.

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
    const customers = el("button", "Customers", "customers");
    customers.type = "button";
    customers.setAttribute("aria-expanded", "false");
    customers.addEventListener("click", () => toggleCustomers(row.key));
    actions.append(toggle, cap, rotate, refund, customers);
    row.actions = actions;
    state.keyRows.set(key.id, row);
  }
  row.key = key;
  const budget = key.budget;
  const source = el("td", key.source);
  const disabled = el("td", key.disabled ? "disabled" : "active", key.disabled ? "state off" : "state on");
  row.classList.toggle("disabled", Boolean(key.disabled));
  const [toggle, cap, rotate, refund, customers] = row.actions.children;
  const open = state.customers.has(key.id);
  customers.textContent = open ? "Hide customers" : "Customers";
  customers.setAttribute("aria-expanded", String(open));
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
    limitsCell(key),
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
  for (const id of state.customers.keys()) {
    if (!seen.has(id)) state.customers.delete(id);
  }
  // Rows are kept and updated in place, so a refresh never swaps a button
  // out from under a click. A key whose customers are open has them in a
  // row of their own beneath it.
  const rows = [];
  for (const key of state.keys) {
    rows.push(keyRow(key));
    if (state.customers.has(key.id)) rows.push(customersRow(key));
  }
  $("keys-body").replaceChildren(...rows);
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

// === a key's customers ===

// Opens or closes the list of a key's customers (the first page: the end
// users its calls named, each with its last call and its money under the
// key's template).
async function toggleCustomers(key) {
  if (state.customers.has(key.id)) {
    state.customers.delete(key.id);
    renderKeys();
    return;
  }
  state.customers.set(key.id, null);
  renderKeys();
  try {
    await loadCustomers(key.id);
  } catch (error) {
    handle(error);
  }
}

async function loadCustomers(id) {
  let shown;
  try {
    const query = new URLSearchParams({ key: id, limit: String(PAGE_SIZE) });
    shown = await api("GET", `customers?${query}`);
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) throw error;
    shown = { error: error.message };
  }
  // Closed meanwhile: keep it closed.
  if (!state.customers.has(id)) return;
  state.customers.set(id, shown);
  renderKeys();
}

// Every open list read again, on each refresh.
async function loadOpenCustomers() {
  await Promise.all([...state.customers.keys()].map(loadCustomers));
}

function customersRow(key) {
  const row = el("tr", null, "customers-row");
  row.dataset.key = key.id;
  const cell = el("td", null, "customers");
  cell.colSpan = 9;
  const shown = state.customers.get(key.id);
  if (shown === null || shown === undefined) {
    cell.append(el("span", "loading customers…", "muted"));
  } else if (shown.error) {
    cell.append(el("span", shown.error, "error"));
  } else if (shown.customers.length === 0) {
    cell.append(el("span", "no customer has been named by this key's calls", "muted"));
  } else {
    const table = el("table", null, "customers-table");
    const head = el("tr");
    for (const name of ["customer", "last call", "spent", "left", "cap"]) head.append(el("th", name));
    const thead = el("thead");
    thead.append(head);
    const body = el("tbody");
    for (const customer of shown.customers) {
      const line = el("tr");
      line.dataset.customer = customer.id;
      const budget = customer.budget;
      // Without a money cap no counter keeps a customer's spend: shown as
      // unknown, not as zero.
      line.append(
        el("td", customer.id, "id"),
        el("td", when(customer.last_call), "last-call"),
        el("td", budget ? usd(budget.spent_usd_micros) : "–", "spent"),
        el("td", budget ? usd(budget.remaining_usd_micros) : "–", "remaining"),
        el("td", budget ? `${usd(budget.cap_usd_micros)}/${budget.period}` : "no cap", "cap"),
      );
      body.append(line);
    }
    table.append(thead, body);
    cell.append(table);
    const count = shown.customers.length;
    const more = shown.next !== null ? `, more on the server (tollgate admin customers list --key ${key.id} --all)` : "";
    cell.append(el("p", `${count} ${count === 1 ? "customer" : "customers"}${more}`, "muted"));
  }
  row.append(cell);
  return row;
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
