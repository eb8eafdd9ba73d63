//! The contract cases of idempotency claims (docs/design.md, "Budget protocol": a client's
//! `Idempotency-Key`): a request repeating one still in flight is refused,
//! one repeating a finished request is reserved and charged as a call of
//! its own, and the gateway's own retries of a claimed reserve still get
//! their first answer.

use super::*;
use crate::budget::Books;

/// A fresh claim, shaped like the gateway's (hex).
fn fresh_claim() -> String {
    Uuid::now_v7().simple().to_string()
}

async fn reserve_claimed(store: &BudgetStore, req: &ReserveRequest, claim: &str) -> ClaimedReserve {
    store.reserve_claimed(req, claim).await.unwrap()
}

fn ran_reserved(outcome: &ClaimedReserve) -> bool {
    matches!(
        outcome,
        ClaimedReserve::Ran(ReserveOutcome::Reserved { .. })
    )
}

pub(super) async fn claimed_request_in_flight_refuses_its_duplicate(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let claim = fresh_claim();
    let first = request(&key, None, 1_000, TTL_SECS);
    let duplicate = request(&key, None, 1_000, TTL_SECS);
    assert!(ran_reserved(&reserve_claimed(&store, &first, &claim).await));

    assert_eq!(
        reserve_claimed(&store, &duplicate, &claim).await,
        ClaimedReserve::Duplicate
    );
    // Nothing was remembered: asking again gets the same refusal.
    assert_eq!(
        reserve_claimed(&store, &duplicate, &claim).await,
        ClaimedReserve::Duplicate
    );
    assert_eq!(counters(&store, &key).await, (0, 1_000), "charged once");
    assert!(matches!(
        store.settle(&settlement(&duplicate, 500)).await,
        Err(StoreError::UnknownReservation(_))
    ));

    // Another claim, or no claim, is another request.
    let other = request(&key, None, 1_000, TTL_SECS);
    assert!(ran_reserved(
        &reserve_claimed(&store, &other, &fresh_claim()).await
    ));
    let plain = request(&key, None, 1_000, TTL_SECS);
    assert!(reserve(&store, &plain).await.is_reserved());
    assert_eq!(counters(&store, &key).await, (0, 3_000));
}

pub(super) async fn claimed_reserve_retry_gets_the_first_answer(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let claim = fresh_claim();
    let req = request(&key, None, 700, TTL_SECS);
    // The gateway retries a timed-out reserve with the same exec id: the
    // first attempt's reservation holds the claim, yet the retry is no
    // duplicate.
    assert!(ran_reserved(&reserve_claimed(&store, &req, &claim).await));
    assert!(ran_reserved(&reserve_claimed(&store, &req, &claim).await));
    assert_eq!(counters(&store, &key).await, (0, 700));

    settle(&store, &req, 500).await;
    assert!(ran_reserved(&reserve_claimed(&store, &req, &claim).await));
    assert_eq!(counters(&store, &key).await, (500, 0));

    // A denied claimed reserve retried gets the same denial.
    let denied = request(&key, None, 600, TTL_SECS);
    let claim = fresh_claim();
    let denial = reserve_claimed(&store, &denied, &claim).await;
    assert!(
        matches!(&denial, ClaimedReserve::Ran(ReserveOutcome::Denied(d)) if d.remaining == 500),
        "{denial:?}"
    );
    assert_eq!(reserve_claimed(&store, &denied, &claim).await, denial);
    assert_eq!(f.open_reservations().await, (0, 0));
}

pub(super) async fn settled_claim_is_reserved_and_charged_again(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let claim = fresh_claim();
    let first = request(&key, None, 1_000, TTL_SECS);
    assert!(ran_reserved(&reserve_claimed(&store, &first, &claim).await));
    settle(&store, &first, 600).await;

    // Finished: the repeat is a call of its own, charged when settled.
    let again = request(&key, None, 1_000, TTL_SECS);
    assert!(ran_reserved(&reserve_claimed(&store, &again, &claim).await));
    assert_eq!(counters(&store, &key).await, (600, 1_000));
    // And while the repeat is in flight, a third is its duplicate.
    let third = request(&key, None, 1_000, TTL_SECS);
    assert_eq!(
        reserve_claimed(&store, &third, &claim).await,
        ClaimedReserve::Duplicate
    );

    settle(&store, &again, 700).await;
    assert_eq!(counters(&store, &key).await, (1_300, 0));
    let ledger = f.ledger().await;
    let exec_ids: Vec<&str> = ledger.iter().map(|e| e.exec_id.as_str()).collect();
    assert_eq!(exec_ids, [first.exec_id.as_str(), again.exec_id.as_str()]);
    assert_eq!(
        statuses(&ledger),
        [(LedgerStatus::Ok, 600), (LedgerStatus::Ok, 700)]
    );
}

pub(super) async fn expired_claim_is_reserved_again(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 10_000, Period::Day);
    let claim = fresh_claim();
    let crashed = request(&key, None, 1_000, 1);
    assert!(ran_reserved(
        &reserve_claimed(&store, &crashed, &claim).await
    ));
    f.advance(Duration::from_secs(2)).await;

    // Past its deadline the first request is over, swept or not.
    let again = request(&key, None, 1_000, TTL_SECS);
    assert!(ran_reserved(&reserve_claimed(&store, &again, &claim).await));
    let third = request(&key, None, 1_000, TTL_SECS);
    assert_eq!(
        reserve_claimed(&store, &third, &claim).await,
        ClaimedReserve::Duplicate
    );
    let charged = expiry_charge(f, 1_000);
    assert_eq!(counters(&store, &key).await, (charged, 1_000));

    // The expired one's late settle neither frees nor takes the claim.
    let late = settle(&store, &crashed, 300).await;
    assert_eq!(late.status, LedgerStatus::Late);
    assert_eq!(
        reserve_claimed(&store, &third, &claim).await,
        ClaimedReserve::Duplicate
    );
    settle(&store, &again, 200).await;
    assert!(ran_reserved(&reserve_claimed(&store, &third, &claim).await));
    assert_eq!(counters(&store, &key).await, (500, 1_000));
}

pub(super) async fn denied_claim_is_evaluated_afresh(f: &impl Fixture) {
    let store = f.store();
    let key = scope(ScopeKind::Key, 1_000, Period::Day);
    let claim = fresh_claim();
    // A denied request was never forwarded: its repeat is no duplicate.
    let denied = request(&key, None, 1_500, TTL_SECS);
    assert!(matches!(
        reserve_claimed(&store, &denied, &claim).await,
        ClaimedReserve::Ran(ReserveOutcome::Denied(_))
    ));
    let smaller = request(&key, None, 800, TTL_SECS);
    assert!(ran_reserved(
        &reserve_claimed(&store, &smaller, &claim).await
    ));
    assert_eq!(counters(&store, &key).await, (0, 800));

    // The denied exec id still gets its own first answer, and the claim
    // now belongs to the reservation in flight.
    assert!(matches!(
        reserve_claimed(&store, &denied, &claim).await,
        ClaimedReserve::Ran(ReserveOutcome::Denied(_))
    ));
    let next = request(&key, None, 100, TTL_SECS);
    assert_eq!(
        reserve_claimed(&store, &next, &claim).await,
        ClaimedReserve::Duplicate
    );
}
