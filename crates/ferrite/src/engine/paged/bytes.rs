//! Little-endian fields of the paged engine's on-media layouts (pages, the meta page, free-list
//! trunks, journal and WAL headers, records and frames, rows, catalog records).
//!
//! Two kinds of access:
//! - fixed layouts, whose buffer the caller sized for the layout (a header it allocated, a
//!   page-sized buffer read at constant offsets): [`u16_at`], [`u32_at`], [`u64_at`] and
//!   [`put_u16`], [`put_u32`], [`put_u64`]. A field past the buffer's end is a bug of the
//!   caller, and they panic like slice indexing does;
//! - offsets that come from stored bytes (a page's cell offsets, a row's lengths):
//!   [`get_u16`], [`get_u32`], [`get_u64`] and [`set_u16`], [`set_u32`] return `None` past
//!   the end (or on an offset that overflows), so damaged bytes give an error, never a panic.
//!
//! # Invariants
//! Every multi-byte integer of the paged formats is little-endian, whatever the host.

/// The `N` bytes at `at`, or `None` when they pass the end of `b`.
fn array<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// The `N` bytes at `at`, writable, or `None` when they pass the end of `b`.
fn slot<const N: usize>(b: &mut [u8], at: usize) -> Option<&mut [u8]> {
    b.get_mut(at..at.checked_add(N)?)
}

/// The `u16` at `at`, `None` past the end.
pub(crate) fn get_u16(b: &[u8], at: usize) -> Option<u16> {
    array(b, at).map(u16::from_le_bytes)
}

/// The `u32` at `at`, `None` past the end.
pub(crate) fn get_u32(b: &[u8], at: usize) -> Option<u32> {
    array(b, at).map(u32::from_le_bytes)
}

/// The `u64` at `at`, `None` past the end.
pub(crate) fn get_u64(b: &[u8], at: usize) -> Option<u64> {
    array(b, at).map(u64::from_le_bytes)
}

/// Stores `v` at `at`; `None`, and nothing written, past the end.
pub(crate) fn set_u16(b: &mut [u8], at: usize, v: u16) -> Option<()> {
    slot::<2>(b, at).map(|s| s.copy_from_slice(&v.to_le_bytes()))
}

/// Stores `v` at `at`; `None`, and nothing written, past the end.
pub(crate) fn set_u32(b: &mut [u8], at: usize, v: u32) -> Option<()> {
    slot::<4>(b, at).map(|s| s.copy_from_slice(&v.to_le_bytes()))
}

/// The `u16` of a fixed layout at `at`. Panics past the end of `b` (a caller's bug).
pub(crate) fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(fixed(b, at))
}

/// The `u32` of a fixed layout at `at`. Panics past the end of `b` (a caller's bug).
pub(crate) fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(fixed(b, at))
}

/// The `u64` of a fixed layout at `at`. Panics past the end of `b` (a caller's bug).
pub(crate) fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(fixed(b, at))
}

/// Stores `v` in a fixed layout at `at`. Panics past the end of `b` (a caller's bug).
pub(crate) fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

/// Stores `v` in a fixed layout at `at`. Panics past the end of `b` (a caller's bug).
pub(crate) fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Stores `v` in a fixed layout at `at`. Panics past the end of `b` (a caller's bug).
pub(crate) fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

fn fixed<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut w = [0u8; N];
    w.copy_from_slice(&b[at..at + N]);
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_little_endian_and_checked_access_stops_at_the_end() {
        let mut b = [0u8; 10];
        put_u16(&mut b, 0, 0x0102);
        put_u32(&mut b, 2, 0x0304_0506);
        assert_eq!(b[..6], [0x02, 0x01, 0x06, 0x05, 0x04, 0x03]);
        put_u64(&mut b, 2, u64::MAX - 1);
        assert_eq!((u16_at(&b, 0), u64_at(&b, 2)), (0x0102, u64::MAX - 1));
        assert_eq!(u32_at(&b, 6), u32::MAX);
        assert_eq!(get_u64(&b, 2), Some(u64::MAX - 1));
        assert_eq!((get_u16(&b, 9), get_u32(&b, 7), get_u64(&b, 3)), (None, None, None));
        assert_eq!((get_u16(&b, usize::MAX), get_u32(&b, usize::MAX - 1)), (None, None));
        assert_eq!(set_u32(&mut b, 7, 1), None);
        assert_eq!(set_u16(&mut b, usize::MAX, 1), None);
        assert_eq!(u32_at(&b, 6), u32::MAX, "a refused store writes nothing");
        assert_eq!(set_u16(&mut b, 8, 7), Some(()));
        assert_eq!(get_u16(&b, 8), Some(7));
    }
}
