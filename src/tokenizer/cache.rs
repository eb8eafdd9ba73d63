//! Token counts remembered by content, so a conversation resent every
//! turn is counted once: each message's text costs a hash the next time
//! it comes, not a recount.
//!
//! A count is kept under the BLAKE3 hash of the tokenizer's id and the
//! text (128 bits of it, its length beside): a cryptographic hash, so no
//! client can make a costly text look like a cheap one it sent before,
//! and the count read back is always the count of exactly this text.
//! Texts shorter than [`MIN_CACHED_BYTES`] count faster than they hash
//! and are counted each time.
//!
//! The memory is bounded (`server.token_count_cache_mb`): the cache is
//! split into shards, each a current and a previous generation of at
//! most a fixed number of entries. A hit in the previous generation moves
//! to the current one; when the current one is full, the previous one is
//! dropped and the current one takes its place. What was used in the last
//! generation stays, what was not goes, at O(1) per call and with each
//! shard's lock held only for a map lookup.

use std::hash::{BuildHasherDefault, Hasher};
use std::sync::{Mutex, OnceLock, PoisonError};

use hashbrown::HashMap;
use prometheus_client::metrics::counter::Counter;

/// Shorter texts are counted each time: a role, a field name, a short
/// reply count in about the time their hash takes.
pub const MIN_CACHED_BYTES: usize = 256;

/// `server.token_count_cache_mb` when the config does not say.
pub const DEFAULT_CACHE_MB: u64 = 64;

/// What one bucket of a map costs: an entry (key and count) and its
/// control byte.
const BUCKET_BYTES: u64 = std::mem::size_of::<(Key, u64)>() as u64 + 1;

const SHARDS: usize = 16;

/// The count of a text: its hash (128 bits) and its length in bytes.
type Key = (u128, u32);

/// The key is a cryptographic hash already: its low 64 bits are the
/// map's hash.
#[derive(Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only the integers below are hashed.
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u128(&mut self, value: u128) {
        self.0 ^= value as u64;
    }

    fn write_u32(&mut self, value: u32) {
        self.0 ^= u64::from(value).rotate_left(32);
    }
}

type Map = HashMap<Key, u64, BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
struct Shard {
    current: Map,
    previous: Map,
}

/// Remembered token counts, bounded in memory.
pub struct CountCache {
    shards: Vec<Mutex<Shard>>,
    /// Entries per generation per shard; 0: the cache is off.
    per_generation: usize,
    hits: Counter,
    misses: Counter,
}

impl CountCache {
    /// A cache of at most about `megabytes` MiB; 0 turns it off.
    pub fn new(megabytes: u64) -> CountCache {
        // A map's buckets are a power of two, at most seven eighths full:
        // each generation of each shard gets the most buckets that fit
        // its share, and holds as many entries as fill them.
        let share = megabytes.saturating_mul(1 << 20) / (2 * SHARDS as u64);
        let buckets = match share / BUCKET_BYTES {
            0 => 0,
            fit => 1u64 << fit.ilog2(),
        };
        let per_generation = usize::try_from(buckets / 8 * 7).unwrap_or(usize::MAX);
        CountCache {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            per_generation,
            hits: Counter::default(),
            misses: Counter::default(),
        }
    }

    /// The gateway's cache: the size [`configure`] gave, or the default.
    pub fn global() -> &'static CountCache {
        GLOBAL.get_or_init(|| CountCache::new(DEFAULT_CACHE_MB))
    }

    /// Sizes the gateway's cache, once, before the first call counts.
    pub fn configure(megabytes: u64) {
        let _ = GLOBAL.set(CountCache::new(megabytes));
    }

    /// Counts served from the cache, and counted afresh (long texts only:
    /// the ones the cache would keep), for `/metrics`.
    pub fn counters(&self) -> (Counter, Counter) {
        (self.hits.clone(), self.misses.clone())
    }

    /// The count of `text` by the tokenizer `tokenizer` (an id of its
    /// own), from the cache, or from `count` and then kept.
    pub fn count(&self, tokenizer: u8, text: &str, count: impl FnOnce(&str) -> u64) -> u64 {
        if text.len() < MIN_CACHED_BYTES || self.per_generation == 0 {
            return count(text);
        }
        let Ok(len) = u32::try_from(text.len()) else {
            return count(text);
        };
        let mut hasher = blake3::Hasher::new();
        hasher.update(&[tokenizer]);
        hasher.update(text.as_bytes());
        let digest = hasher.finalize();
        let hash = u128::from_le_bytes(digest.as_bytes()[..16].try_into().unwrap_or_default());
        let key = (hash, len);
        let shard = &self.shards[(hash >> 64) as usize % SHARDS];
        if let Some(tokens) = self.lookup(shard, key) {
            self.hits.inc();
            return tokens;
        }
        self.misses.inc();
        // Counted outside the lock: a long text takes milliseconds.
        let tokens = count(text);
        self.keep(shard, key, tokens);
        tokens
    }

    fn lookup(&self, shard: &Mutex<Shard>, key: Key) -> Option<u64> {
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(&tokens) = shard.current.get(&key) {
            return Some(tokens);
        }
        let tokens = shard.previous.remove(&key)?;
        self.insert(&mut shard, key, tokens);
        Some(tokens)
    }

    fn keep(&self, shard: &Mutex<Shard>, key: Key, tokens: u64) {
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        self.insert(&mut shard, key, tokens);
    }

    fn insert(&self, shard: &mut Shard, key: Key, tokens: u64) {
        if shard.current.len() >= self.per_generation {
            shard.previous = std::mem::take(&mut shard.current);
        }
        shard.current.insert(key, tokens);
    }

    /// Entries held now, both generations, and the bytes their maps have
    /// allocated.
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        self.shards.iter().fold((0, 0), |(entries, bytes), shard| {
            let shard = shard.lock().unwrap();
            (
                entries + shard.current.len() + shard.previous.len(),
                bytes + shard.current.allocation_size() + shard.previous.allocation_size(),
            )
        })
    }
}

static GLOBAL: OnceLock<CountCache> = OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;

    fn text(i: usize) -> String {
        format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(20))
    }

    #[test]
    fn a_text_is_counted_once_and_short_ones_every_time() {
        let cache = CountCache::new(1);
        let counted = std::cell::Cell::new(0);
        let count = |text: &str| {
            counted.set(counted.get() + 1);
            text.len() as u64
        };
        let long = text(1);
        assert_eq!(cache.count(1, &long, count), long.len() as u64);
        assert_eq!(cache.count(1, &long, count), long.len() as u64);
        assert_eq!(counted.get(), 1);
        assert_eq!((cache.hits.get(), cache.misses.get()), (1, 1));
        // Another tokenizer's count of the same text is its own.
        cache.count(2, &long, count);
        assert_eq!(counted.get(), 2);
        // A text one byte longer is another text.
        cache.count(1, &format!("{long} "), count);
        assert_eq!(counted.get(), 3);
        cache.count(1, "hi", count);
        cache.count(1, "hi", count);
        assert_eq!(counted.get(), 5);
    }

    #[test]
    fn memory_stays_bounded_and_what_is_used_stays() {
        let cache = CountCache::new(1);
        let bound = 2 * SHARDS * cache.per_generation;
        let kept = text(0);
        cache.count(1, &kept, |t| t.len() as u64);
        for i in 1..(4 * bound) {
            cache.count(1, &text(i), |t| t.len() as u64);
            // One text used all along is never dropped.
            let mut recounted = false;
            cache.count(1, &kept, |t| {
                recounted = true;
                t.len() as u64
            });
            assert!(!recounted, "the text in use was dropped at {i}");
            assert!(cache.held().0 <= bound, "{} > {bound}", cache.held().0);
        }
        // Full, it holds no more memory than it was given.
        assert!(cache.held().1 <= 1 << 20, "{} bytes", cache.held().1);
        assert!(cache.held().1 > 1 << 18, "{} bytes", cache.held().1);
    }

    #[test]
    fn size_zero_turns_it_off() {
        let cache = CountCache::new(0);
        let counted = std::cell::Cell::new(0);
        for _ in 0..3 {
            cache.count(1, &text(1), |t| {
                counted.set(counted.get() + 1);
                t.len() as u64
            });
        }
        assert_eq!(counted.get(), 3);
        assert_eq!(cache.held().0, 0);
    }
}
