//! ipv6 header (lands in the wire task).
