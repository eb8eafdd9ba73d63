//! The store a config names, opened.

use super::{
    BudgetStore, MemoryStore, RedisStore, RedisUrlError, Rules, SqliteOpenError, SqliteStore,
};
use crate::budget::Upkeep;
use crate::config::{Config, StoreBackend};

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("store.redis_url: {0}")]
    RedisUrl(#[from] RedisUrlError),
    #[error("store.sqlite_path: {0}")]
    Sqlite(#[from] SqliteOpenError),
}

/// Opens the budget store `config` names. The SQLite store opens its file
/// (or refuses to start, saying why); the Redis store connects in the
/// background: the gateway starts while Redis is down, and its `/readyz`
/// answers 503 until Redis does.
pub async fn open(config: &Config) -> Result<BudgetStore, OpenError> {
    let store = &config.store;
    let rules = Rules::of(store);
    Ok(match &store.backend {
        StoreBackend::Memory => {
            tracing::warn!(
                "budget store: memory; every counter, hold and ledger entry is lost when \
                 this process stops (for tests and benchmarks; use sqlite or redis to keep the books)"
            );
            // Its ledger dies with the process, so keeping it for weeks
            // would only grow the process by every call served: entries are
            // folded once a retry of their call can no longer arrive, and
            // the folded sums keep `counter == folded + ledger + open`.
            BudgetStore::Memory(MemoryStore::new(Rules {
                ledger_retention: store.ledger_retention.min(store.closed_record),
                ..rules
            }))
        }
        StoreBackend::Sqlite { path } => {
            let sqlite = SqliteStore::open(path, rules)?;
            tracing::info!(file = %path.display(), "budget store: sqlite");
            BudgetStore::Sqlite(sqlite)
        }
        StoreBackend::Redis { url, tls } => {
            let rules = Rules {
                ledger_retention: store.ledger_buffer,
                ..rules
            };
            let redis = RedisStore::connect_tls(url.expose(), tls, rules).await?;
            for key in &config.keys {
                redis.track_key(&key.id, key.org.as_deref());
            }
            BudgetStore::Redis(redis)
        }
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use super::*;
    use crate::budget::{Books, Period, Reports, ReserveRequest, Scope, ScopeKind, Settlement};
    use crate::usage::Usage;

    #[tokio::test]
    async fn the_memory_store_folds_its_ledger_once_a_retry_can_no_longer_arrive() {
        let config = Config::from_toml_str(
            r#"
[store]
backend = "memory"
closed_record_secs = 1

[[providers]]
name = "openai"
kind = "openai"
base_url = "https://api.openai.com/"
api_key_env = "OPENAI_API_KEY"
models = ["gpt-*"]

[[keys]]
id = "alice"
key_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
cap_usd = "1"
period = "day"
"#,
            Path::new("test.toml"),
        )
        .unwrap();
        let store = open(&config).await.unwrap();
        let BudgetStore::Memory(memory) = &store else {
            panic!("the config names the memory store");
        };
        let key = Scope {
            kind: ScopeKind::Key,
            id: "alice".to_owned(),
            cap: 1_000_000,
            period: Period::Day,
        };
        store
            .reserve(&ReserveRequest {
                caps: Vec::new(),
                tokens: 0,
                customer: None,
                exec_id: "call-1".to_owned(),
                key,
                org: None,
                model: "gpt-4o-mini".to_owned(),
                amount: 500,
                min_amount: 500,
                run: None,
                ttl: Duration::from_secs(60),
            })
            .await
            .unwrap();
        store
            .settle(&Settlement {
                exec_id: "call-1".to_owned(),
                key: "alice".to_owned(),
                org: None,
                model: "gpt-4o-mini".to_owned(),
                usage: Usage::default(),
                actual: 300,
                estimated: false,
            })
            .await
            .unwrap();
        assert_eq!(memory.ledger().len(), 1);
        tokio::time::sleep(Duration::from_millis(1100)).await;
        store.sweep().await.unwrap();
        assert!(memory.ledger().is_empty(), "the entry was not folded");
        let books = store.reconcile().await.unwrap();
        assert_eq!(books.len(), 1);
        assert_eq!(books[0].counter, 300);
        assert_eq!(books[0].folded, 300);
    }
}
