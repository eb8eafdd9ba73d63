//! The [`Gateway`]: what every request shares — the checked config, the
//! keys, the budget store, the upstream pool, the metrics and the
//! settlements still finishing — and the scopes a key spends from.

use std::sync::Arc;

use crate::auth::Keys;
use crate::budget::{self, BudgetStore, Scope, ScopeKind};
use crate::config::{Config, KeyConfig};
use crate::metrics::Metrics;
use crate::settle::Settler;
use crate::upstream::{self, UpstreamClient};

/// Everything a request needs, shared by all connections.
pub struct Gateway {
    pub config: Config,
    pub keys: Keys,
    pub store: BudgetStore,
    pub client: UpstreamClient,
    pub metrics: Arc<Metrics>,
    /// Issues the ticket that settles each call, and keeps count of the
    /// settlements still finishing after their request is gone, which
    /// shutdown waits for.
    pub settler: Settler,
    /// Every tag the configured scopes' budget data lives under (see
    /// [`budget::tags`]): what the sweep and the metrics read.
    pub budget_tags: Vec<String>,
}

impl Gateway {
    pub fn new(config: Config, store: BudgetStore) -> std::io::Result<Gateway> {
        for provider in &config.providers {
            if provider.api_key.is_none() {
                tracing::warn!(
                    provider = %provider.name,
                    "provider has no API key: set {} (calls routed to it are refused until then)",
                    provider.api_key_env
                );
            }
        }
        crate::estimate::warm_up();
        let metrics = Arc::new(Metrics::new());
        let settler = Settler::new(store.clone(), metrics.clone(), config.store.reservation_ttl);
        Ok(Gateway {
            keys: Keys::new(config.keys.clone()),
            client: upstream::client()?,
            store,
            metrics,
            settler,
            budget_tags: budget::tags(&config),
            config,
        })
    }

    /// The scopes a key spends from: itself and its org.
    pub fn scopes(&self, key: &KeyConfig) -> (Scope, Option<Scope>) {
        let key_scope = Scope {
            kind: ScopeKind::Key,
            id: key.id.clone(),
            cap: key.cap,
            period: key.period,
        };
        let org_scope = key.org.as_ref().and_then(|id| {
            self.config
                .orgs
                .iter()
                .find(|o| &o.id == id)
                .map(|org| Scope {
                    kind: ScopeKind::Org,
                    id: org.id.clone(),
                    cap: org.cap,
                    period: org.period,
                })
        });
        (key_scope, org_scope)
    }
}
