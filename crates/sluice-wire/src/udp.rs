//! udp header (lands in the wire task).
