//! sctp header (lands in the wire task).
