//! vxlan header (lands in the wire task).
