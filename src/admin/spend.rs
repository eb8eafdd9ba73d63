//! `GET /admin/v1/spend`: spend, tokens and calls grouped by key, org,
//! model, run, customer or day, from the day aggregates the stores keep in the same
//! atomic step as the counters, so a report never reads raw ledger
//! entries (which are folded away after their retention).

use std::collections::BTreeMap;

use chrono::{Datelike, NaiveDate, Utc};
use http::{HeaderValue, Response, StatusCode};
use serde_json::json;

use super::{ok, AdminError, Call};
use crate::body::{full, Body};
use crate::budget::Reports;
use crate::budget::{SpendQuery, SpendRow};

/// What a report's rows are grouped by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GroupBy {
    Key,
    Org,
    Model,
    /// `<key>/<run>`: run ids are the clients' own, unique only within a
    /// key; calls outside a run are grouped under `""`.
    Run,
    /// `<key>/<customer>`: customer ids are the clients' own, unique only
    /// within a key; calls that named no customer are grouped under `""`.
    Customer,
    Day,
}

/// One row of the report.
#[derive(Debug, Default)]
struct Totals {
    calls: u64,
    input_tokens: u64,
    cached_input_tokens: u64,
    cache_write_tokens: u64,
    output_tokens: u64,
    cost_usd_micros: i64,
}

impl Totals {
    fn add(&mut self, row: &SpendRow) {
        self.calls += row.calls;
        self.input_tokens += row.input_tokens;
        self.cached_input_tokens += row.cached_input_tokens;
        self.cache_write_tokens += row.cache_write_tokens;
        self.output_tokens += row.output_tokens;
        self.cost_usd_micros += row.cost_usd_micros;
    }
}

const COLUMNS: &str =
    "group,calls,input_tokens,cached_input_tokens,cache_write_tokens,output_tokens,cost_usd_micros";

/// `GET /admin/v1/spend?group_by=key|org|model|run|customer|day[&key=][&org=][&from=]
/// [&to=][&format=csv]`: days are UTC dates, `from` and `to` inclusive;
/// by default the current month to today.
pub async fn report(call: &Call<'_>) -> Result<Response<Body>, AdminError> {
    let group_by = match call.query.get("group_by").map(String::as_str) {
        None | Some("key") => GroupBy::Key,
        Some("org") => GroupBy::Org,
        Some("model") => GroupBy::Model,
        Some("day") => GroupBy::Day,
        Some("run") => GroupBy::Run,
        Some("customer") => GroupBy::Customer,
        Some(other) => {
            return Err(AdminError::bad(
                format!("group_by must be key, org, model, run, customer or day, not {other:?}"),
                Some("group_by"),
            ))
        }
    };
    let today = Utc::now().date_naive();
    let from = match call.query.get("from") {
        Some(text) => day(text, "from")?,
        None => today.with_day(1).unwrap_or(today),
    };
    let to = match call.query.get("to") {
        Some(text) => day(text, "to")?,
        None => today,
    };
    if from > to {
        return Err(AdminError::bad("from is after to", Some("from")));
    }
    let csv = match call.query.get("format").map(String::as_str) {
        None | Some("json") => false,
        Some("csv") => true,
        Some(other) => {
            return Err(AdminError::bad(
                format!("format must be json or csv, not {other:?}"),
                Some("format"),
            ))
        }
    };
    let query = SpendQuery {
        from,
        to,
        key: call.query.get("key").cloned(),
        org: call.query.get("org").cloned(),
    };
    let store = &call.gateway.store;
    let rows = store.spend(&query).await.map_err(AdminError::store)?;
    let mut groups: BTreeMap<String, Totals> = BTreeMap::new();
    for row in &rows {
        let group = match group_by {
            GroupBy::Key => row.key.clone(),
            GroupBy::Org => row.org.clone().unwrap_or_default(),
            GroupBy::Model => row.model.clone(),
            GroupBy::Run if row.run.is_empty() => String::new(),
            GroupBy::Run => format!("{}/{}", row.key, row.run),
            GroupBy::Customer if row.customer.is_empty() => String::new(),
            GroupBy::Customer => format!("{}/{}", row.key, row.customer),
            GroupBy::Day => row.day.clone(),
        };
        groups.entry(group).or_default().add(row);
    }
    if csv {
        let mut text = format!("{COLUMNS}\n");
        for (group, t) in &groups {
            text.push_str(&format!(
                "{},{},{},{},{},{},{}\n",
                csv_field(group),
                t.calls,
                t.input_tokens,
                t.cached_input_tokens,
                t.cache_write_tokens,
                t.output_tokens,
                t.cost_usd_micros
            ));
        }
        let mut response = Response::new(full(text));
        *response.status_mut() = StatusCode::OK;
        response.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("text/csv; charset=utf-8"),
        );
        return Ok(response);
    }
    let rows: Vec<_> = groups
        .iter()
        .map(|(group, t)| {
            json!({
                "group": group,
                "calls": t.calls,
                "input_tokens": t.input_tokens,
                "cached_input_tokens": t.cached_input_tokens,
                "cache_write_tokens": t.cache_write_tokens,
                "output_tokens": t.output_tokens,
                "cost_usd_micros": t.cost_usd_micros,
            })
        })
        .collect();
    Ok(ok(&json!({
        "from": from.to_string(),
        "to": to.to_string(),
        "group_by": match group_by {
            GroupBy::Key => "key",
            GroupBy::Org => "org",
            GroupBy::Model => "model",
            GroupBy::Run => "run",
            GroupBy::Customer => "customer",
            GroupBy::Day => "day",
        },
        "rows": rows,
    })))
}

/// A day as `YYYY-MM-DD`, or the UTC day of an RFC 3339 time.
fn day(text: &str, name: &str) -> Result<NaiveDate, AdminError> {
    NaiveDate::parse_from_str(text, "%Y-%m-%d")
        .or_else(|_| crate::directory::parse_time(text).map(|at| at.date_naive()))
        .map_err(|_| {
            AdminError::bad(
                format!("{name} must be a day such as \"2026-11-30\" (UTC), not {text:?}"),
                Some(name),
            )
        })
}

/// A CSV field, quoted when it holds a comma, a quote or a line break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}
