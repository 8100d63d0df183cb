//! Live migration (docs/migration.md), post-copy after optional pre-copy rounds
//! (`precopy.rs`): the source (`source.rs`, `PUT /vm/migrate`) and the destination (`incoming.rs`, `memvisor run --incoming`), speaking the messages of
//! `wire.rs` over one TCP connection. The VM's state is a snapshot's (`snapshot.rs`); guest
//! memory on the destination is a page store served from the source until every page is
//! there.
//!
//! Each end does its network I/O on threads of its own (`migrate` and `migrate-rx` on the
//! source; the thread that starts the VM, then `migrate-rx`, on the destination, with the
//! pager's fault path writing page requests), so that each can be given its own filter.

pub mod incoming;
mod precopy;
pub(crate) mod source;
pub mod wire;
