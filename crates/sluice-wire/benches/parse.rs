//! Parse throughput benchmark (lands in the wire task).
fn main() {}
