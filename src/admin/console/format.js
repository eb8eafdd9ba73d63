// Formatting: money as exact dollars, times, and the elements and bars
// the other parts draw with.

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
  cell.append(bar(budget, cap));
  const numbers = el("div", null, "numbers");
  numbers.append(
    el("span", `${usd(budget.spent_usd_micros)} spent`, "spent"),
    el("span", `${usd(budget.reserved_usd_micros)} held`, "reserved"),
    el("span", `${usd(budget.remaining_usd_micros)} left of ${usd(cap)}`, "remaining"),
  );
  cell.append(numbers);
  return cell;
}

// The bar of a budget (`spent_usd_micros`, `reserved_usd_micros`) against
// its cap, with the numbers as its tooltip.
function bar(budget, cap) {
  const total = Math.max(cap, 1);
  const spent = Math.min(budget.spent_usd_micros, total);
  const reserved = Math.min(budget.reserved_usd_micros, total - spent);
  const drawing = svg("svg", { class: "bar", viewBox: "0 0 100 8", preserveAspectRatio: "none", role: "img" });
  drawing.append(svg("rect", { class: "bar-cap", x: 0, y: 0, width: 100, height: 8 }));
  drawing.append(svg("rect", { class: "bar-spent", x: 0, y: 0, width: (spent / total) * 100, height: 8 }));
  drawing.append(
    svg("rect", { class: "bar-reserved", x: (spent / total) * 100, y: 0, width: (reserved / total) * 100, height: 8 }),
  );
  const title = svg("title");
  title.textContent = `${usd(budget.spent_usd_micros)} spent, ${usd(budget.reserved_usd_micros)} reserved of ${usd(cap)}`;
  drawing.append(title);
  return drawing;
}

// "60 rpm · 100000 tpm", or "" without rate limits.
function rates(rpm, tpm) {
  const parts = [];
  if (rpm !== null && rpm !== undefined) parts.push(`${rpm} rpm`);
  if (tpm !== null && tpm !== undefined) parts.push(`${tpm} tpm`);
  return parts.join(" · ");
}

// A key's or an org's rate limits, then each of its model groups: its
// name (its models as the tooltip), and for a money cap a bar with what
// is spent and what is left of the cap per period (from the budget's
// `model_caps`), then its own rate limits.
function limitsCell(scope) {
  const cell = el("td", null, "limits");
  const own = rates(scope.rpm, scope.tpm);
  if (own) cell.append(el("div", own, "rates"));
  const states = new Map(((scope.budget && scope.budget.model_caps) || []).map((state) => [state.name, state]));
  for (const group of scope.model_caps || []) {
    const line = el("div", null, "group");
    line.dataset.group = group.name;
    line.title = `models: ${group.models.join(", ")}`;
    const head = el("div", null, "group-head");
    head.append(el("span", group.name, "group-name"));
    const groupRates = rates(group.rpm, group.tpm);
    if (groupRates) head.append(el("span", groupRates, "rates"));
    line.append(head);
    if (group.cap_usd_micros !== null && group.cap_usd_micros !== undefined) {
      const state = states.get(group.name);
      const numbers = el("div", null, "numbers");
      if (state) {
        line.append(bar(state, group.cap_usd_micros));
        numbers.append(
          el("span", `${usd(state.spent_usd_micros)} spent`, "spent"),
          el("span", `${usd(state.remaining_usd_micros)} left of ${usd(group.cap_usd_micros)}/${group.period}`, "remaining"),
        );
      } else {
        numbers.append(el("span", `cap ${usd(group.cap_usd_micros)}/${group.period}`, "remaining"));
      }
      line.append(numbers);
    }
    cell.append(line);
  }
  const template = customerTemplate(scope);
  if (template) cell.append(el("div", template, "customer-template"));
  if (!cell.hasChildNodes()) cell.append(el("span", "–", "muted"));
  return cell;
}

// A key's customer template in words: "each customer: $0.50/day · 10 rpm
// · from body · required", or "" when the key sets none of it (an org has
// none).
function customerTemplate(key) {
  const parts = [];
  const cap = key.customer_cap_usd_micros;
  if (cap !== null && cap !== undefined) parts.push(`${usd(cap)}/${key.customer_period}`);
  const own = rates(key.customer_rpm, key.customer_tpm);
  if (own) parts.push(own);
  if (key.customer_from === "body") parts.push("from body");
  if (key.customer_required) parts.push("required");
  return parts.length > 0 ? `each customer: ${parts.join(" · ")}` : "";
}
