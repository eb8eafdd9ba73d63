//! The memory store's spend aggregates (see `budget::aggregates`): one row
//! per day, key and model, in a sorted map so a report reads a day range
//! and the sweep drops the oldest days without visiting the rest. Held
//! under the store's lock with the books, so a row moves with its ledger
//! entry.

use std::collections::BTreeMap;

use crate::budget::aggregates::{day_id, SpendQuery, SpendRow};
use crate::budget::LedgerEntry;

#[derive(Default)]
pub(super) struct Aggregates {
    /// By (day, key, run, customer, model): day first, so rows sort in
    /// report order and the oldest days come first.
    rows: BTreeMap<(String, String, String, String, String), SpendRow>,
}

impl Aggregates {
    /// Adds one ledger entry to its row.
    pub(super) fn add(&mut self, entry: &LedgerEntry) {
        let row = SpendRow::for_entry(entry);
        let id = (
            row.day.clone(),
            row.key.clone(),
            row.run.clone(),
            row.customer.clone(),
            row.model.clone(),
        );
        self.rows.entry(id).or_insert(row).add(entry);
    }

    /// Drops the rows of days before `first_kept` (`YYYY-MM-DD`).
    pub(super) fn drop_before(&mut self, first_kept: &str) {
        let kept = self.rows.split_off(&(
            first_kept.to_owned(),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        ));
        self.rows = kept;
    }

    /// The rows `query` wants, in (day, key, run, customer, model) order.
    pub(super) fn spend(&self, query: &SpendQuery) -> Vec<SpendRow> {
        let from = (
            day_id(query.from),
            String::new(),
            String::new(),
            String::new(),
            String::new(),
        );
        let to = day_id(query.to);
        self.rows
            .range(from..)
            .map(|(_, row)| row)
            .take_while(|row| row.day <= to)
            .filter(|row| query.matches(&row.day, &row.key, row.org.as_deref()))
            .cloned()
            .collect()
    }
}
