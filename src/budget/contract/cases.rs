//! The cases of the contract suite: each one a piece of the budget protocol
//! (docs/design.md), written against [`BudgetStore`] and a [`Fixture`].

use std::time::Duration;

use chrono::TimeDelta;

use super::*;
use crate::budget::Books;

pub(super) async fn reserve_up_to_the_cap_exactly(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);

    assert!(reserve(&store, &request(&key, None, 600, TTL_SECS))
        .await
        .is_reserved());
    // Exactly what remains still fits.
    assert!(reserve(&store, &request(&key, None, 400, TTL_SECS))
        .await
        .is_reserved());

    let now = f.now().await;
    let denied = reserve(&store, &request(&key, None, 1, TTL_SECS)).await;
    assert_eq!(
        denied,
        ReserveOutcome::Denied(Denial {
            meter: Meter::Usd,
            kind: ScopeKind::Key,
            id: key.id.clone(),
            period: Period::Day,
            cap: 1_000,
            remaining: 0,
            resets_at: Period::Day.resets_at(now),
        })
    );
    let state = state(&store, &key).await;
    assert_eq!((state.spent, state.reserved), (0, 1_000));
    assert_eq!(state.period_id, Period::Day.id_at(now));
    assert_eq!(state.resets_at, Period::Day.resets_at(now));
}

pub(super) async fn one_micro_over_the_remaining_is_denied(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Total);
    assert!(reserve(&store, &request(&key, None, 300, TTL_SECS))
        .await
        .is_reserved());

    match reserve(&store, &request(&key, None, 701, TTL_SECS)).await {
        ReserveOutcome::Denied(denial) => {
            assert_eq!(denial.remaining, 700);
            assert_eq!(denial.resets_at, None, "total never resets");
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(
        counters(&store, &key).await,
        (0, 300),
        "a denial charges nothing"
    );
    assert!(reserve(&store, &request(&key, None, 700, TTL_SECS))
        .await
        .is_reserved());
}

pub(super) async fn settle_below_at_and_above_the_reservation(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let mut remaining = 10_000;
    for (actual, status) in [
        (400, LedgerStatus::Ok),
        (1_000, LedgerStatus::Ok),
        (1_000 + EPSILON, LedgerStatus::Ok),
        (1_000 + EPSILON + 1, LedgerStatus::Overrun),
    ] {
        let req = request(&key, None, 1_000, TTL_SECS);
        assert!(reserve(&store, &req).await.is_reserved());
        remaining -= actual;
        assert_eq!(
            settle(&store, &req, actual).await,
            applied(status, 1_000, actual, remaining),
            "actual {actual}"
        );
    }
    assert_eq!(counters(&store, &key).await, (10_000 - remaining, 0));
    assert_eq!(
        statuses(&f.ledger().await),
        [
            (LedgerStatus::Ok, 400),
            (LedgerStatus::Ok, 1_000),
            (LedgerStatus::Ok, 1_000 + delta(EPSILON)),
            (LedgerStatus::Overrun, 1_000 + delta(EPSILON) + 1),
        ]
    );
}

pub(super) async fn overrun_is_charged_past_the_cap(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, None, 1_000, TTL_SECS);
    assert!(reserve(&store, &req).await.is_reserved());
    assert_eq!(
        settle(&store, &req, 1_500).await,
        applied(LedgerStatus::Overrun, 1_000, 1_500, 0)
    );
    // The money was spent: the counter goes past the cap and stays there.
    assert_eq!(counters(&store, &key).await, (1_500, 0));
    match reserve(&store, &request(&key, None, 1, TTL_SECS)).await {
        ReserveOutcome::Denied(denial) => assert_eq!(denial.remaining, 0),
        other => panic!("expected a denial, got {other:?}"),
    }
}

pub(super) async fn estimated_usage_is_marked_estimated(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let req = request(&key, None, 1_000, TTL_SECS);
    assert!(reserve(&store, &req).await.is_reserved());
    let estimated = Settlement {
        estimated: true,
        ..settlement(&req, 1_200)
    };
    let outcome = store.settle(&estimated).await.unwrap();
    assert_eq!(
        outcome,
        applied(LedgerStatus::Estimated, 1_000, 1_200, 8_800)
    );
    assert_eq!(counters(&store, &key).await, (1_200, 0));
}

pub(super) async fn reserve_retry_charges_once(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, None, 700, TTL_SECS);
    assert!(reserve(&store, &req).await.is_reserved());
    assert!(reserve(&store, &req).await.is_reserved());
    assert_eq!(counters(&store, &key).await, (0, 700));

    settle(&store, &req, 500).await;
    // A retry that arrives after the settle still gets the first answer.
    assert!(reserve(&store, &req).await.is_reserved());
    assert_eq!(counters(&store, &key).await, (500, 0));
    assert_eq!(f.open_reservations().await, (0, 0));
}

pub(super) async fn settle_retry_changes_nothing(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let req = request(&key, None, 1_000, TTL_SECS);
    reserve(&store, &req).await;
    let first = settle(&store, &req, 600).await;
    assert_eq!(first, applied(LedgerStatus::Ok, 1_000, 600, 9_400));

    let retried = SettleOutcome {
        applied: false,
        ..first.clone()
    };
    assert_eq!(settle(&store, &req, 600).await, retried);
    // A retry carrying another amount still returns the first result.
    assert_eq!(settle(&store, &req, 900).await, retried);
    assert_eq!(counters(&store, &key).await, (600, 0));
    assert_eq!(f.ledger().await.len(), 1);
}

pub(super) async fn denied_retry_returns_the_same_denial(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let first = request(&key, None, 800, TTL_SECS);
    let second = request(&key, None, 300, TTL_SECS);
    assert!(reserve(&store, &first).await.is_reserved());
    let denial = reserve(&store, &second).await;
    assert!(matches!(&denial, ReserveOutcome::Denied(d) if d.remaining == 200));

    // Headroom comes back, but the retry is the same request: same answer.
    settle(&store, &first, 0).await;
    assert_eq!(reserve(&store, &second).await, denial);
    assert_eq!(counters(&store, &key).await, (0, 0));
    assert!(matches!(
        store.settle(&settlement(&second, 300)).await,
        Err(StoreError::UnknownReservation(_))
    ));
}

pub(super) async fn ownership_mismatch_changes_nothing(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 10_000, Period::Month);
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let req = request(&key, Some(&org), 500, TTL_SECS);
    reserve(&store, &req).await;

    let genuine = settlement(&req, 400);
    let forgeries = [
        Settlement {
            key: unique("key"),
            ..genuine.clone()
        },
        Settlement {
            org: Some(unique("org")),
            ..genuine.clone()
        },
        Settlement {
            org: None,
            ..genuine.clone()
        },
    ];
    for forged in &forgeries {
        let result = store.settle(forged).await;
        assert!(
            matches!(&result, Err(StoreError::OwnershipMismatch { exec_id }) if *exec_id == req.exec_id),
            "{forged:?}: {result:?}"
        );
    }
    assert_eq!(counters(&store, &key).await, (0, 500));
    assert_eq!(counters(&store, &org).await, (0, 500));
    assert!(f.ledger().await.is_empty());

    // A key without an org cannot be settled as if it had one. (A key
    // belongs to one org, or none, for good: the Redis store keeps a key's
    // counters under its org's hash tag.)
    let solo_key = scope(ScopeKind::Key, 1_000, Period::Day);
    let solo = request(&solo_key, None, 100, TTL_SECS);
    reserve(&store, &solo).await;
    let with_org = Settlement {
        org: Some(org.id.clone()),
        ..settlement(&solo, 100)
    };
    assert!(matches!(
        store.settle(&with_org).await,
        Err(StoreError::OwnershipMismatch { .. })
    ));

    assert_eq!(
        store.settle(&genuine).await.unwrap(),
        applied(LedgerStatus::Ok, 500, 400, 600)
    );
    // A forged retry of a settled reservation is still rejected.
    assert!(matches!(
        store.settle(&forgeries[0]).await,
        Err(StoreError::OwnershipMismatch { .. })
    ));
    assert_eq!(counters(&store, &key).await, (400, 0));
    assert_eq!(counters(&store, &solo_key).await, (0, 100));
}

pub(super) async fn unknown_reservation_is_rejected(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let never_reserved = request(&key, None, 100, TTL_SECS);
    let result = store.settle(&settlement(&never_reserved, 100)).await;
    assert!(
        matches!(&result, Err(StoreError::UnknownReservation(id)) if *id == never_reserved.exec_id),
        "{result:?}"
    );
    assert_eq!(counters(&store, &key).await, (0, 0));
}

pub(super) async fn rollover_gives_fresh_headroom_and_settles_into_the_old_period(
    f: &impl Fixture,
) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let before = f.now().await;
    let midnight = Period::Day.resets_at(before).unwrap();
    let to_midnight = u64::try_from((midnight - before).num_seconds()).unwrap() + 1;

    let old = request(&key, None, 800, to_midnight + 3_600);
    assert!(reserve(&store, &old).await.is_reserved());
    f.advance(Duration::from_secs(to_midnight)).await;

    let today = state(&store, &key).await;
    assert_eq!(today.period_id, Period::Day.id_at(midnight));
    assert_ne!(today.period_id, Period::Day.id_at(before));
    assert_eq!((today.spent, today.reserved), (0, 0));
    assert_eq!(today.resets_at, Some(midnight + TimeDelta::days(1)));
    assert!(reserve(&store, &request(&key, None, 1_000, TTL_SECS))
        .await
        .is_reserved());

    // Yesterday's reservation settles into yesterday's counter.
    assert_eq!(
        settle(&store, &old, 500).await,
        applied(LedgerStatus::Ok, 800, 500, 500)
    );
    assert_eq!(counters(&store, &key).await, (0, 1_000));
    let yesterday = f
        .reconcile()
        .await
        .into_iter()
        .find(|row| row.id == key.id && row.period_id == Period::Day.id_at(before))
        .unwrap();
    assert_eq!(
        (yesterday.counter, yesterday.ledger, yesterday.open),
        (500, 500, 0)
    );
}

pub(super) async fn tighter_of_key_and_org_denies(f: &impl Fixture) {
    let store = f.store();
    let now = f.now().await;
    let org = scope(ScopeKind::Org, 1_500, Period::Month);
    let alice = scope(ScopeKind::Key, 1_000, Period::Day);
    let bob = scope(ScopeKind::Key, 1_000, Period::Day);

    let first = request(&alice, Some(&org), 900, TTL_SECS);
    assert!(reserve(&store, &first).await.is_reserved());

    // Bob's own cap allows 700; the org's remaining 600 does not.
    assert_eq!(
        reserve(&store, &request(&bob, Some(&org), 700, TTL_SECS)).await,
        ReserveOutcome::Denied(Denial {
            meter: Meter::Usd,
            kind: ScopeKind::Org,
            id: org.id.clone(),
            period: Period::Month,
            cap: 1_500,
            remaining: 600,
            resets_at: Period::Month.resets_at(now),
        })
    );
    assert_eq!(counters(&store, &bob).await, (0, 0));

    // Both would deny: the key is named, and neither is charged.
    match reserve(&store, &request(&alice, Some(&org), 700, TTL_SECS)).await {
        ReserveOutcome::Denied(denial) => {
            assert_eq!(
                (denial.kind, &denial.id, denial.remaining),
                (ScopeKind::Key, &alice.id, 100)
            );
        }
        other => panic!("expected a denial, got {other:?}"),
    }
    assert_eq!(counters(&store, &alice).await, (0, 900));
    assert_eq!(counters(&store, &org).await, (0, 900));

    let last = request(&bob, Some(&org), 600, TTL_SECS);
    assert!(reserve(&store, &last).await.is_reserved());
    assert_eq!(counters(&store, &org).await, (0, 1_500));

    settle(&store, &first, 850).await;
    settle(&store, &last, 600).await;
    assert_eq!(counters(&store, &org).await, (1_450, 0));
    assert_eq!(counters(&store, &alice).await, (850, 0));
    assert_eq!(counters(&store, &bob).await, (600, 0));
}

pub(super) async fn concurrent_reserves_never_exceed_the_cap(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 10_000, Period::Day);
    let key = scope(ScopeKind::Key, 100, Period::Day);
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let store = store.clone();
            let req = request(&key, Some(&org), 7, TTL_SECS);
            tokio::spawn(async move { store.reserve(&req).await.unwrap() })
        })
        .collect();
    let mut reserved = 0;
    for task in tasks {
        if task.await.unwrap().is_reserved() {
            reserved += 1;
        }
    }
    assert_eq!(reserved, 100 / 7);
    assert_eq!(counters(&store, &key).await, (0, 98));
    assert_eq!(counters(&store, &org).await, (0, 98));
}

pub(super) async fn concurrent_reserve_and_settle_keep_the_books(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 250, Period::Day);
    let keys: Vec<Scope> = (0..3)
        .map(|_| scope(ScopeKind::Key, 100, Period::Day))
        .collect();
    let tasks: Vec<_> = (0..60u64)
        .map(|i| {
            let store = store.clone();
            let req = request(&keys[(i % 3) as usize], Some(&org), 10, TTL_SECS);
            tokio::spawn(async move {
                if store.reserve(&req).await.unwrap().is_reserved() {
                    // Never above the reservation, so headroom only grows.
                    let outcome = store.settle(&settlement(&req, i % 11)).await.unwrap();
                    assert!(outcome.applied);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    let (org_spent, org_reserved) = counters(&store, &org).await;
    assert_eq!(org_reserved, 0);
    assert!(org_spent <= 250, "org spent {org_spent}");
    let mut keys_spent = 0;
    for key in &keys {
        let (spent, reserved) = counters(&store, key).await;
        assert!(spent <= 100 && reserved == 0, "{key:?}: {spent} {reserved}");
        keys_spent += spent;
    }
    assert_eq!(keys_spent, org_spent);
    assert_eq!(f.open_reservations().await, (0, 0));
}

/// The sweep folds the entries past the retention, oldest first, and stops
/// at the first recent one: only the old part of the ledger goes.
pub(super) async fn only_entries_past_the_retention_fold(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 100_000, Period::Total);
    for actual in [100, 200, 300] {
        let req = request(&key, None, 1_000, TTL_SECS);
        reserve(&store, &req).await;
        settle(&store, &req, actual).await;
    }
    // Nothing is old yet: a sweep leaves the ledger whole.
    assert_eq!(f.sweep_expired().await, 0);
    assert_eq!(f.ledger().await.len(), 3);

    f.advance(Duration::from_secs(31 * 86_400)).await;
    for actual in [400, 500] {
        let req = request(&key, None, 1_000, TTL_SECS);
        reserve(&store, &req).await;
        settle(&store, &req, actual).await;
    }
    assert_eq!(f.sweep_expired().await, 0);
    assert_eq!(
        statuses(&f.ledger().await),
        [(LedgerStatus::Ok, 400), (LedgerStatus::Ok, 500)]
    );
    let rows = f.reconcile().await;
    let row = rows.iter().find(|row| row.id == key.id).unwrap();
    assert_eq!(
        (row.counter, row.folded, row.ledger, row.open),
        (1_500, 600, 900, 0),
        "{row:?}"
    );
}

pub(super) async fn old_ledger_entries_fold_into_their_counters(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 10_000, Period::Total);
    let key = scope(ScopeKind::Key, 10_000, Period::Total);
    let done = request(&key, Some(&org), 1_000, TTL_SECS);
    reserve(&store, &done).await;
    settle(&store, &done, 600).await;
    let open = request(&key, Some(&org), 500, 40 * 86_400);
    assert!(reserve(&store, &open).await.is_reserved());

    // Past the 30-day retention: the sweep trims the ledger, and what the
    // trimmed entries charged stays accounted for as folded.
    f.advance(Duration::from_secs(31 * 86_400)).await;
    assert_eq!(f.sweep_expired().await, 0);
    assert!(f.ledger().await.is_empty());
    let rows = f.reconcile().await;
    for scope in [&key, &org] {
        let row = rows.iter().find(|row| row.id == scope.id).unwrap();
        assert_eq!(
            (row.counter, row.folded, row.ledger, row.open),
            (1_100, 600, 0, 500),
            "{row:?}"
        );
    }

    // The reservation still open across the trim settles as usual.
    assert_eq!(
        settle(&store, &open, 450).await,
        applied(LedgerStatus::Ok, 500, 450, 8_950)
    );
    assert_eq!(counters(&store, &key).await, (1_050, 0));
    assert_eq!(statuses(&f.ledger().await), [(LedgerStatus::Ok, 450)]);
}

/// A settle whose actual, or the counter it moves, would reach 2^53 µUSD is
/// refused by every store with the same answer, at once and before
/// anything changes; one that lands exactly on 2^53 - 1 goes through.
pub(super) async fn settles_past_2_to_the_53_are_refused_alike(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, MAX_USD_MICROS, Period::Total);
    let key = scope(ScopeKind::Key, MAX_USD_MICROS, Period::Total);
    let big = request(&key, Some(&org), 1_000, TTL_SECS);
    assert!(reserve(&store, &big).await.is_reserved());
    let out_of_range = |req: &ReserveRequest, result: Result<SettleOutcome, StoreError>| {
        assert!(
            matches!(&result, Err(StoreError::OutOfRange { exec_id }) if *exec_id == req.exec_id),
            "{result:?}"
        );
    };
    for actual in [MAX_USD_MICROS + 1, u64::MAX] {
        let started = std::time::Instant::now();
        out_of_range(&big, store.settle(&settlement(&big, actual)).await);
        assert!(started.elapsed() < Duration::from_secs(1), "retried?");
    }
    assert_eq!(counters(&store, &key).await, (0, 1_000));

    // An overrun that takes the counter close to 2^53 is still exact.
    assert_eq!(
        settle(&store, &big, MAX_USD_MICROS - 10).await,
        applied(LedgerStatus::Overrun, 1_000, MAX_USD_MICROS - 10, 10)
    );
    let next = request(&key, Some(&org), 5, TTL_SECS);
    assert!(reserve(&store, &next).await.is_reserved());
    // 11 would take both counters to 2^53: refused, nothing written.
    out_of_range(&next, store.settle(&settlement(&next, 11)).await);
    assert_eq!(counters(&store, &key).await, (MAX_USD_MICROS - 10, 5));
    assert_eq!(counters(&store, &org).await, (MAX_USD_MICROS - 10, 5));
    assert_eq!(f.ledger().await.len(), 1);
    assert_eq!(
        settle(&store, &next, 10).await,
        applied(LedgerStatus::Ok, 5, 10, 0)
    );
    assert_eq!(counters(&store, &key).await, (MAX_USD_MICROS, 0));
    assert_eq!(counters(&store, &org).await, (MAX_USD_MICROS, 0));

    // Late, the same: the check counts what expiry charged.
    let late = request(&key, Some(&org), 0, 2);
    assert!(reserve(&store, &late).await.is_reserved());
    f.advance(Duration::from_secs(3)).await;
    out_of_range(&late, store.settle(&settlement(&late, 1)).await);
    assert_eq!(
        settle(&store, &late, 0).await,
        applied(LedgerStatus::Late, 0, 0, 0)
    );
    assert_eq!(counters(&store, &key).await, (MAX_USD_MICROS, 0));
}
