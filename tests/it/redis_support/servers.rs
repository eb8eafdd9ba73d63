//! Redis servers a test starts itself: a lone `redis-server` on a free
//! loopback port that can be killed and started again empty on the same
//! port, and a 3-primary Redis Cluster. Everything is killed, and its files
//! removed, when dropped.
//!
//! Beside them, one server per test process ([`shared`]) for the tests
//! that need a Redis but not one of their own: they keep to hash tags of
//! their own on it. Nothing assumes a Redis on 6379.
//!
//! The integration tests and the library's unit tests
//! (`src/budget/redis/testing.rs`) share this file.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a server gets to answer PING after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Ports tried before giving up on starting a server.
const PORT_TRIES: usize = 20;

/// A `redis-server` child on a loopback port, with no persistence, so a
/// restart comes back empty (no data, no script cache).
pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    extra: Vec<String>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// Starts a server on a free port with `extra` arguments.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        for _ in 0..PORT_TRIES {
            let mut server = RedisServer::stopped_on(free_port(false), extra);
            if server.restart_once() {
                return server;
            }
        }
        panic!("could not start redis-server on a free port");
    }

    /// A server not running yet, to be started on `port` by
    /// [`RedisServer::restart`].
    pub fn stopped_on(port: u16, extra: &[&str]) -> RedisServer {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-redis-")
            .tempdir()
            .unwrap();
        RedisServer {
            child: None,
            port,
            extra: extra.iter().map(|arg| (*arg).to_owned()).collect(),
            dir,
        }
    }

    /// A server not running yet on a free port.
    pub fn stopped() -> RedisServer {
        RedisServer::stopped_on(free_port(false), &[])
    }

    /// Starts the server (again) on its port, empty; panics if it does not
    /// answer in time.
    pub fn restart(&mut self) {
        assert!(
            self.restart_once(),
            "redis-server did not come up on port {}",
            self.port
        );
    }

    fn restart_once(&mut self) -> bool {
        self.kill();
        let port = self.port.to_string();
        let dir = self.dir.path().to_string_lossy().into_owned();
        let child = Command::new("redis-server")
            .args(["--port", &port, "--bind", "127.0.0.1", "--dir", &dir])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed to run the Redis tests");
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(_)) = child.try_wait() {
                    // The port was taken meanwhile.
                    self.child = None;
                    return false;
                }
            }
            if answers(self.port) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.kill();
        false
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The process id while the server runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGKILL: the server vanishes without saving anything.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A loopback port nothing listens on now; with `bus`, also `port + 10000`
/// (a cluster node's bus port).
pub fn free_port(bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
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

// === One server per test process ===

/// A server that lives as long as this test process, in a static whose
/// destructor never runs: a watchdog ([`reap_at_exit`]) kills it and
/// removes its files once the process is gone.
pub struct ProcessServer {
    server: RedisServer,
    url: String,
    _watchdog: Watchdog,
}

impl ProcessServer {
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn port(&self) -> u16 {
        self.server.port
    }
}

/// The server shared by every test of this process that needs no server
/// of its own, started on first use.
pub fn shared() -> &'static ProcessServer {
    static SHARED: OnceLock<ProcessServer> = OnceLock::new();
    SHARED.get_or_init(|| {
        let server = RedisServer::start();
        let pids: Vec<u32> = server.pid().into_iter().collect();
        let watchdog = reap_at_exit(&pids, server.dir.path());
        ProcessServer {
            url: server.url(),
            server,
            _watchdog: watchdog,
        }
    })
}

/// A shell that kills servers once this process has exited: it reads its
/// stdin until end of file, and this process holds the write end of that
/// pipe until the kernel closes it at exit, however the process exits,
/// SIGKILL included. The pipe is close-on-exec, so no other child holds it
/// open. Keep the value for as long as the servers should live.
pub struct Watchdog {
    _shell: Child,
}

/// Starts a [`Watchdog`] that kills `pids` and removes `dir` once this
/// process has exited, for servers that are never dropped.
pub fn reap_at_exit(pids: &[u32], dir: &Path) -> Watchdog {
    let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
    let script = format!(
        "cat >/dev/null; kill {pids} 2>/dev/null; sleep 1; rm -rf '{dir}'",
        pids = pids.join(" "),
        dir = dir.display(),
    );
    let shell = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the Redis watchdog");
    Watchdog { _shell: shell }
}

// === Cluster ===

/// A 3-primary Redis Cluster on loopback.
pub struct Cluster {
    nodes: Vec<RedisServer>,
    dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts three cluster nodes on free ports, joins them with
    /// `redis-cli --cluster create` and waits for `cluster_state:ok`.
    pub fn start() -> Cluster {
        let dir = cluster_dir();
        let nodes: Vec<RedisServer> = (0..3).map(|_| Cluster::node(dir.path())).collect();
        Cluster::join(nodes, dir)
    }

    /// Starts a cluster on `ports`, each with its bus port free; panics if
    /// a node does not come up.
    pub fn start_on(ports: &[u16]) -> Cluster {
        let dir = cluster_dir();
        let nodes = ports
            .iter()
            .map(|&port| {
                let mut node = Cluster::stopped_node(dir.path(), port);
                node.restart();
                node
            })
            .collect();
        Cluster::join(nodes, dir)
    }

    fn join(nodes: Vec<RedisServer>, dir: tempfile::TempDir) -> Cluster {
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
        while !nodes
            .iter()
            .all(|node| redis_cli(node.port, &["cluster", "info"]).contains("cluster_state:ok"))
        {
            assert!(
                Instant::now() < deadline,
                "the cluster never reached cluster_state:ok"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Cluster { nodes, dir }
    }

    fn node(dir: &Path) -> RedisServer {
        for _ in 0..PORT_TRIES {
            let mut node = Cluster::stopped_node(dir, free_port(true));
            if node.restart_once() {
                return node;
            }
        }
        panic!("could not start a cluster node");
    }

    fn stopped_node(dir: &Path, port: u16) -> RedisServer {
        let config = dir.join(format!("nodes-{port}.conf"));
        let config = config.to_string_lossy().into_owned();
        let extra = ["--cluster-enabled", "yes", "--cluster-config-file", &config];
        RedisServer::stopped_on(port, &extra)
    }

    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }

    /// Where the nodes keep their cluster configs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The running nodes' process ids.
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(RedisServer::pid).collect()
    }

    /// `redis://h1:p1,h2:p2,h3:p3`: the cluster form of a `redis://` URL.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis://{}", hosts.join(","))
    }

    /// The hash slot of `key`, as the cluster computes it.
    pub fn slot(&self, key: &str) -> u16 {
        redis_cli(self.nodes[0].port, &["cluster", "keyslot", key])
            .trim()
            .parse()
            .unwrap()
    }

    /// The port of the primary serving `slot`, from `CLUSTER NODES`.
    pub fn primary_for(&self, slot: u16) -> u16 {
        let nodes = redis_cli(self.nodes[0].port, &["cluster", "nodes"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 9 || !fields[2].contains("master") {
                continue;
            }
            let port: u16 = fields[1]
                .split(['@', ':'])
                .nth(1)
                .and_then(|port| port.parse().ok())
                .unwrap();
            let serves = fields[8..].iter().any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                match (low.parse::<u16>(), high.parse::<u16>()) {
                    (Ok(low), Ok(high)) => (low..=high).contains(&slot),
                    _ => false,
                }
            });
            if serves {
                return port;
            }
        }
        panic!("no primary serves slot {slot}:\n{nodes}");
    }
}

fn cluster_dir() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("tollgate-redis-cluster-")
        .tempdir()
        .unwrap()
}

/// A `redis+cluster://` URL naming `ports` on the loopback address.
pub fn cluster_url(ports: impl IntoIterator<Item = u16>) -> String {
    let hosts: Vec<String> = ports
        .into_iter()
        .map(|port| format!("127.0.0.1:{port}"))
        .collect();
    format!("redis+cluster://{}", hosts.join(","))
}

// === MONITOR ===

/// Every command a Redis server runs whose line contains a needle, read
/// with `MONITOR` from the moment [`Monitor::start`] returns.
pub struct Monitor {
    port: u16,
    marker: String,
    stop: Arc<AtomicBool>,
    reader: Option<JoinHandle<Vec<String>>>,
}

impl Monitor {
    pub fn start(port: u16, needle: &str) -> Monitor {
        let mut stream = TcpStream::connect((Ipv4Addr::LOCALHOST, port)).unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim_end(), "+OK", "MONITOR refused");
        let marker = format!("monitor-end-{}", uuid::Uuid::now_v7().simple());
        let stop = Arc::new(AtomicBool::new(false));
        let needle = needle.to_owned();
        let end = marker.clone();
        let stopping = stop.clone();
        let reader = std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut line = Vec::new();
            loop {
                match reader.read_until(b'\n', &mut line) {
                    Ok(0) => break,
                    Ok(_) if line.ends_with(b"\n") => {
                        let text = String::from_utf8_lossy(&line).into_owned();
                        line.clear();
                        if text.contains(&end) {
                            break;
                        }
                        if text.contains(&needle) {
                            kept.push(text.trim_end().to_owned());
                        }
                    }
                    // A partial line stays in `line` until its end arrives.
                    Ok(_) | Err(_) if !stopping.load(Ordering::SeqCst) => {}
                    _ => break,
                }
            }
            kept
        });
        Monitor {
            port,
            marker,
            stop,
            reader: Some(reader),
        }
    }

    /// Every kept line up to now: a marker command sent after the work
    /// arrives after every command of it, so none is missed.
    pub fn finish(mut self) -> Vec<String> {
        redis_cli(self.port, &["echo", &self.marker]);
        self.join(Duration::from_secs(10))
    }

    fn join(&mut self, within: Duration) -> Vec<String> {
        let Some(reader) = self.reader.take() else {
            return Vec::new();
        };
        let deadline = Instant::now() + within;
        while !reader.is_finished() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop.store(true, Ordering::SeqCst);
        reader.join().unwrap()
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The script SHA and the first argument (the exec id of `reserve.lua` and
/// `settle.lua`) of an `EVALSHA` line of MONITOR output, e.g.
/// `+1700000000.1 [0 127.0.0.1:5555] "EVALSHA" "<sha>" "5" "tg:{t}:spend" … "<exec id>" …`;
/// `None` for any other command (commands run inside a script are shown as
/// `[0 lua] …` with their own names). Quotes inside later arguments are
/// escaped, so splitting on `"` holds up to the first argument.
pub fn evalsha_of(line: &str) -> Option<(&str, &str)> {
    let (_, command) = line.split_once("] ")?;
    // Every second piece is a quoted word: name, sha, numkeys, keys, args.
    let mut words = command.split('"').skip(1).step_by(2);
    let name = words.next()?;
    if !name.eq_ignore_ascii_case("evalsha") {
        return None;
    }
    let sha = words.next()?;
    let keys: usize = words.next()?.parse().ok()?;
    let first_arg = words.nth(keys).unwrap_or_default();
    Some((sha, first_arg))
}
