//! Closed records: a settled or denied one is listed in `done` for the
//! closed-record time and forgotten from its head; a settled one keeps
//! only what a retry reads, in its compact form, and a retry still gets
//! the first answer; one that expired first stays in `closed`.

use super::*;

const KEEP: Duration = Duration::from_millis(800);

async fn connect() -> RedisStore {
    let rules = Rules {
        closed_record: KEEP,
        ..Rules::default()
    };
    RedisStore::connect(shared_url(), rules).await.unwrap()
}

/// The keys of a key without an org: its tag is `key:<id>`.
fn keys_of(key: &Scope) -> TagKeys {
    TagKeys::new(&format!("key:{}", key.id))
}

async fn raw_record(keys: &TagKeys, exec_id: &str) -> Option<String> {
    let mut redis = raw_connection(shared_url()).await;
    ::redis::cmd("HGET")
        .arg(keys.res())
        .arg(exec_id)
        .query_async(&mut redis)
        .await
        .unwrap()
}

/// The `done` list and the `closed` members of the tag.
async fn retention(keys: &TagKeys) -> (Vec<String>, Vec<String>) {
    let mut redis = raw_connection(shared_url()).await;
    let done: Vec<String> = ::redis::cmd("LRANGE")
        .arg(&keys.all()[6])
        .arg(0)
        .arg(-1)
        .query_async(&mut redis)
        .await
        .unwrap();
    let closed: Vec<String> = ::redis::cmd("ZRANGE")
        .arg(&keys.all()[3])
        .arg(0)
        .arg(-1)
        .query_async(&mut redis)
        .await
        .unwrap();
    (done, closed)
}

async fn forget(store: &RedisStore, key: &Scope) {
    store
        .sweep_tags(&[format!("key:{}", key.id)])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_settled_call_is_listed_in_done_compact_and_forgotten_after_the_closed_record_time() {
    let store = connect().await;
    let key = key_scope(1_000);
    let keys = keys_of(&key);
    let req = request(&key, 300);
    assert!(store.reserve(&req).await.unwrap().is_reserved());
    let first = store.settle(&settlement(&req, 250)).await.unwrap();

    let raw = raw_record(&keys, &req.exec_id).await.unwrap();
    assert!(
        raw.starts_with(&format!("settled|{}||300|ok|250|", key.id)),
        "{raw}"
    );
    let (done, closed) = retention(&keys).await;
    assert_eq!(done.len(), 1);
    assert!(done[0].ends_with(&format!("|{}", req.exec_id)), "{done:?}");
    assert!(closed.is_empty(), "{closed:?}");

    // A retry reads the compact record: the first answer, applied once.
    let again = store.settle(&settlement(&req, 250)).await.unwrap();
    assert!(!again.applied);
    assert_eq!(
        (
            again.status,
            again.reserved,
            again.actual,
            again.key_remaining
        ),
        (
            first.status,
            first.reserved,
            first.actual,
            first.key_remaining
        )
    );
    // So does a retried reserve, and a settle naming another key is
    // refused as someone else's, read from the compact record too.
    match store.reserve(&req).await.unwrap() {
        ReserveOutcome::Reserved { amount, .. } => assert_eq!(amount, 300),
        other => panic!("{other:?}"),
    }
    let mut forged = settlement(&req, 1);
    forged.key = unique("key");
    store.track_key(&key.id, None);
    store.track_key(&forged.key, None);
    assert!(matches!(
        store.settle(&forged).await,
        Err(StoreError::OwnershipMismatch { .. })
    ));

    // Kept the closed-record time, then forgotten by the sweep.
    forget(&store, &key).await;
    assert!(raw_record(&keys, &req.exec_id).await.is_some());
    tokio::time::sleep(KEEP + Duration::from_millis(300)).await;
    forget(&store, &key).await;
    assert_eq!(raw_record(&keys, &req.exec_id).await, None);
    assert_eq!(retention(&keys).await, (Vec::new(), Vec::new()));
    let state = store.scope_state(&key).await.unwrap();
    assert_eq!((state.spent, state.reserved), (250, 0));
}

#[tokio::test]
async fn a_denial_is_listed_in_done_and_a_late_settle_stays_in_closed() {
    let store = connect().await;
    let key = key_scope(1_000);
    let keys = keys_of(&key);

    let denied = request(&key, 5_000);
    assert!(!store.reserve(&denied).await.unwrap().is_reserved());
    let (done, closed) = retention(&keys).await;
    assert_eq!(done.len(), 1);
    assert!(done[0].ends_with(&format!("|{}", denied.exec_id)));
    assert!(closed.is_empty());

    // Expired first: kept a reservation TTL in `closed`; its late settle
    // keeps it there, for the closed-record time from then.
    let mut late = request(&key, 200);
    late.ttl = Duration::from_millis(200);
    assert!(store.reserve(&late).await.unwrap().is_reserved());
    tokio::time::sleep(Duration::from_millis(300)).await;
    forget(&store, &key).await;
    let (_, closed) = retention(&keys).await;
    assert_eq!(closed, vec![late.exec_id.clone()]);
    let outcome = store.settle(&settlement(&late, 150)).await.unwrap();
    assert_eq!(outcome.status, LedgerStatus::Late);
    let raw = raw_record(&keys, &late.exec_id).await.unwrap();
    assert!(raw.starts_with("settled|"), "{raw}");
    let (done, closed) = retention(&keys).await;
    assert_eq!(closed, vec![late.exec_id.clone()]);
    assert!(!done.iter().any(|entry| entry.ends_with(&late.exec_id)));

    tokio::time::sleep(KEEP + Duration::from_millis(300)).await;
    forget(&store, &key).await;
    assert_eq!(raw_record(&keys, &denied.exec_id).await, None);
    assert_eq!(raw_record(&keys, &late.exec_id).await, None);
    assert_eq!(retention(&keys).await, (Vec::new(), Vec::new()));
}

#[tokio::test]
async fn a_settled_record_of_layout_1_still_answers_its_retry_and_is_forgotten() {
    let store = connect().await;
    let key = key_scope(1_000);
    let keys = keys_of(&key);
    let req = request(&key, 300);
    store.scope_state(&key).await.unwrap();
    // As layout 1 wrote it: JSON, its forgetting in `closed`.
    let record = format!(
        r#"{{"s":"settled","k":"{}","a":"300","st":"ok","act":"250","rem":"700","by":"c-1"}}"#,
        key.id
    );
    let forget_at = Utc::now().timestamp_millis() + i64::try_from(KEEP.as_millis()).unwrap();
    let mut redis = raw_connection(shared_url()).await;
    let () = ::redis::cmd("HSET")
        .arg(keys.res())
        .arg(&req.exec_id)
        .arg(&record)
        .query_async(&mut redis)
        .await
        .unwrap();
    let () = ::redis::cmd("ZADD")
        .arg(&keys.all()[3])
        .arg(forget_at)
        .arg(&req.exec_id)
        .query_async(&mut redis)
        .await
        .unwrap();

    let again = store.settle(&settlement(&req, 250)).await.unwrap();
    assert!(!again.applied);
    assert_eq!(
        (again.reserved, again.actual, again.key_remaining),
        (300, 250, 700)
    );

    tokio::time::sleep(KEEP + Duration::from_millis(300)).await;
    forget(&store, &key).await;
    assert_eq!(raw_record(&keys, &req.exec_id).await, None);
    assert_eq!(retention(&keys).await, (Vec::new(), Vec::new()));
}
