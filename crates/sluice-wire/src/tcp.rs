//! tcp header (lands in the wire task).
