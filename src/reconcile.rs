//! `tollgate reconcile`: every scope's counter, per period,
//! beside what its folded sums, ledger and open reservations say it should
//! hold, as a table for people or JSON for machines.

use crate::budget::Reports;
use crate::budget::Upkeep;
use crate::budget::{self, BudgetStore, Reconciliation, SqliteStore};
use crate::config::{Config, StoreBackend};
use crate::directory::Directory;

/// Every configured scope's rows, read from the shared store the config
/// names.
pub async fn read_books(config: &Config) -> Result<Vec<Reconciliation>, String> {
    let store = match &config.store.backend {
        StoreBackend::Memory => {
            return Err("the memory store lives inside the gateway process; \
                        reconcile needs store.backend = \"sqlite\" or \"redis\""
                .to_owned())
        }
        // Beside the gateway that owns the file: read, never lock or write.
        StoreBackend::Sqlite { path } => {
            BudgetStore::Sqlite(SqliteStore::open_reader(path).map_err(|e| e.to_string())?)
        }
        StoreBackend::Redis { .. } => budget::open(config).await.map_err(|e| e.to_string())?,
    };
    let endpoint = match &store {
        BudgetStore::Redis(redis) => redis.endpoint().to_owned(),
        BudgetStore::Sqlite(sqlite) => sqlite.path().display().to_string(),
        BudgetStore::Memory(_) => "memory".to_owned(),
    };
    store
        .ping()
        .await
        .map_err(|e| format!("cannot reach the budget store at {endpoint}: {e}"))?;
    // The keys the admin API made spend under tags of their own.
    Directory::new(config)
        .reload(&store)
        .await
        .map_err(|e| format!("cannot read the keys at {endpoint}: {e}"))?;
    store
        .reconcile()
        .await
        .map_err(|e| format!("cannot read the books at {endpoint}: {e}"))
}

/// Whether every row balances.
pub fn balanced(rows: &[Reconciliation]) -> bool {
    rows.iter().all(|row| row.drift() == 0)
}

const COLUMNS: [&str; 8] = [
    "kind", "id", "period", "counter", "folded", "ledger", "open", "drift",
];

/// One line per scope and period, money in µUSD, columns aligned, and a
/// closing line saying whether the books balance.
pub fn table(rows: &[Reconciliation]) -> String {
    let cells: Vec<[String; 8]> = rows
        .iter()
        .map(|row| {
            [
                row.kind.to_string(),
                row.id.clone(),
                row.period_id.clone(),
                row.counter.to_string(),
                row.folded.to_string(),
                row.ledger.to_string(),
                row.open.to_string(),
                row.drift().to_string(),
            ]
        })
        .collect();
    let mut widths = COLUMNS.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.len());
        }
    }
    let header = COLUMNS.map(str::to_owned);
    let mut text = String::new();
    for line in std::iter::once(&header).chain(&cells) {
        let mut out = String::new();
        for (column, (cell, width)) in line.iter().zip(widths).enumerate() {
            if column > 0 {
                out.push_str("  ");
            }
            // Names read left to right, amounts line up on their units.
            if column < 3 {
                out.push_str(&format!("{cell:<width$}"));
            } else {
                out.push_str(&format!("{cell:>width$}"));
            }
        }
        text.push_str(out.trim_end());
        text.push('\n');
    }
    let drifting = rows.iter().filter(|row| row.drift() != 0).count();
    text.push_str(&match drifting {
        0 => format!("{} rows, no drift (amounts in µUSD)\n", rows.len()),
        n => format!("DRIFT in {n} of {} rows (amounts in µUSD)\n", rows.len()),
    });
    text
}

/// The rows for machines: amounts in µUSD, and `balanced` for the verdict.
pub fn json(rows: &[Reconciliation]) -> String {
    let lines: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let drift = row.drift();
            let drift = i64::try_from(drift).unwrap_or(if drift < 0 { i64::MIN } else { i64::MAX });
            serde_json::json!({
                "kind": row.kind.as_str(),
                "id": row.id,
                "period_id": row.period_id,
                "counter_usd_micros": row.counter,
                "folded_usd_micros": row.folded,
                "ledger_usd_micros": row.ledger,
                "open_usd_micros": row.open,
                "drift_usd_micros": drift,
            })
        })
        .collect();
    format!(
        "{}\n",
        serde_json::json!({"balanced": balanced(rows), "rows": lines})
    )
}
