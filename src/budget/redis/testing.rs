//! Redis servers that tests start themselves: the integration tests' own
//! (`tests/redis_support/servers.rs`, a lone `redis-server` on a free
//! loopback port and a 3-primary Redis Cluster), and one cluster shared by
//! every unit test of the binary.
//!
//! The shared cluster lives in a static, whose destructor never runs, so a
//! small watchdog shell kills its servers (and removes their files) once
//! this test process is gone.

use std::process::{Command, Stdio};
use std::sync::OnceLock;

// The integration tests use the parts the unit tests do not.
#[allow(dead_code)]
#[path = "../../../tests/redis_support/servers.rs"]
mod servers;

pub use servers::{cluster_url, free_port, redis_cli, Cluster, RedisServer};

/// The shared server every machine and CI run of this project has.
pub const SHARED_URL: &str = "redis://127.0.0.1:6379";

/// The cluster shared by every test of this binary, started on first use.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = Cluster::start();
        watch(&cluster);
        cluster
    })
}

/// Kills the cluster's nodes and removes its files once this process has
/// exited, for a cluster that is never dropped.
fn watch(cluster: &Cluster) {
    let pids: Vec<String> = cluster.pids().iter().map(u32::to_string).collect();
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill {pids} 2>/dev/null; sleep 1; rm -rf '{dir}'",
        parent = std::process::id(),
        pids = pids.join(" "),
        dir = cluster.dir().display(),
    );
    // Detached: the outer shell exits at once, the loop runs on.
    let status = Command::new("sh")
        .args(["-c", &format!("({script}) >/dev/null 2>&1 &")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("starting the cluster watchdog");
    assert!(status.success(), "starting the cluster watchdog: {status}");
}
