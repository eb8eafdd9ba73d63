//! The Redis store's queue of spending alerts (see `budget::alerts`), in
//! three keys under the admin tag (`records`), one `lua/alerts.lua` call
//! per operation:
//!
//! | key                                | type | holds |
//! |------------------------------------|------|-------|
//! | `tg:{tollgate:admin}:alerts`       | hash | event id → `<attempts> <body>` while it waits |
//! | `tg:{tollgate:admin}:alerts:due`   | zset | waiting ids by when each may be sent (ms) |
//! | `tg:{tollgate:admin}:alerts:done`  | zset | delivered ids by when each may be forgotten (ms) |
//!
//! Like the documents, every call checks the store epoch first: a Redis
//! restarted without its data has lost the queue, and the gateway says so
//! rather than start a new one silently.

use std::sync::LazyLock;
use std::time::Duration;

use ::redis::{FromRedisValue, Script};

use super::connection::Request;
use super::RedisStore;
use crate::budget::alerts::{AlertEvent, QueuedAlert, ALERT_ID_RETENTION};
use crate::budget::{AlertQueue, StoreError};

/// The script, hashed once for every store in the process; it takes no
/// clock offset in a test build (it is not built on `common.lua`).
static ALERTS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/alerts.lua")));

impl AlertQueue for RedisStore {
    /// Queues `event` unless its id was ever queued (within
    /// [`ALERT_ID_RETENTION`]); returns whether it did.
    async fn queue_alert(&self, event: &AlertEvent) -> Result<bool, StoreError> {
        let queued: i64 = self
            .run_alerts("queue an alert", &["queue", &event.id, &event.body()])
            .await?;
        Ok(queued == 1)
    }

    /// Up to `limit` events due now, oldest due first, each leased for
    /// `lease` (not due again before then).
    async fn due_alerts(
        &self,
        limit: usize,
        lease: Duration,
    ) -> Result<Vec<QueuedAlert>, StoreError> {
        let reply: Vec<String> = self
            .run_alerts(
                "take the due alerts",
                &["due", &limit.to_string(), &millis(lease)],
            )
            .await?;
        reply
            .chunks_exact(3)
            .map(|item| {
                Ok(QueuedAlert {
                    id: item[0].clone(),
                    attempts: item[1].parse().map_err(|_| {
                        StoreError::Unavailable(format!("unreadable alert {}", item[0]))
                    })?,
                    body: item[2].clone(),
                })
            })
            .collect()
    }

    /// The receiver took the event: it is never sent again.
    async fn alert_delivered(&self, id: &str) -> Result<(), StoreError> {
        let _: i64 = self
            .run_alerts(
                "mark an alert delivered",
                &["delivered", id, &millis(ALERT_ID_RETENTION)],
            )
            .await?;
        Ok(())
    }

    /// A delivery failed: the event is due again `retry_after` from now.
    async fn alert_failed(&self, id: &str, retry_after: Duration) -> Result<(), StoreError> {
        let _: i64 = self
            .run_alerts(
                "mark an alert failed",
                &["failed", id, &millis(retry_after)],
            )
            .await?;
        Ok(())
    }
}

impl RedisStore {
    async fn run_alerts<T: FromRedisValue>(
        &self,
        what: &'static str,
        args: &[&str],
    ) -> Result<T, StoreError> {
        self.epoch().await?;
        let mut invocation = ALERTS.prepare_invoke();
        for key in self.inner.records.alerts() {
            invocation.key(key);
        }
        for arg in args {
            invocation.arg(*arg);
        }
        self.inner
            .connection
            .call(self.inner.policy, what, Request::Script(&invocation))
            .await
    }
}

fn millis(duration: Duration) -> String {
    duration.as_millis().to_string()
}
