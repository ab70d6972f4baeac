//! The fold of the native state table (`table.rs`): a batch's keys, event times
//! and items into the table's rows, all or nothing. Pass 2 folds into scratch
//! accumulators started from the table's rows (an int past i64 is a `Bail` with
//! nothing changed), pass 3 writes them back, new rows in first-record order (as
//! the Python loops insert keys into a window's dict).

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyFloat, PyInt, PyList};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::accs::COUNT;
use crate::json::{Bail, R};
use crate::num::Num;
use crate::store::hash_key;
use crate::table::Table;

/// What a fold did besides the entries: late records, stream time, and the
/// windows whose first offset it set (end, index of the record).
pub struct Outcome {
    pub late: Vec<usize>,
    pub st: i64,
    pub firsts: Vec<(i64, usize)>,
}

/// A window a batch touches: its end, whether it existed, whether it was empty.
struct Touched {
    end: i64,
    existed: bool,
}

pub fn num_of(obj: &Bound<'_, PyAny>) -> R<Num> {
    if obj.is_exact_instance_of::<PyInt>() {
        return obj.extract::<i64>().map(Num::I).map_err(|_| Bail);
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        return Ok(Num::F(obj.cast::<PyFloat>().map_err(|_| Bail)?.value()));
    }
    Err(Bail)
}

impl Table {
    pub fn fold_core(
        &mut self, keys: &[&[u8]], times: &[i64], items: &[Num], st0: i64,
        refold: Option<&FxHashSet<i64>>,
    ) -> R<Outcome> {
        let (ncols, width, shape) = (self.ncols, self.shape.width, &self.shape);
        let mut win_of: FxHashMap<i64, usize> = FxHashMap::default();
        let mut touched: Vec<Touched> = Vec::new();
        let mut slot_of: FxHashMap<(usize, &[u8]), usize> =
            FxHashMap::with_capacity_and_hasher(times.len(), Default::default());
        // per slot: (window, record, the table's row, the key's hash)
        let mut slots: Vec<(usize, usize, Option<usize>, u64)> = Vec::with_capacity(times.len());
        let mut accs: Vec<Num> = Vec::with_capacity(times.len() * width);
        let mut out = Outcome { late: Vec::new(), st: st0, firsts: Vec::new() };
        let (mut cur_end, mut cur_w) = (i64::MIN, 0usize);
        for (i, (&t, &key)) in times.iter().zip(keys).enumerate() {
            let it = &items[i * ncols..(i + 1) * ncols];
            let now = if refold.is_some() { out.st } else { t.max(out.st) };
            // Windows containing t start at the multiples of advance in (t - size, t],
            // newest first (the Python loops' order, so windows are created in it).
            let mut start = t - t.rem_euclid(self.advance);
            let low = t.checked_sub(self.size).ok_or(Bail)?;
            let mut is_late = false;
            while start > low {
                let end = start.checked_add(self.size).ok_or(Bail)?;
                start -= self.advance;
                match refold {
                    Some(pending) if !pending.contains(&end) => continue,
                    Some(_) => {}
                    None => {
                        if end.checked_add(self.grace).ok_or(Bail)? <= now {
                            is_late = true;
                            continue;
                        }
                    }
                }
                let w = if end == cur_end {
                    cur_w
                } else {
                    let w = match win_of.get(&end) {
                        Some(&w) => w,
                        None => {
                            let existing = self.wins.get(end);
                            let empty = existing.is_none_or(|w| w.len() == 0);
                            match (refold.is_some(), existing.is_some()) {
                                (true, false) => return Err(Bail),
                                // the refold's first record into an empty window
                                (true, true) if empty => out.firsts.push((end, i)),
                                (false, false) => out.firsts.push((end, i)),
                                _ => {}
                            }
                            touched.push(Touched { end, existed: existing.is_some() });
                            win_of.insert(end, touched.len() - 1);
                            touched.len() - 1
                        }
                    };
                    (cur_end, cur_w) = (end, w);
                    w
                };
                let s = match slot_of.get(&(w, key)) {
                    Some(&s) => s,
                    None => {
                        let h = hash_key(key);
                        let base = accs.len();
                        accs.resize(base + width, Num::None);
                        let found = if touched[w].existed {
                            self.wins.get(end).and_then(|win| win.find(key, h).map(|r| (win, r)))
                        } else {
                            None
                        };
                        match found {
                            Some((win, r)) => accs[base..]
                                .copy_from_slice(&win.accs[r * width..(r + 1) * width]),
                            None => shape.zero(&mut accs[base..]),
                        }
                        slots.push((w, i, found.map(|(_, r)| r), h));
                        slot_of.insert((w, key), slots.len() - 1);
                        slots.len() - 1
                    }
                };
                shape.update(&mut accs[s * width..(s + 1) * width], it)?;
            }
            if refold.is_none() {
                out.st = now;
                if is_late {
                    out.late.push(i);
                }
            }
        }
        for t in &touched {
            if !t.existed {
                self.wins.create(t.end);
            }
        }
        for (s, &(w, rec, row, h)) in slots.iter().enumerate() {
            let win = self.wins.get_mut(touched[w].end).ok_or(Bail)?;
            let acc = &accs[s * width..(s + 1) * width];
            let r = match row {
                Some(r) => {
                    win.accs[r * width..(r + 1) * width].copy_from_slice(acc);
                    r
                }
                None => {
                    if !win.push(keys[rec], h, acc) {
                        return Err(Bail);
                    }
                    win.len() - 1
                }
            };
            if refold.is_none() {
                win.set_dirty(r);
            }
        }
        Ok(out)
    }

    /// The general path's columns (keys, event times, picked items) as the table's.
    pub fn columns<'py>(
        &self, keys: &Bound<'py, PyList>, times: &Bound<'py, PyList>,
        items: Option<&Bound<'py, PyList>>,
    ) -> R<(Vec<Bound<'py, PyBytes>>, Vec<i64>, Vec<Num>)> {
        let n = keys.len();
        if times.len() != n || items.is_some_and(|x| x.len() != n) {
            return Err(Bail);
        }
        let mut ks = Vec::with_capacity(n);
        let mut ts = Vec::with_capacity(n);
        let mut xs = Vec::with_capacity(n * self.ncols);
        for i in 0..n {
            ks.push(keys.get_item(i).map_err(|_| Bail)?.cast_into_exact::<PyBytes>()
                .map_err(|_| Bail)?);
            let t = times.get_item(i).map_err(|_| Bail)?;
            if !t.is_exact_instance_of::<PyInt>() {
                return Err(Bail);
            }
            ts.push(t.extract::<i64>().map_err(|_| Bail)?);
            let Some(items) = items.filter(|_| self.ncols > 0) else { continue };
            let item = items.get_item(i).map_err(|_| Bail)?;
            if self.shape.composite {
                let parts = item.cast_exact::<PyList>().map_err(|_| Bail)?;
                if parts.len() != self.shape.kinds.len() {
                    return Err(Bail);
                }
                for (j, &k) in self.shape.kinds.iter().enumerate() {
                    if k != COUNT {
                        xs.push(num_of(&parts.get_item(j).map_err(|_| Bail)?)?);
                    }
                }
            } else {
                xs.push(num_of(&item)?);
            }
        }
        Ok((ks, ts, xs))
    }
}

