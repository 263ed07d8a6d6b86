//! CRC32c (Castagnoli) and the SCTP checksum (RFC 4960 section 6.8 and appendix B).
//!
//! The CRC itself comes from the `crc32c` crate (SSE4.2 `crc32` instruction when available,
//! table-driven otherwise); this module adds the SCTP framing: the checksum field is taken as
//! zero while computing, and the result is byte-reversed the way SCTP stores it.

/// Offset of the checksum field in the SCTP common header.
const FIELD: usize = 8;
/// Length of the checksum field.
const FIELD_LEN: usize = 4;

/// Plain CRC32c of `data` (reflected, initial value and final XOR `0xffffffff`; the check value
/// for `b"123456789"` is `0xe3069283`).
///
/// ```
/// assert_eq!(sluice_checksum::crc32c::crc32c(b"123456789"), 0xe306_9283);
/// ```
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    ::crc32c::crc32c(data)
}

/// The SCTP checksum of `packet` (common header plus chunks), with the 4-byte checksum field at
/// offset 8 treated as zero whatever it holds.
///
/// The value is returned as it reads from the header in network order: write it with
/// `u32::to_be_bytes` into bytes 8..12, and verify a received packet by comparing with
/// `u32::from_be_bytes` of those bytes. (SCTP transmits the CRC least significant byte first,
/// so this is `crc32c(..).swap_bytes()`, matching RFC 4960 appendix B's sample code and the
/// little-endian store of Linux's `sctp_compute_cksum`.)
///
/// A packet shorter than 12 bytes is summed with whatever part of the field it has zeroed; such
/// a packet is invalid SCTP, but this function does not panic on it.
///
/// ```
/// use sluice_checksum::crc32c;
/// // SCTP common header (ports 1234 -> 80, verification tag 1, checksum field) and no chunks.
/// let mut pkt = [0x04, 0xd2, 0x00, 0x50, 0, 0, 0, 1, 0xde, 0xad, 0xbe, 0xef];
/// let crc = crc32c::sctp(&pkt); // the field's old contents are ignored
/// pkt[8..12].copy_from_slice(&crc.to_be_bytes());
/// assert!(crc32c::sctp_is_valid(&pkt));
/// assert_eq!(crc32c::sctp(&pkt), crc);
/// ```
#[inline]
pub fn sctp(packet: &[u8]) -> u32 {
    let (head, rest) = packet.split_at(packet.len().min(FIELD));
    let (field, tail) = rest.split_at(rest.len().min(FIELD_LEN));
    let zeros = [0u8; FIELD_LEN];
    let crc = ::crc32c::crc32c(head);
    let crc = ::crc32c::crc32c_append(crc, zeros.get(..field.len()).unwrap_or(&[]));
    ::crc32c::crc32c_append(crc, tail).swap_bytes()
}

/// Whether `packet` carries a correct SCTP checksum in bytes 8..12. False if it is shorter
/// than the 12-byte common header.
///
/// ```
/// use sluice_checksum::crc32c::{sctp, sctp_is_valid};
/// let mut pkt = [0x04, 0xd2, 0x00, 0x50, 0, 0, 0, 1, 0, 0, 0, 0];
/// assert!(!sctp_is_valid(&pkt));
/// let crc = sctp(&pkt);
/// pkt[8..12].copy_from_slice(&crc.to_be_bytes());
/// assert!(sctp_is_valid(&pkt));
/// assert!(!sctp_is_valid(&pkt[..11])); // too short for the common header
/// ```
#[inline]
pub fn sctp_is_valid(packet: &[u8]) -> bool {
    match packet.get(FIELD..FIELD + FIELD_LEN) {
        Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]) == sctp(packet),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_values() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        // RFC 3720 (iSCSI) appendix B.4: 32 bytes of zeros -> CRC bytes aa 36 91 8a on the wire.
        assert_eq!(crc32c(&[0u8; 32]).to_le_bytes(), [0xaa, 0x36, 0x91, 0x8a]);
        // ... and 32 bytes of 0xff -> 43 ab a8 62.
        assert_eq!(
            crc32c(&[0xffu8; 32]).to_le_bytes(),
            [0x43, 0xab, 0xa8, 0x62]
        );
    }

    #[test]
    fn short_packets_do_not_panic() {
        for len in 0..13 {
            let p = vec![0x5a; len];
            let _ = sctp(&p);
            assert!(!sctp_is_valid(&p[..len.min(11)]));
        }
    }
}
