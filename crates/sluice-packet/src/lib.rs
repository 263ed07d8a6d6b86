//! Packet offload metadata (lands in the packet task).
