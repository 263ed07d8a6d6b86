//! ethernet header (lands in the wire task).
