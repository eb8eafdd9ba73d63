//! `store.redis_url` over TLS and the `store.redis_tls_*` files.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

use super::{base, fake_env, redis_url};
use crate::config::{Config, ConfigError, RedisTls, StoreBackend};

/// A CA, and a client certificate it signed, as PEM files under `certs/`
/// of a temporary directory holding the config file.
struct Files {
    dir: tempfile::TempDir,
    ca: String,
    cert: String,
    key: String,
}

impl Files {
    fn new() -> Files {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("certs")).unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca = ca_params.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca_params, ca_key);
        let key = KeyPair::generate().unwrap();
        let cert = CertificateParams::new(vec!["gateway".to_owned()])
            .unwrap()
            .signed_by(&key, &issuer)
            .unwrap()
            .pem();
        let files = Files {
            dir,
            ca,
            cert,
            key: key.serialize_pem(),
        };
        files.write("ca.pem", &files.ca);
        files.write("client.pem", &files.cert);
        files.write("client.key", &files.key);
        files
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join("certs").join(name)
    }

    fn origin(&self) -> PathBuf {
        self.dir.path().join("tollgate.toml")
    }

    /// `base()` on the Redis store at `url`, with `lines` under `[store]`.
    fn load(&self, url: &str, lines: &str) -> Result<Config, ConfigError> {
        let store = format!("[store]\nbackend = \"redis\"\nredis_url = \"{url}\"\n{lines}");
        let text = base().replacen("[store]", &store, 1);
        let env = fake_env(&[("BOB_KEY", "b")]);
        Config::from_toml_str_with_env(&text, &self.origin(), &env)
    }

    /// The message of the error `load` gives, without the file name.
    fn error(&self, url: &str, lines: &str) -> String {
        let message = self.load(url, lines).unwrap_err().to_string();
        let origin = format!("{}: ", self.origin().display());
        message.strip_prefix(&origin).unwrap_or(&message).to_owned()
    }
}

fn tls_of(config: &Config) -> &RedisTls {
    match &config.store.backend {
        StoreBackend::Redis { tls, .. } => tls,
        other => panic!("not a Redis store: {other:?}"),
    }
}

const CLIENT: &str = "redis_tls_cert_file = \"certs/client.pem\"\n\
                      redis_tls_key_file = \"certs/client.key\"\n";

#[test]
fn tls_urls_are_accepted_for_one_node_and_a_cluster() {
    let files = Files::new();
    for url in [
        "rediss://:pw@cache.example.com:6380/0",
        "rediss+cluster://a:7000,b:7001",
        "rediss://a:7000,b:7001",
    ] {
        let config = files.load(url, "").unwrap();
        assert_eq!(redis_url(&config), Some(url));
        let tls = tls_of(&config);
        assert!(tls.ca_pem.is_none() && tls.client.is_none(), "{tls:?}");
    }
    let message = files.error("valkeys://a:6379", "");
    assert!(
        message.starts_with("store.redis_url: must start with redis:// or, over TLS, rediss://"),
        "{message}"
    );
}

#[test]
fn insecure_tls_is_refused() {
    let files = Files::new();
    for url in [
        "rediss://a:6380/#insecure",
        "rediss+cluster://a:1,b:2#insecure",
    ] {
        let message = files.error(url, "");
        assert!(
            message.starts_with("store.redis_url: #insecure would turn off the check"),
            "{message}"
        );
    }
    let message = files.error("rediss://a:6380/#other", "");
    assert_eq!(message, "store.redis_url: must not end in a #fragment");
}

#[test]
fn certificate_files_are_read_beside_the_config_file() {
    let files = Files::new();
    let lines = format!("redis_tls_ca_file = \"certs/ca.pem\"\n{CLIENT}");
    let config = files.load("rediss://a:6380", &lines).unwrap();
    let tls = tls_of(&config);
    assert_eq!(tls.ca_pem.as_deref(), Some(files.ca.as_str()));
    let client = tls.client.as_ref().unwrap();
    assert_eq!(client.cert_pem, files.cert);
    assert_eq!(client.key_pem.expose(), files.key);
    // The key, a credential, is not in the config's Debug.
    let debug = format!("{config:?}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    assert!(debug.contains("custom_ca: true"), "{debug}");

    // An absolute path is taken as it is.
    let absolute = format!("redis_tls_ca_file = \"{}\"", files.path("ca.pem").display());
    let config = files.load("rediss+cluster://a:1,b:2", &absolute).unwrap();
    assert_eq!(tls_of(&config).ca_pem.as_deref(), Some(files.ca.as_str()));
}

#[test]
fn bad_certificate_files_stop_the_load_naming_the_field() {
    let files = Files::new();
    let url = "rediss://a:6380";
    let ca = |file: &str| format!("redis_tls_ca_file = \"{file}\"");

    let message = files.error(url, &ca("certs/missing.pem"));
    assert!(
        message.starts_with("store.redis_tls_ca_file: cannot read ")
            && message.contains(&Path::new("certs").join("missing.pem").display().to_string()),
        "{message}"
    );
    files.write("empty.pem", "not a certificate\n");
    let message = files.error(url, &ca("certs/empty.pem"));
    assert_eq!(
        message,
        "store.redis_tls_ca_file: holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
    );
    files.write(
        "broken.pem",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
    );
    let message = files.error(url, &ca("certs/broken.pem"));
    assert!(
        message.starts_with("store.redis_tls_ca_file: holds a certificate that cannot be a CA"),
        "{message}"
    );
    assert_eq!(
        files.error(url, &ca(" ")),
        "store.redis_tls_ca_file: must not be empty"
    );

    let only_cert = "redis_tls_cert_file = \"certs/client.pem\"";
    let message = files.error(url, only_cert);
    assert!(
        message.starts_with("store.redis_tls_key_file: must be set with"),
        "{message}"
    );
    let only_key = "redis_tls_key_file = \"certs/client.key\"";
    let message = files.error(url, only_key);
    assert!(
        message.starts_with("store.redis_tls_cert_file: must be set with"),
        "{message}"
    );

    // A key that is no key, and a key of another certificate.
    let swapped = "redis_tls_cert_file = \"certs/client.pem\"\n\
                   redis_tls_key_file = \"certs/ca.pem\"";
    let message = files.error(url, swapped);
    assert_eq!(
        message,
        "store.redis_tls_key_file: holds no PEM private key (PKCS#8, PKCS#1 or SEC1)"
    );
    files.write("other.key", &KeyPair::generate().unwrap().serialize_pem());
    let mismatched = "redis_tls_cert_file = \"certs/client.pem\"\n\
                      redis_tls_key_file = \"certs/other.key\"";
    let message = files.error(url, mismatched);
    assert!(
        message.starts_with(
            "store.redis_tls_key_file: is not usable with the certificate of store.redis_tls_cert_file"
        ),
        "{message}"
    );
}

#[test]
fn tls_files_need_a_tls_url() {
    let files = Files::new();
    let message = files.error("redis://a:6379", "redis_tls_ca_file = \"certs/ca.pem\"");
    assert_eq!(
        message,
        "store.redis_tls_ca_file: is for TLS, but store.redis_url is not a rediss:// URL"
    );
    let message = files.error("redis+cluster://a:1,b:2", CLIENT);
    assert_eq!(
        message,
        "store.redis_tls_cert_file: is for TLS, but store.redis_url is not a rediss:// URL"
    );
}
