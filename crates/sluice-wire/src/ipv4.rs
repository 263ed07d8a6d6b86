//! ipv4 header (lands in the wire task).
