//! Checking the Redis store's settings: the URL's scheme, and for TLS
//! (`rediss://`) the CA and client certificate files, read and parsed at
//! load so that a bad file stops the gateway at start-up rather than
//! failing every budget call.

use std::path::Path;

use rustls::crypto::ring;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;

use super::super::raw::RawStore;
use super::super::{ConfigError, RedisClientCert, RedisTls, Secret, StoreBackend};
use super::Checker;

/// Overrides `store.redis_url`, so the URL and its password can stay out of
/// the file.
const REDIS_URL_ENV: &str = "TOLLGATE_REDIS_URL";
/// The schemes of a plain URL, and of one over TLS.
const PLAIN_SCHEMES: [&str; 2] = ["redis://", "redis+cluster://"];
const TLS_SCHEMES: [&str; 2] = ["rediss://", "rediss+cluster://"];

impl Checker<'_> {
    pub(super) fn redis(&self, raw: &RawStore) -> Result<StoreBackend, ConfigError> {
        let url = self
            .secret_var(REDIS_URL_ENV)
            .or_else(|| raw.redis_url.clone().map(Secret::new))
            .ok_or_else(|| {
                self.invalid(
                    "store.redis_url",
                    format!("backend \"redis\" needs redis_url or env {REDIS_URL_ENV}"),
                )
            })?;
        // The URL is never echoed: it may carry a password.
        let text = url.expose();
        let starts = |schemes: &[&str]| schemes.iter().any(|scheme| text.starts_with(scheme));
        let over_tls = starts(&TLS_SCHEMES);
        if !over_tls && !starts(&PLAIN_SCHEMES) {
            return Err(self.invalid(
                "store.redis_url",
                "must start with redis:// or, over TLS, rediss:// \
                 (redis+cluster:// or rediss+cluster:// for a Redis Cluster)",
            ));
        }
        if let Some((_, fragment)) = text.split_once('#') {
            let message = if fragment == "insecure" {
                "#insecure would turn off the check of the server's certificate, which \
                 tollgate does not do; name the CA that signed it in store.redis_tls_ca_file"
            } else {
                "must not end in a #fragment"
            };
            return Err(self.invalid("store.redis_url", message));
        }
        let tls = self.redis_tls(raw)?;
        if !over_tls {
            let set = [
                ("store.redis_tls_ca_file", &raw.redis_tls_ca_file),
                ("store.redis_tls_cert_file", &raw.redis_tls_cert_file),
                ("store.redis_tls_key_file", &raw.redis_tls_key_file),
            ];
            if let Some((field, _)) = set.iter().find(|(_, value)| value.is_some()) {
                return Err(self.invalid(
                    *field,
                    "is for TLS, but store.redis_url is not a rediss:// URL",
                ));
            }
        }
        Ok(StoreBackend::Redis { url, tls })
    }

    /// The CA and the client certificate of `store.redis_tls_*`, each
    /// read beside the config file and parsed.
    fn redis_tls(&self, raw: &RawStore) -> Result<RedisTls, ConfigError> {
        let ca_pem = match &raw.redis_tls_ca_file {
            Some(file) => {
                let field = "store.redis_tls_ca_file";
                let pem = self.pem_file(field, file)?;
                check_ca(&pem).map_err(|message| self.invalid(field, message))?;
                Some(pem)
            }
            None => None,
        };
        let client =
            match (&raw.redis_tls_cert_file, &raw.redis_tls_key_file) {
                (None, None) => None,
                (Some(_), None) => return Err(self.invalid(
                    "store.redis_tls_key_file",
                    "must be set with store.redis_tls_cert_file: the key of the client certificate",
                )),
                (None, Some(_)) => return Err(self.invalid(
                    "store.redis_tls_cert_file",
                    "must be set with store.redis_tls_key_file: the client certificate of the key",
                )),
                (Some(cert_file), Some(key_file)) => {
                    let cert_pem = self.pem_file("store.redis_tls_cert_file", cert_file)?;
                    let key_pem = self.pem_file("store.redis_tls_key_file", key_file)?;
                    let (chain, key) = client_parts(&cert_pem, &key_pem)
                        .map_err(|(field, message)| self.invalid(field, message))?;
                    CertifiedKey::from_der(chain, key, &ring::default_provider()).map_err(|e| {
                        self.invalid(
                            "store.redis_tls_key_file",
                            format!(
                            "is not usable with the certificate of store.redis_tls_cert_file: {e}"
                        ),
                        )
                    })?;
                    Some(RedisClientCert {
                        cert_pem,
                        key_pem: Secret::new(key_pem),
                    })
                }
            };
        Ok(RedisTls { ca_pem, client })
    }

    /// The text of a PEM file, its relative path resolved against the
    /// config file's directory.
    fn pem_file(&self, field: &str, file: &str) -> Result<String, ConfigError> {
        if file.trim().is_empty() {
            return Err(self.invalid(field, "must not be empty"));
        }
        let path = self.beside_config(file);
        read_pem(&path).map_err(|message| self.invalid(field, message))
    }
}

fn read_pem(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not a PEM file", path.display()))
}

/// The certificates of a PEM text; an error when there are none or one is
/// malformed. No detail of the text is quoted.
fn certificates(pem: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|_| "holds a malformed PEM block".to_owned())?;
    if certs.is_empty() {
        return Err("holds no PEM certificate (-----BEGIN CERTIFICATE-----)".to_owned());
    }
    Ok(certs)
}

/// Every certificate of a CA file must be a usable trust anchor.
fn check_ca(pem: &str) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(pem)? {
        roots
            .add(cert)
            .map_err(|e| format!("holds a certificate that cannot be a CA: {e}"))?;
    }
    Ok(())
}

/// The client's certificate chain and key, each parsed; an error names the
/// field of the file at fault.
fn client_parts(
    cert_pem: &str,
    key_pem: &str,
) -> Result<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>), (&'static str, String)> {
    let chain = certificates(cert_pem).map_err(|message| ("store.redis_tls_cert_file", message))?;
    // The key is a credential: its parse error, which may quote a line of
    // it, is not passed on.
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|_| {
        (
            "store.redis_tls_key_file",
            "holds no PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned(),
        )
    })?;
    Ok((chain, key))
}
