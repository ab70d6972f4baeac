//! A validating JSON scanner that accepts a subset of what orjson accepts, never
//! more, and yields the same values for what it picks.
//!
//! Anything it is not sure of is a `Bail`: the caller then leaves the batch to
//! the Python path, which decodes with orjson itself. So the rules here may be
//! stricter than orjson's (nesting deeper than `MAX_DEPTH`, object keys with
//! escapes, integers outside i64), never looser: RFC 8259 grammar, the four
//! whitespace bytes, UTF-8 validated (surrogates refused, as orjson does), escapes
//! `\" \\ \/ \b \f \n \r \t \uXXXX` with surrogate pairs, no lone surrogate,
//! floats correctly rounded (Rust's parser, as orjson's) and finite.

/// The batch can't be proven clean here: leave it to the Python path.
#[derive(Debug)]
pub struct Bail;

pub type R<T> = Result<T, Bail>;

/// Deeper nesting than this (orjson allows 1024) is left to orjson.
const MAX_DEPTH: u32 = 64;

/// A picked value: numbers are decoded, strings kept as their raw span.
#[derive(Clone, Copy, Debug)]
pub enum Val<'a> {
    Missing,
    Int(i64),
    Float(f64),
    /// the bytes between the quotes, and whether they hold escapes
    Str(&'a [u8], bool),
    /// true, false, null, an object or an array
    Other,
}

#[inline]
fn ws(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && matches!(b[i], b' ' | b'\t' | b'\n' | b'\r') {
        i += 1;
    }
    i
}

#[inline]
fn hex4(b: &[u8], i: usize) -> R<u32> {
    let d = b.get(i..i + 4).ok_or(Bail)?;
    let mut v = 0u32;
    for &c in d {
        let x = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            _ => return Err(Bail),
        };
        v = v * 16 + x as u32;
    }
    Ok(v)
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGHS: u64 = 0x8080_8080_8080_8080;

/// Per byte of `w`, its high bit set where the byte is `"`, `\\`, a control
/// character or not ASCII. Exact for the lowest such byte (the borrow of the
/// subtractions can only flag bytes above a true one), which is all that is used.
#[inline]
fn specials(w: u64) -> u64 {
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGHS;
    zero(w ^ (ONES * b'"' as u64))
        | zero(w ^ (ONES * b'\\' as u64))
        | (w.wrapping_sub(ONES * 0x20) & !w & HIGHS)
        | (w & HIGHS)
}

/// The string starting at `b[i] == '"'`: (position after its closing quote, its
/// contents' span, whether it holds escapes).
#[inline]
fn string(b: &[u8], i: usize) -> R<(usize, usize, usize, bool)> {
    let start = i + 1;
    let mut j = start;
    let mut high = false;
    let mut esc = false;
    loop {
        // Eight plain bytes at a time up to the next special one.
        while let Some(chunk) = b.get(j..j + 8) {
            let m = specials(u64::from_le_bytes(chunk.try_into().expect("8 bytes")));
            if m != 0 {
                j += (m.trailing_zeros() / 8) as usize;
                break;
            }
            j += 8;
        }
        let c = *b.get(j).ok_or(Bail)?;
        match c {
            b'"' => break,
            b'\\' => {
                esc = true;
                match *b.get(j + 1).ok_or(Bail)? {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => j += 2,
                    b'u' => {
                        let cp = hex4(b, j + 2)?;
                        j += 6;
                        if (0xD800..0xDC00).contains(&cp) {
                            if b.get(j) != Some(&b'\\') || b.get(j + 1) != Some(&b'u') {
                                return Err(Bail);
                            }
                            let lo = hex4(b, j + 2)?;
                            if !(0xDC00..0xE000).contains(&lo) {
                                return Err(Bail);
                            }
                            j += 6;
                        } else if (0xDC00..0xE000).contains(&cp) {
                            return Err(Bail);
                        }
                    }
                    _ => return Err(Bail),
                }
            }
            0..=0x1f => return Err(Bail),
            0x80.. => {
                high = true;
                j += 1;
            }
            _ => j += 1,
        }
    }
    // Escapes are ASCII, so the span is valid UTF-8 exactly when its raw bytes are.
    if high && std::str::from_utf8(&b[start..j]).is_err() {
        return Err(Bail);
    }
    Ok((j + 1, start, j, esc))
}

#[inline]
fn digits(b: &[u8], mut j: usize) -> usize {
    while j < b.len() && b[j].is_ascii_digit() {
        j += 1;
    }
    j
}

/// The number starting at `b[i]`: its value and the position after it.
#[inline]
fn number(b: &[u8], i: usize) -> R<(Val<'static>, usize)> {
    let mut j = i;
    let neg = b.get(j) == Some(&b'-');
    if neg {
        j += 1;
    }
    let int_start = j;
    match b.get(j) {
        Some(b'0') => j += 1,
        Some(b'1'..=b'9') => j = digits(b, j + 1),
        _ => return Err(Bail),
    }
    let int_end = j;
    let mut float = false;
    if b.get(j) == Some(&b'.') {
        let k = digits(b, j + 1);
        if k == j + 1 {
            return Err(Bail);
        }
        j = k;
        float = true;
    }
    if matches!(b.get(j), Some(b'e' | b'E')) {
        j += 1;
        if matches!(b.get(j), Some(b'+' | b'-')) {
            j += 1;
        }
        let k = digits(b, j);
        if k == j {
            return Err(Bail);
        }
        j = k;
        float = true;
    }
    if !float {
        // Accumulated negative so that i64::MIN fits; beyond i64 orjson gives a
        // big int or a float: left to it.
        let mut v: i64 = 0;
        for &c in &b[int_start..int_end] {
            v = v.checked_mul(10).ok_or(Bail)?.checked_sub((c - b'0') as i64).ok_or(Bail)?;
        }
        let v = if neg { v } else { v.checked_neg().ok_or(Bail)? };
        return Ok((Val::Int(v), j));
    }
    // The span is ASCII by construction.
    let s = std::str::from_utf8(&b[i..j]).map_err(|_| Bail)?;
    let v: f64 = s.parse().map_err(|_| Bail)?;
    if !v.is_finite() {
        return Err(Bail); // orjson refuses a number that overflows a double
    }
    Ok((Val::Float(v), j))
}

#[inline]
fn literal(b: &[u8], i: usize, lit: &[u8]) -> R<usize> {
    if b.get(i..i + lit.len()) == Some(lit) {
        Ok(i + lit.len())
    } else {
        Err(Bail)
    }
}

/// Any value at `b[i]` (no leading whitespace): what it is and the position after it.
fn value(b: &[u8], i: usize, depth: u32) -> R<(Val<'_>, usize)> {
    match *b.get(i).ok_or(Bail)? {
        b'"' => {
            let (j, s, e, esc) = string(b, i)?;
            Ok((Val::Str(&b[s..e], esc), j))
        }
        b'{' => Ok((Val::Other, object(b, i, depth + 1, &[], &mut [])?)),
        b'[' => Ok((Val::Other, array(b, i, depth + 1)?)),
        b't' => Ok((Val::Other, literal(b, i, b"true")?)),
        b'f' => Ok((Val::Other, literal(b, i, b"false")?)),
        b'n' => Ok((Val::Other, literal(b, i, b"null")?)),
        b'-' | b'0'..=b'9' => number(b, i),
        _ => Err(Bail),
    }
}

fn array(b: &[u8], i: usize, depth: u32) -> R<usize> {
    if depth > MAX_DEPTH {
        return Err(Bail);
    }
    let mut j = ws(b, i + 1);
    if b.get(j) == Some(&b']') {
        return Ok(j + 1);
    }
    loop {
        j = ws(b, value(b, j, depth)?.1);
        match b.get(j) {
            Some(b',') => j = ws(b, j + 1),
            Some(b']') => return Ok(j + 1),
            _ => return Err(Bail),
        }
    }
}

/// The object at `b[i] == '{'`; the values of the members named in `fields` go to
/// `out` (the last one of a name wins, as in orjson). Returns the position after it.
fn object<'a>(
    b: &'a [u8], i: usize, depth: u32, fields: &[&[u8]], out: &mut [Val<'a>],
) -> R<usize> {
    if depth > MAX_DEPTH {
        return Err(Bail);
    }
    let mut j = ws(b, i + 1);
    if b.get(j) == Some(&b'}') {
        return Ok(j + 1);
    }
    loop {
        if b.get(j) != Some(&b'"') {
            return Err(Bail);
        }
        let (k, ks, ke, esc) = string(b, j)?;
        j = ws(b, k);
        if b.get(j) != Some(&b':') {
            return Err(Bail);
        }
        j = ws(b, j + 1);
        let name = &b[ks..ke];
        let slot = if fields.is_empty() {
            None
        } else if esc {
            // An escaped name could spell a field: not decoded here.
            return Err(Bail);
        } else {
            fields.iter().position(|f| *f == name)
        };
        let (v, k) = value(b, j, depth)?;
        if let Some(s) = slot {
            out[s] = v;
        }
        j = ws(b, k);
        match b.get(j) {
            Some(b',') => j = ws(b, j + 1),
            Some(b'}') => return Ok(j + 1),
            _ => return Err(Bail),
        }
    }
}

/// A whole document that is one object; the named members' values go to `out`
/// (`Val::Missing` where absent).
pub fn pick<'a>(b: &'a [u8], fields: &[&[u8]], out: &mut [Val<'a>]) -> R<()> {
    for v in out.iter_mut() {
        *v = Val::Missing;
    }
    let i = ws(b, 0);
    if b.get(i) != Some(&b'{') {
        return Err(Bail);
    }
    let j = ws(b, object(b, i, 1, fields, out)?);
    if j != b.len() {
        return Err(Bail);
    }
    Ok(())
}

/// A whole document: its top-level value.
pub fn whole(b: &[u8]) -> R<Val<'_>> {
    let i = ws(b, 0);
    let (v, j) = value(b, i, 0)?;
    if ws(b, j) != b.len() {
        return Err(Bail);
    }
    Ok(v)
}
