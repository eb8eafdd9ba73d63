//! The cases about the queue of spending alerts (`budget::alerts`): an
//! event is queued once per id, ever; what is due is handed out leased;
//! a failed delivery comes back later, a delivered one never.
//!
//! Each fixture's store has a queue of its own (on Redis, under the
//! fixture's own admin tag).

use super::*;
use crate::budget::alerts::{AlertEvent, AlertKind, QueuedAlert};
use crate::budget::AlertQueue;
use crate::money::Threshold;

fn event(scope_id: &str, threshold: &str) -> AlertEvent {
    let threshold = Threshold::parse(threshold).unwrap();
    AlertEvent::new(
        AlertKind::Threshold,
        ScopeKind::Key,
        scope_id,
        Some(&threshold),
        "2026-11-29",
        1_000_000,
        500_000,
        Utc.with_ymd_and_hms(2026, 11, 29, 12, 0, 0).unwrap(),
    )
}

const LEASE: Duration = Duration::from_secs(30);

pub(super) async fn an_alert_is_queued_once_and_delivered_once(f: &impl Fixture) {
    let store = f.store();
    let first = event(&unique("k"), "0.5");
    assert!(store.queue_alert(&first).await.unwrap());
    assert!(!store.queue_alert(&first).await.unwrap());

    let due = store.due_alerts(10, LEASE).await.unwrap();
    assert_eq!(
        due,
        [QueuedAlert {
            id: first.id.clone(),
            body: first.body(),
            attempts: 0
        }]
    );
    // Leased: not handed out again while its sender works on it.
    assert!(store.due_alerts(10, LEASE).await.unwrap().is_empty());

    store.alert_failed(&first.id, Duration::ZERO).await.unwrap();
    let again = store.due_alerts(10, LEASE).await.unwrap();
    assert_eq!(again.len(), 1);
    assert_eq!((again[0].attempts, &again[0].body), (1, &first.body()));

    store.alert_delivered(&first.id).await.unwrap();
    store.alert_failed(&first.id, Duration::ZERO).await.unwrap();
    assert!(store
        .due_alerts(10, Duration::ZERO)
        .await
        .unwrap()
        .is_empty());
    // Its id is remembered: the same crossing seen later is not queued.
    assert!(!store.queue_alert(&first).await.unwrap());
    // Another threshold of the same scope is another event.
    let second = event(&first.scope_id, "0.8");
    assert_ne!(second.id, first.id);
    assert!(store.queue_alert(&second).await.unwrap());
    assert_eq!(store.due_alerts(10, LEASE).await.unwrap().len(), 1);
}

pub(super) async fn a_leased_alert_is_due_again_when_its_lease_runs_out(f: &impl Fixture) {
    let store = f.store();
    let alert = event(&unique("k"), "0.5");
    assert!(store.queue_alert(&alert).await.unwrap());
    assert_eq!(
        store
            .due_alerts(10, Duration::from_secs(1))
            .await
            .unwrap()
            .len(),
        1
    );
    assert!(store.due_alerts(10, LEASE).await.unwrap().is_empty());
    f.advance(Duration::from_millis(1500)).await;
    let due = store.due_alerts(10, LEASE).await.unwrap();
    assert_eq!(due.len(), 1);
    // A lease that ran out is not a failed delivery.
    assert_eq!(due[0].attempts, 0);
    assert!(store.due_alerts(0, LEASE).await.unwrap().is_empty());
}

pub(super) async fn concurrent_queues_of_one_alert_queue_it_once(f: &impl Fixture) {
    let store = f.store();
    let alert = event(&unique("k"), "0.8");
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..8 {
        let (store, alert) = (store.clone(), alert.clone());
        tasks.spawn(async move { store.queue_alert(&alert).await.unwrap() });
    }
    let mut queued = 0;
    while let Some(answer) = tasks.join_next().await {
        queued += usize::from(answer.unwrap());
    }
    assert_eq!(queued, 1);
    assert_eq!(store.due_alerts(10, LEASE).await.unwrap().len(), 1);
}
