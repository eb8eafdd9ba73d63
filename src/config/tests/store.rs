//! `[store]`: the default SQLite store beside the config, and how long a
//! reservation, a closed record, the ledger and its buffer are kept.

use std::path::Path;
use std::time::Duration;

use super::{base, error_after, fake_env, load, load_with};
use crate::config::{Config, OnExpiry, StoreBackend};

#[test]
fn reservation_ttl_must_exceed_the_upstream_timeout() {
    let message = error_after("reservation_ttl_secs = 120", "reservation_ttl_secs = 60");
    assert!(
        message.starts_with("test.toml: store.reservation_ttl_secs: 60 must exceed"),
        "{message}"
    );
    // The defaults (900 > 600) hold; a raised timeout alone breaks them.
    let message = error_after(
        "upstream_timeout_secs = 60\n\n[store]\nreservation_ttl_secs = 120",
        "upstream_timeout_secs = 900\n\n[store]",
    );
    assert!(
        message.contains("store.reservation_ttl_secs: 900"),
        "{message}"
    );
}

#[test]
fn ledger_retention_defaults_to_30_days_and_is_bounded() {
    let config = load(&base()).unwrap();
    assert_eq!(
        config.store.ledger_retention,
        Duration::from_secs(30 * 24 * 3600)
    );
    let config = load(&base().replacen(
        "reservation_ttl_secs = 120",
        "reservation_ttl_secs = 120\nledger_retention_days = 7",
        1,
    ))
    .unwrap();
    assert_eq!(
        config.store.ledger_retention,
        Duration::from_secs(7 * 24 * 3600)
    );
    let message = error_after(
        "reservation_ttl_secs = 120",
        "reservation_ttl_secs = 120\nledger_retention_days = 0",
    );
    assert!(
        message.starts_with("test.toml: store.ledger_retention_days: 0 must be between"),
        "{message}"
    );
}

#[test]
fn aggregate_retention_defaults_to_400_days_and_is_bounded() {
    assert_eq!(load(&base()).unwrap().store.aggregate_retention_days, 400);
    let text = base().replacen("[store]", "[store]\naggregate_retention_days = 90", 1);
    assert_eq!(load(&text).unwrap().store.aggregate_retention_days, 90);
    for bad in ["0", "3651", "99999999999"] {
        let message = error_after(
            "[store]",
            &format!("[store]\naggregate_retention_days = {bad}"),
        );
        assert!(
            message.starts_with(&format!(
                "test.toml: store.aggregate_retention_days: {bad} must be between 1 and 3650"
            )),
            "{message}"
        );
    }
}

#[test]
fn on_expiry_defaults_to_charge_and_takes_release() {
    assert_eq!(load(&base()).unwrap().store.on_expiry, OnExpiry::Charge);
    for (text, expected) in [("charge", OnExpiry::Charge), ("release", OnExpiry::Release)] {
        let config = base().replacen("[store]", &format!("[store]\non_expiry = \"{text}\""), 1);
        assert_eq!(load(&config).unwrap().store.on_expiry, expected, "{text}");
    }
    let error = error_after("[store]", "[store]\non_expiry = \"Release\"");
    assert!(error.contains("store.on_expiry"), "{error}");
    assert!(error.contains("\"charge\" or \"release\""), "{error}");
}

#[test]
fn the_sqlite_store_is_the_default_and_its_path_is_relative_to_the_config() {
    let text = base();
    let env = fake_env(&[("BOB_KEY", "b")]);
    let in_dir = Config::from_toml_str_with_env(&text, Path::new("/etc/tollgate/gw.toml"), &env);
    match in_dir.unwrap().store.backend {
        StoreBackend::Sqlite { path } => assert_eq!(path, Path::new("/etc/tollgate/tollgate.db")),
        other => panic!("default store: {other:?}"),
    }

    let named = text.replacen("[store]", "[store]\nsqlite_path = \"data/books.db\"", 1);
    let config = Config::from_toml_str_with_env(&named, Path::new("/srv/gw.toml"), &env).unwrap();
    match config.store.backend {
        StoreBackend::Sqlite { path } => assert_eq!(path, Path::new("/srv/data/books.db")),
        other => panic!("{other:?}"),
    }

    let absolute = text.replacen("[store]", "[store]\nsqlite_path = \"/var/lib/tg.db\"", 1);
    let config =
        Config::from_toml_str_with_env(&absolute, Path::new("/srv/gw.toml"), &env).unwrap();
    match config.store.backend {
        StoreBackend::Sqlite { path } => assert_eq!(path, Path::new("/var/lib/tg.db")),
        other => panic!("{other:?}"),
    }

    let empty = text.replacen("[store]", "[store]\nsqlite_path = \"\"", 1);
    let message = load_with(&empty, &[("BOB_KEY", "b")])
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("store.sqlite_path: must not be empty"),
        "{message}"
    );
}

#[test]
fn closed_records_are_kept_two_minutes_unless_told_otherwise() {
    let config = load_with(&base(), &[("BOB_KEY", "b")]).unwrap();
    assert_eq!(config.store.closed_record, Duration::from_secs(120));
    let text = base().replacen("[store]", "[store]\nclosed_record_secs = 30", 1);
    let config = load_with(&text, &[("BOB_KEY", "b")]).unwrap();
    assert_eq!(config.store.closed_record, Duration::from_secs(30));
    for bad in ["0", "86401"] {
        let text = base().replacen(
            "[store]",
            &format!("[store]\nclosed_record_secs = {bad}"),
            1,
        );
        let message = load_with(&text, &[("BOB_KEY", "b")])
            .unwrap_err()
            .to_string();
        assert!(message.contains("store.closed_record_secs"), "{message}");
    }
}

#[test]
fn the_ledger_buffer_defaults_to_24_hours_and_is_bounded() {
    let config = load(&base()).unwrap();
    assert_eq!(config.store.ledger_buffer, Duration::from_secs(24 * 3600));
    let text = base().replacen("[store]", "[store]\nledger_buffer_hours = 2", 1);
    assert_eq!(
        load(&text).unwrap().store.ledger_buffer,
        Duration::from_secs(2 * 3600)
    );
    for bad in ["0", "169", "99999999999"] {
        let message = error_after("[store]", &format!("[store]\nledger_buffer_hours = {bad}"));
        assert!(
            message.starts_with(&format!(
                "test.toml: store.ledger_buffer_hours: {bad} must be between 1 and 168"
            )),
            "{message}"
        );
    }
}

#[test]
fn a_ledger_sink_is_a_redis_gateways_file_beside_the_config() {
    let redis = "[store]\nbackend = \"redis\"\nredis_url = \"redis://127.0.0.1:6379\"";
    let config = load(&base()).unwrap();
    assert_eq!(config.store.ledger_sink, None);
    let text = base().replacen(
        "[store]",
        &format!("{redis}\nledger_sink_path = \"ledger.db\""),
        1,
    );
    let config = Config::from_toml_str_with_env(
        &text,
        Path::new("/etc/tollgate/gateway.toml"),
        &fake_env(&[("BOB_KEY", "b")]),
    )
    .unwrap();
    assert_eq!(
        config.store.ledger_sink.as_deref(),
        Some(Path::new("/etc/tollgate/ledger.db"))
    );
    let absolute = text.replacen("\"ledger.db\"", "\"/var/lib/tollgate/ledger.db\"", 1);
    assert_eq!(
        load(&absolute).unwrap().store.ledger_sink.as_deref(),
        Some(Path::new("/var/lib/tollgate/ledger.db"))
    );

    let empty = base().replacen("[store]", &format!("{redis}\nledger_sink_path = \" \""), 1);
    let message = load(&empty).unwrap_err().to_string();
    assert!(
        message.starts_with("test.toml: store.ledger_sink_path: must not be empty"),
        "{message}"
    );
    for backend in ["sqlite", "memory"] {
        let message = error_after(
            "[store]",
            &format!("[store]\nbackend = \"{backend}\"\nledger_sink_path = \"ledger.db\""),
        );
        assert!(
            message.starts_with("test.toml: store.ledger_sink_path: only the redis store"),
            "{message}"
        );
    }
}
