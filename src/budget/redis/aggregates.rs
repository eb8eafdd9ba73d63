//! Reading a tag's spend aggregates (see `budget::aggregates`): the hash
//! `tg:{T}:agg`, which every script that books a ledger entry also moves
//! (`aggregate` in `lua/common.lua`), and the sweep trims by day.
//!
//! One field per row and metric, `<day>|<key>[/<run>][#<customer>]|<model>|<metric>`
//! (`/<run>` for a call in a run, `#<customer>` for a call that named a
//! customer; a row without either reads as it always did), each moved
//! by HINCRBY: a settle adds three to six small increments (a metric that
//! does not move is not written), and no read or decode of a packed value.
//! The metrics: `n` calls, `in`, `cin`, `cw`, `out` token counts, `usd` the
//! cost in µUSD (signed). Day and metric have no `|`, and key, run and
//! customer ids neither (nor key ids a `/`, nor any of them a `#`), so a
//! model with `|` in its name still reads back whole. Fields that do
//! not start with a day (the sweep's own `kept_from` and `scan`) are not
//! rows. The row's org is not stored: it is the tag's (see `tag_for`).

use std::collections::BTreeMap;

use super::connection::{CallPolicy, Connection, Request};
use super::scripts::TagKeys;
use crate::budget::{SpendQuery, SpendRow, StoreError};

/// The rows under `tags` that `query` wants, by day, key, run, customer
/// and model.
pub(super) async fn spend(
    connection: &Connection,
    policy: CallPolicy,
    tags: &[String],
    query: &SpendQuery,
) -> Result<Vec<SpendRow>, StoreError> {
    let mut rows: BTreeMap<(String, String, String, String, String), SpendRow> = BTreeMap::new();
    for tag in tags {
        let org = org_of(tag);
        if query
            .org
            .as_deref()
            .is_some_and(|wanted| Some(wanted) != org)
        {
            continue;
        }
        let mut hgetall = ::redis::cmd("HGETALL");
        hgetall.arg(TagKeys::new(tag).agg());
        let fields: Vec<(String, String)> = connection
            .call(policy, "read spend aggregates", Request::Command(&hgetall))
            .await?;
        for (field, value) in fields {
            let Some((day, scope, model, metric)) = parse_field(&field) else {
                continue;
            };
            let (key, run, customer) = parse_scope(scope);
            if !query.matches(day, key, org) {
                continue;
            }
            let id = (
                day.to_owned(),
                key.to_owned(),
                run.to_owned(),
                customer.to_owned(),
                model.to_owned(),
            );
            let row = rows.entry(id).or_insert_with(|| SpendRow {
                day: day.to_owned(),
                key: key.to_owned(),
                org: org.map(str::to_owned),
                run: run.to_owned(),
                customer: customer.to_owned(),
                model: model.to_owned(),
                ..SpendRow::default()
            });
            add_metric(row, metric, &value).ok_or_else(|| {
                StoreError::Unavailable(format!(
                    "unreadable spend aggregate {field} = {value:?} under tag {tag}"
                ))
            })?;
        }
    }
    Ok(rows.into_values().collect())
}

/// The org whose tag this is: `tag_for` names a key without an org
/// `key:<id>`, and ids have no `:`, so any other tag is an org id.
fn org_of(tag: &str) -> Option<&str> {
    (!tag.starts_with("key:")).then_some(tag)
}

/// `(day, key, model, metric)` of a row field; `None` for the sweep's own
/// fields.
fn parse_field(field: &str) -> Option<(&str, &str, &str, &str)> {
    let (day, rest) = field.split_at_checked(10)?;
    if !day.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let rest = rest.strip_prefix('|')?;
    let (key, rest) = rest.split_once('|')?;
    let (model, metric) = rest.rsplit_once('|')?;
    Some((day, key, model, metric))
}

/// `(key, run, customer)` of a row's scope `<key>[/<run>][#<customer>]`,
/// `""` for a run or a customer it does not name.
fn parse_scope(scope: &str) -> (&str, &str, &str) {
    let (scope, customer) = scope.split_once('#').unwrap_or((scope, ""));
    let (key, run) = scope.split_once('/').unwrap_or((scope, ""));
    (key, run, customer)
}

/// Adds one metric's value to the row; `None` if it does not read. A
/// metric this binary does not know (written by a newer one) is skipped.
fn add_metric(row: &mut SpendRow, metric: &str, value: &str) -> Option<()> {
    let count = || value.parse::<u64>().ok();
    match metric {
        "n" => row.calls = count()?,
        "in" => row.input_tokens = count()?,
        "cin" => row.cached_input_tokens = count()?,
        "cw" => row.cache_write_tokens = count()?,
        "out" => row.output_tokens = count()?,
        "usd" => row.cost_usd_micros = value.parse().ok()?,
        _ => {}
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_names_its_day_key_model_and_metric() {
        assert_eq!(
            parse_field("2026-11-29|alice|gpt-4o-mini|usd"),
            Some(("2026-11-29", "alice", "gpt-4o-mini", "usd"))
        );
        assert_eq!(
            parse_field("2026-11-29|alice|a|b|n"),
            Some(("2026-11-29", "alice", "a|b", "n"))
        );
        assert_eq!(
            parse_field("2026-11-29|alice||n"),
            Some(("2026-11-29", "alice", "", "n"))
        );
        assert_eq!(parse_field("kept_from"), None);
        assert_eq!(parse_field("scan"), None);
    }

    #[test]
    fn a_scope_names_its_key_run_and_customer() {
        assert_eq!(parse_scope("alice"), ("alice", "", ""));
        assert_eq!(parse_scope("alice/run-7"), ("alice", "run-7", ""));
        assert_eq!(parse_scope("alice#bob@x.io"), ("alice", "", "bob@x.io"));
        assert_eq!(parse_scope("alice/run:7#u:1"), ("alice", "run:7", "u:1"));
        assert_eq!(
            parse_field("2026-11-29|alice/r#c-1|a|b|n"),
            Some(("2026-11-29", "alice/r#c-1", "a|b", "n"))
        );
    }

    #[test]
    fn a_tag_names_its_org_unless_it_is_a_lone_key() {
        assert_eq!(org_of("acme"), Some("acme"));
        assert_eq!(org_of("key:alice"), None);
    }
}
