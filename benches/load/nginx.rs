//! N: nginx as a second pass-through, a proxy people run in production,
//! beside P, the bare hyper proxy built like the gateway. Measured against
//! both, a ratio says what the gateway costs over the cheapest hyper
//! forwarding and over a mature proxy in C.
//!
//! The benchmark writes nginx's whole configuration in the run's temp dir
//! (prefix, pid file, temp paths) and starts it in the foreground as a
//! child, logging to stderr, so it needs no privileges and leaves nothing
//! behind. Where no `nginx` is installed, N is left out.
//!
//! nginx runs under a small shell wrapper ([`WRAPPER`]) rather than under
//! `setpriv --pdeathsig` like the other processes: its worker is forked by
//! the master and outlives it when the master is killed outright, still
//! holding the port. The wrapper asks the master to stop (SIGTERM, which
//! stops the worker too) as soon as its stdin closes, which happens when
//! the benchmark drops it and also when the benchmark dies by any signal.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};

use std::process::Command;

use crate::error::BenchError;
use crate::procs::Proc;

/// Where nginx is looked for after `PATH`: Debian puts it in sbin, which
/// an unprivileged `PATH` often lacks.
const SBIN_NGINX: &str = "/usr/sbin/nginx";

/// Runs `$0 "$@"` (nginx and its arguments) and stops it when stdin
/// closes. A command started in the background by a non-interactive shell
/// reads /dev/null, so stdin is kept on descriptor 3 for the watcher; the
/// wrapper exits when nginx does, whether stopped or failed to start.
const WRAPPER: &str = r#"exec 3<&0 0</dev/null
"$0" "$@" 3<&- &
nginx=$!
{ cat <&3 >/dev/null; kill -TERM "$nginx" 2>/dev/null; } &
exec 3<&-
wait "$nginx""#;

/// The name nginx's master and worker processes go by.
const PROCESS_NAME: &str = "nginx";

/// Connections beyond the clients' that nginx may hold: the readiness
/// probe and the books check's calls, with room to spare.
const SPARE_CONNECTIONS: usize = 64;

/// An installed nginx, and how many clients it will be asked to serve at
/// once.
pub struct Nginx {
    binary: PathBuf,
    clients: usize,
}

impl Nginx {
    /// The nginx binary on `PATH` or at [`SBIN_NGINX`], to serve up to
    /// `clients` connections at once; why not, when there is none.
    pub fn find(clients: usize) -> Result<Nginx, String> {
        let on_path = std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("nginx"))
                .find(|candidate| candidate.is_file())
        });
        let sbin = || {
            let sbin = PathBuf::from(SBIN_NGINX);
            sbin.is_file().then_some(sbin)
        };
        match on_path.or_else(sbin) {
            Some(binary) => Ok(Nginx { binary, clients }),
            None => Err(format!("no nginx binary (PATH, {SBIN_NGINX})")),
        }
    }

    /// Starts nginx proxying to `upstream` for `phase`, in a prefix dir of
    /// its own under `run_dir`, and waits until a request through it is
    /// answered.
    pub fn start(
        &self,
        run_dir: &Path,
        phase: &str,
        upstream: SocketAddr,
    ) -> Result<Proc, BenchError> {
        start(&self.binary, self.clients, run_dir, phase, upstream)
    }
}

fn start(
    nginx: &Path,
    clients: usize,
    run_dir: &Path,
    phase: &str,
    upstream: SocketAddr,
) -> Result<Proc, BenchError> {
    let prefix = run_dir.join(format!("nginx-{phase}"));
    std::fs::create_dir_all(prefix.join("temp"))?;
    // nginx binds the port itself: take a free one from the kernel and
    // hand it over. Another process could take it in between; nginx then
    // fails to start and N is reported as not run.
    let listen = TcpListener::bind(("127.0.0.1", 0))?.local_addr()?;
    let conf = prefix.join("nginx.conf");
    std::fs::write(&conf, config(listen, upstream, clients))?;
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(WRAPPER)
        .arg(nginx)
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&conf)
        // The log nginx writes before it has read the config: without
        // this, the compiled-in path under /var/log, which an
        // unprivileged user cannot open.
        .arg("-e")
        .arg("stderr");
    Proc::start_wrapped("nginx (N)", command, PROCESS_NAME, listen)
}

/// The configuration: one server on `listen` proxying everything to
/// `upstream` on kept-alive connections, for `clients` at once.
fn config(listen: SocketAddr, upstream: SocketAddr, clients: usize) -> String {
    // Each client's connection and its upstream connection, and the
    // upstream connections a round leaves idle in the pool (`keepalive`),
    // which hold their slots until nginx notices the upstream closed them:
    // with two per client, a second round of 1,000 streams ran out. Sized
    // to the run rather than generously: nginx allocates every slot at
    // start, and its idle memory is reported beside the gateways'.
    let connections = 3 * clients + SPARE_CONNECTIONS;
    let open_files = 2 * connections;
    let mut text = String::new();
    // `write!` to a String cannot fail.
    let _ = write!(
        text,
        r#"# Written by tollgate's load benchmark; every path is under the prefix (-p).
daemon off;
# One worker: the gateway and P get the same two cores, shared with the
# load generator and the upstream, and a second worker would only contend
# with those for them. nginx's single event loop per core is its model.
worker_processes 1;
pid nginx.pid;
error_log stderr warn;
worker_rlimit_nofile {open_files};

events {{
    worker_connections {connections};
}}

http {{
    access_log off;
    client_body_temp_path temp/client_body;
    proxy_temp_path temp/proxy;
    fastcgi_temp_path temp/fastcgi;
    uwsgi_temp_path temp/uwsgi;
    scgi_temp_path temp/scgi;

    # P and the gateways keep a connection for as long as the client does;
    # nginx's default closes it every 1,000 requests.
    keepalive_requests 1000000;
    # A request body up to the gateway's default limit stays in memory, as
    # P and the gateways keep it. Past nginx's default buffer (16 KB) it
    # would go to a temp file, then upstream 8 KB a write on a socket
    # without TCP_NODELAY, where Nagle's algorithm holds the last write
    # until the upstream's delayed ACK: some 40 ms on most turns of 35 and
    # 138 KB in the conversation mode. A body of known length is given a
    # buffer of its length, so a short call takes no more than before.
    client_max_body_size 10m;
    client_body_buffer_size 10m;

    upstream bench_upstream {{
        server {upstream};
        # Idle upstream connections kept per worker: one per client, so
        # that no call opens one, as P and the gateways pool theirs.
        keepalive {clients};
        keepalive_requests 1000000;
    }}

    server {{
        listen {listen};

        location / {{
            proxy_pass http://bench_upstream;
            proxy_http_version 1.1;
            # Keep-alive to the upstream: no `Connection: close` on the way.
            proxy_set_header Connection "";
            # Events go to the client as they arrive, so SSE streams through.
            proxy_buffering off;
            # The request body is read whole before forwarding (nginx's
            # default), as P and the gateways do.
            proxy_request_buffering on;
            proxy_read_timeout 300s;
        }}
    }}
}}
"#
    );
    text
}
