//! Internet checksums (lands in the checksum task).
