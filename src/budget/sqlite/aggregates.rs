//! The SQLite store's spend aggregates (see `budget::aggregates`): the
//! `aggregates` table, one row per day, key, run, customer and model, upserted with
//! the ledger entries of each posting in their own transaction, so a row
//! never disagrees with the ledger it sums. Rows of days older than the aggregate
//! retention are deleted by the sweep.

use rusqlite::Connection;

use crate::budget::aggregates::{day_id, SpendQuery, SpendRow};

type Sql<T> = rusqlite::Result<T>;

/// Adds the sums of `row` (the ledger entries of one posting, of its day,
/// key, run, customer and model) to the file's row.
pub(super) fn add(conn: &Connection, row: &SpendRow) -> Sql<()> {
    conn.prepare_cached(
        "INSERT INTO aggregates (day, key, org, model, calls, input_tokens, cached_input_tokens,
             cache_write_tokens, output_tokens, cost_usd_micros, run, customer)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
         ON CONFLICT (day, key, run, customer, model) DO UPDATE SET
             calls = calls + excluded.calls,
             input_tokens = input_tokens + excluded.input_tokens,
             cached_input_tokens = cached_input_tokens + excluded.cached_input_tokens,
             cache_write_tokens = cache_write_tokens + excluded.cache_write_tokens,
             output_tokens = output_tokens + excluded.output_tokens,
             cost_usd_micros = cost_usd_micros + excluded.cost_usd_micros",
    )?
    .execute(rusqlite::params![
        row.day,
        row.key,
        row.org,
        row.model,
        row.calls,
        row.input_tokens,
        row.cached_input_tokens,
        row.cache_write_tokens,
        row.output_tokens,
        row.cost_usd_micros,
        row.run,
        row.customer,
    ])?;
    Ok(())
}

/// Deletes the rows of days before `first_kept` (`YYYY-MM-DD`).
pub(super) fn drop_before(conn: &Connection, first_kept: &str) -> Sql<usize> {
    conn.prepare_cached("DELETE FROM aggregates WHERE day < ?1")?
        .execute([first_kept])
}

/// The rows `query` wants, by day, key, run, customer and model (the
/// primary key's order).
pub(super) fn spend(conn: &Connection, query: &SpendQuery) -> Sql<Vec<SpendRow>> {
    let mut statement = conn.prepare_cached(
        "SELECT day, key, org, model, calls, input_tokens, cached_input_tokens,
                cache_write_tokens, output_tokens, cost_usd_micros, run, customer
           FROM aggregates
          WHERE day BETWEEN ?1 AND ?2
            AND (?3 IS NULL OR key = ?3)
            AND (?4 IS NULL OR org = ?4)
          ORDER BY day, key, run, customer, model",
    )?;
    let rows = statement.query_map(
        (day_id(query.from), day_id(query.to), &query.key, &query.org),
        |row| {
            Ok(SpendRow {
                day: row.get(0)?,
                key: row.get(1)?,
                org: row.get(2)?,
                run: row.get(10)?,
                customer: row.get(11)?,
                model: row.get(3)?,
                calls: row.get(4)?,
                input_tokens: row.get(5)?,
                cached_input_tokens: row.get(6)?,
                cache_write_tokens: row.get(7)?,
                output_tokens: row.get(8)?,
                cost_usd_micros: row.get(9)?,
            })
        },
    )?;
    rows.collect()
}
