//! The contract's cases about reservations never settled by their deadline
//! (a crashed gateway): what expiry charges under each `on_expiry` policy,
//! and how a settle that arrives afterwards (`late`) replaces that charge
//! with the call's actual cost.

use std::time::Duration;

use super::*;
use crate::budget::Books;
use crate::budget::Reports;
use crate::budget::SpendQuery;

/// The default policy: an expired reservation keeps its amount charged
/// (the provider may have billed the call); a late settle moves the
/// counters by what the call cost less that, down as well as up.
pub(super) async fn expiry_charges_the_hold_then_a_late_settle_corrects_it(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 100_000, Period::Month);
    let key = scope(ScopeKind::Key, 2_000, Period::Day);
    let crashed = request(&key, Some(&org), 1_000, 2);
    assert!(reserve(&store, &crashed).await.is_reserved());
    f.advance(Duration::from_secs(3)).await;

    // The next reserve expires the crashed call's reservation first: its
    // amount moves from reserved to spent, and stays out of reach.
    let next = request(&key, Some(&org), 500, TTL_SECS);
    assert!(reserve(&store, &next).await.is_reserved());
    let ledger = f.ledger().await;
    assert_eq!(ledger.len(), 1);
    let expired = &ledger[0];
    assert_eq!(expired.exec_id, crashed.exec_id);
    assert_eq!(
        (expired.key.as_str(), expired.org.as_deref()),
        (key.id.as_str(), Some(org.id.as_str()))
    );
    assert_eq!(expired.status, LedgerStatus::Expired);
    assert_eq!((expired.reserved, expired.actual), (1_000, 1_000));
    assert_eq!(expired.usage, Usage::default());
    assert_eq!(
        expired.model, crashed.model,
        "booked against the reserved model"
    );
    assert_eq!(counters(&store, &key).await, (1_000, 500));
    assert_eq!(counters(&store, &org).await, (1_000, 500));
    assert!(matches!(
        reserve(&store, &request(&key, Some(&org), 501, TTL_SECS)).await,
        ReserveOutcome::Denied(denial) if denial.remaining == 500
    ));

    // The call cost 700 after all: 300 of the charge comes back, once.
    let late = settle(&store, &crashed, 700).await;
    assert_eq!(late, applied(LedgerStatus::Late, 1_000, 700, 800));
    assert_eq!(
        settle(&store, &crashed, 700).await,
        SettleOutcome {
            applied: false,
            ..late
        }
    );
    assert_eq!(counters(&store, &key).await, (700, 500));
    assert_eq!(counters(&store, &org).await, (700, 500));

    // Another crashed call cost more than it held: the rest is charged.
    let dearer = request(&key, Some(&org), 300, 2);
    assert!(reserve(&store, &dearer).await.is_reserved());
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(f.sweep_expired().await, 1);
    assert_eq!(counters(&store, &key).await, (1_000, 500));
    assert_eq!(
        settle(&store, &dearer, 450).await,
        applied(LedgerStatus::Late, 300, 450, 350)
    );
    assert_eq!(counters(&store, &key).await, (1_150, 500));
    assert_eq!(counters(&store, &org).await, (1_150, 500));
    assert_eq!(
        statuses(&f.ledger().await),
        [
            (LedgerStatus::Expired, 1_000),
            (LedgerStatus::Late, -300),
            (LedgerStatus::Expired, 300),
            (LedgerStatus::Late, 150),
        ]
    );
}

/// An operator refunds part of an expired call's charge, then its settle
/// comes late and cheaper: it gives back only what the refund left in
/// `spent`, and books what it gave back, so nothing is returned twice and
/// the books balance.
pub(super) async fn a_late_settle_gives_back_only_what_a_refund_left(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 100_000, Period::Month);
    let key = scope(ScopeKind::Key, 2_000, Period::Day);
    let crashed = request(&key, Some(&org), 1_000, 2);
    assert!(reserve(&store, &crashed).await.is_reserved());
    f.advance(Duration::from_secs(3)).await;
    assert_eq!(f.sweep_expired().await, 1);
    assert_eq!(counters(&store, &key).await, (1_000, 0));

    let refund = crate::budget::Adjustment {
        exec_id: Uuid::now_v7().to_string(),
        key: key.clone(),
        org: Some(org.clone()),
        amount: -600,
        note: "not billed".to_owned(),
    };
    assert!(matches!(
        store.adjust(&refund).await.unwrap(),
        crate::budget::AdjustOutcome::Applied { .. }
    ));
    assert_eq!(counters(&store, &key).await, (400, 0));

    // It cost 100: 900 of the charge would come back, 400 is left.
    let late = settle(&store, &crashed, 100).await;
    assert_eq!(late, applied(LedgerStatus::Late, 1_000, 100, 2_000));
    assert_eq!(counters(&store, &key).await, (0, 0));
    assert_eq!(counters(&store, &org).await, (0, 0));
    assert_eq!(
        statuses(&f.ledger().await),
        [
            (LedgerStatus::Expired, 1_000),
            (LedgerStatus::Adjustment, -600),
            (LedgerStatus::Late, -400),
        ]
    );
    // A retry still gives nothing more back.
    assert!(!settle(&store, &crashed, 100).await.applied);
    assert_eq!(counters(&store, &key).await, (0, 0));
}

/// `on_expiry = "release"`: an expired reservation is charged nothing, its
/// headroom comes back, and a late settle charges the call in full.
pub(super) async fn expiry_releases_the_hold_then_a_late_settle_charges_in_full(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let crashed = request(&key, None, 1_000, 2);
    assert!(reserve(&store, &crashed).await.is_reserved());
    f.advance(Duration::from_secs(3)).await;

    // The next reserve expires the crashed call's reservation first.
    let next = request(&key, None, 1_000, TTL_SECS);
    assert!(reserve(&store, &next).await.is_reserved());
    let ledger = f.ledger().await;
    assert_eq!(ledger.len(), 1);
    let expired = &ledger[0];
    assert_eq!(expired.exec_id, crashed.exec_id);
    assert_eq!(expired.key, key.id);
    assert_eq!(expired.status, LedgerStatus::Expired);
    assert_eq!((expired.reserved, expired.actual), (1_000, 0));
    assert_eq!(expired.usage, Usage::default());
    assert_eq!(
        expired.model, crashed.model,
        "booked against the reserved model"
    );
    assert_eq!(counters(&store, &key).await, (0, 1_000));

    // The call did cost money after all: charged in full, as late.
    let late = settle(&store, &crashed, 700).await;
    assert_eq!(late, applied(LedgerStatus::Late, 1_000, 700, 0));
    assert_eq!(
        settle(&store, &crashed, 700).await,
        SettleOutcome {
            applied: false,
            ..late
        }
    );
    assert_eq!(counters(&store, &key).await, (700, 1_000));
    assert_eq!(
        statuses(&f.ledger().await),
        [(LedgerStatus::Expired, 0), (LedgerStatus::Late, 700)]
    );
}

/// No sweep ran: the settle itself finds the reservation past its
/// deadline, expires it (charging its amount) and corrects that charge.
pub(super) async fn settle_after_the_deadline_is_late(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, None, 400, 2);
    reserve(&store, &req).await;
    f.advance(Duration::from_secs(3)).await;

    assert_eq!(
        settle(&store, &req, 300).await,
        applied(LedgerStatus::Late, 400, 300, 700)
    );
    assert_eq!(counters(&store, &key).await, (300, 0));
    let ledger = f.ledger().await;
    assert_eq!(
        statuses(&ledger),
        [(LedgerStatus::Expired, 400), (LedgerStatus::Late, -100)]
    );
    assert_eq!(
        ledger[0].model, req.model,
        "booked against the reserved model"
    );
}

/// A reservation that names no model (as one recorded by a version that
/// did not keep it) is listed and expires with none: its entry and its
/// aggregate row have the model `""`.
pub(super) async fn a_reservation_without_a_model_expires_with_none(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = ReserveRequest {
        model: String::new(),
        ..request(&key, None, 400, 2)
    };
    reserve(&store, &req).await;
    let holds = store.open_holds(10).await.unwrap();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].model, "");

    f.advance(Duration::from_secs(3)).await;
    assert_eq!(f.sweep_expired().await, 1);
    let ledger = f.ledger().await;
    assert_eq!(statuses(&ledger), [(LedgerStatus::Expired, 400)]);
    assert_eq!(ledger[0].model, "");
    let today = f.now().await.date_naive();
    let query = SpendQuery {
        from: today,
        to: today,
        key: None,
        org: None,
    };
    let rows: Vec<(String, u64, i64)> = store
        .spend(&query)
        .await
        .unwrap()
        .into_iter()
        .map(|row| (row.model, row.calls, row.cost_usd_micros))
        .collect();
    assert_eq!(rows, [(String::new(), 1, 400)]);
}

/// The same under `on_expiry = "release"`: the expiry charges nothing and
/// the late settle all of the call.
pub(super) async fn settle_after_the_deadline_is_late_under_release(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, None, 400, 2);
    reserve(&store, &req).await;
    f.advance(Duration::from_secs(3)).await;

    assert_eq!(
        settle(&store, &req, 300).await,
        applied(LedgerStatus::Late, 400, 300, 700)
    );
    assert_eq!(counters(&store, &key).await, (300, 0));
    assert_eq!(
        statuses(&f.ledger().await),
        [(LedgerStatus::Expired, 0), (LedgerStatus::Late, 300)]
    );
}

/// Under either policy.
pub(super) async fn sweep_expires_only_due_reservations(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    for _ in 0..3 {
        reserve(&store, &request(&key, None, 100, 2)).await;
    }
    let lasting = request(&key, None, 100, TTL_SECS);
    reserve(&store, &lasting).await;
    assert_eq!(f.open_reservations().await, (4, 400));

    f.advance(Duration::from_secs(3)).await;
    assert_eq!(f.sweep_expired().await, 3);
    assert_eq!(f.sweep_expired().await, 0);
    assert_eq!(f.open_reservations().await, (1, 100));
    let charged = expiry_charge(f, 100);
    assert_eq!(counters(&store, &key).await, (3 * charged, 100));
    let ledger = f.ledger().await;
    assert_eq!(ledger.len(), 3);
    for entry in &ledger {
        assert_eq!(
            (entry.status, entry.actual),
            (LedgerStatus::Expired, delta(charged))
        );
    }
    assert_eq!(settle(&store, &lasting, 100).await.status, LedgerStatus::Ok);
}

/// Under either policy: an expired record is kept one TTL after its
/// expiry, so a settle the gateway still retries (for two TTLs from
/// before its reserve) finds it and corrects the charge.
pub(super) async fn expired_record_outlives_every_settle_retry(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Total);
    let req = request(&key, None, 1_000, TTL_SECS);
    reserve(&store, &req).await;
    f.advance(Duration::from_secs(TTL_SECS + 1)).await;
    assert_eq!(f.sweep_expired().await, 1);

    // Two TTLs after the reserve, less a little: the record is still there.
    f.advance(Duration::from_secs(TTL_SECS - 3)).await;
    assert_eq!(f.sweep_expired().await, 0);
    let late = settle(&store, &req, 600).await;
    assert_eq!(late, applied(LedgerStatus::Late, 1_000, 600, 9_400));
    assert_eq!(counters(&store, &key).await, (600, 0));
    let charged = delta(expiry_charge(f, 1_000));
    assert_eq!(
        statuses(&f.ledger().await),
        [
            (LedgerStatus::Expired, charged),
            (LedgerStatus::Late, 600 - charged)
        ]
    );
}

/// A settled call's record is kept as long as a retry of it can arrive
/// (the closed-record time), however long its reservation could have
/// lasted, and then forgotten without a trace in the books.
pub(super) async fn closed_records_are_kept_for_the_retry_horizon_only(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Total);
    let hour = 3_600;
    let req = request(&key, None, 1_000, hour);
    reserve(&store, &req).await;
    assert_eq!(
        settle(&store, &req, 700).await,
        applied(LedgerStatus::Ok, 1_000, 700, 9_300)
    );
    let horizon = DEFAULT_CLOSED_RECORD;

    f.advance(horizon - Duration::from_secs(2)).await;
    f.sweep_expired().await;
    let retry = settle(&store, &req, 700).await;
    assert!(!retry.applied, "{retry:?}");

    f.advance(Duration::from_secs(3)).await;
    f.sweep_expired().await;
    match store.settle(&settlement(&req, 700)).await {
        Err(StoreError::UnknownReservation(_)) => {}
        other => panic!("the record outlived the retry horizon: {other:?}"),
    }
    assert_eq!(counters(&store, &key).await, (700, 0));
    assert_eq!(statuses(&f.ledger().await), [(LedgerStatus::Ok, 700)]);
}
