//! A vocabulary: the bytes of every token, by rank, and the rank of any
//! bytes that are a token.
//!
//! The token bytes are read in place from the table `build.rs` wrote into
//! the binary; only the hash table of ranks is built, four bytes a slot,
//! so o200k_base takes about 3 MB where tiktoken-rs keeps some 50 MB.

use std::hash::BuildHasher;

use hashbrown::{DefaultHashBuilder, HashTable};

pub(super) struct Vocab {
    tokens: Tokens,
    ranks: HashTable<u32>,
    hasher: DefaultHashBuilder,
}

impl Vocab {
    pub(super) fn new(table: &'static [u8]) -> Result<Vocab, String> {
        let (count, rest) = table
            .split_first_chunk::<4>()
            .ok_or("vocabulary table is empty")?;
        let count = u32::from_le_bytes(*count);
        let offsets_len = (count as usize + 1) * 4;
        if rest.len() < offsets_len {
            return Err(format!("vocabulary table is cut short: {count} tokens"));
        }
        let (offsets, bytes) = rest.split_at(offsets_len);
        let tokens = Tokens { offsets, bytes };
        let hasher = DefaultHashBuilder::default();
        let mut ranks = HashTable::with_capacity(count as usize);
        let mut end = 0;
        for rank in 0..count {
            let (start, next) = (tokens.offset(rank), tokens.offset(rank + 1));
            if start != end || next < start || next > bytes.len() {
                return Err(format!("vocabulary table is corrupt at token {rank}"));
            }
            end = next;
            ranks.insert_unique(hasher.hash_one(tokens.token(rank)), rank, |&rank| {
                hasher.hash_one(tokens.token(rank))
            });
        }
        Ok(Vocab {
            tokens,
            ranks,
            hasher,
        })
    }

    /// The rank of `bytes`, if they are a token.
    #[inline]
    pub(super) fn rank(&self, bytes: &[u8]) -> Option<u32> {
        let hash = self.hasher.hash_one(bytes);
        self.ranks
            .find(hash, |&rank| self.tokens.token(rank) == bytes)
            .copied()
    }
}

/// The token bytes, in rank order, as `build.rs` laid them out.
#[derive(Clone, Copy)]
struct Tokens {
    /// `n + 1` little-endian u32 offsets into `bytes`.
    offsets: &'static [u8],
    bytes: &'static [u8],
}

impl Tokens {
    #[inline]
    fn token(self, rank: u32) -> &'static [u8] {
        &self.bytes[self.offset(rank)..self.offset(rank + 1)]
    }

    #[inline]
    fn offset(self, index: u32) -> usize {
        let at = index as usize * 4;
        let offsets = self.offsets;
        u32::from_le_bytes([
            offsets[at],
            offsets[at + 1],
            offsets[at + 2],
            offsets[at + 3],
        ]) as usize
    }
}
