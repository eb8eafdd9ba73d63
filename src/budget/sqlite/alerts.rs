//! The SQLite store's queue of spending alerts (see `budget::alerts`): the
//! `alerts` table (`schema`, version 7), one row per event id. A row waits
//! (`delivered_at` NULL) until the receiver takes it, then stays as a
//! delivered id until `forget_at`, so the same event is never queued
//! twice. Each call is one job on the writer, committed before it answers:
//! a queued event survives a crash.

use std::time::Duration;

use rusqlite::Connection;

use super::record::millis;
use super::upkeep::limit_arg;
use super::{Clock, SqliteStore};
use crate::budget::alerts::{AlertEvent, QueuedAlert, ALERT_ID_RETENTION};
use crate::budget::{AlertQueue, StoreError};

type Sql<T> = rusqlite::Result<T>;

impl AlertQueue for SqliteStore {
    /// Queues `event` unless its id was ever queued (within
    /// [`ALERT_ID_RETENTION`]); returns whether it did.
    async fn queue_alert(&self, event: &AlertEvent) -> Result<bool, StoreError> {
        let (id, body) = (event.id.clone(), event.body());
        self.call(move |db, clock| queue(db.conn(), clock, &id, &body).map(Ok))
            .await
    }

    /// Up to `limit` events due now, oldest due first, each leased for
    /// `lease` (not due again before then).
    async fn due_alerts(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<QueuedAlert>, StoreError> {
        self.call(move |db, clock| due(db.conn(), clock, limit, lease).map(Ok))
            .await
    }

    /// The receiver took the event: it is never sent again.
    async fn alert_delivered(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.call(move |db, clock| {
            let now = millis(clock.now());
            db.conn()
                .prepare_cached(
                    "UPDATE alerts SET delivered_at = ?2, forget_at = ?3
                  WHERE id = ?1 AND delivered_at IS NULL",
                )?
                .execute((&id, now, now.saturating_add(ms(ALERT_ID_RETENTION))))?;
            Ok(Ok(()))
        })
        .await
    }

    /// A delivery failed: the event is due again `retry_after` from now.
    async fn alert_failed(&self, id: &str, retry_after: Duration) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.call(move |db, clock| {
            let due = millis(clock.now()).saturating_add(ms(retry_after));
            db.conn()
                .prepare_cached(
                    "UPDATE alerts SET attempts = attempts + 1, due = ?2
                  WHERE id = ?1 AND delivered_at IS NULL",
                )?
                .execute((&id, due))?;
            Ok(Ok(()))
        })
        .await
    }
}

fn queue(conn: &Connection, clock: &Clock, id: &str, body: &str) -> Sql<bool> {
    let now = millis(clock.now());
    // Delivered ids past their retention no longer block anything.
    conn.prepare_cached("DELETE FROM alerts WHERE forget_at <= ?1")?
        .execute([now])?;
    let inserted = conn
        .prepare_cached(
            "INSERT INTO alerts (id, body, attempts, due) VALUES (?1, ?2, 0, ?3)
             ON CONFLICT (id) DO NOTHING",
        )?
        .execute((id, body, now))?;
    Ok(inserted == 1)
}

fn due(conn: &Connection, clock: &Clock, limit: usize, lease: Duration) -> Sql<Vec<QueuedAlert>> {
    let now = millis(clock.now());
    let due: Vec<QueuedAlert> = conn
        .prepare_cached(
            "SELECT id, body, attempts FROM alerts
              WHERE delivered_at IS NULL AND due <= ?1
              ORDER BY due, id LIMIT ?2",
        )?
        .query_map((now, limit_arg(limit)), |row| {
            Ok(QueuedAlert {
                id: row.get(0)?,
                body: row.get(1)?,
                attempts: row.get(2)?,
            })
        })?
        .collect::<Sql<_>>()?;
    let mut lease_until = conn.prepare_cached("UPDATE alerts SET due = ?2 WHERE id = ?1")?;
    for alert in &due {
        lease_until.execute((&alert.id, now.saturating_add(ms(lease))))?;
    }
    Ok(due)
}

fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}
