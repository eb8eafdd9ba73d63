//! Counts the tokens of one piece by merging it as tiktoken does: start
//! from single bytes and, while some adjacent pair of parts is a token,
//! merge the pair of lowest rank (the leftmost of equals).
//!
//! Short pieces, nearly all of them, use tiktoken's own loop over a
//! vector of parts, quadratic but cache-friendly. Long ones (a run of
//! letters without a break, a long line of symbols) use a heap of
//! candidate pairs over a linked list of parts, O(n log n), so no text
//! can make counting slow.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::vocab::Vocab;

/// Pieces this long or longer are merged with the heap.
const LONG_PIECE_BYTES: usize = 128;

const NO_RANK: u32 = u32::MAX;

/// Buffers reused across the pieces of one text.
#[derive(Default)]
pub(super) struct Scratch {
    /// (start of a part, rank of the pair it starts).
    parts: Vec<(usize, u32)>,
}

/// The number of tokens `piece` (two bytes or more) merges into.
pub(super) fn count(vocab: &Vocab, piece: &[u8], scratch: &mut Scratch) -> u64 {
    if piece.len() >= LONG_PIECE_BYTES {
        count_long(vocab, piece)
    } else {
        count_short(vocab, piece, &mut scratch.parts)
    }
}

fn count_short(vocab: &Vocab, piece: &[u8], parts: &mut Vec<(usize, u32)>) -> u64 {
    let rank = |bytes: &[u8]| vocab.rank(bytes).unwrap_or(NO_RANK);
    parts.clear();
    parts.extend((0..piece.len() - 1).map(|i| (i, rank(&piece[i..i + 2]))));
    parts.push((piece.len() - 1, NO_RANK));
    parts.push((piece.len(), NO_RANK));
    // The rank of merging part `i` with part `i + 1`, once part `i + 1`
    // has absorbed part `i + 2`.
    let merged_rank = |parts: &[(usize, u32)], i: usize| {
        if i + 3 < parts.len() {
            rank(&piece[parts[i].0..parts[i + 3].0])
        } else {
            NO_RANK
        }
    };
    loop {
        let mut lowest = (NO_RANK, 0);
        for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
            if rank < lowest.0 {
                lowest = (rank, i);
            }
        }
        if lowest.0 == NO_RANK {
            break;
        }
        let i = lowest.1;
        if i > 0 {
            parts[i - 1].1 = merged_rank(parts, i - 1);
        }
        parts[i].1 = merged_rank(parts, i);
        parts.remove(i + 1);
    }
    (parts.len() - 1) as u64
}

fn count_long(vocab: &Vocab, piece: &[u8]) -> u64 {
    let len = piece.len();
    // Part `i` starts at byte `i` and ends where `next[i]` starts; `pair[i]`
    // is the rank of part `i` merged with the part after it. A part
    // merged into its left neighbour is dead: its pair rank is NO_RANK.
    let mut next: Vec<usize> = (1..=len).collect();
    let mut prev: Vec<usize> = (0..len).map(|i| i.wrapping_sub(1)).collect();
    let mut pair = vec![NO_RANK; len];
    let mut heap = BinaryHeap::with_capacity(len);
    for i in 0..len - 1 {
        pair[i] = vocab.rank(&piece[i..i + 2]).unwrap_or(NO_RANK);
        if pair[i] != NO_RANK {
            heap.push(Reverse((pair[i], i)));
        }
    }
    let pair_rank = |next: &[usize], i: usize| match next[i] {
        j if j < len => vocab.rank(&piece[i..next[j]]).unwrap_or(NO_RANK),
        _ => NO_RANK,
    };
    let mut parts = len as u64;
    while let Some(Reverse((rank, i))) = heap.pop() {
        // A pair's bytes only grow as parts merge, so a rank that changed
        // never comes back: an entry whose rank is not current is stale.
        if pair[i] != rank {
            continue;
        }
        let j = next[i];
        next[i] = next[j];
        if next[i] < len {
            prev[next[i]] = i;
        }
        pair[j] = NO_RANK;
        parts -= 1;
        pair[i] = pair_rank(&next, i);
        if pair[i] != NO_RANK {
            heap.push(Reverse((pair[i], i)));
        }
        let p = prev[i];
        if p < len {
            pair[p] = pair_rank(&next, p);
            if pair[p] != NO_RANK {
                heap.push(Reverse((pair[p], p)));
            }
        }
    }
    parts
}

#[cfg(test)]
pub(super) fn count_both(vocab: &Vocab, piece: &[u8]) -> (u64, u64) {
    (
        count_short(vocab, piece, &mut Vec::new()),
        count_long(vocab, piece),
    )
}
