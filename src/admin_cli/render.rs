//! The admin API's answers for people: keys, orgs, customers, spend and
//! open reservations as aligned tables with money in USD (six places, from the
//! `*_usd_micros` fields).
//!
//! The server is the authority on every field: a field missing from an
//! answer is shown as `-` rather than refused, and only a list that is not
//! there at all is an error.

use serde_json::Value;

use super::layout::{Align::Left, Align::Right, Fields, Table};
use crate::money::format_usd;

/// How an answer is shown without `--json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum View {
    /// One key with its budget.
    Key,
    /// `{"key", "secret"}`: the secret first, then the key.
    KeySecret,
    Keys,
    Org,
    Orgs,
    /// A key's customers with their budgets.
    Customers,
    /// An empty 204 answer.
    Deleted {
        what: &'static str,
        id: String,
    },
    Spend,
    /// A ledger entry: its fields as they came.
    Entry,
    Reservations,
    /// Text printed as it came (`spend --csv`).
    Raw,
}

/// `body` for people, or why it cannot be read.
pub(crate) fn human(view: &View, body: &[u8]) -> Result<String, String> {
    match view {
        View::Raw => return Ok(String::from_utf8_lossy(body).into_owned()),
        View::Deleted { what, id } => return Ok(format!("deleted {what} {id}\n")),
        _ => {}
    }
    let value: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
    if matches!(view, View::Key | View::Org) && !value["id"].is_string() {
        return Err("no \"id\" in the answer".to_owned());
    }
    match view {
        View::Key => Ok(key_text(&value)),
        View::KeySecret => secret(&value),
        View::Keys => keys(&value),
        View::Org => Ok(org_text(&value)),
        View::Orgs => orgs(&value),
        View::Customers => customers(&value),
        View::Spend => spend(&value),
        View::Entry => Ok(entry(&value)),
        View::Reservations => reservations(&value),
        View::Raw | View::Deleted { .. } => Ok(String::new()),
    }
}

// === keys and orgs ===

fn secret(answer: &Value) -> Result<String, String> {
    let secret = answer
        .get("secret")
        .and_then(Value::as_str)
        .ok_or("no \"secret\" in the answer")?;
    let key = answer.get("key").unwrap_or(&Value::Null);
    Ok(format!(
        "Secret of key {id}, shown only this once: store it now \
         (if it is lost, rotate the key):\n\n    {secret}\n\n{fields}",
        id = text(&key["id"]),
        fields = key_text(key),
    ))
}

/// A key's fields, then its model groups and its customer template.
fn key_text(key: &Value) -> String {
    format!(
        "{}{}{}",
        key_fields(key).render(),
        model_caps(key),
        customer_template(key)
    )
}

/// A key's customer template under a heading: each customer's cap, its
/// period, rate limits, where calls name it and whether they must; nothing
/// when the key sets none of it.
fn customer_template(key: &Value) -> String {
    let set = |name: &str| !matches!(&key[name], Value::Null | Value::Bool(false));
    let from_body = key["customer_from"]
        .as_str()
        .is_some_and(|from| from != "header");
    let any = [
        "customer_cap_usd_micros",
        "customer_period",
        "customer_rpm",
        "customer_tpm",
        "customer_required",
    ]
    .iter()
    .any(|name| set(name));
    if !any && !from_body {
        return String::new();
    }
    let mut fields = Fields::default();
    fields.add("cap_usd", usd(&key["customer_cap_usd_micros"]));
    fields.add("period", text(&key["customer_period"]));
    fields.add("rpm", text(&key["customer_rpm"]));
    fields.add("tpm", text(&key["customer_tpm"]));
    fields.add("from", text(&key["customer_from"]));
    fields.add("required", text(&key["customer_required"]));
    let rows: String = fields
        .render()
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    format!("\neach customer\n{rows}")
}

/// An org's fields, then its model groups.
fn org_text(org: &Value) -> String {
    format!("{}{}", org_fields(org).render(), model_caps(org))
}

fn key_fields(key: &Value) -> Fields {
    let budget = &key["budget"];
    let mut fields = Fields::default();
    fields.add("id", text(&key["id"]));
    fields.add("org", text(&key["org"]));
    fields.add("state", state(key));
    fields.add("source", text(&key["source"]));
    fields.add("period", text(&key["period"]));
    budget_fields(&mut fields, key, budget);
    fields.add("models", models(&key["models"]));
    fields.add("expires_at", text(&key["expires_at"]));
    fields.add("created_at", text(&key["created_at"]));
    fields.add("on_insufficient", text(&key["on_insufficient"]));
    fields.add("alert_at", list(&key["alert_at"]));
    fields.add("rpm", text(&key["rpm"]));
    fields.add("tpm", text(&key["tpm"]));
    fields.add("metadata", text(&key["metadata"]));
    fields
}

fn org_fields(org: &Value) -> Fields {
    let mut fields = Fields::default();
    fields.add("id", text(&org["id"]));
    fields.add("source", text(&org["source"]));
    fields.add("period", text(&org["period"]));
    budget_fields(&mut fields, org, &org["budget"]);
    fields.add("rpm", text(&org["rpm"]));
    fields.add("tpm", text(&org["tpm"]));
    fields.add("created_at", text(&org["created_at"]));
    fields
}

/// A key's or an org's model groups as written, with each money cap's
/// spend in the current period (from `budget.model_caps`), as a table under
/// a heading; nothing when it has none.
fn model_caps(scope: &Value) -> String {
    let Some(groups) = scope["model_caps"].as_array().filter(|g| !g.is_empty()) else {
        return String::new();
    };
    let states = scope["budget"]["model_caps"].as_array();
    let mut table = Table::new(&[
        ("name", Left),
        ("models", Left),
        ("period", Left),
        ("cap_usd", Right),
        ("spent_usd", Right),
        ("reserved_usd", Right),
        ("remaining_usd", Right),
        ("rpm", Right),
        ("tpm", Right),
    ]);
    for group in groups {
        let state = states
            .and_then(|states| states.iter().find(|state| state["name"] == group["name"]))
            .unwrap_or(&Value::Null);
        table.row(vec![
            text(&group["name"]),
            list(&group["models"]),
            text(&group["period"]),
            usd(&group["cap_usd_micros"]),
            usd(&state["spent_usd_micros"]),
            usd(&state["reserved_usd_micros"]),
            usd(&state["remaining_usd_micros"]),
            text(&group["rpm"]),
            text(&group["tpm"]),
        ]);
    }
    let rows: String = table
        .render()
        .lines()
        .map(|line| format!("  {line}\n"))
        .collect();
    format!("\nmodel caps\n{rows}")
}

/// The names of a key's or an org's model groups, for a list.
fn group_names(scope: &Value) -> String {
    match scope["model_caps"].as_array() {
        Some(groups) if !groups.is_empty() => groups
            .iter()
            .map(|group| text(&group["name"]))
            .collect::<Vec<_>>()
            .join(", "),
        _ => "-".to_owned(),
    }
}

/// The cap, and what the current period has spent, holds and has left.
fn budget_fields(fields: &mut Fields, scope: &Value, budget: &Value) {
    fields.add("cap_usd", cap(scope));
    fields.add("spent_usd", usd(&budget["spent_usd_micros"]));
    fields.add("reserved_usd", usd(&budget["reserved_usd_micros"]));
    fields.add("remaining_usd", usd(&budget["remaining_usd_micros"]));
    fields.add("period_id", text(&budget["period_id"]));
    fields.add("resets_at", text(&budget["resets_at"]));
}

fn keys(answer: &Value) -> Result<String, String> {
    let keys = entries(answer, "keys")?;
    if keys.is_empty() {
        return Ok(format!("no keys{}\n", more(answer)));
    }
    let mut table = Table::new(&[
        ("id", Left),
        ("org", Left),
        ("period", Left),
        ("cap_usd", Right),
        ("spent_usd", Right),
        ("reserved_usd", Right),
        ("remaining_usd", Right),
        ("state", Left),
        ("expires_at", Left),
        ("source", Left),
        ("rpm", Right),
        ("tpm", Right),
        ("model_caps", Left),
        ("models", Left),
    ]);
    for key in keys {
        let budget = &key["budget"];
        table.row(vec![
            text(&key["id"]),
            text(&key["org"]),
            text(&key["period"]),
            cap(key),
            usd(&budget["spent_usd_micros"]),
            usd(&budget["reserved_usd_micros"]),
            usd(&budget["remaining_usd_micros"]),
            state(key),
            text(&key["expires_at"]),
            text(&key["source"]),
            text(&key["rpm"]),
            text(&key["tpm"]),
            group_names(key),
            models(&key["models"]),
        ]);
    }
    Ok(format!(
        "{}{}{}\n",
        table.render(),
        count(keys.len() as u64, "key", "keys"),
        more(answer)
    ))
}

fn orgs(answer: &Value) -> Result<String, String> {
    let orgs = entries(answer, "orgs")?;
    if orgs.is_empty() {
        return Ok(format!("no orgs{}\n", more(answer)));
    }
    let mut table = Table::new(&[
        ("id", Left),
        ("period", Left),
        ("cap_usd", Right),
        ("spent_usd", Right),
        ("reserved_usd", Right),
        ("remaining_usd", Right),
        ("source", Left),
        ("rpm", Right),
        ("tpm", Right),
        ("model_caps", Left),
    ]);
    for org in orgs {
        let budget = &org["budget"];
        table.row(vec![
            text(&org["id"]),
            text(&org["period"]),
            cap(org),
            usd(&budget["spent_usd_micros"]),
            usd(&budget["reserved_usd_micros"]),
            usd(&budget["remaining_usd_micros"]),
            text(&org["source"]),
            text(&org["rpm"]),
            text(&org["tpm"]),
            group_names(org),
        ]);
    }
    Ok(format!(
        "{}{}{}\n",
        table.render(),
        count(orgs.len() as u64, "org", "orgs"),
        more(answer)
    ))
}

/// A key's customers: each one's last call and its money under the key's
/// template (`-` where the template has no money cap).
fn customers(answer: &Value) -> Result<String, String> {
    let customers = entries(answer, "customers")?;
    if customers.is_empty() {
        return Ok(format!("no customers{}\n", more(answer)));
    }
    let mut table = Table::new(&[
        ("id", Left),
        ("last_call", Left),
        ("spent_usd", Right),
        ("remaining_usd", Right),
        ("cap_usd", Right),
    ]);
    for customer in customers {
        let budget = &customer["budget"];
        table.row(vec![
            text(&customer["id"]),
            text(&customer["last_call"]),
            usd(&budget["spent_usd_micros"]),
            usd(&budget["remaining_usd_micros"]),
            usd(&budget["cap_usd_micros"]),
        ]);
    }
    Ok(format!(
        "{}{}{}\n",
        table.render(),
        count(customers.len() as u64, "customer", "customers"),
        more(answer)
    ))
}

/// When the list goes on past this page: how to read the rest.
fn more(answer: &Value) -> String {
    match answer["next"].as_str() {
        Some(next) => format!("; more after {next} (--after {next}, or --all)"),
        None => String::new(),
    }
}

/// The cap of the current period, else the configured one.
fn cap(scope: &Value) -> String {
    match &scope["budget"]["cap_usd_micros"] {
        Value::Null => usd(&scope["cap_usd_micros"]),
        cap => usd(cap),
    }
}

fn state(key: &Value) -> String {
    match key["disabled"].as_bool() {
        Some(true) => "disabled",
        Some(false) => "active",
        None => "-",
    }
    .to_owned()
}

/// A key's model globs; `null` means every model.
fn models(models: &Value) -> String {
    match models {
        Value::Null => "all".to_owned(),
        other => list(other),
    }
}

// === spend, reservations, ledger entries ===

fn spend(answer: &Value) -> Result<String, String> {
    let rows = entries(answer, "rows")?;
    let mut text = format!(
        "spend from {} to {}\n",
        self::text(&answer["from"]),
        self::text(&answer["to"])
    );
    if rows.is_empty() {
        text.push_str("no spend\n");
        return Ok(text);
    }
    let mut table = Table::new(&[
        ("group", Left),
        ("calls", Right),
        ("input_tokens", Right),
        ("cached_input_tokens", Right),
        ("cache_write_tokens", Right),
        ("output_tokens", Right),
        ("cost_usd", Right),
    ]);
    let (mut calls, mut cost) = (0u64, 0u64);
    for row in rows {
        calls = calls.saturating_add(row["calls"].as_u64().unwrap_or(0));
        cost = cost.saturating_add(row["cost_usd_micros"].as_u64().unwrap_or(0));
        table.row(vec![
            self::text(&row["group"]),
            self::text(&row["calls"]),
            self::text(&row["input_tokens"]),
            self::text(&row["cached_input_tokens"]),
            self::text(&row["cache_write_tokens"]),
            self::text(&row["output_tokens"]),
            usd(&row["cost_usd_micros"]),
        ]);
    }
    text.push_str(&table.render());
    text.push_str(&format!(
        "{}, {}, {} USD\n",
        count(rows.len() as u64, "group", "groups"),
        count(calls, "call", "calls"),
        format_usd(cost)
    ));
    Ok(text)
}

fn reservations(answer: &Value) -> Result<String, String> {
    let holds = entries(answer, "reservations")?;
    if holds.is_empty() {
        return Ok("no open reservations\n".to_owned());
    }
    let mut table = Table::new(&[
        ("exec_id", Left),
        ("key", Left),
        ("org", Left),
        ("run", Left),
        ("model", Left),
        ("amount_usd", Right),
        ("started_at", Left),
        ("deadline", Left),
    ]);
    let mut held = 0u64;
    for hold in holds {
        held = held.saturating_add(hold["amount_usd_micros"].as_u64().unwrap_or(0));
        table.row(
            ["exec_id", "key", "org", "run", "model"]
                .iter()
                .map(|field| text(&hold[*field]))
                .chain([
                    usd(&hold["amount_usd_micros"]),
                    text(&hold["started_at"]),
                    text(&hold["deadline"]),
                ])
                .collect(),
        );
    }
    Ok(format!(
        "{}{} holding {} USD\n",
        table.render(),
        count(holds.len() as u64, "open reservation", "open reservations"),
        format_usd(held)
    ))
}

/// A ledger entry's fields by name; `…_usd_micros` amounts (negative for a
/// refund) as `…_usd`.
fn entry(entry: &Value) -> String {
    let Value::Object(fields_in) = entry else {
        return format!("{entry}\n");
    };
    let mut fields = Fields::default();
    for (name, value) in fields_in {
        match name.strip_suffix("_micros") {
            Some(usd_name) if value.is_i64() || value.is_u64() => {
                fields.add(usd_name, usd(value));
            }
            _ => fields.add(name, text(value)),
        }
    }
    fields.render()
}

// === cells ===

/// `1 key`, `2 keys`.
fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The entries of a list answer.
fn entries<'a>(answer: &'a Value, field: &str) -> Result<&'a Vec<Value>, String> {
    answer[field]
        .as_array()
        .ok_or_else(|| format!("no \"{field}\" list in the answer"))
}

/// µUSD as USD with six places; negative amounts (refunds) keep their sign.
fn usd(micros: &Value) -> String {
    match (micros.as_u64(), micros.as_i64()) {
        (Some(micros), _) => format_usd(micros),
        (None, Some(micros)) => format!("-{}", format_usd(micros.unsigned_abs())),
        (None, None) => "-".to_owned(),
    }
}

/// A string as it is, `null` as `-`, anything else as compact JSON.
fn text(value: &Value) -> String {
    match value {
        Value::Null => "-".to_owned(),
        Value::String(text) if text.is_empty() => "-".to_owned(),
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A list of strings joined by commas.
fn list(value: &Value) -> String {
    match value.as_array() {
        Some(items) if items.is_empty() => "-".to_owned(),
        Some(items) => items.iter().map(text).collect::<Vec<_>>().join(", "),
        None => text(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key(id: &str, spent: u64, models: Value) -> Value {
        let mut key = plain_key(id, spent, models);
        if id == "alice" {
            key["rpm"] = json!(60);
            key["model_caps"] = json!([
                {"name": "opus", "models": ["claude-opus-*", "claude-3-opus*"],
                 "cap_usd": "50.00", "cap_usd_micros": 50_000_000, "period": "day",
                 "rpm": 10, "tpm": null},
                {"name": "minis", "models": ["gpt-4o-mini"], "cap_usd": null,
                 "cap_usd_micros": null, "period": null, "rpm": null, "tpm": 100_000},
            ]);
            key["budget"]["model_caps"] = json!([
                {"name": "opus", "models": ["claude-opus-*", "claude-3-opus*"],
                 "period": "day", "period_id": "2026-11-29", "cap_usd_micros": 50_000_000,
                 "spent_usd_micros": 1_200, "reserved_usd_micros": 300,
                 "remaining_usd_micros": 49_998_500, "resets_at": "2026-11-30T00:00:00Z"},
            ]);
        }
        key
    }

    fn plain_key(id: &str, spent: u64, models: Value) -> Value {
        json!({
            "id": id, "org": "acme", "cap_usd_micros": 25_000_000, "period": "day",
            "models": models, "disabled": false, "expires_at": null,
            "created_at": "2026-11-29T10:00:00Z", "source": "api", "metadata": {"team": "x"},
            "on_insufficient": "refuse", "alert_at": ["0.5", "0.8"],
            "budget": {"id": id, "period": "day", "period_id": "2026-11-29",
                       "cap_usd_micros": 25_000_000, "spent_usd_micros": spent,
                       "reserved_usd_micros": 0, "remaining_usd_micros": 25_000_000 - spent,
                       "resets_at": "2026-11-30T00:00:00Z", "model_caps": []},
            "model_caps": [], "rpm": null, "tpm": null,
        })
    }

    fn show(view: View, value: &Value) -> String {
        human(&view, value.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn keys_show_money_in_usd_from_their_budget() {
        let mut disabled = key("bob", 0, Value::Null);
        disabled["disabled"] = json!(true);
        disabled["budget"] = Value::Null;
        disabled["org"] = Value::Null;
        let answer = json!({
            "keys": [key("alice", 1_200, json!(["gpt-4o*", "claude-*"])), disabled],
            "next": "bob",
        });
        let text = show(View::Keys, &answer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "id     org   period    cap_usd  spent_usd  reserved_usd  remaining_usd  state     expires_at  source  rpm  tpm  model_caps   models"
        );
        assert_eq!(
            lines[1],
            "alice  acme  day     25.000000   0.001200      0.000000      24.998800  active    -           api      60    -  opus, minis  gpt-4o*, claude-*"
        );
        assert_eq!(
            lines[2],
            "bob    -     day     25.000000          -             -              -  disabled  -           api       -    -  -            all"
        );
        assert_eq!(lines[3], "2 keys; more after bob (--after bob, or --all)");
        assert_eq!(
            show(View::Keys, &json!({"keys": [], "next": null})),
            "no keys\n"
        );
    }

    #[test]
    fn a_new_secret_comes_first_and_says_it_is_shown_once() {
        let answer = json!({"key": key("alice", 0, Value::Null), "secret": "tg-s3cret"});
        let text = show(View::KeySecret, &answer);
        assert!(
            text.starts_with("Secret of key alice, shown only this once"),
            "{text}"
        );
        assert!(text.contains("\n    tg-s3cret\n"), "{text}");
        assert!(text.contains("\ncap_usd          25.000000\n"), "{text}");
        assert!(text.contains("\nalert_at         0.5, 0.8\n"), "{text}");
        assert!(human(&View::KeySecret, br#"{"key":{}}"#).is_err());
        // A list where one key was expected is not shown as an empty key.
        assert!(human(&View::Key, br#"{"keys":[],"next":null}"#).is_err());
    }

    #[test]
    fn a_key_shows_its_rate_limits_and_each_model_groups_money() {
        let text = show(View::Key, &key("alice", 0, Value::Null));
        assert!(text.contains("\nrpm              60\n"), "{text}");
        assert!(text.contains("\ntpm              -\n"), "{text}");
        let groups: Vec<&str> = text
            .split("\nmodel caps\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"))
            .lines()
            .collect();
        assert_eq!(
            groups,
            [
                "  name   models                         period    cap_usd  spent_usd  reserved_usd  remaining_usd  rpm     tpm",
                "  opus   claude-opus-*, claude-3-opus*  day     50.000000   0.001200      0.000300      49.998500   10       -",
                "  minis  gpt-4o-mini                    -               -          -             -              -    -  100000",
            ]
        );
        // Without groups there is no heading.
        let text = show(View::Org, &plain_key("acme", 0, Value::Null));
        assert!(!text.contains("model caps"), "{text}");
        assert!(text.contains("\nrpm            -\n"), "{text}");
    }

    #[test]
    fn a_key_shows_its_customer_template_and_customers_their_money() {
        let mut alice = plain_key("alice", 0, Value::Null);
        let text = show(View::Key, &alice);
        assert!(!text.contains("each customer"), "{text}");
        alice["customer_cap_usd"] = json!("0.50");
        alice["customer_cap_usd_micros"] = json!(500_000);
        alice["customer_period"] = json!("day");
        alice["customer_rpm"] = json!(10);
        alice["customer_from"] = json!("body");
        alice["customer_required"] = json!(true);
        let text = show(View::Key, &alice);
        let template: Vec<&str> = text
            .split("\neach customer\n")
            .nth(1)
            .unwrap_or_else(|| panic!("{text}"))
            .lines()
            .collect();
        assert_eq!(
            template,
            [
                "  cap_usd   0.500000",
                "  period    day",
                "  rpm       10",
                "  tpm       -",
                "  from      body",
                "  required  true",
            ]
        );

        let answer = json!({"customers": [
            {"id": "c1@example.com", "last_call": "2026-11-29T10:00:00Z",
             "budget": {"period": "day", "period_id": "2026-11-29", "cap_usd_micros": 500_000,
                        "spent_usd_micros": 1_200, "reserved_usd_micros": 0,
                        "remaining_usd_micros": 498_800, "resets_at": "2026-11-30T00:00:00Z"}},
            {"id": "c2", "last_call": "2026-11-29T11:00:00Z", "budget": null},
        ], "next": "c2"});
        let text = show(View::Customers, &answer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            [
                "id              last_call             spent_usd  remaining_usd   cap_usd",
                "c1@example.com  2026-11-29T10:00:00Z   0.001200       0.498800  0.500000",
                "c2              2026-11-29T11:00:00Z          -              -         -",
                "2 customers; more after c2 (--after c2, or --all)",
            ]
        );
        assert_eq!(
            show(View::Customers, &json!({"customers": [], "next": null})),
            "no customers\n"
        );
    }

    #[test]
    fn spend_rows_add_up_in_a_closing_line() {
        let answer = json!({"from": "2026-11-01", "to": "2026-11-30", "rows": [
            {"group": "gpt-4o-mini", "calls": 3, "input_tokens": 1200, "cached_input_tokens": 0,
             "cache_write_tokens": 0, "output_tokens": 300, "cost_usd_micros": 360},
            {"group": "claude-sonnet-4", "calls": 1, "input_tokens": 10, "cached_input_tokens": 5,
             "cache_write_tokens": 2, "output_tokens": 20, "cost_usd_micros": 1_000_000},
        ]});
        let text = show(View::Spend, &answer);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "spend from 2026-11-01 to 2026-11-30");
        assert_eq!(
            lines[2],
            "gpt-4o-mini          3          1200                    0                   0            300  0.000360"
        );
        assert_eq!(lines[4], "2 groups, 4 calls, 1.000360 USD");
    }

    #[test]
    fn reservations_and_entries_show_signed_usd() {
        let answer = json!({"reservations": [{"exec_id": "e1", "key": "alice", "org": null,
            "run": "r1", "model": "gpt-4o", "amount_usd_micros": 2_500_000,
            "started_at": "2026-11-29T10:00:00Z", "deadline": "2026-11-29T10:15:00Z"}]});
        let text = show(View::Reservations, &answer);
        assert!(
            text.contains("e1       alice  -    r1   gpt-4o    2.500000"),
            "{text}"
        );
        assert!(
            text.ends_with("1 open reservation holding 2.500000 USD\n"),
            "{text}"
        );
        assert_eq!(
            show(View::Reservations, &json!({"reservations": []})),
            "no open reservations\n"
        );
        let entry =
            json!({"status": "adjustment", "amount_usd_micros": -250_000, "note": "refund"});
        assert_eq!(
            show(View::Entry, &entry),
            "amount_usd  -0.250000\nnote        refund\nstatus      adjustment\n"
        );
    }

    #[test]
    fn deleted_and_raw_answers_need_no_json() {
        let deleted = View::Deleted {
            what: "key",
            id: "alice".to_owned(),
        };
        assert_eq!(human(&deleted, b"").unwrap(), "deleted key alice\n");
        assert_eq!(
            human(&View::Raw, b"group,calls\nx,1\n").unwrap(),
            "group,calls\nx,1\n"
        );
    }
}
