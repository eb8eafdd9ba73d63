//! The config's load and checks: a valid base config, broken one field
//! at a time, each error naming the file and the field. The sections with
//! many settings have their own files: `store`, `keys` (with orgs and
//! alerts), `http_layers` and `redis_tls`.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use super::*;

mod http_layers;
mod keys;
mod providers;
mod redis_tls;
mod store;

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
