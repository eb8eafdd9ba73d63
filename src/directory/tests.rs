use std::path::Path;

use super::*;
use crate::budget::records::StoredRecord;

const CONFIG: &str = r#"
[store]
backend = "memory"

[[providers]]
name = "openai"
kind = "openai"
base_url = "http://127.0.0.1:9"
api_key_env = "NO_KEY"
models = ["gpt-*"]

[[orgs]]
id = "acme"
cap_usd = "100.00"
period = "month"

[[keys]]
id = "a"
org = "acme"
key_env = "KEY_A"
cap_usd = "1.00"
period = "day"

[[keys]]
id = "b"
key_env = "KEY_B"
cap_usd = "1.00"
period = "day"
"#;

fn config() -> Config {
    let env = |name: &str| match name {
        "KEY_A" => Some("secret-a".to_owned()),
        "KEY_B" => Some("secret-b".to_owned()),
        _ => None,
    };
    Config::from_toml_str_with_env(CONFIG, Path::new("test.toml"), &env).unwrap()
}

fn headers(name: &'static str, value: &str) -> HeaderMap {
    let mut h = HeaderMap::new();
    h.insert(name, value.parse().unwrap());
    h
}

fn key_doc(id: &str, org: Option<&str>, secret: &str) -> KeyDoc {
    KeyDoc {
        id: id.to_owned(),
        org: org.map(str::to_owned),
        key_sha256: hex::encode(hash_key(secret)),
        cap_usd_micros: 5,
        period: "total".to_owned(),
        models: None,
        disabled: false,
        expires_at: None,
        created_at: "2026-11-30T00:00:00Z".to_owned(),
        metadata: serde_json::Map::new(),
        on_insufficient: "refuse".to_owned(),
        alert_at: Vec::new(),
        model_caps: Vec::new(),
        rpm: None,
        tpm: None,
        customer_cap_usd: None,
        customer_period: None,
        customer_rpm: None,
        customer_tpm: None,
        customer_from: None,
        customer_required: false,
        deleted_at: None,
    }
}

fn records(keys: &[KeyDoc]) -> RecordSet {
    RecordSet {
        version: 7,
        records: keys
            .iter()
            .map(|doc| StoredRecord {
                kind: RecordKind::Key,
                id: doc.id.clone(),
                revision: 1,
                body: serde_json::to_string(doc).unwrap(),
            })
            .collect(),
    }
}

fn directory(snapshot: Snapshot) -> Directory {
    Directory {
        current: ArcSwap::from_pointee(snapshot),
        config: config(),
        writing: tokio::sync::Mutex::new(()),
    }
}

#[test]
fn finds_the_key_by_either_header() {
    let d = directory(Snapshot::build(&config(), Some(&RecordSet::default())));
    let found = d
        .authenticate(&headers("authorization", "Bearer secret-b"))
        .unwrap();
    assert_eq!(found.id, "b");
    let found = d.authenticate(&headers("x-api-key", "secret-a")).unwrap();
    assert_eq!(found.id, "a");
    let (key, org) = d.scopes(&found);
    assert_eq!((key.id.as_str(), org.unwrap().id.as_str()), ("a", "acme"));
}

#[test]
fn rejects_missing_and_unknown_keys() {
    let d = directory(Snapshot::build(&config(), Some(&RecordSet::default())));
    let auth = |h: HeaderMap| d.authenticate(&h);
    assert!(matches!(
        auth(HeaderMap::new()),
        Err(GatewayError::MissingKey)
    ));
    assert!(matches!(
        auth(headers("authorization", "Bearer ")),
        Err(GatewayError::MissingKey)
    ));
    assert!(matches!(
        auth(headers("authorization", "Basic abc")),
        Err(GatewayError::MissingKey)
    ));
    assert!(matches!(
        auth(headers("authorization", "Bearer nope")),
        Err(GatewayError::InvalidKey)
    ));
    assert!(auth(headers("x-api-key", "secret-a ")).is_ok());
}

#[test]
fn before_the_store_is_read_an_unknown_key_may_be_one_of_its_own() {
    let d = Directory::new(&config());
    assert!(d.authenticate(&headers("x-api-key", "secret-a")).is_ok());
    assert!(matches!(
        d.authenticate(&headers("x-api-key", "made-by-the-api")),
        Err(GatewayError::StoreUnavailable)
    ));
}

#[test]
fn api_keys_are_served_unless_disabled_expired_deleted_or_orphaned() {
    let mut disabled = key_doc("off", None, "s-off");
    disabled.disabled = true;
    let mut expired = key_doc("old", None, "s-old");
    expired.expires_at = Some("2020-01-01T00:00:00Z".to_owned());
    let mut deleted = key_doc("gone", None, "s-gone");
    deleted.deleted_at = Some("2026-01-01T00:00:00Z".to_owned());
    let orphan = key_doc("orphan", Some("no-such-org"), "s-orphan");
    let shadowed = key_doc("a", None, "s-shadow");
    let set = records(&[
        key_doc("new", Some("acme"), "s-new"),
        disabled,
        expired,
        deleted,
        orphan,
        shadowed,
    ]);
    let d = directory(Snapshot::build(&config(), Some(&set)));
    let auth = |secret: &str| d.authenticate(&headers("x-api-key", secret));
    let new = auth("s-new").unwrap();
    assert_eq!(
        (new.id.as_str(), new.cap, new.org.as_deref()),
        ("new", 5, Some("acme"))
    );
    for secret in ["s-off", "s-old", "s-gone", "s-orphan", "s-shadow"] {
        assert!(
            matches!(auth(secret), Err(GatewayError::InvalidKey)),
            "{secret}"
        );
    }
    let snapshot = d.snapshot();
    assert_eq!(snapshot.version, Some(7));
    assert_eq!(snapshot.keys["a"].source(), Source::Config);
    assert_eq!(snapshot.keys["new"].source(), Source::Api);
    assert!(!snapshot.keys.contains_key("gone"));
}

#[tokio::test]
async fn a_refresh_reads_the_store_only_when_its_version_moved() {
    use crate::budget::records::RecordWrite;
    use crate::budget::{MemoryStore, Records, Rules};
    let memory = MemoryStore::new(Rules::default());
    let store = BudgetStore::Memory(memory.clone());
    let d = Directory::new(&config());
    assert!(d.refresh(&store).await.unwrap(), "first read");
    assert!(!d.refresh(&store).await.unwrap(), "nothing changed");
    memory
        .write_record(&RecordWrite {
            kind: RecordKind::Key,
            id: "k".to_owned(),
            expect: None,
            body: serde_json::to_string(&key_doc("k", None, "s-k")).unwrap(),
            audit: "{}".to_owned(),
        })
        .await
        .unwrap();
    assert!(d.refresh(&store).await.unwrap());
    assert_eq!(
        d.authenticate(&headers("x-api-key", "s-k")).unwrap().id,
        "k"
    );
}

#[test]
fn a_document_written_here_is_applied_without_reading_the_others() {
    use crate::budget::{MemoryStore, Rules};
    let store = BudgetStore::Memory(MemoryStore::new(Rules::default()));
    let d = directory(Snapshot::build(
        &config(),
        Some(&records(&[key_doc("k1", None, "s-1")])),
    ));
    let record = |doc: &KeyDoc, revision| StoredRecord {
        kind: RecordKind::Key,
        id: doc.id.clone(),
        revision,
        body: serde_json::to_string(doc).unwrap(),
    };
    // The next version: applied, and the snapshot is at that version.
    d.apply(&record(&key_doc("k2", Some("acme"), "s-2"), 1), 8, &store);
    assert_eq!(d.snapshot().version, Some(8));
    assert_eq!(
        d.authenticate(&headers("x-api-key", "s-2")).unwrap().id,
        "k2"
    );
    assert!(d.authenticate(&headers("x-api-key", "s-1")).is_ok());

    // A rotation replaces the secret; a deletion removes the key.
    d.apply(&record(&key_doc("k2", Some("acme"), "s-2b"), 2), 9, &store);
    assert!(matches!(
        d.authenticate(&headers("x-api-key", "s-2")),
        Err(GatewayError::InvalidKey)
    ));
    assert!(d.authenticate(&headers("x-api-key", "s-2b")).is_ok());
    let mut gone = key_doc("k1", None, "s-1");
    gone.deleted_at = Some("2026-11-30T00:00:00Z".to_owned());
    d.apply(&record(&gone, 2), 10, &store);
    assert!(matches!(
        d.authenticate(&headers("x-api-key", "s-1")),
        Err(GatewayError::InvalidKey)
    ));

    // After a change made elsewhere (version 11), the snapshot keeps its
    // version, so the next poll reads every document.
    d.apply(&record(&key_doc("k3", None, "s-3"), 1), 12, &store);
    assert!(d.authenticate(&headers("x-api-key", "s-3")).is_ok());
    assert_eq!(d.snapshot().version, Some(10));
    // A write the snapshot is already past is not applied again: it would
    // put back the key `k1` deleted at version 10.
    d.apply(&record(&key_doc("k1", None, "s-1"), 1), 7, &store);
    assert!(d.authenticate(&headers("x-api-key", "s-1")).is_err());
    // A config key is never replaced by a document of its id.
    d.apply(&record(&key_doc("a", None, "s-shadow"), 1), 13, &store);
    assert!(matches!(
        d.authenticate(&headers("x-api-key", "s-shadow")),
        Err(GatewayError::InvalidKey)
    ));
    assert!(d.authenticate(&headers("x-api-key", "secret-a")).is_ok());
}
