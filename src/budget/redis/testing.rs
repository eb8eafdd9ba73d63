//! Redis servers that tests start themselves: a lone `redis-server` on a
//! free loopback port (killed when dropped), and one 3-primary Redis
//! Cluster shared by every test of the binary.
//!
//! The cluster lives in a static, whose destructor never runs, so a small
//! watchdog shell kills its servers (and removes their files) once this
//! test process is gone.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long a server gets to answer PING after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before giving up on starting a server.
const PORT_TRIES: usize = 20;

/// The shared server every machine and CI run of this project has.
pub const SHARED_URL: &str = "redis://127.0.0.1:6379";

/// A `redis-server` child process on a loopback port.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    /// Starts a server on a free port, with `extra` arguments.
    pub fn start(extra: &[&str]) -> RedisServer {
        for _ in 0..PORT_TRIES {
            if let Some(server) = RedisServer::start_on(free_port(false), extra) {
                return server;
            }
        }
        panic!("could not start redis-server on a free port");
    }

    /// Starts a server on `port`; `None` if it exits (the port was taken
    /// meanwhile) or never answers.
    pub fn start_on(port: u16, extra: &[&str]) -> Option<RedisServer> {
        let port_arg = port.to_string();
        let mut args = vec![
            "--port",
            &port_arg,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
        ];
        args.extend_from_slice(extra);
        let child = Command::new("redis-server")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed to run the Redis tests");
        let mut server = RedisServer { child, port };
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = server.child.try_wait() {
                return None;
            }
            if answers(port) {
                return Some(server);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        server.stop();
        None
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A port nothing listens on now; with `bus`, also `port + 10000` (a
/// cluster node's bus port).
pub fn free_port(bus: bool) -> u16 {
    loop {
        let listener =
            TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("binding a loopback port");
        let port = listener.local_addr().expect("a bound address").port();
        if !bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Whether a server on `port` answers PING.
pub fn answers(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect((Ipv4Addr::LOCALHOST, port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

/// A running 3-primary cluster; its servers are killed and its files
/// removed when it drops.
pub struct Cluster {
    nodes: Vec<RedisServer>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts three cluster nodes on free ports and joins them.
    pub fn start() -> Cluster {
        let ports: Vec<u16> = (0..3).map(|_| free_port(true)).collect();
        Cluster::start_on(&ports)
    }

    /// Starts a cluster on `ports` (each with its bus port free), or
    /// panics.
    pub fn start_on(ports: &[u16]) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-redis-cluster-")
            .tempdir()
            .expect("a temporary directory");
        let nodes: Vec<RedisServer> = ports
            .iter()
            .map(|port| {
                let config = dir.path().join(format!("nodes-{port}.conf"));
                let config = config.to_string_lossy();
                let extra = ["--cluster-enabled", "yes", "--cluster-config-file", &config];
                RedisServer::start_on(*port, &extra)
                    .unwrap_or_else(|| panic!("could not start a cluster node on port {port}"))
            })
            .collect();
        let mut create = Command::new("redis-cli");
        create.arg("--cluster").arg("create");
        for node in &nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let output = create
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("redis-cli must be installed to run the cluster tests");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed: {}",
            String::from_utf8_lossy(&output.stdout)
        );
        let deadline = Instant::now() + START_TIMEOUT;
        while !nodes.iter().all(|node| cluster_ok(node.port)) {
            assert!(
                Instant::now() < deadline,
                "the cluster never reached cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Cluster { nodes, dir }
    }

    /// A `redis+cluster://` URL naming every node.
    pub fn url(&self) -> String {
        cluster_url(self.nodes.iter().map(|node| node.port))
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }
}

/// A `redis+cluster://` URL naming `ports` on the loopback address.
pub fn cluster_url(ports: impl IntoIterator<Item = u16>) -> String {
    let hosts: Vec<String> = ports
        .into_iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    format!("redis+cluster://{}", hosts.join(","))
}

/// The cluster shared by every test of this binary, started on first use.
pub fn cluster() -> &'static Cluster {
    static CLUSTER: OnceLock<Cluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        let cluster = Cluster::start();
        watch(&cluster);
        cluster
    })
}

/// Runs `redis-cli -p <port> <args>` and returns its output.
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .arg("-p")
        .arg(port.to_string())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli must be installed to run the Redis tests");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn cluster_ok(port: u16) -> bool {
    redis_cli(port, &["cluster", "info"]).contains("cluster_state:ok")
}

/// Kills the cluster's nodes and removes its files once this process has
/// exited, for a cluster that is never dropped.
fn watch(cluster: &Cluster) {
    let pids: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| node.pid().to_string())
        .collect();
    let dir = cluster.dir.path();
    let script = format!(
        "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill {pids} 2>/dev/null; sleep 1; rm -rf '{dir}'",
        parent = std::process::id(),
        pids = pids.join(" "),
        dir = dir.display(),
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
