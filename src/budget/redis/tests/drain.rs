//! Draining the ledger stream: `drain.lua` folds and trims exactly the
//! entries a sink acknowledged, once, and the sweep folds what no sink
//! took once it is older than the ledger buffer; reconcile balances
//! throughout.

use super::*;

const HOUR: Duration = Duration::from_secs(3_600);

async fn connect(ledger_buffer: Duration) -> RedisStore {
    connect_to(shared_url(), ledger_buffer).await
}

async fn connect_to(url: &str, ledger_buffer: Duration) -> RedisStore {
    RedisStore::connect(
        url,
        Rules {
            ledger_retention: ledger_buffer,
            ..Rules::default()
        },
    )
    .await
    .unwrap()
}

fn org_scope() -> Scope {
    Scope {
        kind: ScopeKind::Org,
        id: unique("org"),
        cap: 1_000_000,
        period: Period::Month,
    }
}

/// Reserves 1,000 for a call of `key` in `org` and settles it at `actual`.
async fn call(store: &RedisStore, key: &Scope, org: &Scope, actual: UsdMicros) {
    let mut req = request(key, 1_000);
    req.org = Some(org.clone());
    assert!(store.reserve(&req).await.unwrap().is_reserved());
    let mut settle = settlement(&req, actual);
    settle.org = Some(org.id.clone());
    store.settle(&settle).await.unwrap();
}

/// The key's and the org's rows: (folded, ledger), each checked to balance.
async fn books(store: &RedisStore, tag: &str) -> Vec<(ScopeKind, i64, i64)> {
    let rows = store.reconcile_in(&[tag.to_owned()]).await.unwrap();
    assert_eq!(rows.len(), 2, "{rows:?}");
    rows.iter()
        .map(|row| {
            assert_eq!(row.drift(), 0, "{row:?}");
            (row.kind, row.folded, row.ledger)
        })
        .collect()
}

/// The key's and the org's folded sums, whether or not the books balance
/// (for cases that unbalance them on purpose).
async fn folded(store: &RedisStore, tag: &str) -> Vec<(ScopeKind, i64)> {
    let rows = store.reconcile_in(&[tag.to_owned()]).await.unwrap();
    rows.iter().map(|row| (row.kind, row.folded)).collect()
}

#[tokio::test]
async fn the_drain_folds_exactly_the_entries_the_sink_acknowledged() {
    drains_exactly_what_was_acknowledged(shared_url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_folds_exactly_the_entries_the_sink_acknowledged_on_a_cluster() {
    let url = tokio::task::spawn_blocking(|| cluster().url())
        .await
        .unwrap();
    drains_exactly_what_was_acknowledged(&url).await;
}

async fn drains_exactly_what_was_acknowledged(url: &str) {
    let store = connect_to(url, DEFAULT_LEDGER_RETENTION).await;
    let key = key_scope(1_000_000);
    let org = org_scope();
    let tag = org.id.clone();
    for actual in [100, 200, 300] {
        call(&store, &key, &org, actual).await;
    }
    let page = store.ledger_page(&tag, 2).await.unwrap();
    assert_eq!(
        page.iter().map(|entry| entry.actual).collect::<Vec<_>>(),
        [100, 200]
    );
    assert_eq!(page[0].key, key.id);
    assert_eq!(page[0].org.as_deref(), Some(org.id.as_str()));
    assert_eq!(page[0].status, "ok");
    assert_eq!(page[0].run, None);
    // Booked while the page was with the sink: not in it, so not folded.
    call(&store, &key, &org, 400).await;

    assert_eq!(store.fold_drained(&tag, &page).await.unwrap(), 2);
    let left = store.ledger(&tag).await.unwrap();
    assert_eq!(
        left.iter().map(|entry| entry.actual).collect::<Vec<_>>(),
        [300, 400]
    );
    let expected = vec![(ScopeKind::Key, 300, 700), (ScopeKind::Org, 300, 700)];
    assert_eq!(books(&store, &tag).await, expected);

    // A retry of the same fold, or a second gateway that drained the same
    // page into its own sink, finds those entries gone and adds nothing.
    assert_eq!(store.fold_drained(&tag, &page).await.unwrap(), 0);
    let second = connect_to(url, DEFAULT_LEDGER_RETENTION).await;
    assert_eq!(second.fold_drained(&tag, &page).await.unwrap(), 0);
    assert_eq!(books(&store, &tag).await, expected);
    assert_eq!(store.ledger(&tag).await.unwrap().len(), 2);

    // The rest drains the same way, to an empty stream.
    let rest = store.ledger_page(&tag, 1_000).await.unwrap();
    assert_eq!(store.fold_drained(&tag, &rest).await.unwrap(), 2);
    assert!(store.ledger(&tag).await.unwrap().is_empty());
    assert_eq!(
        books(&store, &tag).await,
        [(ScopeKind::Key, 1_000, 0), (ScopeKind::Org, 1_000, 0)]
    );
}

#[tokio::test]
async fn a_fold_of_part_of_a_page_trims_no_further() {
    let store = connect(DEFAULT_LEDGER_RETENTION).await;
    let key = key_scope(1_000_000);
    let org = org_scope();
    let tag = org.id.clone();
    for actual in [1, 2, 3] {
        call(&store, &key, &org, actual).await;
    }
    let page = store.ledger_page(&tag, 3).await.unwrap();
    assert_eq!(store.fold_drained(&tag, &page[..1]).await.unwrap(), 1);
    assert_eq!(
        books(&store, &tag).await,
        [(ScopeKind::Key, 1, 5), (ScopeKind::Org, 1, 5)]
    );
}

/// A page whose start was folded by someone else since it was read (a
/// second gateway's drain, the sweep): the stream no longer starts with
/// it, so the script folds the entries still there itself, each once.
#[tokio::test]
async fn a_page_partly_folded_since_it_was_read_is_folded_for_the_rest_once() {
    let store = connect(DEFAULT_LEDGER_RETENTION).await;
    let other = connect(DEFAULT_LEDGER_RETENTION).await;
    let key = key_scope(1_000_000);
    let org = org_scope();
    let tag = org.id.clone();
    for actual in [10, 20, 30] {
        call(&store, &key, &org, actual).await;
    }
    let page = store.ledger_page(&tag, 3).await.unwrap();
    assert_eq!(other.fold_drained(&tag, &page[..1]).await.unwrap(), 1);
    // Booked after the page was read: not folded.
    call(&store, &key, &org, 40).await;
    assert_eq!(store.fold_drained(&tag, &page).await.unwrap(), 2);
    assert_eq!(
        books(&store, &tag).await,
        [(ScopeKind::Key, 60, 40), (ScopeKind::Org, 60, 40)]
    );
}

/// A page of several keys, under one org: each key's sum and the org's
/// are folded, and the books balance.
#[tokio::test]
async fn a_page_of_several_keys_folds_each_keys_sum() {
    let store = connect(DEFAULT_LEDGER_RETENTION).await;
    let (alice, bob) = (key_scope(1_000_000), key_scope(1_000_000));
    let org = org_scope();
    let tag = org.id.clone();
    for (key, actual) in [(&alice, 100), (&bob, 7), (&alice, 200), (&bob, 8)] {
        call(&store, key, &org, actual).await;
    }
    call(&store, &alice, &org, 1_000).await;
    let page = store.ledger_page(&tag, 4).await.unwrap();
    assert_eq!(store.fold_drained(&tag, &page).await.unwrap(), 4);
    let rows = store
        .reconcile_in(std::slice::from_ref(&tag))
        .await
        .unwrap();
    let folded = |kind: ScopeKind, id: &str| {
        let row = rows
            .iter()
            .find(|row| row.kind == kind && row.id == id)
            .unwrap_or_else(|| panic!("{id}: {rows:?}"));
        assert_eq!(row.drift(), 0, "{row:?}");
        (row.folded, row.ledger)
    };
    assert_eq!(folded(ScopeKind::Key, &alice.id), (300, 1_000));
    assert_eq!(folded(ScopeKind::Key, &bob.id), (15, 0));
    assert_eq!(folded(ScopeKind::Org, &org.id), (315, 1_000));
}

/// While the stream starts with the page, the script adds the sums the
/// gateway took from the page and reads none of its entries again: given
/// sums the entries do not add up to, it folds those.
#[tokio::test]
async fn a_page_still_at_the_start_is_folded_by_its_sums_without_reading_it_again() {
    let store = connect(DEFAULT_LEDGER_RETENTION).await;
    let key = key_scope(1_000_000);
    let org = org_scope();
    let tag = org.id.clone();
    for actual in [10, 20] {
        call(&store, &key, &org, actual).await;
    }
    let page = store.ledger_page(&tag, 2).await.unwrap();
    let mut args = scripts::drain_args(&page);
    assert_eq!(args[2], page[0].id, "the page's first entry");
    let org_period = page[0].org_period.clone().unwrap();
    args[3] = format!(
        "key:{}:{}:f|7|org:{}:{org_period}:f|9",
        key.id, page[0].key_period, org.id
    );
    let reply = store
        .run(
            &store.inner.scripts.drain,
            "fold a drained page",
            &scripts::TagKeys::new(&tag),
            &args,
        )
        .await
        .unwrap();
    assert_eq!(scripts::drain_reply(&reply).unwrap(), 2);
    assert_eq!(
        folded(&store, &tag).await,
        [(ScopeKind::Key, 7), (ScopeKind::Org, 9)]
    );
}

/// A Redis that lost the end of its history since the page was read (a
/// failover to a replica that was behind, a restart from an older
/// snapshot) still starts with the page but lacks its last entries: the
/// script folds the entries it finds, not the page's sums.
#[tokio::test]
async fn a_page_whose_end_redis_lost_is_folded_for_what_is_left() {
    let store = connect(DEFAULT_LEDGER_RETENTION).await;
    let key = key_scope(1_000_000);
    let org = org_scope();
    let tag = org.id.clone();
    for actual in [10, 20, 30] {
        call(&store, &key, &org, actual).await;
    }
    let page = store.ledger_page(&tag, 3).await.unwrap();
    let mut redis = raw_connection(shared_url()).await;
    let deleted: i64 = ::redis::cmd("XDEL")
        .arg(scripts::TagKeys::new(&tag).ledger())
        .arg(&page[2].id)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    assert_eq!(store.fold_drained(&tag, &page).await.unwrap(), 2);
    assert_eq!(
        folded(&store, &tag).await,
        [(ScopeKind::Key, 30), (ScopeKind::Org, 30)]
    );
}

#[tokio::test]
async fn a_fold_through_something_not_a_stream_id_is_refused() {
    let store = connect(DEFAULT_LEDGER_RETENTION).await;
    let key = key_scope(1_000_000);
    let org = org_scope();
    let tag = org.id.clone();
    call(&store, &key, &org, 1).await;
    let entry = store.ledger_page(&tag, 1).await.unwrap().remove(0);
    for bad in ["+", "12", "1-2-3", ""] {
        let mut page = vec![entry.clone()];
        page[0].id = bad.to_owned();
        let refused = store.fold_drained(&tag, &page).await;
        assert!(
            matches!(&refused, Err(StoreError::Refused(message)) if message.contains("stream id")),
            "{bad:?}: {refused:?}"
        );
    }
    // Nothing was folded.
    assert_eq!(store.ledger(&tag).await.unwrap().len(), 1);
}

#[tokio::test]
async fn entries_no_sink_took_are_folded_once_past_the_ledger_buffer() {
    let store = connect(HOUR).await;
    let key = key_scope(1_000_000);
    let org = org_scope();
    let tag = org.id.clone();
    store.track_key(&key.id, Some(&org.id));
    for actual in [100, 250] {
        call(&store, &key, &org, actual).await;
    }
    // Within the buffer they wait for a sink.
    store.sweep_tags(std::slice::from_ref(&tag)).await.unwrap();
    assert_eq!(store.ledger(&tag).await.unwrap().len(), 2);

    // Trims go by whole hours: two hours on, the hour they fell in is
    // past the one-hour buffer.
    store.shift_clock(2 * 3_600_000);
    call(&store, &key, &org, 50).await;
    store.sweep_tags(std::slice::from_ref(&tag)).await.unwrap();
    let left = store.ledger(&tag).await.unwrap();
    assert_eq!(
        left.iter().map(|entry| entry.actual).collect::<Vec<_>>(),
        [50]
    );
    let rows = store
        .reconcile_in(std::slice::from_ref(&tag))
        .await
        .unwrap();
    // The key's day may have changed with the clock: one row per period.
    for row in &rows {
        assert_eq!(row.drift(), 0, "{row:?}");
    }
    let folded: i64 = rows
        .iter()
        .filter(|row| row.kind == ScopeKind::Key)
        .map(|row| row.folded)
        .sum();
    assert_eq!(folded, 350);
}
