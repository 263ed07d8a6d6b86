//! Link types (the `LINKTYPE_*` values of pcap and pcapng).

use pcap_file::DataLink;
use std::fmt;

/// What a record's bytes start with: the link type of the capture (pcap) or of the interface
/// the record was captured on (pcapng).
///
/// The ones Sluice decodes have their own variant; every other value is kept as
/// [`LinkType::Other`] so that a tool can say what it skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkType {
    /// `LINKTYPE_ETHERNET` (1): an Ethernet frame without FCS.
    Ethernet,
    /// `LINKTYPE_RAW` (101): an IP packet, version from its first nibble. The values 12 and 14
    /// (`DLT_RAW` of the BSDs and OpenBSD, found in old files) mean the same and are read as
    /// this too.
    RawIp,
    /// `LINKTYPE_IPV4` (228): an IPv4 packet.
    Ipv4,
    /// `LINKTYPE_IPV6` (229): an IPv6 packet.
    Ipv6,
    /// `LINKTYPE_LINUX_SLL` (113): Linux "cooked" capture, a 16-byte header then the packet;
    /// see [`LinkType::ip_packet`].
    LinuxSll,
    /// Any other link type, by its number.
    Other(u32),
}

/// Length of the Linux cooked-capture (SLL) header.
pub const SLL_HEADER_LEN: usize = 16;

impl LinkType {
    /// The link type of a `LINKTYPE_*` number.
    pub fn from_raw(n: u32) -> LinkType {
        match n {
            1 => LinkType::Ethernet,
            12 | 14 | 101 => LinkType::RawIp,
            228 => LinkType::Ipv4,
            229 => LinkType::Ipv6,
            113 => LinkType::LinuxSll,
            n => LinkType::Other(n),
        }
    }

    /// Its `LINKTYPE_*` number (raw IP is 101, whatever number it was read from).
    pub fn raw(self) -> u32 {
        match self {
            LinkType::Ethernet => 1,
            LinkType::RawIp => 101,
            LinkType::Ipv4 => 228,
            LinkType::Ipv6 => 229,
            LinkType::LinuxSll => 113,
            LinkType::Other(n) => n,
        }
    }

    /// Whether records of this link type are IP packets with no link header (raw IP, IPv4,
    /// IPv6).
    pub fn is_ip(self) -> bool {
        matches!(self, LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6)
    }

    /// The IP packet a record of this link type carries: the whole record for raw IP, IPv4
    /// and IPv6; what follows the 16-byte header of a Linux cooked capture whose protocol is
    /// IPv4 (0x0800) or IPv6 (0x86dd); `None` otherwise (Ethernet frames included: they are
    /// parsed from their link header).
    ///
    /// ```
    /// use sluice_pcap::LinkType;
    /// let mut sll = vec![0u8; 16];
    /// sll[14..16].copy_from_slice(&0x86ddu16.to_be_bytes());
    /// sll.extend_from_slice(&[0x60, 0, 0, 0]);
    /// assert_eq!(LinkType::LinuxSll.ip_packet(&sll), Some(&[0x60u8, 0, 0, 0][..]));
    /// assert_eq!(LinkType::RawIp.ip_packet(&[0x45]), Some(&[0x45u8][..]));
    /// assert_eq!(LinkType::Ethernet.ip_packet(&[0u8; 20]), None);
    /// ```
    pub fn ip_packet(self, data: &[u8]) -> Option<&[u8]> {
        match self {
            LinkType::RawIp | LinkType::Ipv4 | LinkType::Ipv6 => Some(data),
            LinkType::LinuxSll => {
                let proto = data.get(14..SLL_HEADER_LEN)?;
                match u16::from_be_bytes([proto[0], proto[1]]) {
                    0x0800 | 0x86dd => data.get(SLL_HEADER_LEN..),
                    _ => None,
                }
            }
            LinkType::Ethernet | LinkType::Other(_) => None,
        }
    }
}

impl From<DataLink> for LinkType {
    fn from(d: DataLink) -> LinkType {
        LinkType::from_raw(u32::from(d))
    }
}

impl From<LinkType> for DataLink {
    fn from(l: LinkType) -> DataLink {
        DataLink::from(l.raw())
    }
}

/// The libpcap name without `LINKTYPE_` (`ETHERNET`, `RAW`, `IPV4`, `IPV6`, `LINUX_SLL`, …),
/// or `LINKTYPE n` for a number without a name.
impl fmt::Display for LinkType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match DataLink::from(*self) {
            DataLink::Unknown(n) => write!(f, "LINKTYPE {n}"),
            d => write!(f, "{d:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_round_trip_and_raw_aliases_read_as_raw() {
        for n in [1u32, 101, 113, 228, 229, 105, 276, 9999] {
            assert_eq!(LinkType::from_raw(n).raw(), n);
        }
        assert_eq!(LinkType::from_raw(12), LinkType::RawIp);
        assert_eq!(LinkType::from_raw(14), LinkType::RawIp);
        assert_eq!(LinkType::from_raw(276), LinkType::Other(276));
        assert!(LinkType::Ipv6.is_ip() && !LinkType::LinuxSll.is_ip());
    }

    #[test]
    fn names_are_libpcaps() {
        assert_eq!(LinkType::RawIp.to_string(), "RAW");
        assert_eq!(LinkType::Ethernet.to_string(), "ETHERNET");
        assert_eq!(LinkType::LinuxSll.to_string(), "LINUX_SLL");
        assert_eq!(LinkType::Ipv4.to_string(), "IPV4");
        assert_eq!(LinkType::Other(60000).to_string(), "LINKTYPE 60000");
    }

    #[test]
    fn sll_without_ip_or_too_short_has_no_ip_packet() {
        let mut sll = [0u8; 18];
        sll[14] = 0x08;
        sll[15] = 0x06; // ARP
        assert_eq!(LinkType::LinuxSll.ip_packet(&sll), None);
        assert_eq!(LinkType::LinuxSll.ip_packet(&sll[..10]), None);
        sll[15] = 0x00;
        assert_eq!(LinkType::LinuxSll.ip_packet(&sll), Some(&[0u8, 0][..]));
    }
}
