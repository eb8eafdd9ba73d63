//! The connection to Redis: one node or a cluster behind one multiplexed,
//! self-healing handle, and the timeout and retry policy every call goes
//! through.
//!
//! URLs:
//! - `redis://[user:password@]host[:port][/db]` (or `unix://…`): one node,
//!   through a [`ConnectionManager`], which reconnects by itself.
//! - `redis+cluster://[user:password@]host:port[,host:port…]`, or a
//!   `redis://` URL naming several comma-separated `host:port`s: a Redis
//!   Cluster seeded from those nodes, through a cluster connection that
//!   follows the slot map (MOVED/ASK) and sends every keyed command to the
//!   slot's primary.
//!
//! Over TLS: `rediss://…` and `rediss+cluster://…` (or `rediss://` with
//! several hosts). The server's certificate is always verified, against
//! the configured CA or else the Mozilla roots compiled in; a client
//! certificate is offered when configured. `#insecure`, which would skip
//! the verification, is refused.
//!
//! Neither connects before the first call, so the gateway starts while
//! Redis is down and `/readyz` says so until it answers. Concurrent calls
//! share one connection per node and are pipelined on it.

use std::time::Duration;

use ::redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use ::redis::cluster::{ClusterClientBuilder, ClusterConfig};
use ::redis::cluster_async::ClusterConnection;
use ::redis::{
    ClientTlsConfig, Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, RetryMethod,
    ScriptInvocation, TlsCertificates, Value,
};

use crate::budget::StoreError;
use crate::config::RedisTls;

/// How long one attempt of a call may take before it is abandoned.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts per call: the scripts are idempotent on their ids, so an
/// attempt that timed out (and may still have run) is safe to repeat.
const CALL_ATTEMPTS: u32 = 3;
/// The pause before the second attempt, doubled before each later one.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// A connection attempt to a dead address fails within this.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// The error code of a script's refusal of its arguments (`fail` in
/// `lua/common.lua`).
const SCRIPT_REFUSAL: &str = "TOLLGATE";
/// Redirect retries inside one cluster attempt, and their waits (ms).
const CLUSTER_RETRIES: u32 = 4;
const CLUSTER_MIN_RETRY_WAIT_MS: u64 = 10;
const CLUSTER_MAX_RETRY_WAIT_MS: u64 = 200;

#[derive(Debug, thiserror::Error)]
pub enum RedisUrlError {
    /// The URL is never echoed: it may carry a password.
    #[error("the Redis URL is malformed: {0}")]
    Malformed(&'static str),
    #[error(
        "#insecure would turn off the check of the Redis server's certificate, \
         which tollgate does not do"
    )]
    Insecure,
    #[error("TLS certificates are configured, but the Redis URL is not rediss://")]
    TlsWithoutRediss,
    /// A certificate or key rustls cannot use (the config check reads
    /// them first, so this is rare).
    #[error("the Redis TLS certificates are unusable: {0}")]
    Certificates(String),
}

/// How calls are timed out and retried.
#[derive(Clone, Copy, Debug)]
pub(super) struct CallPolicy {
    pub timeout: Duration,
    pub attempts: u32,
    pub first_backoff: Duration,
}

impl Default for CallPolicy {
    fn default() -> Self {
        CallPolicy {
            timeout: CALL_TIMEOUT,
            attempts: CALL_ATTEMPTS,
            first_backoff: FIRST_BACKOFF,
        }
    }
}

/// One request to Redis: a plain command, or a script called by its SHA
/// (and loaded again if Redis answers NOSCRIPT).
#[derive(Clone, Copy)]
pub(super) enum Request<'a> {
    Command(&'a Cmd),
    Script(&'a ScriptInvocation<'a>),
}

/// A multiplexed handle to one node or to a cluster; clones share it.
#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl Connection {
    /// Builds the handle without connecting, with `tls`'s certificates for
    /// a `rediss://` URL. Must be called from within a Tokio runtime, which
    /// drives the connection's tasks.
    pub fn open(
        url: &str,
        tls: &RedisTls,
        policy: CallPolicy,
    ) -> Result<Connection, RedisUrlError> {
        let over_tls = url.starts_with("rediss");
        if url
            .split_once('#')
            .is_some_and(|(_, fragment)| fragment == "insecure")
        {
            return Err(RedisUrlError::Insecure);
        }
        let certificates = certificates(tls);
        if certificates.is_some() && !over_tls {
            return Err(RedisUrlError::TlsWithoutRediss);
        }
        if over_tls {
            use_ring_crypto();
        }
        match cluster_nodes(url)? {
            Some(nodes) => {
                // Redirects (MOVED, ASK, TRYAGAIN during a failover) are
                // followed inside one attempt, briefly: the policy's
                // timeout bounds the attempt anyway.
                let mut builder = ClusterClientBuilder::new(nodes)
                    .connection_timeout(CONNECT_TIMEOUT)
                    .response_timeout(policy.timeout)
                    .retries(CLUSTER_RETRIES)
                    .min_retry_wait(CLUSTER_MIN_RETRY_WAIT_MS)
                    .max_retry_wait(CLUSTER_MAX_RETRY_WAIT_MS);
                if let Some(certificates) = certificates {
                    builder = builder.certs(certificates);
                }
                let client = builder
                    .build()
                    .map_err(|error| cluster_build_error(&error, over_tls))?;
                let config = ClusterConfig::new()
                    .set_connection_timeout(CONNECT_TIMEOUT)
                    .set_response_timeout(policy.timeout);
                Ok(Connection::Cluster(
                    client.get_pending_async_connection_with_config(config),
                ))
            }
            None => {
                let client = match certificates {
                    Some(certificates) => ::redis::Client::build_with_tls(url, certificates)
                        .map_err(|error| single_build_error(&error))?,
                    None => ::redis::Client::open(url)
                        .map_err(|_| RedisUrlError::Malformed("not a valid redis:// URL"))?,
                };
                // Few, quick reconnect attempts inside the manager: the
                // caller's own retries and the next call drive reconnection,
                // so a dead server fails a call fast instead of queueing it.
                let config = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(CONNECT_TIMEOUT))
                    .set_response_timeout(Some(policy.timeout))
                    .set_number_of_retries(1)
                    .set_min_delay(Duration::from_millis(20))
                    .set_max_delay(Duration::from_millis(200));
                let manager = ConnectionManager::new_lazy_with_config(client, config)
                    .map_err(|_| RedisUrlError::Malformed("not a valid redis:// URL"))?;
                Ok(Connection::Single(manager))
            }
        }
    }

    /// Sends `request` under the policy: each try is cut off after
    /// `policy.timeout`; timeouts and connection errors are retried with a
    /// doubling backoff; anything else is not, and a script's refusal of
    /// its arguments (`lua/common.lua`'s `fail`) is `Refused`.
    pub async fn call<T: FromRedisValue>(
        &self,
        policy: CallPolicy,
        what: &'static str,
        request: Request<'_>,
    ) -> Result<T, StoreError> {
        let mut backoff = policy.first_backoff;
        let mut tries = 0;
        loop {
            tries += 1;
            let mut connection = self.clone();
            let attempt = async {
                match request {
                    Request::Command(cmd) => cmd.query_async(&mut connection).await,
                    Request::Script(invocation) => invocation.invoke_async(&mut connection).await,
                }
            };
            let error = match tokio::time::timeout(policy.timeout, attempt).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(error)) if error.code() == Some(SCRIPT_REFUSAL) => {
                    let detail = error.detail().unwrap_or_default();
                    return Err(StoreError::Refused(format!("{what}: {detail}")));
                }
                Ok(Err(error)) if !is_transient(&error) => {
                    return Err(StoreError::Unavailable(format!("{what}: {error}")));
                }
                Ok(Err(error)) => StoreError::Unavailable(format!("{what}: {error}")),
                Err(_elapsed) => StoreError::Timeout,
            };
            if tries >= policy.attempts.max(1) {
                return Err(error);
            }
            tracing::debug!(what, tries, %error, "retrying a budget store call");
            tokio::time::sleep(backoff).await;
            backoff = backoff.saturating_mul(2);
        }
    }
}

/// Worth another attempt: the connection or the cluster, not the request,
/// was the problem.
fn is_transient(error: &RedisError) -> bool {
    !matches!(error.retry_method(), RetryMethod::NoRetry)
}

impl ConnectionLike for Connection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Connection::Single(connection) => connection.req_packed_command(cmd),
            Connection::Cluster(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Connection::Single(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
            Connection::Cluster(connection) => {
                connection.req_packed_commands(pipeline, offset, count)
            }
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Connection::Single(connection) => connection.get_db(),
            Connection::Cluster(connection) => connection.get_db(),
        }
    }
}

/// The configured certificates in the redis crate's form; `None` when
/// neither a CA nor a client certificate is set (the server's certificate
/// is then checked against the compiled-in roots).
fn certificates(tls: &RedisTls) -> Option<TlsCertificates> {
    if tls.ca_pem.is_none() && tls.client.is_none() {
        return None;
    }
    Some(TlsCertificates {
        client_tls: tls.client.as_ref().map(|client| ClientTlsConfig {
            client_cert: client.cert_pem.as_bytes().to_vec(),
            client_key: client.key_pem.expose().as_bytes().to_vec(),
        }),
        root_cert: tls.ca_pem.as_ref().map(|pem| pem.as_bytes().to_vec()),
    })
}

/// rustls takes its cryptography from the process's default provider, or
/// else from the one provider compiled in, and panics if it cannot choose.
/// ring is the one this build uses (for the providers' HTTPS too); it is
/// made the default so that no dependency bringing another can leave
/// rustls to choose. A default already installed is kept.
fn use_ring_crypto() {
    let _already_installed = rustls::crypto::ring::default_provider().install_default();
}

/// Why a single-node client with certificates could not be built: the URL
/// or the certificates. Neither is quoted.
fn single_build_error(error: &RedisError) -> RedisUrlError {
    match error.kind() {
        ::redis::ErrorKind::InvalidClientConfig => {
            RedisUrlError::Malformed("not a valid rediss:// URL")
        }
        _ => RedisUrlError::Certificates(error.to_string()),
    }
}

/// Why a cluster client could not be built.
fn cluster_build_error(error: &RedisError, over_tls: bool) -> RedisUrlError {
    match error.kind() {
        ::redis::ErrorKind::InvalidClientConfig => {
            RedisUrlError::Malformed("not a valid cluster node list")
        }
        _ if over_tls => RedisUrlError::Certificates(error.to_string()),
        _ => RedisUrlError::Malformed("not a valid cluster node list"),
    }
}

/// The node URLs of a cluster URL, each with the URL's credentials; `None`
/// for a single-node URL.
fn cluster_nodes(url: &str) -> Result<Option<Vec<String>>, RedisUrlError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or(RedisUrlError::Malformed("no scheme"))?;
    let (node_scheme, explicit) = match scheme {
        "redis+cluster" => ("redis", true),
        "rediss+cluster" => ("rediss", true),
        "redis" | "rediss" => (scheme, false),
        _ => return Ok(None),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, _path) = rest.split_at(authority_end);
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    if !explicit && !hosts.contains(',') {
        return Ok(None);
    }
    if hosts.split(',').any(str::is_empty) {
        return Err(RedisUrlError::Malformed(
            "an empty host in the cluster node list",
        ));
    }
    let nodes = hosts
        .split(',')
        .map(|host| match userinfo {
            Some(userinfo) => format!("{node_scheme}://{userinfo}@{host}"),
            None => format!("{node_scheme}://{host}"),
        })
        .collect();
    Ok(Some(nodes))
}

/// The URL without its credentials, for logs.
pub(super) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<malformed>".to_owned();
    };
    let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let hosts = authority
        .rsplit_once('@')
        .map_or(authority, |(_, hosts)| hosts);
    // A query may carry a password too (`?password=`): drop it.
    let path = tail.split('?').next().unwrap_or_default();
    format!("{scheme}://{hosts}{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_node_urls_are_not_clusters() {
        assert_eq!(cluster_nodes("redis://127.0.0.1:6379").unwrap(), None);
        assert_eq!(cluster_nodes("redis://:pw@127.0.0.1:6379/2").unwrap(), None);
        assert_eq!(cluster_nodes("unix:///tmp/redis.sock").unwrap(), None);
    }

    #[test]
    fn cluster_urls_list_their_nodes_with_credentials() {
        assert_eq!(
            cluster_nodes("redis+cluster://u:p@10.0.0.1:7000,10.0.0.2:7001").unwrap(),
            Some(vec![
                "redis://u:p@10.0.0.1:7000".to_owned(),
                "redis://u:p@10.0.0.2:7001".to_owned()
            ])
        );
        assert_eq!(
            cluster_nodes("redis://h1:7000,h2:7000").unwrap(),
            Some(vec![
                "redis://h1:7000".to_owned(),
                "redis://h2:7000".to_owned()
            ])
        );
        assert_eq!(
            cluster_nodes("redis+cluster://h1:7000").unwrap(),
            Some(vec!["redis://h1:7000".to_owned()])
        );
        assert!(cluster_nodes("redis+cluster://h1:7000,,h2:7000").is_err());
        assert!(cluster_nodes("127.0.0.1:6379").is_err());
    }

    #[test]
    fn tls_cluster_urls_keep_tls_on_every_node() {
        assert_eq!(
            cluster_nodes("rediss+cluster://:pw@h1:7000,h2:7001").unwrap(),
            Some(vec![
                "rediss://:pw@h1:7000".to_owned(),
                "rediss://:pw@h2:7001".to_owned()
            ])
        );
        assert_eq!(
            cluster_nodes("rediss://h1:7000,h2:7001#x").unwrap(),
            Some(vec![
                "rediss://h1:7000".to_owned(),
                "rediss://h2:7001".to_owned()
            ])
        );
        assert_eq!(cluster_nodes("rediss://h1:6380").unwrap(), None);
    }

    /// A CA certificate and a client certificate with its key, as PEM.
    fn certificates_pem() -> RedisTls {
        use rcgen::{CertificateParams, KeyPair};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let key = KeyPair::generate().unwrap();
        let cert_pem = CertificateParams::new(vec!["gateway".to_owned()])
            .unwrap()
            .signed_by(&key, &rcgen::Issuer::new(ca, ca_key))
            .unwrap()
            .pem();
        RedisTls {
            ca_pem: Some(ca_pem),
            client: Some(crate::config::RedisClientCert {
                cert_pem,
                key_pem: crate::config::Secret::new(key.serialize_pem()),
            }),
        }
    }

    #[tokio::test]
    async fn tls_clients_are_built_with_their_certificates() {
        let policy = CallPolicy::default();
        let none = RedisTls::default();
        let tls = certificates_pem();
        for url in [
            "rediss://127.0.0.1:1",
            "rediss+cluster://127.0.0.1:1,127.0.0.1:2",
        ] {
            assert!(Connection::open(url, &none, policy).is_ok(), "{url}");
            assert!(Connection::open(url, &tls, policy).is_ok(), "{url}");
            // The certificates reach the client: unusable ones fail it.
            let broken = RedisTls {
                ca_pem: Some(
                    "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n".to_owned(),
                ),
                client: None,
            };
            assert!(
                matches!(
                    Connection::open(url, &broken, policy),
                    Err(RedisUrlError::Certificates(_))
                ),
                "{url}"
            );
        }
        for url in [
            "redis://127.0.0.1:1",
            "redis+cluster://127.0.0.1:1,127.0.0.1:2",
        ] {
            assert!(matches!(
                Connection::open(url, &tls, policy),
                Err(RedisUrlError::TlsWithoutRediss)
            ));
        }
        for url in [
            "rediss://127.0.0.1:1/#insecure",
            "rediss+cluster://127.0.0.1:1,127.0.0.1:2#insecure",
        ] {
            assert!(matches!(
                Connection::open(url, &none, policy),
                Err(RedisUrlError::Insecure)
            ));
        }
    }

    #[test]
    fn redaction_drops_credentials() {
        assert_eq!(
            redacted("redis://user:s3cret@10.0.0.1:6379/0?password=x"),
            "redis://10.0.0.1:6379/0"
        );
        assert_eq!(
            redacted("redis+cluster://:s3cret@h1:1,h2:2"),
            "redis+cluster://h1:1,h2:2"
        );
        assert_eq!(redacted("redis://127.0.0.1"), "redis://127.0.0.1");
    }
}
