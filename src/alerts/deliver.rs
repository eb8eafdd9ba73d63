//! The delivery task: every [`TICK`], the alerts due are taken from the
//! store (leased, so another gateway does not send them at the same
//! moment) and POSTed to the webhook, signed; a 2xx marks one delivered,
//! anything else (an error status, a refused connection, no answer within
//! [`SEND_TIMEOUT`]) puts it back with a backoff of 1 s doubling to at most
//! [`MAX_BACKOFF`].
//!
//! Signature: `x-tollgate-signature: t=<unix seconds>,v1=<hex
//! HMAC-SHA256(secret, "<t>.<body>")>`, over the very bytes sent, which
//! are the body as queued. A receiver checks it and the age of `t`, and
//! drops an `id` it has seen (delivery is at least once).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use chrono::Utc;
use hmac::{Hmac, Mac};
use http::{header, Method, Request};
use sha2::Sha256;
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::MissedTickBehavior;

use crate::budget::alerts::QueuedAlert;
use crate::budget::AlertQueue;
use crate::budget::BudgetStore;
use crate::config::{AlertsConfig, Webhook};
use crate::metrics::Metrics;
use crate::upstream::{self, Payload, UpstreamClient};

/// How often the store is asked for due alerts.
pub const TICK: Duration = Duration::from_millis(500);

/// Alerts sent per tick, at once.
const BATCH: usize = 32;

/// How long a taken alert is not handed to another gateway: longer than a
/// send may take, so only a gateway that died while sending lets another
/// one send it again.
const LEASE: Duration = Duration::from_secs(30);

/// How long the receiver has to answer.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest wait between two attempts at one alert.
const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// While the receiver keeps failing, one warning per this long.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// The signature header's name.
pub const SIGNATURE_HEADER: &str = "x-tollgate-signature";

/// Stops the delivery task when dropped.
pub struct Delivering {
    task: AbortHandle,
}

impl Drop for Delivering {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts delivering on the current Tokio runtime, when a webhook is
/// configured; it stops when the guard drops.
pub fn spawn(
    config: &AlertsConfig,
    store: &BudgetStore,
    metrics: &Arc<Metrics>,
) -> Option<Delivering> {
    let webhook = config.webhook.clone()?;
    let client = match upstream::client() {
        Ok(client) => client,
        Err(error) => {
            tracing::error!(%error, "cannot build the webhook client: spending alerts stay queued");
            return None;
        }
    };
    let sender = Arc::new(Sender {
        client,
        webhook,
        metrics: metrics.clone(),
    });
    let task = tokio::spawn(deliver_periodically(store.clone(), sender));
    Some(Delivering {
        task: task.abort_handle(),
    })
}

struct Sender {
    client: UpstreamClient,
    webhook: Webhook,
    metrics: Arc<Metrics>,
}

/// Whether the receiver or the store is failing, so each is logged when it
/// starts failing (and then once per [`WARN_EVERY`]), and when it recovers.
#[derive(Default)]
struct Health {
    warned_at: Option<Instant>,
}

impl Health {
    fn failed(&mut self, what: &str, error: &str) {
        if self.warned_at.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            self.warned_at = Some(Instant::now());
            tracing::warn!(%error, "{what}");
        }
    }

    fn works(&mut self, what: &str) {
        if self.warned_at.take().is_some() {
            tracing::info!("{what}");
        }
    }
}

async fn deliver_periodically(store: BudgetStore, sender: Arc<Sender>) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut store_health = Health::default();
    let mut receiver_health = Health::default();
    loop {
        ticks.tick().await;
        let due = match store.due_alerts(BATCH, LEASE).await {
            Ok(due) => {
                store_health.works("spending alerts are read from the store again");
                due
            }
            Err(error) => {
                store_health.failed("cannot read the spending alerts due", &error.to_string());
                continue;
            }
        };
        let mut sends = JoinSet::new();
        for alert in due {
            let sender = sender.clone();
            sends.spawn(async move {
                let sent = sender.send(&alert).await;
                (alert, sent)
            });
        }
        while let Some(done) = sends.join_next().await {
            let Ok((alert, sent)) = done else { continue };
            sender.metrics.count_alert_delivery(sent.is_ok());
            let marked = match sent {
                Ok(()) => {
                    receiver_health.works("the alert webhook takes alerts again");
                    store.alert_delivered(&alert.id).await
                }
                Err(error) => {
                    receiver_health.failed(
                        "the alert webhook failed; alerts stay queued and are retried",
                        &error,
                    );
                    store.alert_failed(&alert.id, backoff(alert.attempts)).await
                }
            };
            if let Err(error) = marked {
                // Its lease runs out and it is sent again: at least once.
                store_health.failed("cannot mark a spending alert", &error.to_string());
            }
        }
    }
}

impl Sender {
    /// POSTs one alert; `Err` says why it did not land.
    async fn send(&self, alert: &QueuedAlert) -> Result<(), String> {
        let secret = self.webhook.secret.expose().as_bytes();
        let signature = signature(secret, Utc::now().timestamp(), alert.body.as_bytes());
        let request = Request::builder()
            .method(Method::POST)
            .uri(self.webhook.url.clone())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, "tollgate")
            .header(SIGNATURE_HEADER, signature)
            .body(Payload::from(Bytes::from(alert.body.clone())))
            .map_err(|error| error.to_string())?;
        match tokio::time::timeout(SEND_TIMEOUT, self.client.request(request)).await {
            Ok(Ok(response)) if response.status().is_success() => Ok(()),
            Ok(Ok(response)) => Err(format!("answered {}", response.status())),
            Ok(Err(error)) => Err(format!("unreachable: {error}")),
            Err(_) => Err(format!("no answer within {SEND_TIMEOUT:?}")),
        }
    }
}

/// The header value for `body` signed at unix time `t`.
pub fn signature(secret: &[u8], t: i64, body: &[u8]) -> String {
    // HMAC takes a key of any length; `new_from_slice` cannot fail for it.
    let mut mac = match Hmac::<Sha256>::new_from_slice(secret) {
        Ok(mac) => mac,
        Err(_) => return format!("t={t},v1="),
    };
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// The wait before the next attempt at an alert that failed `attempts`
/// times before: 1 s, doubling, at most [`MAX_BACKOFF`].
fn backoff(attempts: u32) -> Duration {
    Duration::from_secs(1)
        .checked_mul(1u32.checked_shl(attempts).unwrap_or(u32::MAX))
        .map_or(MAX_BACKOFF, |delay| delay.min(MAX_BACKOFF))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_a_second_to_five_minutes() {
        let waits: Vec<u64> = [0, 1, 2, 8, 9, 40].map(|n| backoff(n).as_secs()).to_vec();
        assert_eq!(waits, [1, 2, 4, 256, 300, 300]);
    }

    #[test]
    fn the_signature_is_hmac_sha256_of_time_dot_body() {
        let signed = signature(b"Jefe", 0, b"what do ya want ");
        assert!(signed.starts_with("t=0,v1="), "{signed}");
        let mut mac = Hmac::<Sha256>::new_from_slice(b"Jefe").unwrap();
        mac.update(b"0.what do ya want ");
        assert_eq!(
            signed,
            format!("t=0,v1={}", hex::encode(mac.finalize().into_bytes()))
        );
        assert_eq!(signature(b"Jefe", 0, b"").len(), "t=0,v1=".len() + 64);
    }
}
