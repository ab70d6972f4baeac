//! Result values as orjson (3.13) writes them, for `output.rs`: str escapes,
//! the float layout, ints within 64 bits, and the results of the built-in
//! aggregations read from their accumulators. `Bail`: not written exactly as
//! orjson would (the caller leaves the slice to Python).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString};

/// Declined: the Python path encodes this slice.
pub(crate) struct Bail;
pub(crate) type R<T> = Result<T, Bail>;

// -- JSON as orjson writes it -----------------------------------------------------

/// A str's JSON text: orjson escapes `"`, `\` and the control characters below
/// 0x20 (`\b \t \n \f \r` by name, the rest as `\u00xx`), nothing else.
pub(crate) fn write_str(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut from = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[from..i]);
        if esc.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 15) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        from = i + 1;
    }
    out.extend_from_slice(&bytes[from..]);
    out.push(b'"');
}

/// A finite float as orjson (3.13) writes it: the shortest digits that read
/// back to it, plain up to 16 digits left of the point (`123.0`, `0.001`;
/// `1e+16` past them), `0.0000x` down to 1e-5, else `d.ddde-7`.
pub(crate) fn write_float(out: &mut Vec<u8>, f: f64) {
    // Rust's `{:e}` gives the shortest round-trip digits ("1.2345e-7", "5e0"),
    // but not always the closest of them: 711909615820736.25 is "...736.3" there
    // and "...736.2" in orjson (ties to even). So: the value correctly rounded to
    // that many digits, where it reads back to the same float.
    let shortest = format!("{:e}", f);
    let n = shortest.split_once('e').map_or(0, |(m, _)| m.bytes().filter(u8::is_ascii_digit).count());
    let closest = format!("{:.*e}", n.saturating_sub(1), f);
    let sci = if closest.parse::<f64>().ok() == Some(f) { closest } else { shortest };
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp has an exponent");
    let exp: i32 = exp.parse().expect("LowerExp exponent");
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let mut digits: Vec<u8> = mantissa.bytes().filter(|&b| b != b'.').collect();
    while digits.len() > 1 && digits.last() == Some(&b'0') {
        digits.pop(); // rounded up to fewer digits: 9.5 -> "1.0e1"
    }
    let len = digits.len() as i32;
    // value = 0.d1d2...dn * 10^kk
    let kk = exp + 1;
    if neg {
        out.push(b'-');
    }
    let k = kk - len; // value = digits * 10^k
    if 0 <= k && kk <= 16 {
        out.extend_from_slice(&digits);
        out.extend(std::iter::repeat(b'0').take(k as usize));
        out.extend_from_slice(b".0");
    } else if 0 < kk && kk <= 16 {
        out.extend_from_slice(&digits[..kk as usize]);
        out.push(b'.');
        out.extend_from_slice(&digits[kk as usize..]);
    } else if -5 < kk && kk <= 0 {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat(b'0').take((-kk) as usize));
        out.extend_from_slice(&digits);
    } else {
        out.push(digits[0]);
        if len > 1 {
            out.push(b'.');
            out.extend_from_slice(&digits[1..]);
        }
        out.push(b'e');
        if kk > 0 {
            out.push(b'+'); // orjson 3.13 signs positive exponents (ryu did not)
        }
        out.extend_from_slice((kk - 1).to_string().as_bytes());
    }
}

pub(crate) fn write_int(out: &mut Vec<u8>, obj: &Bound<'_, PyAny>) -> R<()> {
    // orjson takes i64 and u64; past them it raises (the Python path says so)
    if let Ok(i) = obj.extract::<i64>() {
        out.extend_from_slice(i.to_string().as_bytes());
    } else if let Ok(u) = obj.extract::<u64>() {
        out.extend_from_slice(u.to_string().as_bytes());
    } else {
        return Err(Bail);
    }
    Ok(())
}

/// None, a bool, an int, a float or a str, of exactly those types.
pub(crate) fn write_scalar(out: &mut Vec<u8>, obj: &Bound<'_, PyAny>) -> R<()> {
    if obj.is_exact_instance_of::<PyInt>() {
        write_int(out, obj)
    } else if obj.is_exact_instance_of::<PyFloat>() {
        let f = obj.cast::<PyFloat>().map_err(|_| Bail)?.value();
        if f.is_finite() {
            write_float(out, f);
        } else {
            out.extend_from_slice(b"null"); // orjson: NaN and infinities are null
        }
        Ok(())
    } else if obj.is_none() {
        out.extend_from_slice(b"null");
        Ok(())
    } else if obj.is_exact_instance_of::<PyBool>() {
        out.extend_from_slice(if obj.is_truthy().map_err(|_| Bail)? { b"true" } else { b"false" });
        Ok(())
    } else if obj.is_exact_instance_of::<PyString>() {
        let s = obj.cast::<PyString>().map_err(|_| Bail)?.to_str().map_err(|_| Bail)?;
        write_str(out, s);
        Ok(())
    } else {
        Err(Bail)
    }
}

/// A result value: a scalar, or a dict of str -> scalar (a dict of
/// aggregations), its items in dict order or, with `sort`, by name.
pub(crate) fn write_value(out: &mut Vec<u8>, obj: &Bound<'_, PyAny>, sort: bool) -> R<()> {
    let Ok(dict) = obj.cast_exact::<PyDict>() else { return write_scalar(out, obj) };
    let mut items: Vec<(Bound<'_, PyAny>, Bound<'_, PyAny>)> = dict.iter().collect();
    if sort {
        let mut named = Vec::with_capacity(items.len());
        for (k, v) in items {
            let name = k.cast_exact::<PyString>().map_err(|_| Bail)?.to_str().map_err(|_| Bail)?;
            named.push((name.to_owned(), v));
        }
        named.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        out.push(b'{');
        for (i, (name, v)) in named.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_str(out, name);
            out.push(b':');
            write_scalar(out, v)?;
        }
        out.push(b'}');
        return Ok(());
    }
    out.push(b'{');
    for (i, (k, v)) in items.drain(..).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        let name = k.cast_exact::<PyString>().map_err(|_| Bail)?.to_str().map_err(|_| Bail)?;
        write_str(out, name);
        out.push(b':');
        write_scalar(out, &v)?;
    }
    out.push(b'}');
    Ok(())
}

/// Kinds of the built-in aggregations whose result `encode_accumulators` writes.
pub(crate) const K_COUNT: u8 = 0;
pub(crate) const K_SUM: u8 = 1;
pub(crate) const K_MINMAX: u8 = 2;
pub(crate) const K_MEAN: u8 = 3;

pub(crate) fn kind_code(name: &str) -> PyResult<u8> {
    Ok(match name {
        "count" => K_COUNT,
        "sum" => K_SUM,
        "min" | "max" => K_MINMAX,
        "mean" => K_MEAN,
        _ => return Err(PyValueError::new_err(format!("no native result for {name:?}"))),
    })
}

/// An exact int of at most 53 bits, or a float: what f64 divides as Python does.
pub(crate) fn exact_f64(obj: &Bound<'_, PyAny>) -> R<f64> {
    if obj.is_exact_instance_of::<PyFloat>() {
        return Ok(obj.cast::<PyFloat>().map_err(|_| Bail)?.value());
    }
    if obj.is_exact_instance_of::<PyInt>() {
        let i = obj.extract::<i64>().map_err(|_| Bail)?;
        if i.unsigned_abs() <= 1 << 53 {
            return Ok(i as f64);
        }
    }
    Err(Bail)
}

/// The result of one aggregation's accumulator, as `Aggregator.result` gives it
/// and orjson writes it: Count, Sum, Min and Max are their accumulator; Mean is
/// `[sum, count]`, `sum / count` or None for no items.
pub(crate) fn write_result(out: &mut Vec<u8>, kind: u8, acc: &Bound<'_, PyAny>) -> R<()> {
    match kind {
        K_COUNT | K_SUM => {
            if !acc.is_exact_instance_of::<PyInt>() && !acc.is_exact_instance_of::<PyFloat>() {
                return Err(Bail);
            }
            write_scalar(out, acc)
        }
        K_MINMAX => write_scalar(out, acc),
        _ => {
            let pair = acc.cast_exact::<PyList>().map_err(|_| Bail)?;
            if pair.len() != 2 {
                return Err(Bail);
            }
            let count = pair.get_item(1).map_err(|_| Bail)?;
            if !count.is_exact_instance_of::<PyInt>() {
                return Err(Bail);
            }
            if count.extract::<i64>().map_err(|_| Bail)? == 0 {
                out.extend_from_slice(b"null");
                return Ok(());
            }
            // exact operands: IEEE division rounds as Python's true division does
            let q = exact_f64(&pair.get_item(0).map_err(|_| Bail)?)? / exact_f64(&count)?;
            if q.is_finite() {
                write_float(out, q);
            } else {
                out.extend_from_slice(b"null");
            }
            Ok(())
        }
    }
}
