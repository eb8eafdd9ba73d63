//! Redis servers that tests start themselves: the integration tests' own
//! (`tests/it/redis_support/servers.rs`, a lone `redis-server` on a free
//! loopback port and a 3-primary Redis Cluster), one lone server shared by
//! every unit test of the binary that needs no server of its own
//! ([`shared_url`]), and one cluster shared the same way.
//!
//! The shared servers live in statics, whose destructors never run, so a
//! watchdog kills them (and removes their files) once this test process is
//! gone.

use std::sync::OnceLock;

// The integration tests use the parts the unit tests do not.
#[allow(dead_code)]
#[path = "../../../tests/it/redis_support/servers.rs"]
mod servers;

pub use servers::{cluster_url, free_port, redis_cli, Cluster, RedisServer};

/// The URL of the server shared by this process's unit tests that need no
/// server of their own: a `redis-server` on a free port, started on first
/// use.
pub fn shared_url() -> &'static str {
    servers::shared().url()
}

/// The cluster shared by every test of this binary, started on first use.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<(Cluster, servers::Watchdog)> = OnceLock::new();
    let (cluster, _watchdog) = CLUSTER.get_or_init(|| {
        let cluster = Cluster::start();
        let watchdog = servers::reap_at_exit(&cluster.pids(), cluster.dir());
        (cluster, watchdog)
    });
    cluster
}
