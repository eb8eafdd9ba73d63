//! The Redis side of customers and rate limits that the contract suite
//! cannot see: what the sweep's pass over the spend hash deletes (ended
//! rate limit minutes, a forgotten customer's every counter, its marks)
//! and keeps (anything a reservation still holds), the `cust` set, and
//! what a call naming a customer costs in Redis commands.

use super::*;
use crate::budget::caps::customer_scope_id;
use crate::budget::{Cap, Meter, DEFAULT_CUSTOMER_TTL};

const MINUTE_MS: i64 = 60_000;

async fn connect(url: &str, customer_ttl: Duration) -> RedisStore {
    let rules = Rules {
        customer_ttl,
        ..Rules::default()
    };
    RedisStore::connect(url, rules).await.unwrap()
}

/// A key capped over all time: a test shifting the clock by hours never
/// crosses into another of its periods.
fn total_key() -> Scope {
    Scope {
        period: Period::Total,
        ..key_scope(1_000_000)
    }
}

fn tag_of(key: &Scope) -> String {
    format!("key:{}", key.id)
}

/// A call of `key`, for `customer` when given, held against the key's
/// `rpm` and the customer's money (period `period`) and `rpm`.
fn call(key: &Scope, customer: Option<&str>, period: Period, ttl: Duration) -> ReserveRequest {
    let rpm = |kind, id: String| Cap {
        kind,
        id,
        meter: Meter::Requests,
        period: Period::Minute,
        limit: 1_000,
    };
    let mut caps = vec![rpm(ScopeKind::Key, key.id.clone())];
    if let Some(customer) = customer {
        let id = customer_scope_id(&key.id, customer);
        caps.push(Cap {
            kind: ScopeKind::Customer,
            id: id.clone(),
            meter: Meter::Usd,
            period,
            limit: 1_000_000,
        });
        caps.push(rpm(ScopeKind::Customer, id));
    }
    ReserveRequest {
        caps,
        customer: customer.map(str::to_owned),
        ttl,
        ..request(key, 100)
    }
}

/// The spend hash's field names, sorted.
async fn spend_fields(url: &str, key: &Scope) -> Vec<String> {
    let mut redis = raw_connection(url).await;
    let mut fields: Vec<String> = ::redis::cmd("HKEYS")
        .arg(TagKeys::new(&tag_of(key)).spend())
        .query_async(&mut redis)
        .await
        .unwrap();
    fields.sort();
    fields
}

/// The members of the tag's `cust` set.
async fn cust_members(url: &str, key: &Scope) -> Vec<String> {
    let mut redis = raw_connection(url).await;
    ::redis::cmd("ZRANGE")
        .arg(TagKeys::new(&tag_of(key)).cust())
        .arg(0)
        .arg(-1)
        .query_async(&mut redis)
        .await
        .unwrap()
}

fn with<'a>(fields: &'a [String], part: &str) -> Vec<&'a str> {
    fields
        .iter()
        .map(String::as_str)
        .filter(|field| field.contains(part))
        .collect()
}

async fn sweep(store: &RedisStore, key: &Scope) {
    store.sweep_tags(&[tag_of(key)]).await.unwrap();
}

async fn customer_ids(store: &RedisStore, key: &Scope) -> Vec<String> {
    store
        .customers(&key.id, None, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|seen| seen.id)
        .collect()
}

#[tokio::test]
async fn a_rate_limit_minute_is_forgotten_two_minutes_on_unless_a_call_holds_it() {
    let url = shared_url();
    let store = connect(url, DEFAULT_CUSTOMER_TTL).await;
    let key = total_key();
    let settled = call(&key, Some("c1"), Period::Total, Duration::from_secs(60));
    assert!(store.reserve(&settled).await.unwrap().is_reserved());
    store.settle(&settlement(&settled, 50)).await.unwrap();
    // The next minute, a call stays open for an hour.
    store.shift_clock(MINUTE_MS);
    let open = call(&key, Some("c1"), Period::Total, Duration::from_secs(3_600));
    assert!(store.reserve(&open).await.unwrap().is_reserved());
    // The minute ids (`YYYY-MM-DDTHHMM`) of the rate limits' counters.
    let minutes = |fields: &[String]| -> usize {
        let mut minutes: Vec<&str> = with(fields, "/requests")
            .into_iter()
            .map(|field| {
                let at = field.find("/requests").unwrap();
                &field[at - 15..at]
            })
            .collect();
        minutes.sort();
        minutes.dedup();
        minutes.len()
    };
    let before = spend_fields(url, &key).await;
    // Two minutes, each with the key's and the customer's counter and
    // reserved part.
    assert_eq!(with(&before, "/requests").len(), 8, "{before:?}");
    assert_eq!(minutes(&before), 2);

    // Still within two minutes of the first: kept.
    store.shift_clock(MINUTE_MS);
    sweep(&store, &key).await;
    assert_eq!(with(&spend_fields(url, &key).await, "/requests").len(), 8);

    // Past them: the settled minute goes, the held one stays, and the
    // money counters stay whatever their age.
    store.shift_clock(3 * MINUTE_MS);
    sweep(&store, &key).await;
    let after = spend_fields(url, &key).await;
    assert_eq!(with(&after, "/requests").len(), 4, "{after:?}");
    assert_eq!(minutes(&after), 1);
    assert!(after.contains(&format!(
        "customer:{}:total",
        customer_scope_id(&key.id, "c1")
    )));
    assert_eq!(
        with(&after, &format!("key:{}:total", key.id)),
        [
            format!("key:{}:total", key.id),
            format!("key:{}:total:r", key.id)
        ]
    );

    // Once settled, the next pass (at most a minute later) takes it.
    store.settle(&settlement(&open, 50)).await.unwrap();
    store.shift_clock(MINUTE_MS + 1_000);
    sweep(&store, &key).await;
    let last = spend_fields(url, &key).await;
    assert!(with(&last, "/requests").is_empty(), "{last:?}");
    assert_eq!(customer_ids(&store, &key).await, ["c1"]);
}

#[tokio::test]
async fn a_customer_is_kept_while_a_call_of_it_is_open() {
    let url = shared_url();
    let ttl = Duration::from_secs(600);
    let store = connect(url, ttl).await;
    let key = total_key();
    let open = call(
        &key,
        Some("slow"),
        Period::Total,
        Duration::from_secs(3_600),
    );
    assert!(store.reserve(&open).await.unwrap().is_reserved());

    // Past the customer TTL, but the call holds part of its counters.
    store.shift_clock(20 * MINUTE_MS);
    sweep(&store, &key).await;
    assert_eq!(customer_ids(&store, &key).await, ["slow"]);
    store.settle(&settlement(&open, 70)).await.unwrap();
    // A settle is no call: the customer's last call stays where it was,
    // and it is forgotten once its call's deadline has passed.
    store.shift_clock(45 * MINUTE_MS);
    sweep(&store, &key).await;
    assert!(customer_ids(&store, &key).await.is_empty());
    let fields = spend_fields(url, &key).await;
    for part in ["customer:", "seen:", "gone:"] {
        assert!(with(&fields, part).is_empty(), "{part} in {fields:?}");
    }
    assert!(cust_members(url, &key).await.is_empty());
    // The key keeps its books.
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (70, 0));
}

#[tokio::test]
async fn a_forgotten_customer_loses_its_counters_of_every_period() {
    let url = shared_url();
    let ttl = Duration::from_secs(3 * 86_400);
    let store = connect(url, ttl).await;
    let key = total_key();
    // Three days of calls, each day's money counted under its own day.
    for _ in 0..3 {
        let req = call(&key, Some("daily"), Period::Day, Duration::from_secs(60));
        assert!(store.reserve(&req).await.unwrap().is_reserved());
        store.settle(&settlement(&req, 40)).await.unwrap();
        store.shift_clock(86_400_000);
    }
    let stays = call(&key, Some("stays"), Period::Day, Duration::from_secs(60));
    assert!(store.reserve(&stays).await.unwrap().is_reserved());
    store.settle(&settlement(&stays, 40)).await.unwrap();
    let daily = customer_scope_id(&key.id, "daily");
    sweep(&store, &key).await;
    let before = spend_fields(url, &key).await;
    // Three days of money, counter and reserved part (the minutes are gone).
    assert_eq!(
        with(&before, &format!("customer:{daily}:")).len(),
        6,
        "{before:?}"
    );

    store.shift_clock(2 * 86_400_000 + 1_000);
    sweep(&store, &key).await;
    assert_eq!(customer_ids(&store, &key).await, ["stays"]);
    let after = spend_fields(url, &key).await;
    assert!(with(&after, &format!(":{daily}")).is_empty(), "{after:?}");
    assert_eq!(with(&after, "seen:").len(), 1, "{after:?}");
    assert!(with(&after, "gone:").is_empty(), "{after:?}");
    assert_eq!(
        cust_members(url, &key).await,
        [customer_scope_id(&key.id, "stays")]
    );
    // Called again, it starts from nothing.
    let back = call(&key, Some("daily"), Period::Day, Duration::from_secs(60));
    assert!(store.reserve(&back).await.unwrap().is_reserved());
    let state = store
        .scope_state(&Scope {
            kind: ScopeKind::Customer,
            id: daily,
            cap: 1_000_000,
            period: Period::Day,
        })
        .await
        .unwrap();
    assert_eq!((state.spent, state.reserved), (0, 100));
}

#[tokio::test]
async fn a_customer_id_the_scripts_cannot_take_is_refused() {
    let store = connect(shared_url(), DEFAULT_CUSTOMER_TTL).await;
    let key = key_scope(1_000);
    for bad in ["", "a|b", "a#b", "a/b", &"x".repeat(129)] {
        let req = ReserveRequest {
            customer: Some(bad.to_owned()),
            ..request(&key, 100)
        };
        assert!(
            matches!(store.reserve(&req).await, Err(StoreError::Refused(_))),
            "{bad:?}"
        );
    }
}

/// The calls of the commands a reserve and a settle make, lazy sweep
/// aside (it runs at most once a second per tag).
async fn call_commands(url: &str) -> u64 {
    let mut total = 0;
    for command in [
        "evalsha", "hmget", "hget", "hset", "hincrby", "hdel", "xadd", "zadd", "zrem", "rpush",
    ] {
        total += command_calls(url, command).await;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_naming_a_known_customer_costs_no_more_commands() {
    let server = RedisServer::start();
    let url = server.url();
    let store = connect(&url, DEFAULT_CUSTOMER_TTL).await;
    let key = total_key();
    let ttl = Duration::from_secs(60);
    // Warm: the tag marked, the scripts loaded, the customer known.
    for customer in [None, Some("known")] {
        let req = call(&key, customer, Period::Total, ttl);
        assert!(store.reserve(&req).await.unwrap().is_reserved());
        store.settle(&settlement(&req, 50)).await.unwrap();
    }
    let mut cost = Vec::new();
    for customer in [None, Some("known"), Some("new")] {
        let before = call_commands(&url).await;
        let req = call(&key, customer, Period::Total, ttl);
        assert!(store.reserve(&req).await.unwrap().is_reserved());
        store.settle(&settlement(&req, 50)).await.unwrap();
        cost.push(call_commands(&url).await - before);
    }
    // The customer's money counter is one more HINCRBY of its aggregate
    // row apart: none. A new customer's member of `cust` is one ZADD.
    assert_eq!(cost[1], cost[0], "{cost:?}");
    assert_eq!(cost[2], cost[0] + 1, "{cost:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pass_of_many_pages_forgets_a_customer_whose_counters_it_passed_already() {
    let url = shared_url();
    let ttl = Duration::from_secs(3 * 86_400);
    let store = connect(url, ttl).await;
    let key = total_key();
    for _ in 0..3 {
        let req = call(&key, Some("daily"), Period::Day, Duration::from_secs(60));
        assert!(store.reserve(&req).await.unwrap().is_reserved());
        store.settle(&settlement(&req, 40)).await.unwrap();
        store.shift_clock(86_400_000);
    }
    // Counters a pass meets over several pages, of no customer it forgets
    // (left by a late settle after their customer was forgotten): kept.
    let mut redis = raw_connection(url).await;
    let spend = TagKeys::new(&tag_of(&key)).spend().to_owned();
    for chunk in 0..5 {
        let mut hset = ::redis::cmd("HSET");
        hset.arg(&spend);
        for i in 0..1_000 {
            hset.arg(format!("customer:{}/left-{chunk}-{i}:total", key.id))
                .arg("0");
        }
        let _: () = hset.query_async(&mut redis).await.unwrap();
    }
    store.shift_clock(3 * 86_400_000);
    sweep(&store, &key).await;
    assert!(customer_ids(&store, &key).await.is_empty());
    let after = spend_fields(url, &key).await;
    let daily = customer_scope_id(&key.id, "daily");
    assert!(
        with(&after, &format!(":{daily}")).is_empty(),
        "{:?}",
        with(&after, "daily")
    );
    assert!(with(&after, "gone:").is_empty());
    assert_eq!(with(&after, "/left-").len(), 5_000);
    assert!(with(&after, "/requests").is_empty());
    // The pass that forgot it, the one that met what that pass had
    // passed, and the one that let go of its mark, one after the other.
    let pass: String = ::redis::cmd("HGET")
        .arg(&spend)
        .arg("pass")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(pass.starts_with("3 - "), "{pass}");
}

#[tokio::test]
async fn a_late_settle_after_its_customer_is_forgotten_moves_its_counters_only() {
    let url = shared_url();
    let ttl = Duration::from_secs(600);
    let store = connect(url, ttl).await;
    let key = total_key();
    let lost = call(&key, Some("gone"), Period::Total, Duration::from_secs(60));
    assert!(store.reserve(&lost).await.unwrap().is_reserved());
    // Expired (charged its 100), then forgotten, in one sweep.
    store.shift_clock(11 * MINUTE_MS);
    sweep(&store, &key).await;
    assert!(customer_ids(&store, &key).await.is_empty());
    let scope = Scope {
        kind: ScopeKind::Customer,
        id: customer_scope_id(&key.id, "gone"),
        cap: 1_000_000,
        period: Period::Total,
    };
    let state = store.scope_state(&scope).await.unwrap();
    assert_eq!((state.spent, state.reserved), (0, 0));
    // A late settle below the charge gives back nothing it does not hold;
    // one above it charges the difference; neither remembers the customer.
    let outcome = store.settle(&settlement(&lost, 130)).await.unwrap();
    assert_eq!(outcome.status, LedgerStatus::Late);
    let state = store.scope_state(&scope).await.unwrap();
    assert_eq!((state.spent, state.reserved), (30, 0));
    assert!(customer_ids(&store, &key).await.is_empty());
    assert!(cust_members(url, &key).await.is_empty());
    let ledger = store.ledger(&tag_of(&key)).await.unwrap();
    let customers: Vec<Option<&str>> = ledger
        .iter()
        .map(|entry| entry.customer.as_deref())
        .collect();
    assert_eq!(customers, [Some("gone"), Some("gone")]);
    // Later passes leave it be, as the other stores do.
    store.shift_clock(2 * MINUTE_MS);
    sweep(&store, &key).await;
    let state = store.scope_state(&scope).await.unwrap();
    assert_eq!((state.spent, state.reserved), (30, 0));
}
