//! gre header (lands in the wire task).
