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
//! A conversation's long texts are also remembered as a sequence
//! ([`CountCache::count_all`]): the count of its first texts, in order,
//! under the hash of all of them. A turn that resends the last turn's
//! texts and adds a few finds that sum under one hash of the whole
//! conversation, taken in BLAKE3's wide lanes, and hashes alone only the
//! texts it adds; hashed one by one, a message of a few KB runs in one
//! lane, several times slower per byte.
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

/// A sequence's hash starts with its tokenizer's id with this bit set,
/// where a lone text's starts with the id alone (ids are below 128), so
/// no sequence is ever read as a text or the other way round.
const SEQUENCE: u8 = 0x80;

/// How many of a sequence's last texts are looked for as the end of a
/// sequence remembered before: the texts a turn adds (a reply, tool
/// calls and their results, the next message) are looked past.
const TAIL: usize = 8;

/// Sequences of fewer texts are counted text by text.
const MIN_SEQUENCE: usize = 4;

/// The texts before the tail are copied into a buffer of this size and
/// hashed a buffer at a time, so BLAKE3 hashes its chunks side by side.
const STAGE_BYTES: usize = 64 << 10;

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
        if let Some(tokens) = self.lookup(key) {
            self.hits.inc();
            return tokens;
        }
        self.misses.inc();
        // Counted outside the lock: a long text takes milliseconds.
        let tokens = count(text);
        self.keep(key, tokens);
        tokens
    }

    /// The summed count of `texts` by the tokenizer `tokenizer`, each
    /// counted as [`CountCache::count`] counts it: the sum of the longest
    /// run of their first texts remembered as a sequence (looked for among
    /// the last [`TAIL`] boundaries), plus the texts after it one by one.
    /// The sequence's sum is then kept at each boundary past it.
    pub fn count_all(&self, tokenizer: u8, texts: &[&str], count: impl Fn(&str) -> u64) -> u64 {
        self.count_sequence(tokenizer, texts, count).0
    }

    /// [`CountCache::count_all`], and how many texts the sequence found
    /// covered.
    fn count_sequence(
        &self,
        tokenizer: u8,
        texts: &[&str],
        count: impl Fn(&str) -> u64,
    ) -> (u64, usize) {
        debug_assert!(tokenizer < SEQUENCE, "a tokenizer id has the sequence bit");
        if texts.len() < MIN_SEQUENCE || self.per_generation == 0 {
            let sum = texts
                .iter()
                .map(|text| self.count(tokenizer, text, &count))
                .fold(0, u64::saturating_add);
            return (sum, 0);
        }
        let boundaries = sequence_keys(tokenizer, texts);
        // `boundaries[i]` ends after text `first + i`.
        let first = texts.len() - boundaries.len();
        let found = boundaries
            .iter()
            .enumerate()
            .rev()
            .find_map(|(i, &key)| self.lookup(key).map(|sum| (first + i, sum)));
        // A hit for each text whose count the sequence served, as if
        // each had been found by itself.
        let (counted, mut sum) = match found {
            Some((last, sum)) => {
                self.hits.inc_by(last as u64 + 1);
                (last + 1, sum)
            }
            None => (0, 0),
        };
        // The texts after the sequence found, each by itself; each boundary
        // past it keeps its sum for the turns to come.
        for (at, text) in texts.iter().enumerate().skip(counted) {
            sum = sum.saturating_add(self.count(tokenizer, text, &count));
            if let Some(&key) = at.checked_sub(first).and_then(|i| boundaries.get(i)) {
                self.keep(key, sum);
            }
        }
        (sum, counted)
    }

    /// The shard that holds `key`, by the hash's high bits (the map hashes
    /// by the low ones).
    fn shard(&self, key: Key) -> &Mutex<Shard> {
        &self.shards[(key.0 >> 64) as usize % SHARDS]
    }

    fn lookup(&self, key: Key) -> Option<u64> {
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(&tokens) = shard.current.get(&key) {
            return Some(tokens);
        }
        let tokens = shard.previous.remove(&key)?;
        self.insert(&mut shard, key, tokens);
        Some(tokens)
    }

    fn keep(&self, key: Key, tokens: u64) {
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
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

/// The keys of the sequences `texts` begins with, one per boundary among
/// the last [`TAIL`] (the last: all of them): BLAKE3 over the tokenizer's
/// id with [`SEQUENCE`] set, then each text as its length (8 bytes,
/// little-endian) and its bytes. The texts before the tail are staged in
/// a buffer and hashed a buffer at a time; a tail text is hashed alone,
/// as each boundary needs the hash so far.
fn sequence_keys(tokenizer: u8, texts: &[&str]) -> Vec<Key> {
    let head = texts.len().saturating_sub(TAIL);
    let mut hasher = blake3::Hasher::new();
    let head_bytes: usize = texts[..head].iter().map(|text| 8 + text.len()).sum();
    let mut staged = Vec::with_capacity(STAGE_BYTES.min(1 + head_bytes));
    staged.push(tokenizer | SEQUENCE);
    let mut length = 1u64;
    for text in &texts[..head] {
        for part in [&(text.len() as u64).to_le_bytes()[..], text.as_bytes()] {
            length += part.len() as u64;
            let mut part = part;
            while !part.is_empty() {
                let take = part.len().min(STAGE_BYTES - staged.len());
                staged.extend_from_slice(&part[..take]);
                part = &part[take..];
                if staged.len() == STAGE_BYTES {
                    hasher.update(&staged);
                    staged.clear();
                }
            }
        }
    }
    hasher.update(&staged);
    texts[head..]
        .iter()
        .map(|text| {
            hasher.update(&(text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
            length += 8 + text.len() as u64;
            let digest = hasher.finalize();
            let hash = u128::from_le_bytes(digest.as_bytes()[..16].try_into().unwrap_or_default());
            // The length beside the hash, as a text's: the low 32 bits.
            (hash, length as u32)
        })
        .collect()
}

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

    /// Counts each text as its length, and how many texts were counted.
    fn counting() -> (
        std::cell::Cell<usize>,
        impl Fn(&std::cell::Cell<usize>, &str) -> u64,
    ) {
        (
            std::cell::Cell::new(0),
            |counted: &std::cell::Cell<usize>, text: &str| {
                counted.set(counted.get() + 1);
                text.len() as u64
            },
        )
    }

    #[test]
    fn a_resent_sequence_is_found_and_only_the_texts_added_are_counted() {
        let cache = CountCache::new(4);
        let (counted, count) = counting();
        let mut texts: Vec<String> = (0..40).map(text).collect();
        let sum = |texts: &[String]| texts.iter().map(|t| t.len() as u64).sum::<u64>();
        // The sum, and how many texts the sequence found covered.
        let found = std::cell::Cell::new(0);
        let all = |texts: &[String]| {
            let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
            let (tokens, covered) = cache.count_sequence(1, &texts, |t| count(&counted, t));
            found.set(covered);
            tokens
        };
        assert_eq!(all(&texts), sum(&texts));
        assert_eq!((counted.get(), found.get()), (40, 0));
        // The same turn again: found whole, nothing counted, a hit for
        // each text.
        let hits = cache.hits.get();
        assert_eq!(all(&texts), sum(&texts));
        assert_eq!((counted.get(), found.get()), (40, 40));
        assert_eq!(cache.hits.get(), hits + 40);
        // Each turn adds a reply and a message, or a few tool results:
        // only those are counted.
        for (turn, added) in [2, 1, 3, 7].into_iter().enumerate() {
            let (before, earlier) = (counted.get(), texts.len());
            texts.extend((0..added).map(|i| text(1000 + 10 * turn + i)));
            assert_eq!(all(&texts), sum(&texts), "turn {turn}");
            assert_eq!(counted.get() - before, added, "turn {turn}");
            // The earlier texts came as one sequence, not one by one.
            assert_eq!(found.get(), earlier, "turn {turn}");
        }
        // More texts added than the tail looks past: the sequence is not
        // found, the texts come one by one, each remembered by itself.
        let before = counted.get();
        texts.extend((0..TAIL + 1).map(|i| text(2000 + i)));
        assert_eq!(all(&texts), sum(&texts));
        assert_eq!((counted.get() - before, found.get()), (TAIL + 1, 0));
        // A text changed early in the conversation: the sequence is another
        // one, and only the changed text is counted afresh.
        let before = counted.get();
        texts[3] = text(3000);
        assert_eq!(all(&texts), sum(&texts));
        assert_eq!((counted.get() - before, found.get()), (1, 0));
        // Texts dropped from the end: a sequence kept at an earlier
        // boundary is found.
        texts.truncate(texts.len() - 2);
        let before = counted.get();
        assert_eq!(all(&texts), sum(&texts));
        assert_eq!((counted.get(), found.get()), (before, texts.len()));
    }

    #[test]
    fn a_sequence_is_never_read_as_a_text_nor_as_another_tokenizers() {
        let cache = CountCache::new(4);
        let (counted, count) = counting();
        // Texts of 300 bytes: their lengths' bytes are all ASCII, so the
        // bytes a sequence hashes (after its first) are a valid text too.
        let texts: Vec<String> = (0..5).map(|i| format!("{i:0>300}")).collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        cache.count_all(1, &refs, |t| count(&counted, t));
        let framed: String = texts
            .iter()
            .map(|t| {
                let length = (t.len() as u64).to_le_bytes();
                format!("{}{t}", std::str::from_utf8(&length).unwrap())
            })
            .collect();
        let before = counted.get();
        assert_eq!(
            cache.count(1, &framed, |t| count(&counted, t)),
            framed.len() as u64
        );
        assert_eq!(
            counted.get(),
            before + 1,
            "counted afresh, not read as the sequence"
        );
        // Another tokenizer's sequence of the same texts is its own.
        let before = counted.get();
        cache.count_all(2, &refs, |t| count(&counted, t));
        assert_eq!(counted.get(), before + 5);
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
