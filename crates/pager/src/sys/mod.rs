//! The system calls the pager makes, each behind a small typed wrapper: userfaultfd
//! (`uffd.rs`), the map between page numbers and guest-physical and host addresses
//! (`ram_map.rs`), the page map scan (`pagemap.rs`), and the slots pages are moved into
//! (`slots.rs`). They import nothing of the crate but
//! its basic types (`page.rs`).

pub(crate) mod pagemap;
pub(crate) mod ram_map;
pub(crate) mod slots;
pub mod uffd;
