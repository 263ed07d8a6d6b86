//! Unit and property tests.

mod frames;
mod props;
mod rewrite;
mod state_table;
mod verify;
