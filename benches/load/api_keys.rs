//! Keys made through the admin API (`--api-keys N`): just after a gateway
//! starts, N keys in one org of their own, made as an operator's tooling
//! would, several calls in flight; the gateway's calls then go out with
//! them in turn instead of with the config's one key. A gateway finds an
//! API key in a hash map like a config key, so throughput and latency
//! should not move; spreading the calls over every key is what shows it.
//!
//! The org is made through the API too, not taken from the config: the
//! keys stay in the store after the run (on Redis under
//! `tg:{tollgate:admin}`, shared by every gateway of the machine), and a
//! key whose org only one gateway's config knows would be refused, with
//! an error logged, by every other gateway on each reload. Ids carry the
//! run's id, so the run's budget counters are among the Redis keys the run
//! deletes; the documents themselves stay, as an admin API keeps them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::task::JoinSet;

use crate::client::{Conn, Target};
use crate::error::BenchError;

/// Admin calls in flight while the keys are made.
const IN_FLIGHT: usize = 32;
/// Each key's cap: a call reserves about $0.0001 and is charged less, so
/// even one key taking every call of a run stays far below it.
const KEY_CAP_USD: &str = "1000.00";
/// The org's cap, as the config's org.
const ORG_CAP_USD: &str = "1000000.00";
/// Longest making the keys may take: each write copies the gateway's maps
/// of keys, and writes finishing out of order make it read every
/// document again, so it grows faster than the count.
fn time_limit(count: usize) -> Duration {
    Duration::from_secs(60) + Duration::from_millis(100) * u32::try_from(count).unwrap_or(u32::MAX)
}

/// Makes `count` keys on the gateway `target` (admin key `admin_key`), in
/// a new org; ids start with `prefix`; each key has the fields of `caps`
/// too (an object) when given. Returns their secrets.
pub async fn make(
    target: &Target,
    admin_key: &str,
    prefix: &str,
    count: usize,
    caps: Option<&Value>,
) -> Result<Vec<String>, BenchError> {
    let admin = Arc::new(Target::new(target.label, target.addr, admin_key)?);
    let org = format!("{prefix}-org");
    let body = json!({"id": org, "cap_usd": ORG_CAP_USD, "period": "total"});
    let mut conn = Conn::open(admin.addr).await?;
    created(&admin, &mut conn, "/admin/v1/orgs", &body).await?;
    let started = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = JoinSet::new();
    for _ in 0..IN_FLIGHT.min(count) {
        let (admin, next, prefix, org, caps) = (
            admin.clone(),
            next.clone(),
            prefix.to_owned(),
            org.clone(),
            caps.cloned(),
        );
        workers.spawn(async move {
            make_keys(&admin, &next, &prefix, &org, count, caps.as_ref()).await
        });
    }
    let mut secrets = vec![String::new(); count];
    let collect = async {
        while let Some(done) = workers.join_next().await {
            let made = done.map_err(|e| BenchError::Invalid(format!("a key maker: {e}")))??;
            for (index, secret) in made {
                secrets[index] = secret;
            }
        }
        Ok::<(), BenchError>(())
    };
    tokio::time::timeout(time_limit(count), collect)
        .await
        .map_err(|_| BenchError::Timeout("making the API keys", time_limit(count)))??;
    eprintln!(
        "  {:<2} {count} keys made through the admin API in {:.1} s",
        target.label,
        started.elapsed().as_secs_f64()
    );
    Ok(secrets)
}

/// One caller's share of the keys: the next index until `count`.
async fn make_keys(
    admin: &Target,
    next: &AtomicUsize,
    prefix: &str,
    org: &str,
    count: usize,
    caps: Option<&Value>,
) -> Result<Vec<(usize, String)>, BenchError> {
    let mut conn = Conn::open(admin.addr).await?;
    let mut made = Vec::new();
    loop {
        let index = next.fetch_add(1, Ordering::Relaxed);
        if index >= count {
            return Ok(made);
        }
        let mut body = json!({
            "id": format!("{prefix}-{index}"),
            "org": org,
            "cap_usd": KEY_CAP_USD,
            "period": "total",
        });
        if let (Value::Object(fields), Some(Value::Object(extra))) = (&mut body, caps) {
            fields.extend(extra.clone());
        }
        let reply = created(admin, &mut conn, "/admin/v1/keys", &body).await?;
        let secret = reply["secret"].as_str().ok_or_else(|| {
            BenchError::Invalid(format!("{}: a new key without secret", admin.label))
        })?;
        made.push((index, secret.to_owned()));
    }
}

/// POSTs `body` to `path` and expects 201; returns the reply's JSON.
async fn created(
    admin: &Target,
    conn: &mut Conn,
    path: &str,
    body: &Value,
) -> Result<Value, BenchError> {
    if !conn.is_open() {
        *conn = Conn::open(admin.addr).await?;
    }
    let reply = conn
        .call(admin.post(path, Bytes::from(body.to_string()))?)
        .await?;
    if reply.status != 201 {
        return Err(BenchError::Status {
            what: format!("{} POST {path}", admin.label),
            status: reply.status,
            body: String::from_utf8_lossy(&reply.body).into_owned(),
        });
    }
    serde_json::from_slice(&reply.body)
        .map_err(|e| BenchError::Invalid(format!("{} POST {path}: {e}", admin.label)))
}
