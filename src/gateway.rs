//! The [`Gateway`]: what every request shares — the checked config, the
//! keys and orgs, the budget store, the upstream pool, the metrics and the
//! settlements still finishing.

use std::sync::Arc;

use crate::alerts::Alerts;
use crate::budget::BudgetStore;
use crate::config::Config;
use crate::directory::Directory;
use crate::family::Credentials;
use crate::metrics::Metrics;
use crate::settle::Settler;
use crate::upstream::{self, UpstreamClient};

/// Everything a request needs, shared by all connections.
pub struct Gateway {
    pub config: Config,
    /// The keys and orgs, from the config file and the store.
    pub directory: Arc<Directory>,
    pub store: BudgetStore,
    pub client: UpstreamClient,
    /// The gateway's credential to each provider.
    pub credentials: Credentials,
    pub metrics: Arc<Metrics>,
    /// Issues the ticket that settles each call, and keeps count of the
    /// settlements still finishing after their request is gone, which
    /// shutdown waits for.
    pub settler: Settler,
    /// Queues spending alerts seen in reserves' answers (off without a
    /// webhook).
    pub alerts: Alerts,
}

impl Gateway {
    pub fn new(config: Config, store: BudgetStore) -> std::io::Result<Gateway> {
        for provider in &config.providers {
            if provider.api_key.is_none() && provider.vertex.is_none() {
                tracing::warn!(
                    provider = %provider.name,
                    "provider has no API key: set {} (calls routed to it are refused until then)",
                    provider.api_key_env
                );
            }
        }
        crate::tokenizer::cache::CountCache::configure(config.server.token_count_cache_mb);
        crate::estimate::warm_up();
        let metrics = Arc::new(Metrics::new());
        let settler = Settler::new(store.clone(), metrics.clone(), config.store.reservation_ttl);
        let alerts = Alerts::new(&config, store.clone(), metrics.clone());
        let client = upstream::client()?;
        let credentials = Credentials::new(&config, &client).map_err(std::io::Error::other)?;
        Ok(Gateway {
            alerts,
            directory: Arc::new(Directory::new(&config)),
            client,
            credentials,
            store,
            metrics,
            settler,
            config,
        })
    }
}
