//! The flow table: the single writer ([`FlowTable`]) and its lock-free readers ([`Reader`]).
//!
//! Every batch operation (`insert_batch`, `delete_batch`, `modify_batch`) is applied to the
//! standby classifier copy and published with one pointer swap (see [`crate::publish`]): a reader
//! sees all of a batch or none of it. Single-rule calls are batches of one.
//!
//! The writer also keeps, outside the copies, what only it needs: the rule of each handle (for
//! delete by handle and for dumps), the mask registry (mask → subtable id, reference counted),
//! the handle allocator and the action-list interner.

//!
//! | concern | file |
//! |---|---|
//! | handle allocator, mask registry, action-list interner | `intern.rs` |
//! | the writer's state and quotas; the single-thread steps of a batch | `writer.rs` |
//! | a big insert batch on several threads: handles and records | `parallel_insert.rs` |
//! | lock-free readers and snapshots | `reader.rs` |
//! | the operations API ([`FlowTable`]) | `flow_table.rs` |
//!
//! Each module uses only modules listed above it (and [`crate::classifier`], which uses none
//! of these).

mod flow_table;
mod intern;
mod parallel_insert;
mod reader;
mod writer;

pub use crate::classifier::PARALLEL_MIN_BATCH;
pub use flow_table::FlowTable;
pub use intern::Idr;
pub use reader::{Reader, Snapshot};
pub use writer::TableConfig;
