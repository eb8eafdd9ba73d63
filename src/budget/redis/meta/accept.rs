//! `tollgate admin store accept-epoch`: an operator's word that the books
//! Redis holds now are the books, after Redis lost them.

use std::fmt;

use chrono::{DateTime, Utc};

use super::META_KEY;
use crate::budget::redis::RedisStore;
use crate::budget::Rules;
use crate::config::{Config, StoreBackend};

/// What `tollgate admin store accept-epoch` did.
#[derive(Clone, Debug)]
pub struct AcceptedEpoch {
    /// The Redis URL without credentials.
    pub endpoint: String,
    pub epoch: String,
    /// The epoch `tg:meta` held before, if it held one.
    pub previous: Option<String>,
    /// Redis's clock when it was accepted.
    pub at: DateTime<Utc>,
}

impl fmt::Display for AcceptedEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "accepted the store epoch {} on {} at {}",
            self.epoch,
            self.endpoint,
            self.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        )?;
        match &self.previous {
            Some(previous) => writeln!(f, "{META_KEY} held the epoch {previous} before")?,
            None => writeln!(
                f,
                "{META_KEY} was missing (Redis restarted without its data?)"
            )?,
        }
        writeln!(
            f,
            "gateways that failed closed serve again within about a second; \
             the spent counters the store lost restart from zero"
        )
    }
}

/// `tollgate admin store accept-epoch`: accepts a fresh epoch on the Redis
/// store `config` names.
pub async fn accept_epoch(config: &Config) -> Result<AcceptedEpoch, String> {
    let StoreBackend::Redis { url, tls } = &config.store.backend else {
        return Err("accept-epoch is for the Redis store (store.backend = \"redis\")".to_owned());
    };
    let store = RedisStore::connect_tls(url.expose(), tls, Rules::of(&config.store))
        .await
        .map_err(|e| format!("store.redis_url: {e}"))?;
    let endpoint = store.endpoint().to_owned();
    store
        .accept_epoch()
        .await
        .map_err(|e| format!("cannot accept an epoch on {endpoint}: {e}"))
}
