//! The system calls the pager makes, each behind a small typed wrapper: userfaultfd
//! (`uffd.rs`), the map between page numbers and guest-physical and host addresses
//! (`ram_map.rs`), the page map scan (`pagemap.rs`), the slots pages are moved into
//! (`slots.rs`), and anonymous memory ([`map_anonymous`], also the pool's chunks). They import
//! nothing of the crate but its basic types (`page.rs`).

pub(crate) mod pagemap;
pub(crate) mod ram_map;
pub(crate) mod slots;
pub mod uffd;

/// Maps `len` bytes of anonymous private memory, reserved without swap space and resident only
/// where touched (or where pages are moved in).
pub(crate) fn map_anonymous(len: usize) -> std::io::Result<*mut u8> {
    // SAFETY: a new anonymous private mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    Ok(p.cast())
}
