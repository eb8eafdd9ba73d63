// The orgs table, the open holds and the spend charts.

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
    row.dataset.id = org.id;
    row.append(
      el("td", org.id, "id"),
      el("td", org.source),
      budgetCell(org.budget, org.cap_usd_micros),
      el("td", org.period),
      el("td", when(org.budget && org.budget.resets_at)),
      limitsCell(org),
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
