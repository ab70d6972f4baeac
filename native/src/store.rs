//! The storage of the native state table (`table.rs`): per window end, its
//! (key, accumulator) entries without a Python object per entry.
//!
//! A window keeps its keys end to end in one byte buffer (`blob`, row i's key at
//! `kstart[i]..kstart[i + 1]`), its accumulators in one `Num` vector (`width` per
//! row), its dirty rows as a bitset, and an index from a key's 64-bit hash to its
//! row; the rare key whose hash another key of the window has already goes to
//! `extra` by its bytes, so lookups are exact. Rows stay in insertion order (the
//! order a Python dict of the window would iterate), and a window is dropped
//! whole when it closes: nothing is ever removed from one.
//!
//! Memory per entry is what the layout is for: the index keys by 32 bits of
//! the hash (9 bytes a bucket), and the vectors grow by a quarter instead of
//! doubling (large ones are moved by `mremap`, not copied), so a window of
//! millions of entries holds ~10 % slack rather than up to 100 %.

use std::collections::BTreeMap;
use std::hash::Hasher;

use rustc_hash::{FxHashMap, FxHasher};

use crate::num::Num;

#[inline]
pub fn hash_key(key: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(key);
    h.write_usize(key.len());
    h.finish()
}

/// Room for `more` items in `v`, growing it by at least a quarter.
#[inline]
fn grow<T>(v: &mut Vec<T>, more: usize) {
    if v.len() + more > v.capacity() {
        v.reserve_exact(more.max(v.capacity() / 4).max(16));
    }
}

#[derive(Default)]
pub struct Win {
    idx: FxHashMap<u32, u32>,
    extra: FxHashMap<Box<[u8]>, u32>,
    kstart: Vec<u32>,
    blob: Vec<u8>,
    pub accs: Vec<Num>,
    dirty: Vec<u64>,
    /// the window is in Python's `dirty` dict (touched since the last encode)
    pub marked: bool,
}

impl Win {
    pub fn len(&self) -> usize {
        self.kstart.len()
    }

    pub fn key(&self, row: usize) -> &[u8] {
        let s = self.kstart[row] as usize;
        let e = self.kstart.get(row + 1).map_or(self.blob.len(), |&e| e as usize);
        &self.blob[s..e]
    }

    pub fn find(&self, key: &[u8], h: u64) -> Option<usize> {
        let &row = self.idx.get(&(h as u32))?;
        if self.key(row as usize) == key {
            return Some(row as usize);
        }
        self.extra.get(key).map(|&r| r as usize)
    }

    /// Append a row for a key not in the window; false when the window can't
    /// hold more (its keys past 4 GiB).
    pub fn push(&mut self, key: &[u8], h: u64, acc: &[Num]) -> bool {
        let row = self.kstart.len() as u32;
        let Ok(start) = u32::try_from(self.blob.len()) else { return false };
        if u32::try_from(self.blob.len() + key.len()).is_err() {
            return false;
        }
        grow(&mut self.kstart, 1);
        self.kstart.push(start);
        grow(&mut self.blob, key.len());
        self.blob.extend_from_slice(key);
        grow(&mut self.accs, acc.len());
        self.accs.extend_from_slice(acc);
        if row as usize % 64 == 0 {
            grow(&mut self.dirty, 1);
            self.dirty.push(0);
        }
        match self.idx.entry(h as u32) {
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(row);
            }
            std::collections::hash_map::Entry::Occupied(_) => {
                self.extra.insert(key.into(), row);
            }
        }
        true
    }

    /// Room for `n` more rows (a restore knows how many come).
    pub fn reserve(&mut self, n: usize, width: usize) {
        self.idx.reserve(n);
        self.kstart.reserve(n);
        self.accs.reserve(n * width);
        self.dirty.reserve(n / 64 + 1);
    }

    pub fn set_dirty(&mut self, row: usize) {
        self.dirty[row / 64] |= 1 << (row % 64);
        self.marked = true;
    }

    pub fn is_dirty(&self, row: usize) -> bool {
        self.dirty[row / 64] & (1 << (row % 64)) != 0
    }

    pub fn clear_dirty(&mut self) {
        self.dirty.iter_mut().for_each(|w| *w = 0);
        self.marked = false;
    }

    /// The rows in key order (bytes order, as Python sorts bytes), all or the dirty ones.
    pub fn sorted_rows(&self, dirty_only: bool) -> Vec<u32> {
        let mut rows: Vec<u32> = (0..self.len() as u32)
            .filter(|&r| !dirty_only || self.is_dirty(r as usize))
            .collect();
        rows.sort_unstable_by(|&a, &b| self.key(a as usize).cmp(self.key(b as usize)));
        rows
    }

    /// Bytes held (capacities), for the metrics.
    pub fn nbytes(&self) -> usize {
        let per_idx = std::mem::size_of::<(u32, u32)>() + 1;
        self.idx.capacity() * per_idx
            + self.extra.iter().map(|(k, _)| k.len() + 32).sum::<usize>()
            + self.kstart.capacity() * 4
            + self.blob.capacity()
            + self.accs.capacity() * std::mem::size_of::<Num>()
            + self.dirty.capacity() * 8
            + std::mem::size_of::<Win>()
    }
}

/// The windows of one table, by end, and the order they were created in (the
/// order of the Python dict of windows: `groups` lists them in it).
#[derive(Default)]
pub struct Windows {
    pub by_end: BTreeMap<i64, Win>,
    pub order: Vec<i64>,
}

impl Windows {
    pub fn get(&self, end: i64) -> Option<&Win> {
        self.by_end.get(&end)
    }

    pub fn get_mut(&mut self, end: i64) -> Option<&mut Win> {
        self.by_end.get_mut(&end)
    }

    /// The window, created (empty, last in order) if it did not exist.
    pub fn create(&mut self, end: i64) -> &mut Win {
        if !self.by_end.contains_key(&end) {
            self.order.push(end);
        }
        self.by_end.entry(end).or_default()
    }

    /// Replace the window by an empty one, keeping its place (`windows[end] = {}`).
    pub fn reset(&mut self, end: i64) {
        if self.by_end.insert(end, Win::default()).is_none() {
            self.order.push(end);
        }
    }

    pub fn remove(&mut self, end: i64) -> Option<Win> {
        let w = self.by_end.remove(&end)?;
        self.order.retain(|&e| e != end);
        Some(w)
    }
}
