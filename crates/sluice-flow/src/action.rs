//! ActionList a rule applies to the packets it matches.
//!
//! A rule's action list is an [`ActionList`]: one shared, immutable `Arc<[Action]>`. The flow table
//! interns action lists, so the many rules that share a list (say `output:3`) share one
//! allocation, and both copies of the table point at it instead of holding their own.

use std::net::IpAddr;
use std::sync::Arc;

pub use sluice_wire::TunnelKind;

/// Tunnel encapsulation parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TunnelEncap {
    /// VXLAN, Geneve or GRE.
    pub kind: TunnelKind,
    /// Outer IP source (v4 or v6; both endpoints must be the same family).
    pub src: IpAddr,
    /// Outer IP destination.
    pub dst: IpAddr,
    /// VNI (24 bits for VXLAN/Geneve) or GRE key.
    pub id: u32,
    /// Compute the outer UDP checksum (VXLAN/Geneve); ignored for GRE.
    pub udp_csum: bool,
}

/// One action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Action {
    /// Send a copy to a port.
    Output(u32),
    /// Drop the packet (an empty action list also drops).
    Drop,
    /// Push a VLAN tag outside the existing ones.
    PushVlan {
        /// TPID (0x8100, 0x88a8 or 0x9100).
        tpid: u16,
        /// Tag control information (PCP, DEI, VID).
        tci: u16,
    },
    /// Pop the outermost VLAN tag.
    PopVlan,
    /// Rewrite the Ethernet source.
    SetEthSrc([u8; 6]),
    /// Rewrite the Ethernet destination.
    SetEthDst([u8; 6]),
    /// Rewrite the IPv4 source.
    SetIpv4Src([u8; 4]),
    /// Rewrite the IPv4 destination.
    SetIpv4Dst([u8; 4]),
    /// Rewrite the IPv6 source.
    SetIpv6Src([u8; 16]),
    /// Rewrite the IPv6 destination.
    SetIpv6Dst([u8; 16]),
    /// Rewrite the IPv4 TTL / IPv6 hop limit.
    SetTtl(u8),
    /// Rewrite the DSCP (6 bits; ECN is kept).
    SetDscp(u8),
    /// Rewrite the L4 source port.
    SetTpSrc(u16),
    /// Rewrite the L4 destination port.
    SetTpDst(u16),
    /// Encapsulate in a tunnel.
    Encap(TunnelEncap),
    /// Remove the outer headers of a tunnelled packet.
    Decap,
}

/// An immutable, shared action list.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ActionList(Arc<[Action]>);

impl ActionList {
    /// Builds a list.
    pub fn new(list: impl Into<Arc<[Action]>>) -> Self {
        ActionList(list.into())
    }

    /// The list with a single `output:port`.
    pub fn output(port: u32) -> Self {
        ActionList(Arc::new([Action::Output(port)]))
    }

    /// The actions, in order.
    pub fn as_slice(&self) -> &[Action] {
        &self.0
    }

    /// How many values share this one's allocation (for tests of what releases them).
    #[cfg(test)]
    pub(crate) fn shared_by(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// Whether both values share one allocation.
    pub fn ptr_eq(&self, other: &ActionList) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The address of the shared allocation (a cache key; equal addresses of two live values
    /// mean one allocation).
    pub(crate) fn addr(&self) -> usize {
        Arc::as_ptr(&self.0).cast::<()>() as usize
    }

    /// Heap bytes of the list (for the memory quota).
    pub fn heap_bytes(&self) -> usize {
        core::mem::size_of_val::<[Action]>(&self.0) + 2 * core::mem::size_of::<usize>()
    }
}

impl core::ops::Deref for ActionList {
    type Target = [Action];
    fn deref(&self) -> &[Action] {
        &self.0
    }
}
