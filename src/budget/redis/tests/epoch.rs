//! `tg:meta` and the store epoch: created once, adopted by every store,
//! refused when newer, migrated when older; a Redis restarted empty fails
//! closed, charging nothing and never reading the admin records it lost as
//! none, until an operator accepts a new epoch, while reads racing the
//! creation of `tg:meta` do not.

use super::*;
use crate::budget::Records;

async fn connect(url: &str) -> RedisStore {
    RedisStore::connect(url, Rules::default()).await.unwrap()
}

/// A tg:meta field, '' when absent.
fn meta_field(server: &RedisServer, name: &str) -> String {
    redis_cli(server.port, &["hget", meta::META_KEY, name])
        .trim()
        .to_owned()
}

fn assert_unavailable<T: std::fmt::Debug>(result: &Result<T, StoreError>, says: &str) {
    assert!(
        matches!(result, Err(StoreError::Unavailable(message)) if message.contains(says)),
        "{result:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_store_creates_tg_meta_and_the_others_adopt_its_epoch() {
    let server = RedisServer::start();
    assert_eq!(meta_field(&server, "epoch"), "");
    // Started together: one epoch between them.
    let url = server.url();
    let (a, b) = tokio::join!(connect(&url), connect(&url));
    let (first, second) = tokio::join!(a.epoch(), b.epoch());
    let epoch = meta_field(&server, "epoch");
    assert_eq!(&*first.unwrap(), epoch);
    assert_eq!(&*second.unwrap(), epoch);
    assert_eq!(meta_field(&server, "layout"), LAYOUT.to_string());
    assert!(meta_field(&server, "created_at").parse::<i64>().unwrap() > 0);
    assert_eq!(meta_field(&server, "accepted_at"), "");

    let later = connect(&server.url()).await;
    later.ping().await.unwrap();
    assert_eq!(&*later.epoch().await.unwrap(), epoch);

    // A tag's first reserve marks its books; they serve as usual.
    let key = key_scope(1_000);
    assert!(a.reserve(&request(&key, 100)).await.unwrap().is_reserved());
    assert!(b.reserve(&request(&key, 100)).await.unwrap().is_reserved());
    let spend = TagKeys::new(&tag_for(None, &key.id)).spend().to_owned();
    assert_eq!(
        redis_cli(server.port, &["hget", &spend, "epoch"]).trim(),
        epoch
    );
    assert_eq!(b.scope_state(&key).await.unwrap().reserved, 200);
    assert!(!a.failed_closed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newer_layout_is_refused_and_an_older_one_migrated() {
    let server = RedisServer::start();
    let newer = (LAYOUT + 1).to_string();
    let set = [
        "hset",
        meta::META_KEY,
        "layout",
        &newer,
        "epoch",
        "e-newer",
        "created_at",
        "1",
    ];
    redis_cli(server.port, &set);
    let store = connect(&server.url()).await;
    let says = format!("layout {newer} is newer than this binary's {LAYOUT}");
    assert_unavailable(&store.ping().await, &says);
    let key = key_scope(1_000);
    let req = request(&key, 100);
    assert_unavailable(&store.reserve(&req).await, &says);
    assert_unavailable(&store.settle(&settlement(&req, 10)).await, &says);
    assert_unavailable(&store.scope_state(&key).await, &says);
    assert!(store.failed_closed());
    assert_eq!(
        redis_cli(server.port, &["keys", "tg:{*"]).trim(),
        "",
        "a refused store wrote something"
    );
    assert_eq!(meta_field(&server, "layout"), newer);
    assert!(store.accept_epoch().await.is_err());
    assert_eq!(meta_field(&server, "epoch"), "e-newer");

    // A store of layout 1 (before the `done` lists) is migrated in place,
    // keeping its epoch.
    let one = RedisServer::start();
    redis_cli(
        one.port,
        &[
            "hset",
            meta::META_KEY,
            "layout",
            "1",
            "epoch",
            "e-one",
            "created_at",
            "5",
        ],
    );
    let store = connect(&one.url()).await;
    store.ping().await.unwrap();
    assert_eq!(meta_field(&one, "layout"), LAYOUT.to_string());
    assert_eq!(meta_field(&one, "epoch"), "e-one");

    // A store from before `layout` existed: layout 0, migrated in place,
    // keeping its epoch.
    let old = RedisServer::start();
    redis_cli(
        old.port,
        &["hset", meta::META_KEY, "epoch", "e-old", "created_at", "5"],
    );
    let store = connect(&old.url()).await;
    store.ping().await.unwrap();
    assert_eq!(meta_field(&old, "layout"), LAYOUT.to_string());
    assert_eq!(meta_field(&old, "epoch"), "e-old");
    assert_eq!(&*store.epoch().await.unwrap(), "e-old");
    assert!(store
        .reserve(&request(&key, 100))
        .await
        .unwrap()
        .is_reserved());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_restarted_empty_fails_closed_until_a_new_epoch_is_accepted() {
    let mut server = RedisServer::start();
    let store = connect(&server.url()).await;
    let key = key_scope(1_000);
    let first = request(&key, 100);
    assert!(store.reserve(&first).await.unwrap().is_reserved());
    let lost = store.epoch().await.unwrap();

    server.restart();
    let says = format!("the Redis store epoch {lost} vanished");
    // Also a retry of the reserve that landed before: its books are gone.
    for req in [request(&key, 100), first.clone()] {
        assert_unavailable(&store.reserve(&req).await, &says);
    }
    assert_unavailable(
        &store.reserve_claimed(&request(&key, 100), "ab12").await,
        &says,
    );
    assert_unavailable(&store.ping().await, &says);
    assert_unavailable(&store.scope_state(&key).await, &says);
    assert_unavailable(&store.sweep_expired().await, &says);
    assert!(store.failed_closed());
    // Nothing charged, nothing created: not even tg:meta.
    assert_eq!(redis_cli(server.port, &["keys", "*"]).trim(), "");
    // A settle runs, and finds nothing to settle.
    assert!(matches!(
        store.settle(&settlement(&first, 100)).await,
        Err(StoreError::UnknownReservation(_))
    ));

    // A store that never saw an epoch creates one (a new deployment); it is
    // not the one lost, nor accepted: the first store stays closed.
    let newcomer = connect(&server.url()).await;
    newcomer.ping().await.unwrap();
    assert_ne!(meta_field(&server, "epoch"), &*lost);
    assert_unavailable(&store.reserve(&request(&key, 100)).await, &says);
    assert_unavailable(&store.ping().await, &says);

    // An operator accepts a fresh epoch: the store adopts it on its next
    // call, and the counters start again from zero.
    let accepted = connect(&server.url()).await.accept_epoch().await.unwrap();
    assert_eq!(meta_field(&server, "epoch"), accepted.epoch);
    assert!(accepted.previous.is_some());
    assert!(!meta_field(&server, "accepted_at").is_empty());
    assert!(accepted.to_string().contains(&accepted.epoch));
    let req = request(&key, 300);
    assert!(store.reserve(&req).await.unwrap().is_reserved());
    assert!(!store.failed_closed());
    assert_eq!(&*store.epoch().await.unwrap(), accepted.epoch);
    store.ping().await.unwrap();
    let outcome = store.settle(&settlement(&req, 250)).await.unwrap();
    assert!(outcome.applied);
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (250, 0));
    // The newcomer saw an epoch that was not accepted: it gives way to
    // the accepted one too.
    assert!(newcomer
        .reserve(&request(&key, 100))
        .await
        .unwrap()
        .is_reserved());
    assert_eq!(&*newcomer.epoch().await.unwrap(), accepted.epoch);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_saw_no_epoch_adopts_an_accepted_one() {
    let server = RedisServer::start();
    let accepted = connect(&server.url()).await.accept_epoch().await.unwrap();
    assert_eq!(accepted.previous, None);
    assert_eq!(meta_field(&server, "layout"), LAYOUT.to_string());
    let store = connect(&server.url()).await;
    let key = key_scope(1_000);
    assert!(store
        .reserve(&request(&key, 100))
        .await
        .unwrap()
        .is_reserved());
    assert_eq!(&*store.epoch().await.unwrap(), accepted.epoch);
}

/// At start-up `/readyz`, the sweep and the first reserves read `tg:meta`
/// at once: a read answered before one of them created it, but looked at
/// after, must not take the epoch for lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_racing_the_creation_of_tg_meta_lose_no_epoch() {
    let server = RedisServer::start();
    for _ in 0..50 {
        redis_cli(server.port, &["del", meta::META_KEY]);
        let store = connect(&server.url()).await;
        let calls: Vec<_> = (0..4)
            .map(|i| {
                let store = store.clone();
                tokio::spawn(async move {
                    if i % 2 == 0 {
                        store.ping().await
                    } else {
                        store.sweep_expired().await.map(drop)
                    }
                })
            })
            .collect();
        for call in calls {
            call.await.unwrap().unwrap();
        }
        assert!(!store.failed_closed());
        assert_eq!(&*store.epoch().await.unwrap(), meta_field(&server, "epoch"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_records_fail_closed_in_a_redis_restarted_empty() {
    let mut server = RedisServer::start();
    let store = connect(&server.url()).await;
    let create = RecordWrite {
        kind: RecordKind::Org,
        id: "acme".to_owned(),
        expect: None,
        body: "{}".to_owned(),
        audit: "{}".to_owned(),
    };
    let first = WriteOutcome::Written {
        revision: 1,
        version: 1,
    };
    assert_eq!(store.write_record(&create).await.unwrap(), first);
    let lost = store.epoch().await.unwrap();

    // Not a store without keys and orgs: one that lost them.
    server.restart();
    let says = format!("the Redis store epoch {lost} vanished");
    assert_unavailable(&store.records_version().await, &says);
    assert_unavailable(&store.records().await, &says);
    assert_unavailable(&store.audit(None, 10).await, &says);
    assert_unavailable(&store.write_record(&create).await, &says);
    assert_eq!(redis_cli(server.port, &["keys", "*"]).trim(), "");

    // Once an operator accepts a fresh epoch, the records start again.
    connect(&server.url()).await.accept_epoch().await.unwrap();
    assert_eq!(store.records_version().await.unwrap(), 0);
    assert_eq!(store.write_record(&create).await.unwrap(), first);
}
