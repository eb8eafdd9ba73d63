//! This process's limit on open files, which every test in it shares. The
//! tests that hold hundreds of connections each ran in a process of their
//! own once; now they run beside every other test, so the harnesses raise
//! the limit for all of them before they open anything.

use std::sync::Once;

/// Raises this process's soft limit on open files to its hard limit, once.
/// Children started afterwards inherit it; the gateway raises its own
/// limit to the hard one anyway, and a test that needs a lower one sets it
/// on the child (`prlimit`).
pub fn raise_open_files() {
    static RAISED: Once = Once::new();
    RAISED.call_once(|| {
        rlimit::increase_nofile_limit(u64::MAX).expect("raising the open-files soft limit");
    });
}
