//! icmp header (lands in the wire task).
