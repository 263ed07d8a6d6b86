//! The `sluice` command.
fn main() {}
