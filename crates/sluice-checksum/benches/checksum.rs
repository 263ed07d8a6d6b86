//! Checksum benchmark (lands in the checksum task).
fn main() {}
