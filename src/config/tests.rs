use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::*;

mod http_layers;
mod redis_tls;

const ORIGIN: &str = "test.toml";

fn alice_hash() -> String {
    hex::encode(hash_key("alice-raw-key"))
}

/// A valid config; tests break one field at a time by replacing its text.
pub(super) fn base() -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:9090"
upstream_timeout_secs = 60

[store]
reservation_ttl_secs = 120

[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/"
api_key_env = "OPENAI_API_KEY"
models = ["gpt-*", "o*"]

[[providers]]
name = "local"
kind = "openai"
base_url = "http://127.0.0.1:9000/proxy/v1/"
api_key_env = "LOCAL_KEY"
models = ["gpt-4o", "llama-*"]

[[providers]]
name = "anthropic"
kind = "anthropic"
base_url = "https://api.anthropic.com"
api_key_env = "ANTHROPIC_API_KEY"
models = ["claude-*"]

[[orgs]]
id = "acme"
cap_usd = "500.00"
period = "month"

[[keys]]
id = "alice"
org = "acme"
key_sha256 = "{alice}"
cap_usd = "25.00"
period = "day"
models = ["gpt-4o-mini", "claude-*"]

[[keys]]
id = "bob"
key_env = "BOB_KEY"
cap_usd = "3"
period = "total"
"#,
        alice = alice_hash()
    )
}

pub(super) fn fake_env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| vars.get(name).cloned()
}

fn load_with(text: &str, vars: &[(&str, &str)]) -> Result<Config, ConfigError> {
    Config::from_toml_str_with_env(text, Path::new(ORIGIN), &fake_env(vars))
}

fn load(text: &str) -> Result<Config, ConfigError> {
    load_with(
        text,
        &[("BOB_KEY", "bob-raw-key"), ("OPENAI_API_KEY", "sk-1")],
    )
}

/// The error for `base()` with `from` replaced by `to`.
fn error_after(from: &str, to: &str) -> String {
    let text = base();
    assert!(text.contains(from), "{from:?} is in the base config");
    load(&text.replacen(from, to, 1)).unwrap_err().to_string()
}

#[test]
fn shipped_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/tollgate.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let env = fake_env(&[("OPENAI_API_KEY", "sk-test")]);
    let config =
        Config::from_toml_str_with_env(&text, Path::new("config/tollgate.toml"), &env).unwrap();
    assert_eq!(
        config.server.listen,
        "127.0.0.1:8080".parse::<SocketAddr>().unwrap()
    );
    assert_eq!(config.server.max_request_bytes, 10_485_760);
    assert_eq!(config.server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(config.server.idle_timeout, Duration::from_secs(75));
    assert_eq!(config.server.max_connections, 10_000);
    assert_eq!(config.server.upstream_timeout, Duration::from_secs(600));
    assert!(config.server.admin_key.is_none());
    match &config.store.backend {
        StoreBackend::Sqlite { path } => assert_eq!(path, Path::new("config/tollgate.db")),
        other => panic!("the shipped store is {other:?}"),
    }
    assert_eq!(config.store.reservation_ttl, Duration::from_secs(900));
    assert_eq!(config.store.settle_epsilon, 100);
    assert_eq!(config.store.on_store_error, OnStoreError::Reject);
    assert_eq!(config.store.on_expiry, OnExpiry::Charge);
    assert!(config.prices.get("gpt-4o-mini").is_some());

    let openai = config.provider_for("gpt-4o-mini").unwrap();
    assert_eq!(openai.name, "openai");
    assert_eq!(openai.kind, ProviderKind::OpenAi);
    assert_eq!(openai.api_key.as_ref().unwrap().expose(), "sk-test");
    let anthropic = config.provider_for("claude-sonnet-4-5").unwrap();
    assert_eq!(anthropic.kind, ProviderKind::Anthropic);
    assert!(anthropic.api_key.is_none(), "unset key: still starts");
    for model in [
        "o3-mini",
        "o4-mini",
        "chatgpt-4o-latest",
        "text-embedding-3-small",
    ] {
        assert_eq!(
            config.provider_for(model).unwrap().name,
            "openai",
            "{model}"
        );
    }

    assert_eq!(config.orgs.len(), 1);
    assert_eq!(config.orgs[0].cap, 100_000_000);
    assert_eq!(config.orgs[0].period, Period::Month);
    let demo = &config.keys[0];
    assert_eq!(demo.key_sha256, hash_key("tg-demo-key"));
    assert_eq!(demo.org.as_deref(), Some("demo"));
    assert_eq!(demo.cap, 5_000_000);
    assert_eq!(demo.period, Period::Day);
}

#[test]
fn base_config_loads_with_defaults() {
    let config = load(&base()).unwrap();
    assert_eq!(config.server.max_request_bytes, 10_485_760);
    assert_eq!(config.server.header_read_timeout, Duration::from_secs(10));
    assert_eq!(config.server.idle_timeout, Duration::from_secs(75));
    assert_eq!(config.server.max_connections, 10_000);
    assert_eq!(config.store.settle_epsilon, 100);
    let alice = &config.keys[0];
    assert_eq!(alice.cap, 25_000_000);
    assert_eq!(alice.key_sha256, hash_key("alice-raw-key"));
    assert_eq!(config.keys[1].key_sha256, hash_key("bob-raw-key"));
    assert_eq!(config.keys[1].cap, 3_000_000);
    assert_eq!(config.keys[1].period, Period::Total);
    assert_eq!(config.keys[1].org, None);
}

#[test]
fn validation_errors_name_file_and_field() {
    let cases = [
        ("\"127.0.0.1:9090\"", "\"localhost\"", "server.listen"),
        (
            "upstream_timeout_secs = 60",
            "upstream_timeout_secs = 60\nmax_request_bytes = 0",
            "server.max_request_bytes",
        ),
        (
            "upstream_timeout_secs = 60",
            "upstream_timeout_secs = 0",
            "server.upstream_timeout_secs",
        ),
        (
            "upstream_timeout_secs = 60",
            "upstream_timeout_secs = 60\nheader_read_timeout_secs = 0",
            "server.header_read_timeout_secs",
        ),
        (
            "upstream_timeout_secs = 60",
            "upstream_timeout_secs = 60\nidle_timeout_secs = 0",
            "server.idle_timeout_secs",
        ),
        (
            "upstream_timeout_secs = 60",
            "upstream_timeout_secs = 60\nmax_connections = 0",
            "server.max_connections",
        ),
        ("[store]", "[store]\nbackend = \"disk\"", "store.backend"),
        ("[store]", "[store]\nbackend = \"redis\"", "store.redis_url"),
        (
            "[store]",
            "[store]\non_store_error = \"ignore\"",
            "store.on_store_error",
        ),
        (
            "[store]",
            "[store]\nsettle_epsilon_usd = 0.0001",
            "store.settle_epsilon_usd",
        ),
        (
            "[store]",
            "[store]\non_expiry = \"refund\"",
            "store.on_expiry",
        ),
        (
            "[store]",
            "[prices]\nfile = \"nowhere.toml\"\n[store]",
            "prices.file",
        ),
        ("name = \"local\"", "name = \"openai\"", "providers[1].name"),
        (
            "kind = \"anthropic\"",
            "kind = \"claude\"",
            "providers[2].kind",
        ),
        (
            "\"https://api.openai.com/\"",
            "\"ftp://api.openai.com\"",
            "providers[0].base_url",
        ),
        (
            "\"https://api.openai.com/\"",
            "\"https://api.openai.com/?v=1\"",
            "providers[0].base_url",
        ),
        (
            "\"https://api.openai.com/\"",
            "\"https://user:pw@api.openai.com\"",
            "providers[0].base_url",
        ),
        (
            "\"https://api.openai.com/\"",
            "\"/v1\"",
            "providers[0].base_url",
        ),
        (
            "api_key_env = \"LOCAL_KEY\"",
            "api_key_env = \"\"",
            "providers[1].api_key_env",
        ),
        (
            "models = [\"claude-*\"]",
            "models = []",
            "providers[2].models",
        ),
        (
            "models = [\"gpt-4o\", \"llama-*\"]",
            "models = [\"gpt-4o\", \"[\"]",
            "providers[1].models[1]",
        ),
        ("id = \"acme\"", "id = \"ac:me\"", "orgs[0].id"),
        ("cap_usd = \"500.00\"", "cap_usd = 500.0", "orgs[0].cap_usd"),
        ("period = \"month\"", "period = \"year\"", "orgs[0].period"),
        ("id = \"alice\"", "id = \"\"", "keys[0].id"),
        ("id = \"bob\"", "id = \"alice\"", "keys[1].id"),
        ("org = \"acme\"", "org = \"umbrella\"", "keys[0].org"),
        ("cap_usd = \"25.00\"", "cap_usd = \"-5\"", "keys[0].cap_usd"),
        (
            "cap_usd = \"3\"",
            "cap_usd = \"9007199255\"",
            "keys[1].cap_usd",
        ),
        ("period = \"day\"", "period = \"Day\"", "keys[0].period"),
        (
            "models = [\"gpt-4o-mini\", \"claude-*\"]",
            "models = []",
            "keys[0].models",
        ),
        (
            "key_env = \"BOB_KEY\"",
            "key_env = \"CAROL_KEY\"",
            "keys[1].key_env",
        ),
        (
            "key_env = \"BOB_KEY\"",
            "key_env = \"BOB_KEY\"\nkey_sha256 = \"00\"",
            "keys[1].key_sha256",
        ),
        ("key_env = \"BOB_KEY\"", "", "keys[1].key_sha256"),
        (
            "key_env = \"BOB_KEY\"",
            "key_sha256 = \"abc\"",
            "keys[1].key_sha256",
        ),
    ];
    for (from, to, field) in cases {
        let message = error_after(from, to);
        assert!(
            message.starts_with(&format!("{ORIGIN}: {field}: ")),
            "{field}: {message}"
        );
    }
}

#[test]
fn cap_errors_read_like_the_reference() {
    let message = error_after("cap_usd = \"25.00\"", "cap_usd = \"abc\"");
    assert_eq!(
        message,
        "test.toml: keys[0].cap_usd: \"abc\" is not a decimal number like \"25.00\""
    );
}

#[test]
fn period_errors_list_the_periods() {
    let message = error_after("period = \"month\"", "period = \"year\"");
    assert_eq!(
        message,
        "test.toml: orgs[0].period: unknown period \"year\": \
         expected one of hour, day, week, month, total"
    );
}

#[test]
fn duplicate_key_hashes_are_rejected() {
    let duplicate = format!("key_sha256 = \"{}\"", hex::encode(hash_key("bob-raw-key")));
    let message = error_after(&format!("key_sha256 = \"{}\"", alice_hash()), &duplicate);
    assert!(
        message.starts_with("test.toml: keys[1].key_env: "),
        "{message}"
    );
    assert!(message.contains("\"alice\""), "{message}");
}

#[test]
fn missing_keys_and_providers_are_rejected() {
    let no_keys = base().split("[[keys]]").next().unwrap().to_owned();
    let message = load(&no_keys).unwrap_err().to_string();
    assert!(message.starts_with("test.toml: keys: "), "{message}");
    // With an admin key, every key may come from the admin API.
    let config = load_with(&no_keys, &[("TOLLGATE_ADMIN_KEY", "admin")]).unwrap();
    assert!(config.keys.is_empty());
    let message =
        load("[[keys]]\nid = \"a\"\nkey_env = \"BOB_KEY\"\ncap_usd = \"1\"\nperiod = \"day\"\n")
            .unwrap_err()
            .to_string();
    assert!(message.starts_with("test.toml: providers: "), "{message}");
}

#[test]
fn unknown_fields_are_rejected_with_a_position() {
    let message = error_after("upstream_timeout_secs = 60", "upstream_timeout = 60");
    assert!(message.starts_with("test.toml: "), "{message}");
    assert!(
        message.contains("unknown field `upstream_timeout`"),
        "{message}"
    );
    assert!(message.contains("line 4"), "{message}");

    let message = error_after("period = \"total\"", "period = \"total\"\nbudget = 1");
    assert!(message.contains("unknown field `budget`"), "{message}");

    let message = load("[server\n").unwrap_err().to_string();
    assert!(
        message.starts_with("test.toml: ") && message.contains("line 1"),
        "{message}"
    );
}

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
fn key_env_is_hashed_at_load_and_must_be_set() {
    let config = load_with(&base(), &[("BOB_KEY", "bob-raw-key")]).unwrap();
    assert_eq!(config.keys[1].key_sha256, hash_key("bob-raw-key"));
    for vars in [&[][..], &[("BOB_KEY", "")][..]] {
        let message = load_with(&base(), vars).unwrap_err().to_string();
        assert_eq!(
            message,
            "test.toml: keys[1].key_env: environment variable BOB_KEY is unset or empty"
        );
    }
}

pub(super) fn redis_url(config: &Config) -> Option<&str> {
    match &config.store.backend {
        StoreBackend::Redis { url, .. } => Some(url.expose()),
        StoreBackend::Memory | StoreBackend::Sqlite { .. } => None,
    }
}

#[test]
fn secrets_come_from_the_environment() {
    let text = base().replacen(
        "[store]",
        "[store]\nbackend = \"redis\"\nredis_url = \"redis://file:6379\"",
        1,
    );
    let vars = [
        ("BOB_KEY", "bob-raw-key"),
        ("TOLLGATE_ADMIN_KEY", "admin-secret"),
        ("TOLLGATE_REDIS_URL", "redis://:hunter2@env:6379"),
        ("OPENAI_API_KEY", "sk-live"),
        ("LOCAL_KEY", ""),
    ];
    let config = load_with(&text, &vars).unwrap();
    assert_eq!(config.server.admin_key, Some(hash_key("admin-secret")));
    assert_eq!(
        redis_url(&config),
        Some("redis://:hunter2@env:6379"),
        "env wins over the file"
    );
    assert!(
        config.providers[1].api_key.is_none(),
        "empty counts as unset"
    );

    let from_file = load_with(&text, &[("BOB_KEY", "b")]).unwrap();
    assert_eq!(redis_url(&from_file), Some("redis://file:6379"));

    let bad_scheme = text.replacen("redis://file:6379", "http://file:6379", 1);
    let message = load_with(&bad_scheme, &[("BOB_KEY", "b")])
        .unwrap_err()
        .to_string();
    assert!(
        message.starts_with("test.toml: store.redis_url: "),
        "{message}"
    );
    let tls = text.replacen("redis://file:6379", "rediss://file:6379", 1);
    let config = load_with(&tls, &[("BOB_KEY", "b")]).unwrap();
    assert_eq!(redis_url(&config), Some("rediss://file:6379"));

    let cluster = text.replacen("redis://file:6379", "redis+cluster://a:7000,b:7001", 1);
    let config = load_with(&cluster, &[("BOB_KEY", "b")]).unwrap();
    assert_eq!(redis_url(&config), Some("redis+cluster://a:7000,b:7001"));
}

#[test]
fn secret_debug_and_display_redact() {
    let secret = Secret::new("sk-very-secret".to_owned());
    assert_eq!(format!("{secret:?}"), "*****");
    assert_eq!(format!("{secret}"), "*****");
    assert_eq!(secret.expose(), "sk-very-secret");

    let vars = [
        ("BOB_KEY", "bob-raw-key"),
        ("OPENAI_API_KEY", "sk-very-secret"),
        ("TOLLGATE_ADMIN_KEY", "adm-very-secret"),
    ];
    let config = load_with(&base(), &vars).unwrap();
    let debug = format!("{config:?}");
    assert!(!debug.contains("very-secret"), "{debug}");
    assert!(!debug.contains("bob-raw-key"));
}

#[test]
fn base_urls_are_normalised() {
    let config = load(&base()).unwrap();
    assert_eq!(config.providers[0].base_url.path(), "/");
    assert_eq!(config.providers[0].base_url.host(), Some("api.openai.com"));
    assert_eq!(config.providers[1].base_url.path(), "/proxy/v1");
    assert_eq!(config.providers[1].base_url.port_u16(), Some(9000));
    assert_eq!(config.providers[2].base_url.scheme_str(), Some("https"));
}

#[test]
fn provider_for_takes_the_first_matching_provider() {
    let config = load(&base()).unwrap();
    // "gpt-4o" matches both openai ("gpt-*") and local; openai is first.
    assert_eq!(config.provider_for("gpt-4o").unwrap().name, "openai");
    assert_eq!(config.provider_for("llama-3").unwrap().name, "local");
    assert_eq!(config.provider_for("o3").unwrap().name, "openai");
    assert_eq!(
        config.provider_for("claude-haiku-4-5").unwrap().name,
        "anthropic"
    );
    assert!(config.provider_for("mistral-large").is_none());

    let swapped = base()
        .replacen("name = \"openai\"", "name = \"first\"", 1)
        .replacen("models = [\"gpt-*\", \"o*\"]", "models = [\"o*\"]", 1);
    let config = load(&swapped).unwrap();
    assert_eq!(config.provider_for("gpt-4o").unwrap().name, "local");
}

#[test]
fn allows_model_checks_the_key_allow_list() {
    let config = load(&base()).unwrap();
    let alice = &config.keys[0];
    assert!(alice.allows_model("gpt-4o-mini"));
    assert!(alice.allows_model("claude-sonnet-4-5"));
    assert!(!alice.allows_model("gpt-4o"));
    assert!(!alice.allows_model("gpt-4o-mini-2024-07-18"));
    let bob = &config.keys[1];
    assert!(bob.allows_model("anything-at-all"));
}

#[test]
fn hash_key_is_sha256() {
    assert_eq!(
        hex::encode(hash_key("tg-demo-key")),
        "e7aab4b439baa8c615eb31e352f5b4259085813fbcd95a65a5a346a6bdfb1bb3"
    );
}

#[test]
fn load_reads_the_file_and_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("absent.toml");
    let message = Config::load(&missing).unwrap_err().to_string();
    assert!(message.contains("absent.toml"), "{message}");

    // A relative prices file next to the config, not in the current
    // directory, is found there.
    std::fs::write(
        dir.path().join("my-prices.toml"),
        "[models.\"gpt-4o\"]\ninput_per_mtok = \"2.5\"\noutput_per_mtok = \"10\"\n",
    )
    .unwrap();
    let text = base().replacen(
        "[store]",
        "[prices]\nfile = \"my-prices.toml\"\n\n[store]",
        1,
    );
    let origin = dir.path().join("gateway.toml");
    let config =
        Config::from_toml_str_with_env(&text, &origin, &fake_env(&[("BOB_KEY", "b")])).unwrap();
    assert_eq!(config.prices.len(), 1);

    std::fs::write(
        dir.path().join("my-prices.toml"),
        "[models.\"x\"]\ninput_per_mtok = 1.5\n",
    )
    .unwrap();
    let error =
        Config::from_toml_str_with_env(&text, &origin, &fake_env(&[("BOB_KEY", "b")])).unwrap_err();
    let message = error.to_string();
    assert!(message.contains("gateway.toml: prices.file: "), "{message}");
    assert!(message.contains("my-prices.toml"), "{message}");
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
fn the_admin_key_may_be_given_as_its_digest_and_the_admin_routes_their_own_address() {
    let digest = hex::encode(hash_key("admin-secret"));
    let text = base().replacen(
        "[server]",
        &format!("[server]\nadmin_key_sha256 = \"{digest}\"\nadmin_listen = \"127.0.0.1:9099\""),
        1,
    );
    let config = load_with(&text, &[("BOB_KEY", "bob-raw-key")]).unwrap();
    assert_eq!(config.server.admin_key, Some(hash_key("admin-secret")));
    assert_eq!(
        config.server.admin_listen,
        Some("127.0.0.1:9099".parse().unwrap())
    );
    let bad = base().replacen("[server]", "[server]\nadmin_key_sha256 = \"abc\"", 1);
    let error = load_with(&bad, &[]).unwrap_err().to_string();
    assert!(error.contains("server.admin_key_sha256"), "{error}");
    let bad = base().replacen("[server]", "[server]\nadmin_listen = \"here\"", 1);
    let error = load_with(&bad, &[]).unwrap_err().to_string();
    assert!(error.contains("server.admin_listen"), "{error}");
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

#[test]
fn alerts_need_a_webhook_and_its_secret_and_thresholds_ascend() {
    let config = load(&base()).unwrap();
    assert!(config.alerts.webhook.is_none());
    assert!(config.keys[0].alert_at.is_empty());

    let with_alerts = format!(
        "{}\n[alerts]\nwebhook_url = \"https://ops.example.com/hook\"\nsecret_env = \"HOOK_SECRET\"\n",
        base()
            .replace(
                "models = [\"gpt-4o-mini\", \"claude-*\"]",
                "models = [\"gpt-4o-mini\", \"claude-*\"]\nalert_at = [\"0.5\", \"0.8\"]"
            )
            .replace(
                "period = \"month\"\n",
                "period = \"month\"\nalert_at = [\"0.9\"]\n"
            )
    );
    let vars = [("BOB_KEY", "bob-raw-key"), ("HOOK_SECRET", "s3cret")];
    let config = load_with(&with_alerts, &vars).unwrap();
    let webhook = config.alerts.webhook.as_ref().unwrap();
    assert_eq!(webhook.url.to_string(), "https://ops.example.com/hook");
    assert_eq!(webhook.secret.expose(), "s3cret");
    assert!(!format!("{config:?}").contains("s3cret"));
    let shown: Vec<&str> = config.keys[0].alert_at.iter().map(|t| t.as_str()).collect();
    assert_eq!(shown, ["0.5", "0.8"]);
    assert_eq!(config.orgs[0].alert_at[0].ppm(), 900_000);

    let message =
        |text: &str, vars: &[(&str, &str)]| load_with(text, vars).unwrap_err().to_string();
    let unset = message(&with_alerts, &[("BOB_KEY", "bob-raw-key")]);
    assert!(
        unset.contains("alerts.secret_env") && unset.contains("HOOK_SECRET"),
        "{unset}"
    );
    let no_secret = with_alerts.replace("secret_env = \"HOOK_SECRET\"\n", "");
    assert!(message(&no_secret, &vars).contains("alerts.secret_env"));
    let ftp = with_alerts.replace("https://ops.example.com/hook", "ftp://ops.example.com");
    assert!(message(&ftp, &vars).contains("alerts.webhook_url"));
    let descending = with_alerts.replace("[\"0.5\", \"0.8\"]", "[\"0.8\", \"0.5\"]");
    assert!(message(&descending, &vars).contains("keys[0].alert_at"));
    let too_high = with_alerts.replace("[\"0.9\"]", "[\"1.5\"]");
    assert!(message(&too_high, &vars).contains("orgs[0].alert_at"));
}
