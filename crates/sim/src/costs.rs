//! What each mechanism costs, as parameters of the memory model. The defaults are the values
//! measured on this project's machines; docs/sim.md says where each comes from.

use serde::Deserialize;

/// Costs in seconds per page or bytes per second.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Costs {
    /// A userfaultfd fault's round trip from a vCPU (38 µs; docs/costs.md).
    pub fault_s: f64,
    /// A 4 KiB random read from the swap disk (113 µs; docs/costs.md).
    pub swap_read_s: f64,
    /// Sequential reads from the swap disk, bytes per second (600 MB/s; docs/costs.md).
    pub swap_seq_bytes_s: f64,
    /// Installing one page from the pool as a vCPU waits for it (18 µs; the host-side
    /// `UFFDIO_COPY` alone is less, docs/costs.md).
    pub pool_copy_s: f64,
    /// A guest's first touch of fresh host memory, per page (22 µs; docs/costs.md).
    pub first_touch_s: f64,
    /// How fast a pager limit below resident memory is reached, bytes per second (writes in
    /// batches, sequential on the disk: the disk's 600 MB/s, docs/costs.md).
    pub reclaim_bytes_s: f64,
    /// How fast a balloon inflates, bytes per second (not measured yet; an assumption).
    pub inflate_bytes_s: f64,
    /// How fast a balloon deflates, bytes per second (not measured yet; an assumption).
    pub deflate_bytes_s: f64,
    /// How fast a guest reads its own virtio-blk disk sequentially, bytes per second: what a
    /// page-cache refill costs it (the guest kit's seqread, first pass: 22 MB/s on a host with
    /// room, 29–32 MB/s under pressure; docs/sim.md, "Calibration").
    pub guest_read_bytes_s: f64,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            fault_s: 38e-6,
            swap_read_s: 113e-6,
            swap_seq_bytes_s: 600e6,
            pool_copy_s: 18e-6,
            first_touch_s: 22e-6,
            reclaim_bytes_s: 600e6,
            inflate_bytes_s: 1e9,
            deflate_bytes_s: 1e9,
            guest_read_bytes_s: 26e6,
        }
    }
}

impl Costs {
    /// A fault on a page in the swap file, random or sequential access.
    pub fn swap_fault(&self, sequential: bool) -> f64 {
        if sequential {
            self.fault_s + 4096.0 / self.swap_seq_bytes_s
        } else {
            self.fault_s + self.swap_read_s
        }
    }

    /// A fault on a page in the pool.
    pub fn pool_fault(&self) -> f64 {
        self.fault_s + self.pool_copy_s
    }

    /// A page the guest lacks (its balloon left it short): a read of its own disk, no uffd
    /// trip; sequential reads are page-cache refills through its virtio-blk disk.
    pub fn guest_swap(&self, sequential: bool) -> f64 {
        if sequential {
            4096.0 / self.guest_read_bytes_s
        } else {
            self.swap_read_s
        }
    }
}
