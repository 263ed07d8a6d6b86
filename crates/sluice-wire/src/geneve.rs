//! geneve header (lands in the wire task).
