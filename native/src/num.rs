//! Numbers as Python folds them: ints (i64 here; past it, Python's big ints are
//! left to Python) and floats, added and compared exactly as CPython does.

use std::cmp::Ordering;

use crate::json::{Bail, R};

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    /// Python's None (an empty Min/Max)
    None,
    I(i64),
    F(f64),
}

/// `a + b` as Python computes it: int + int exactly (a Bail past i64), int +
/// float as float(int) + float, the int correctly rounded (CPython's
/// `PyLong_AsDouble` and Rust's `as` both round half to even).
#[inline]
pub fn add(a: Num, b: Num) -> R<Num> {
    match (a, b) {
        (Num::I(x), Num::I(y)) => x.checked_add(y).map(Num::I).ok_or(Bail),
        (Num::I(x), Num::F(y)) => Ok(Num::F(x as f64 + y)),
        (Num::F(x), Num::I(y)) => Ok(Num::F(x + y as f64)),
        (Num::F(x), Num::F(y)) => Ok(Num::F(x + y)),
        _ => Err(Bail),
    }
}

/// How an int compares with a finite float, exactly (as Python's `<`), not
/// through a rounding conversion.
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f >= TWO_63 {
        return Ordering::Less;
    }
    if f < -TWO_63 {
        return Ordering::Greater;
    }
    let t = f.trunc();
    match i.cmp(&(t as i64)) {
        Ordering::Equal => {
            let frac = f - t;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

/// `a < b` for two numbers, as Python decides it.
#[inline]
pub fn lt(a: Num, b: Num) -> R<bool> {
    match (a, b) {
        (Num::I(x), Num::I(y)) => Ok(x < y),
        (Num::F(x), Num::F(y)) => Ok(x < y),
        (Num::I(x), Num::F(y)) => Ok(cmp_int_float(x, y) == Ordering::Less),
        (Num::F(x), Num::I(y)) => Ok(cmp_int_float(y, x) == Ordering::Greater),
        _ => Err(Bail),
    }
}
