//! How the benchmark's own servers (the instant upstream, the bare
//! pass-through) run as its children: they accept connections until the
//! benchmark closes their stdin, which it does however it ends, so no
//! child outlives a run.

use std::io::Read;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};

/// Hands every accepted connection, with TCP_NODELAY, to `serve`, until
/// stdin closes.
pub async fn accept_until_stdin_closes(listener: TcpListener, mut serve: impl FnMut(TcpStream)) {
    let (closed_tx, mut closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        // Blocks until the parent closes our stdin (or dies).
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        let _ = closed_tx.send(());
    });
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(_) => {
                    // Out of descriptors, most likely: wait for some to close.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut closed => break,
        };
        let _ = stream.set_nodelay(true);
        serve(stream);
    }
}
