//! The bytes of the native state table (`table.rs`): exactly what
//! `FixedWindowState.encode` writes and `apply` reads (`core/codec.py`, the
//! aggregators' `encode`/`decode`), for the values the table holds.
//!
//! Anything it can't write or read exactly as Python does (a float Min/Max,
//! whose JSON text is orjson's; a big int; a malformed body) is an `Err`: the
//! caller then converts the table back to Python dicts and lets Python do it.

use crate::accs::{Shape, COUNT, MAX, MEAN, MIN, SUM};
use crate::json::{Bail, R};
use crate::num::Num;

pub const STORED: u8 = 0;
pub const RECOMPUTE: u8 = 1;

pub fn write_uvarint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8 & 0x7F) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

pub fn write_svarint(out: &mut Vec<u8>, n: i64) {
    write_uvarint(out, ((n as u64) << 1) ^ ((n >> 63) as u64));
}

pub fn write_bytes(out: &mut Vec<u8>, b: &[u8]) {
    write_uvarint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn read_uvarint(data: &[u8], pos: &mut usize) -> R<u64> {
    let (mut result, mut shift) = (0u64, 0u32);
    loop {
        let b = *data.get(*pos).ok_or(Bail)?;
        *pos += 1;
        if shift == 63 && b > 1 || shift > 63 {
            return Err(Bail); // past 64 bits: a Python big int
        }
        result |= u64::from(b & 0x7F) << shift;
        if b < 0x80 {
            return Ok(result);
        }
        shift += 7;
    }
}

pub fn read_svarint(data: &[u8], pos: &mut usize) -> R<i64> {
    let u = read_uvarint(data, pos)?;
    Ok(((u >> 1) as i64) ^ -((u & 1) as i64))
}

pub fn read_bytes<'a>(data: &'a [u8], pos: &mut usize) -> R<&'a [u8]> {
    let n = usize::try_from(read_uvarint(data, pos)?).map_err(|_| Bail)?;
    let end = pos.checked_add(n).ok_or(Bail)?;
    let got = data.get(*pos..end).ok_or(Bail)?;
    *pos = end;
    Ok(got)
}

/// `codec.encode_number`.
fn number(out: &mut Vec<u8>, n: Num) -> R<()> {
    match n {
        Num::I(i) => {
            out.push(b'i');
            write_svarint(out, i);
        }
        Num::F(f) => {
            out.push(b'f');
            out.extend_from_slice(&f.to_be_bytes());
        }
        Num::None => return Err(Bail),
    }
    Ok(())
}

/// `codec.decode_number` (bytes after an int's varint are ignored, as there).
fn read_number(data: &[u8]) -> R<Num> {
    match data.first() {
        Some(b'i') => read_svarint(data, &mut 1).map(Num::I),
        Some(b'f') if data.len() == 9 => {
            Ok(Num::F(f64::from_be_bytes(data[1..9].try_into().map_err(|_| Bail)?)))
        }
        _ => Err(Bail),
    }
}

/// One aggregation's `encode` of its accumulator `acc` (its numbers in a row).
fn part(out: &mut Vec<u8>, kind: u8, acc: &[Num]) -> R<()> {
    match kind {
        COUNT | SUM => number(out, acc[0]),
        MEAN => {
            let mut tmp = Vec::with_capacity(20);
            number(&mut tmp, acc[0])?;
            write_bytes(out, &tmp);
            tmp.clear();
            number(&mut tmp, acc[1])?;
            write_bytes(out, &tmp);
            Ok(())
        }
        // encode_json: null or an int's digits (a float's text is orjson's: Python writes it)
        _ => match acc[0] {
            Num::None => {
                out.extend_from_slice(b"null");
                Ok(())
            }
            Num::I(i) => {
                out.extend_from_slice(i.to_string().as_bytes());
                Ok(())
            }
            Num::F(_) => Err(Bail),
        },
    }
}

/// The aggregation's `encode` of a row (a composite: each part length-prefixed).
pub fn encode_acc(out: &mut Vec<u8>, shape: &Shape, acc: &[Num], tmp: &mut Vec<u8>) -> R<()> {
    if !shape.composite {
        return part(out, shape.kinds[0], acc);
    }
    for (&k, &o) in shape.kinds.iter().zip(&shape.offs) {
        tmp.clear();
        part(tmp, k, &acc[o..])?;
        write_bytes(out, tmp);
    }
    Ok(())
}

/// A Min/Max accumulator's JSON as orjson reads it, where that is null or an int.
fn read_json_int(data: &[u8]) -> R<Num> {
    if data == b"null" {
        return Ok(Num::None);
    }
    let digits = data.strip_prefix(b"-").unwrap_or(data);
    let well_formed = !digits.is_empty() && digits.iter().all(u8::is_ascii_digit)
        && (digits[0] != b'0' || digits.len() == 1);
    if !well_formed {
        return Err(Bail);
    }
    std::str::from_utf8(data).map_err(|_| Bail)?.parse::<i64>().map(Num::I).map_err(|_| Bail)
}

fn read_part(kind: u8, data: &[u8], out: &mut [Num]) -> R<()> {
    match kind {
        COUNT => match read_number(data)? {
            Num::I(i) => out[0] = Num::I(i),
            _ => return Err(Bail), // int(float): Python's
        },
        SUM => out[0] = read_number(data)?,
        MEAN => {
            let mut pos = 0;
            out[0] = read_number(read_bytes(data, &mut pos)?)?;
            out[1] = read_number(read_bytes(data, &mut pos)?)?;
        }
        MIN | MAX => out[0] = read_json_int(data)?,
        _ => return Err(Bail),
    }
    Ok(())
}

/// The aggregation's `decode` into a row's numbers.
pub fn decode_acc(shape: &Shape, data: &[u8], out: &mut [Num]) -> R<()> {
    if !shape.composite {
        return read_part(shape.kinds[0], data, out);
    }
    let mut pos = 0;
    for (&k, &o) in shape.kinds.iter().zip(&shape.offs) {
        read_part(k, read_bytes(data, &mut pos)?, &mut out[o..])?;
    }
    if pos != data.len() {
        return Err(Bail);
    }
    Ok(())
}

/// What a window state body holds, in order.
pub enum Item<'a> {
    /// (end, first offset + 1 or 0, kind, number of entries that follow)
    Window(i64, u64, u8, u64),
    /// a key; its accumulator is the sink's second argument
    Entry(&'a [u8]),
}

/// Read a body of `FixedWindowState.apply`'s format (`version`), handing each
/// window and entry to `sink`.
pub fn walk<'a>(
    shape: &Shape, body: &'a [u8], version: u8, mut sink: impl FnMut(Item<'a>, &[Num]),
) -> R<()> {
    let mut pos = 0;
    let mut acc = vec![Num::None; shape.width];
    let n = read_uvarint(body, &mut pos)?;
    for _ in 0..n {
        let end = read_svarint(body, &mut pos)?;
        let mut first = 0;
        if version >= 2 {
            first = read_uvarint(body, &mut pos)?;
            let kind = *body.get(pos).ok_or(Bail)?;
            pos += 1;
            if kind == RECOMPUTE {
                if first == 0 {
                    return Err(Bail);
                }
                sink(Item::Window(end, first, RECOMPUTE, 0), &[]);
                continue;
            }
            if kind != STORED {
                return Err(Bail);
            }
        }
        let keys = read_uvarint(body, &mut pos)?;
        sink(Item::Window(end, first, STORED, keys), &[]);
        for _ in 0..keys {
            let key = read_bytes(body, &mut pos)?;
            let raw = read_bytes(body, &mut pos)?;
            decode_acc(shape, raw, &mut acc)?;
            sink(Item::Entry(key), &acc);
        }
    }
    if pos != body.len() {
        return Err(Bail);
    }
    Ok(())
}
