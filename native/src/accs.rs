//! The accumulators of a fast-path shape: how each aggregation starts, folds an
//! item (as `Aggregator.add` does in Python), and is read from and written to the
//! Python state (`[count, sum, ...]` lists for a dict of aggregations, the value
//! itself for a lone one, `[sum, count]` for a Mean).

use pyo3::prelude::*;
use pyo3::types::{PyFloat, PyInt, PyList};

use crate::json::{Bail, R};
use crate::num::{add, lt, Num};

pub const COUNT: u8 = 0;
pub const SUM: u8 = 1;
pub const MIN: u8 = 2;
pub const MAX: u8 = 3;
pub const MEAN: u8 = 4;

/// The aggregations of one shape and where each keeps its numbers in a slot.
#[derive(Clone)]
pub struct Shape {
    pub kinds: Vec<u8>,
    /// per aggregation, its item's column (count: none)
    pub cols: Vec<usize>,
    /// per aggregation, where its accumulator starts in a slot's numbers
    pub offs: Vec<usize>,
    /// numbers per slot
    pub width: usize,
    /// a dict of aggregations (a list accumulator), not a lone one
    pub composite: bool,
}

/// A Python int that fits an i64.
pub fn int_of(obj: &Bound<'_, PyAny>) -> R<i64> {
    if !obj.is_exact_instance_of::<PyInt>() {
        return Err(Bail);
    }
    obj.extract::<i64>().map_err(|_| Bail)
}

fn num_of(obj: &Bound<'_, PyAny>, none_ok: bool) -> R<Num> {
    if obj.is_exact_instance_of::<PyInt>() {
        return obj.extract::<i64>().map(Num::I).map_err(|_| Bail);
    }
    if obj.is_exact_instance_of::<PyFloat>() {
        let f = obj.cast::<PyFloat>().map_err(|_| Bail)?.value();
        return if f.is_finite() { Ok(Num::F(f)) } else { Err(Bail) };
    }
    if none_ok && obj.is_none() {
        return Ok(Num::None);
    }
    Err(Bail)
}

fn py_num<'py>(py: Python<'py>, n: Num) -> Bound<'py, PyAny> {
    match n {
        Num::None => py.None().into_bound(py),
        Num::I(i) => i.into_pyobject(py).expect("int").into_any(),
        Num::F(f) => PyFloat::new(py, f).into_any(),
    }
}

impl Shape {
    /// The shape of `kinds` (a dict of them when `composite`): items are taken in
    /// column order, one column per aggregation that reads one (all but count).
    pub fn new(kinds: Vec<u8>, composite: bool) -> Shape {
        let (mut cols, mut offs, mut width, mut ncols) = (Vec::new(), Vec::new(), 0, 0);
        for k in &kinds {
            offs.push(width);
            width += if *k == MEAN { 2 } else { 1 };
            if *k == COUNT {
                cols.push(usize::MAX);
            } else {
                cols.push(ncols);
                ncols += 1;
            }
        }
        Shape { kinds, cols, offs, width, composite }
    }

    /// Items per record.
    pub fn ncols(&self) -> usize {
        self.kinds.iter().filter(|&&k| k != COUNT).count()
    }

    /// The accumulator of a key new to its window: the aggregation's zero (the
    /// Python path's first add from zero gives what `update` then gives).
    pub fn zero(&self, out: &mut [Num]) {
        for (k, &o) in self.kinds.iter().zip(&self.offs) {
            match *k {
                COUNT | SUM => out[o] = Num::I(0),
                MEAN => {
                    out[o] = Num::I(0);
                    out[o + 1] = Num::I(0);
                }
                _ => out[o] = Num::None,
            }
        }
    }

    /// The state's accumulator as numbers (a Bail for anything else: big ints,
    /// strings, a shape the Python path built differently).
    pub fn load(&self, acc: &Bound<'_, PyAny>, out: &mut [Num]) -> R<()> {
        if !self.composite {
            return load_one(self.kinds[0], acc, out);
        }
        let list = acc.cast_exact::<PyList>().map_err(|_| Bail)?;
        if list.len() != self.kinds.len() {
            return Err(Bail);
        }
        for (j, (k, &o)) in self.kinds.iter().zip(&self.offs).enumerate() {
            let part = list.get_item(j).map_err(|_| Bail)?;
            load_one(*k, &part, &mut out[o..])?;
        }
        Ok(())
    }

    /// One record's items folded into one accumulator, as the Python loop does.
    #[inline]
    pub fn update(&self, acc: &mut [Num], items: &[Num]) -> R<()> {
        for (j, k) in self.kinds.iter().enumerate() {
            let o = self.offs[j];
            match *k {
                COUNT => acc[o] = add(acc[o], Num::I(1))?,
                SUM => acc[o] = add(acc[o], items[self.cols[j]])?,
                MIN => {
                    let x = items[self.cols[j]];
                    if acc[o] == Num::None || lt(x, acc[o])? {
                        acc[o] = x;
                    }
                }
                MAX => {
                    let x = items[self.cols[j]];
                    if acc[o] == Num::None || lt(acc[o], x)? {
                        acc[o] = x;
                    }
                }
                _ => {
                    acc[o] = add(acc[o], items[self.cols[j]])?;
                    acc[o + 1] = add(acc[o + 1], Num::I(1))?;
                }
            }
        }
        Ok(())
    }

    /// Write `acc` into the state's accumulator `old` in place, as the Python loop
    /// mutates it (lists), or return the new value to store under the key.
    pub fn store<'py>(
        &self, py: Python<'py>, old: Option<&Bound<'py, PyAny>>, acc: &[Num],
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        let Some(old) = old else { return self.new_acc(py, acc).map(Some) };
        if self.composite {
            let list = old.cast::<PyList>()?;
            for (j, (k, &o)) in self.kinds.iter().zip(&self.offs).enumerate() {
                if *k == MEAN {
                    set_pair(py, &list.get_item(j)?, acc[o], acc[o + 1])?;
                } else {
                    list.set_item(j, py_num(py, acc[o]))?;
                }
            }
            return Ok(None);
        }
        if self.kinds[0] == MEAN {
            set_pair(py, old, acc[0], acc[1])?;
            return Ok(None);
        }
        Ok(Some(py_num(py, acc[0])))
    }

    /// A Python accumulator as `Aggregator.add` builds it from zero.
    pub fn new_acc<'py>(&self, py: Python<'py>, acc: &[Num]) -> PyResult<Bound<'py, PyAny>> {
        let one = |k: u8, o: usize| -> PyResult<Bound<'py, PyAny>> {
            Ok(if k == MEAN {
                PyList::new(py, [py_num(py, acc[o]), py_num(py, acc[o + 1])])?.into_any()
            } else {
                py_num(py, acc[o])
            })
        };
        if !self.composite {
            return one(self.kinds[0], 0);
        }
        let parts: Vec<Bound<'py, PyAny>> =
            self.kinds.iter().zip(&self.offs).map(|(&k, &o)| one(k, o)).collect::<PyResult<_>>()?;
        Ok(PyList::new(py, parts)?.into_any())
    }
}

fn load_one(kind: u8, acc: &Bound<'_, PyAny>, out: &mut [Num]) -> R<()> {
    match kind {
        COUNT => out[0] = Num::I(int_of(acc)?),
        SUM => out[0] = num_of(acc, false)?,
        MEAN => {
            let pair = acc.cast_exact::<PyList>().map_err(|_| Bail)?;
            if pair.len() != 2 {
                return Err(Bail);
            }
            out[0] = num_of(&pair.get_item(0).map_err(|_| Bail)?, false)?;
            out[1] = Num::I(int_of(&pair.get_item(1).map_err(|_| Bail)?)?);
        }
        _ => out[0] = num_of(acc, true)?,
    }
    Ok(())
}

/// A Mean's `[sum, count]` list, updated in place.
fn set_pair<'py>(py: Python<'py>, pair: &Bound<'py, PyAny>, sum: Num, count: Num) -> PyResult<()> {
    let pair = pair.cast::<PyList>()?;
    pair.set_item(0, py_num(py, sum))?;
    pair.set_item(1, py_num(py, count))
}
