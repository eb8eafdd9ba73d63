//! A SQLite store whose disk fills up fails closed: calls get 503 in the
//! caller's API shape with nothing forwarded and nothing charged, and the
//! gateway serves again by itself once space returns, without a restart.
//!
//! The disk is a small tmpfs the test mounts, which needs root (as on the
//! machines this project's CI runs on); elsewhere the test says so and
//! stops.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::redis_support::*;

/// A mounted tmpfs, unmounted when dropped.
struct SmallDisk {
    dir: PathBuf,
    _parent: tempfile::TempDir,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("disk");
        std::fs::create_dir(&dir).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir)
            .status()
            .ok()?;
        status.success().then_some(SmallDisk {
            dir,
            _parent: parent,
        })
    }

    fn path(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Fills the disk with one file until a write fails for lack of space.
fn fill(path: &Path) {
    let mut file = std::fs::File::create(path).unwrap();
    let block = vec![0u8; 4096];
    loop {
        if file
            .write_all(&block)
            .and_then(|()| file.sync_all())
            .is_err()
        {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_closed_and_the_gateway_recovers_when_space_returns() {
    let Some(disk) = SmallDisk::mount("4m") else {
        eprintln!("cannot mount a tmpfs here (not root?): the full-disk test did not run");
        return;
    };
    let provider = mock().await;
    let key = KeySpec::new("hal", None, "100.00", "day");
    let mut config = GatewayConfig::new(shared_redis_url(), provider.addr);
    config.sqlite_path = Some(disk.path().join("books.db"));
    config.keys.push(key.clone());
    let gateway = GatewayProcess::start(&config).await;
    let body = chat("gpt-4o-mini", "hi mock:tokens=3", false, 10);
    let response = post_chat(&client(), &gateway.url, &key.raw, &body).await;
    assert_eq!(response.status(), 200);

    let filler = disk.path().join("filler");
    fill(&filler);

    // The WAL may still hold room for a few transactions; then the disk
    // is full for the store too.
    let mut refused = None;
    for _ in 0..2_000 {
        let forwarded = provider.stats.requests();
        let response = post_chat(&client(), &gateway.url, &key.raw, &body).await;
        let status = response.status().as_u16();
        if status == 503 {
            assert_eq!(
                provider.stats.requests(),
                forwarded,
                "a refused call was forwarded"
            );
            refused = Some(response.json::<serde_json::Value>().await.unwrap());
            break;
        }
        assert_eq!(status, 200);
    }
    let refused = refused.expect("the store never ran out of space");
    assert!(
        refused["error"]["message"].as_str().is_some(),
        "not the OpenAI error shape: {refused}"
    );
    assert_eq!(readyz(&gateway.url).await, 200, "reads still work");
    let before = budget(&gateway.url, &key.raw).await;

    // A refused call charged nothing.
    let response = post_chat(&client(), &gateway.url, &key.raw, &body).await;
    assert_eq!(response.status(), 503);
    assert_eq!(budget(&gateway.url, &key.raw).await, before);

    // Space returns: the next call goes through, no restart.
    std::fs::remove_file(&filler).unwrap();
    let response = post_chat(&client(), &gateway.url, &key.raw, &body).await;
    assert_eq!(response.status(), 200);
    let after = budget(&gateway.url, &key.raw).await;
    assert!(
        field(&after, "key", "spent_usd_micros") > field(&before, "key", "spent_usd_micros"),
        "{before} -> {after}"
    );
    drop(gateway);
}
