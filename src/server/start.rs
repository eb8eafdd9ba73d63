//! Starting a gateway: [`start`] builds it from its config and store,
//! starts every background task beside the server (the sweep, the ledger
//! drain, the keys-and-orgs refresh, alert delivery) and hands back one
//! guard, [`Running`]. The binary and the in-process tests start a gateway
//! this one way, so a test runs what production runs.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{serve, Listeners, SHUTDOWN_GRACE};
use crate::alerts::deliver::Delivering;
use crate::budget::{BudgetStore, SweeperGuard};
use crate::config::Config;
use crate::directory::KeepingUp;
use crate::gateway::Gateway;

/// How often expired reservations are swept back to their caps, and the
/// ledger drained to the sink, when no call comes to do it.
const BACKGROUND_EVERY: Duration = Duration::from_secs(1);

/// How a gateway started with [`start`] runs; the default is production's.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long shutdown waits for in-flight calls before it cuts them.
    pub grace: Duration,
    /// How often the periodic sweep runs; `None` for none, so only a
    /// reserve's own lazy sweep expires reservations (a test of that).
    pub sweep_every: Option<Duration>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            grace: SHUTDOWN_GRACE,
            sweep_every: Some(BACKGROUND_EVERY),
        }
    }
}

/// A gateway serving, and its background tasks. Dropping it stops the
/// tasks; the server stops when its shutdown signal completes, and
/// [`Running::stopped`] waits for that.
pub struct Running {
    gateway: Arc<Gateway>,
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    server: JoinHandle<io::Result<()>>,
    _tasks: Tasks,
}

/// The background tasks; each stops when its guard drops.
struct Tasks {
    _sweep: Option<SweeperGuard>,
    _drain: Option<SweeperGuard>,
    _directory: KeepingUp,
    _alerts: Option<Delivering>,
}

/// Builds the gateway of `config` on `store`, reads its keys and orgs,
/// starts its background tasks and serves `listeners` until `shutdown`
/// completes (then as [`serve`] says: in-flight calls finish or are cut
/// after the grace, every settlement is waited for, the store flushed).
pub async fn start(
    config: Config,
    store: BudgetStore,
    listeners: impl Into<Listeners>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    options: Options,
) -> io::Result<Running> {
    let listeners = listeners.into();
    let addr = listeners.main.local_addr()?;
    let admin_addr = match &listeners.admin {
        Some(admin) => Some(admin.local_addr()?),
        None => None,
    };
    // Warming the tokenizers takes a while: off the runtime's threads.
    let gateway = tokio::task::spawn_blocking(move || Gateway::new(config, store))
        .await
        .map_err(io::Error::other)??;
    let gateway = Arc::new(gateway);
    let tasks = Tasks {
        _sweep: options.sweep_every.map(|every| {
            crate::sweep::spawn(gateway.store.clone(), gateway.metrics.clone(), every)
        }),
        _drain: start_drain(&gateway),
        _directory: keep_directory_up(&gateway).await,
        _alerts: crate::alerts::deliver::spawn(
            &gateway.config.alerts,
            &gateway.store,
            &gateway.metrics,
        ),
    };
    let server = tokio::spawn(serve(listeners, gateway.clone(), shutdown, options.grace));
    Ok(Running {
        gateway,
        addr,
        admin_addr,
        server,
        _tasks: tasks,
    })
}

impl Running {
    /// What every request shares: its config, store and metrics.
    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    /// Where the gateway listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the admin API listens, when it has a listener of its own.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// Waits until the server has stopped (its shutdown signal completed
    /// and every call settled), then stops the background tasks.
    pub async fn stopped(mut self) -> io::Result<()> {
        let ended = (&mut self.server).await.map_err(io::Error::other)?;
        drop(self);
        ended
    }
}

/// On Redis, the ledger drain if this gateway has a sink; without one, the
/// start-up log says what becomes of the ledger.
fn start_drain(gateway: &Gateway) -> Option<SweeperGuard> {
    let BudgetStore::Redis(redis) = &gateway.store else {
        return None;
    };
    let store = &gateway.config.store;
    let Some(sink) = &store.ledger_sink else {
        tracing::info!(
            buffer_hours = store.ledger_buffer.as_secs() / 3600,
            "ledger: no store.ledger_sink_path on this gateway, so it does not drain; entries \
             no other gateway drains stay in Redis store.ledger_buffer_hours, then are folded \
             into their counters' sums and dropped"
        );
        return None;
    };
    Some(crate::drain::spawn(
        redis.clone(),
        sink.clone(),
        gateway.metrics.clone(),
        crate::drain::DRAIN_EVERY,
    ))
}

/// Reads the store's keys and orgs before the first request on a store in
/// this process or on this machine (the memory and SQLite stores answer
/// at once), and keeps them up to date while the server runs. On Redis,
/// which may still be connecting, the first read happens in the
/// background.
async fn keep_directory_up(gateway: &Arc<Gateway>) -> KeepingUp {
    if !matches!(gateway.store, BudgetStore::Redis(_)) {
        if let Err(error) = gateway.directory.reload(&gateway.store).await {
            tracing::error!(%error, "cannot read keys and orgs from the store");
        }
    }
    KeepingUp::spawn(gateway.directory.clone(), gateway.store.clone())
}
