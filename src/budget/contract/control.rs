//! The contract's cases about what the control plane asks of the books: an
//! operator's adjustment (a refund or a credit to a key and its org, booked
//! as an `adjustment` ledger entry, once per exec id), and the list of open
//! holds.

use std::time::Duration;

use chrono::TimeDelta;

use super::*;
use crate::budget::Books;
use crate::budget::{AdjustOutcome, Adjustment, OpenHold};

fn adjustment(key: &Scope, org: Option<&Scope>, amount: UsdMicrosDelta, note: &str) -> Adjustment {
    Adjustment {
        exec_id: Uuid::now_v7().to_string(),
        key: key.clone(),
        org: org.cloned(),
        amount,
        note: note.to_owned(),
    }
}

async fn adjust(store: &BudgetStore, adjustment: &Adjustment) -> AdjustOutcome {
    store.adjust(adjustment).await.unwrap()
}

/// Reserves and settles one call of `actual` for the key (and org).
async fn spend(store: &BudgetStore, key: &Scope, org: Option<&Scope>, actual: UsdMicros) {
    let req = request(key, org, actual, TTL_SECS);
    assert!(reserve(store, &req).await.is_reserved());
    assert!(settle(store, &req, actual).await.applied);
}

/// An adjustment applied now, in the periods current at `now`.
fn applied_at(
    now: DateTime<Utc>,
    key: &Scope,
    org: Option<&Scope>,
    key_spent: UsdMicros,
) -> AdjustOutcome {
    AdjustOutcome::Applied {
        key_period_id: key.period.id_at(now),
        org_period_id: org.map(|org| org.period.id_at(now)),
        key_spent,
        applied: true,
    }
}

fn adjustments(ledger: &[LedgerEntry]) -> Vec<&LedgerEntry> {
    ledger
        .iter()
        .filter(|entry| entry.status == LedgerStatus::Adjustment)
        .collect()
}

fn row<'a>(rows: &'a [Reconciliation], scope: &Scope) -> &'a Reconciliation {
    rows.iter()
        .find(|row| row.kind == scope.kind && row.id == scope.id)
        .unwrap()
}

/// A refund lowers `spent` of the key and its org (never their reserved
/// parts), gives that headroom back, and is booked with its note.
pub(super) async fn a_refund_moves_key_and_org_down_and_balances(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 10_000, Period::Month);
    let key = scope(ScopeKind::Key, 5_000, Period::Day);
    spend(&store, &key, Some(&org), 800).await;
    let open = request(&key, Some(&org), 300, TTL_SECS);
    assert!(reserve(&store, &open).await.is_reserved());

    let now = f.now().await;
    let refund = adjustment(&key, Some(&org), -500, "provider refunded a failed call");
    assert_eq!(
        adjust(&store, &refund).await,
        applied_at(now, &key, Some(&org), 300)
    );
    assert_eq!(counters(&store, &key).await, (300, 300));
    assert_eq!(counters(&store, &org).await, (300, 300));
    // The refunded 500 is headroom again: 5,000 - 300 spent - 300 held.
    let refill = request(&key, Some(&org), 4_400, TTL_SECS);
    assert!(reserve(&store, &refill).await.is_reserved());

    let ledger = f.ledger().await;
    assert_eq!(
        statuses(&ledger),
        [(LedgerStatus::Ok, 800), (LedgerStatus::Adjustment, -500)]
    );
    assert_eq!(ledger[0].note, None, "a call's entry has no note");
    let entry = &ledger[1];
    assert_eq!(entry.exec_id, refund.exec_id);
    assert_eq!(
        (entry.key.as_str(), entry.org.as_deref()),
        (key.id.as_str(), Some(org.id.as_str()))
    );
    assert_eq!((entry.model.as_str(), entry.usage), ("", Usage::default()));
    assert_eq!(entry.reserved, 0);
    assert_eq!(
        entry.note.as_deref(),
        Some("provider refunded a failed call")
    );
    assert_eq!(LedgerStatus::Adjustment.as_str(), "adjustment");

    let rows = f.reconcile().await;
    for scope in [&key, &org] {
        let row = row(&rows, scope);
        assert_eq!(
            (row.counter, row.ledger, row.open, row.drift()),
            (5_000, 300, 4_700, 0),
            "{row:?}"
        );
    }
}

/// A credit is money the operator says was spent: charged even past the
/// cap, which then denies the next reserve.
pub(super) async fn a_credit_is_charged_even_past_the_cap(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 1_500, Period::Month);
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    spend(&store, &key, Some(&org), 900).await;

    let now = f.now().await;
    let credit = adjustment(&key, Some(&org), 2_000, "billed outside the gateway");
    assert_eq!(
        adjust(&store, &credit).await,
        applied_at(now, &key, Some(&org), 2_900)
    );
    assert_eq!(counters(&store, &key).await, (2_900, 0));
    assert_eq!(counters(&store, &org).await, (2_900, 0));
    assert!(matches!(
        reserve(&store, &request(&key, Some(&org), 1, TTL_SECS)).await,
        ReserveOutcome::Denied(denial) if denial.kind == ScopeKind::Key && denial.remaining == 0
    ));

    // A key without an org, that never spent anything.
    let solo = scope(ScopeKind::Key, 100, Period::Week);
    assert_eq!(
        adjust(&store, &adjustment(&solo, None, 250, "")).await,
        applied_at(now, &solo, None, 250)
    );
    assert_eq!(counters(&store, &solo).await, (250, 0));
    // On Redis the solo key's entry is under a hash tag of its own: booked
    // in the same millisecond as the others, it has no order among them.
    let (solo_entries, others): (Vec<_>, Vec<_>) = f
        .ledger()
        .await
        .into_iter()
        .partition(|entry| entry.key == solo.id);
    assert_eq!(
        statuses(&others),
        [(LedgerStatus::Ok, 900), (LedgerStatus::Adjustment, 2_000)]
    );
    assert_eq!(statuses(&solo_entries), [(LedgerStatus::Adjustment, 250)]);
    assert_eq!(solo_entries[0].org, None);
    assert_eq!(solo_entries[0].note.as_deref(), Some(""));
}

/// A refund larger than a scope has spent in its current period (what it
/// holds for open reservations does not count) is refused whole, naming
/// the scope, the key first; nothing changes, and nothing is remembered:
/// asked again later, it may fit.
pub(super) async fn a_refund_larger_than_spent_is_refused_naming_the_scope(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 100_000, Period::Day);
    let alice = scope(ScopeKind::Key, 10_000, Period::Total);
    let bob = scope(ScopeKind::Key, 10_000, Period::Day);
    spend(&store, &alice, Some(&org), 800).await;
    spend(&store, &bob, Some(&org), 500).await;
    let before = f.now().await;
    let midnight = Period::Day.resets_at(before).unwrap();
    let to_midnight = u64::try_from((midnight - before).num_seconds()).unwrap() + 1;
    let held = request(&alice, Some(&org), 2_000, to_midnight + 3_600);
    assert!(reserve(&store, &held).await.is_reserved());

    let too_much = adjustment(&alice, Some(&org), -900, "too much");
    assert_eq!(
        adjust(&store, &too_much).await,
        AdjustOutcome::Refused {
            kind: ScopeKind::Key,
            id: alice.id.clone(),
            spent: 800,
        }
    );
    assert_eq!(counters(&store, &alice).await, (800, 2_000));
    assert_eq!(counters(&store, &org).await, (1_300, 2_000));
    assert_eq!(f.ledger().await.len(), 2);

    assert_eq!(
        adjust(&store, &adjustment(&alice, Some(&org), -300, "")).await,
        applied_at(before, &alice, Some(&org), 500)
    );
    assert_eq!(counters(&store, &org).await, (1_000, 2_000));

    // A new day for the org; alice's total goes on.
    f.advance(Duration::from_secs(to_midnight)).await;
    let after_midnight = f.now().await;
    let late = adjustment(&alice, Some(&org), -100, "");
    assert_eq!(
        adjust(&store, &late).await,
        AdjustOutcome::Refused {
            kind: ScopeKind::Org,
            id: org.id.clone(),
            spent: 0,
        }
    );
    assert_eq!(counters(&store, &alice).await, (500, 2_000));
    assert_eq!(counters(&store, &org).await, (0, 0));
    assert_eq!(f.ledger().await.len(), 3);

    // Once the org has spent today, the same adjustment fits.
    spend(&store, &bob, Some(&org), 200).await;
    assert_eq!(
        adjust(&store, &late).await,
        applied_at(after_midnight, &alice, Some(&org), 400)
    );
    assert_eq!(counters(&store, &org).await, (100, 0));
    let rows = f.reconcile().await;
    let yesterday = rows
        .iter()
        .find(|row| row.id == org.id && row.period_id == Period::Day.id_at(before))
        .unwrap();
    assert_eq!(
        (yesterday.counter, yesterday.ledger, yesterday.open),
        (3_000, 1_000, 2_000)
    );
}

/// A retried adjustment (the same exec id) changes nothing and answers the
/// first outcome, whatever else it carries; one naming another key is
/// refused. The books, and `tollgate reconcile`, still balance.
pub(super) async fn adjust_retry_changes_nothing_and_returns_the_first_outcome(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 10_000, Period::Month);
    let key = scope(ScopeKind::Key, 5_000, Period::Day);
    let other = scope(ScopeKind::Key, 5_000, Period::Day);
    spend(&store, &key, Some(&org), 1_000).await;

    let now = f.now().await;
    let refund = adjustment(&key, Some(&org), -400, "duplicate charge");
    let first = adjust(&store, &refund).await;
    assert_eq!(first, applied_at(now, &key, Some(&org), 600));
    spend(&store, &key, Some(&org), 200).await;

    let retried = AdjustOutcome::Applied {
        key_period_id: key.period.id_at(now),
        org_period_id: Some(org.period.id_at(now)),
        key_spent: 600,
        applied: false,
    };
    assert_eq!(adjust(&store, &refund).await, retried);
    let changed = Adjustment {
        amount: -100,
        note: "another note".to_owned(),
        ..refund.clone()
    };
    assert_eq!(adjust(&store, &changed).await, retried);
    let forged = Adjustment {
        key: other.clone(),
        ..refund.clone()
    };
    let result = store.adjust(&forged).await;
    assert!(
        matches!(&result, Err(StoreError::OwnershipMismatch { exec_id }) if *exec_id == refund.exec_id),
        "{result:?}"
    );
    assert_eq!(counters(&store, &key).await, (800, 0));
    assert_eq!(counters(&store, &org).await, (800, 0));
    assert_eq!(counters(&store, &other).await, (0, 0));

    let credit = adjustment(&key, Some(&org), 50, "");
    assert!(matches!(
        adjust(&store, &credit).await,
        AdjustOutcome::Applied {
            key_spent: 850,
            applied: true,
            ..
        }
    ));
    assert!(matches!(
        adjust(&store, &credit).await,
        AdjustOutcome::Applied {
            key_spent: 850,
            applied: false,
            ..
        }
    ));
    let ledger = f.ledger().await;
    let booked = adjustments(&ledger);
    assert_eq!(booked.len(), 2, "{ledger:?}");
    assert_eq!(booked[0].note.as_deref(), Some("duplicate charge"));

    let rows = f.reconcile().await;
    assert!(rows.iter().all(|row| row.drift() == 0), "{rows:?}");
    for scope in [&key, &org] {
        let row = row(&rows, scope);
        assert_eq!(
            (row.counter, row.ledger, row.open),
            (850, 850, 0),
            "{row:?}"
        );
    }
}

/// Amounts of 2^53 µUSD or more either way, and credits that would take a
/// counter there, are refused by every store alike, before anything
/// changes; one that lands on 2^53 - 1 goes through.
pub(super) async fn adjustments_past_2_to_the_53_are_refused_alike(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, MAX_USD_MICROS, Period::Total);
    let key = scope(ScopeKind::Key, MAX_USD_MICROS, Period::Total);
    let out_of_range = |adjustment: &Adjustment, result: Result<AdjustOutcome, StoreError>| {
        assert!(
            matches!(&result, Err(StoreError::OutOfRange { exec_id }) if *exec_id == adjustment.exec_id),
            "{result:?}"
        );
    };
    let max = delta(MAX_USD_MICROS);
    for amount in [max + 1, -(max + 1), i64::MAX, i64::MIN] {
        let huge = adjustment(&key, Some(&org), amount, "");
        out_of_range(&huge, store.adjust(&huge).await);
    }
    assert_eq!(counters(&store, &key).await, (0, 0));

    let near = adjustment(&key, Some(&org), max - 10, "");
    assert!(matches!(
        adjust(&store, &near).await,
        AdjustOutcome::Applied { key_spent, .. } if key_spent == MAX_USD_MICROS - 10
    ));
    let held = request(&key, Some(&org), 5, TTL_SECS);
    assert!(reserve(&store, &held).await.is_reserved());
    // 6 would take both counters (spent + reserved) to 2^53.
    let over = adjustment(&key, Some(&org), 6, "");
    out_of_range(&over, store.adjust(&over).await);
    assert_eq!(counters(&store, &key).await, (MAX_USD_MICROS - 10, 5));
    assert_eq!(counters(&store, &org).await, (MAX_USD_MICROS - 10, 5));
    assert_eq!(f.ledger().await.len(), 1);

    let last = adjustment(&key, Some(&org), 5, "");
    assert!(matches!(
        adjust(&store, &last).await,
        AdjustOutcome::Applied { key_spent, .. } if key_spent == MAX_USD_MICROS - 5
    ));
    let all_back = adjustment(&key, Some(&org), -(max - 5), "");
    assert!(matches!(
        adjust(&store, &all_back).await,
        AdjustOutcome::Applied { key_spent: 0, .. }
    ));
    assert_eq!(counters(&store, &key).await, (0, 5));
    assert_eq!(counters(&store, &org).await, (0, 5));
}

/// The open holds are the reservations not yet settled or expired, oldest
/// first (by when they were reserved, not by deadline), at most `limit`,
/// each with the model its call was reserved for.
pub(super) async fn open_holds_lists_open_reservations_oldest_first(f: &impl Fixture) {
    let store = f.store();
    let org = scope(ScopeKind::Org, 100_000, Period::Month);
    let alice = scope(ScopeKind::Key, 10_000, Period::Day);
    let solo = scope(ScopeKind::Key, 10_000, Period::Day);
    let calls = [
        request(&alice, Some(&org), 100, TTL_SECS),
        ReserveRequest {
            model: "claude-haiku-4-5".to_owned(),
            ..request(&solo, None, 200, 600)
        },
        // Reserved after the first, due before it.
        request(&alice, Some(&org), 300, 10),
        ReserveRequest {
            model: "claude-haiku-4-5".to_owned(),
            ..request(&solo, None, 400, TTL_SECS)
        },
    ];
    let mut reserved_between = Vec::new();
    for call in &calls {
        let before = f.now().await;
        assert!(reserve(&store, call).await.is_reserved());
        reserved_between.push((before, f.now().await));
        f.advance(Duration::from_secs(1)).await;
    }
    settle(&store, &calls[1], 150).await;

    let holds = store.open_holds(10).await.unwrap();
    let ids: Vec<&str> = holds.iter().map(|hold| hold.exec_id.as_str()).collect();
    assert_eq!(
        ids,
        [&calls[0].exec_id, &calls[2].exec_id, &calls[3].exec_id],
        "{holds:?}"
    );
    for (hold, i) in holds.iter().zip([0, 2, 3]) {
        let call = &calls[i];
        let (before, after) = reserved_between[i];
        assert!(
            before <= hold.started_at && hold.started_at <= after,
            "{hold:?} reserved between {before} and {after}"
        );
        assert_eq!(
            hold,
            &OpenHold {
                exec_id: call.exec_id.clone(),
                key: call.key.id.clone(),
                org: call.org.as_ref().map(|org| org.id.clone()),
                run: None,
                model: call.model.clone(),
                amount: call.amount,
                started_at: hold.started_at,
                deadline: hold.started_at + TimeDelta::from_std(call.ttl).unwrap(),
            }
        );
    }

    let two = store.open_holds(2).await.unwrap();
    assert_eq!(two, holds[..2]);
    assert!(store.open_holds(0).await.unwrap().is_empty());
}

/// An applied adjustment is remembered as long as a retry of it can
/// arrive, like a closed reservation record, and no longer: past that, the
/// same exec id is a new adjustment.
pub(super) async fn adjustments_are_remembered_for_the_retry_horizon_only(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Total);
    spend(&store, &key, None, 1_000).await;
    let refund = adjustment(&key, None, -100, "");
    let now = f.now().await;
    assert_eq!(
        adjust(&store, &refund).await,
        applied_at(now, &key, None, 900)
    );
    let horizon = DEFAULT_CLOSED_RECORD;

    f.advance(horizon - Duration::from_secs(2)).await;
    f.sweep_expired().await;
    assert!(matches!(
        adjust(&store, &refund).await,
        AdjustOutcome::Applied {
            key_spent: 900,
            applied: false,
            ..
        }
    ));

    f.advance(Duration::from_secs(3)).await;
    f.sweep_expired().await;
    assert!(matches!(
        adjust(&store, &refund).await,
        AdjustOutcome::Applied {
            key_spent: 800,
            applied: true,
            ..
        }
    ));
    assert_eq!(counters(&store, &key).await, (800, 0));
    assert_eq!(adjustments(&f.ledger().await).len(), 2);
}
