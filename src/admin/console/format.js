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
