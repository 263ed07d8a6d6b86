//! vlan header (lands in the wire task).
