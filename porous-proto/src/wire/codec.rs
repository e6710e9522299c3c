//! Byte-level reading and writing: fixed little-endian integers and varints.
//!
//! The [`Reader`] checks every length before it slices, so nothing built on it can index
//! out of bounds; each read either returns a value or [`DecodeError::Truncated`].
//! Varints are unsigned LEB128 (seven bits a byte, least significant group first, high
//! bit set on every byte but the last) and must be canonical: no redundant zero groups.

use bytes::BufMut;

use super::{DecodeError, Field};

/// Cursor over a datagram being decoded.
#[derive(Debug, Clone)]
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf, pos: 0 }
    }

    pub(crate) fn position(&self) -> usize {
        self.pos
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.remaining() == 0
    }

    /// Everything not yet read.
    pub(crate) fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    pub(crate) fn bytes(&mut self, n: usize, field: Field) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated(field))?;
        let out = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated(field))?;
        self.pos = end;
        Ok(out)
    }

    pub(crate) fn u8(&mut self, field: Field) -> Result<u8, DecodeError> {
        let b = self.bytes(1, field)?;
        b.first().copied().ok_or(DecodeError::Truncated(field))
    }

    /// A little-endian unsigned integer of `n` bytes, 1 <= n <= 4.
    pub(crate) fn uint(&mut self, n: usize, field: Field) -> Result<u32, DecodeError> {
        let b = self.bytes(n, field)?;
        Ok(b.iter().rev().fold(0u32, |acc, &x| (acc << 8) | u32::from(x)))
    }

    pub(crate) fn u32(&mut self, field: Field) -> Result<u32, DecodeError> {
        self.uint(4, field)
    }

    /// A little-endian `u64`.
    pub(crate) fn u64(&mut self, field: Field) -> Result<u64, DecodeError> {
        let low = self.u32(field)?;
        let high = self.u32(field)?;
        Ok(u64::from(high) << 32 | u64::from(low))
    }

    /// A canonical varint no larger than `u32::MAX`.
    pub(crate) fn varint(&mut self, field: Field) -> Result<u32, DecodeError> {
        let mut value: u64 = 0;
        for i in 0..5 {
            let byte = self.u8(field)?;
            value |= u64::from(byte & 0x7F) << (7 * i);
            if byte & 0x80 == 0 {
                if byte == 0 && i > 0 {
                    return Err(DecodeError::NonCanonicalVarint(field));
                }
                return u32::try_from(value).map_err(|_| DecodeError::OutOfRange(field));
            }
        }
        Err(DecodeError::OutOfRange(field))
    }
}

/// Number of bytes the varint encoding of `v` takes (1 to 5).
pub(crate) const fn varint_len(v: u32) -> usize {
    match v {
        0..=0x7F => 1,
        0x80..=0x3FFF => 2,
        0x4000..=0x1F_FFFF => 3,
        0x20_0000..=0xFFF_FFFF => 4,
        _ => 5,
    }
}

pub(crate) fn put_varint<B: BufMut>(out: &mut B, mut v: u32) {
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// Writes the low `n` bytes of `v`, little-endian.
pub(crate) fn put_uint<B: BufMut>(out: &mut B, v: u32, n: usize) {
    out.put_slice(v.to_le_bytes().get(..n).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    #[cfg(target_family = "wasm")]
    use wasm_bindgen_test::wasm_bindgen_test as test;

    use super::*;
    use quickcheck::quickcheck;

    fn enc(v: u32) -> Vec<u8> {
        let mut out = Vec::new();
        put_varint(&mut out, v);
        out
    }

    #[test]
    fn varint_boundaries() {
        for (v, len) in
            [(0, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (2_097_151, 3), (2_097_152, 4), (u32::MAX, 5)]
        {
            assert_eq!(enc(v).len(), len, "{v}");
            assert_eq!(varint_len(v), len, "{v}");
            assert_eq!(Reader::new(&enc(v)).varint(Field::Length), Ok(v));
        }
    }

    #[test]
    fn varint_rejects_overlong_overflow_and_truncation() {
        assert_eq!(
            Reader::new(&[0x80, 0x00]).varint(Field::Length),
            Err(DecodeError::NonCanonicalVarint(Field::Length))
        );
        assert_eq!(
            Reader::new(&[0xFF, 0xFF, 0xFF, 0xFF, 0x10]).varint(Field::Length),
            Err(DecodeError::OutOfRange(Field::Length))
        );
        assert_eq!(
            Reader::new(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01]).varint(Field::Length),
            Err(DecodeError::OutOfRange(Field::Length))
        );
        assert_eq!(Reader::new(&[0x80]).varint(Field::Length), Err(DecodeError::Truncated(Field::Length)));
        assert_eq!(Reader::new(&[]).varint(Field::Length), Err(DecodeError::Truncated(Field::Length)));
    }

    #[test]
    fn fixed_width_little_endian() {
        let mut out = Vec::new();
        put_uint(&mut out, 0x0012_3456, 3);
        assert_eq!(out, [0x56, 0x34, 0x12]);
        let mut r = Reader::new(&out);
        assert_eq!(r.uint(3, Field::PacketId), Ok(0x12_3456));
        assert!(r.is_empty());
        assert_eq!(r.uint(1, Field::PacketId), Err(DecodeError::Truncated(Field::PacketId)));
    }

    quickcheck! {
        fn varint_roundtrip(v: u32) -> bool {
            let bytes = enc(v);
            let mut r = Reader::new(&bytes);
            r.varint(Field::Length) == Ok(v) && r.is_empty() && bytes.len() == varint_len(v)
        }
    }
}
