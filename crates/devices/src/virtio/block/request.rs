//! Parsing and validating virtio-blk requests (virtio 1.2 §5.2.6) from hostile descriptor chains.
//!
//! A request is a header (type, reserved, sector) in a device-readable descriptor, then data
//! descriptors, then a one-byte status in a device-writable descriptor. Every address and
//! length comes from the guest, so each is checked against guest memory and the disk size
//! before any I/O; a request that fails a check is answered with `VIRTIO_BLK_S_IOERR` (or
//! dropped with a zero-length used entry when not even the status byte can be written).

use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

use crate::GuestMem;

pub const SECTOR_SIZE: u64 = 512;
pub const VIRTIO_BLK_T_IN: u32 = 0;
pub const VIRTIO_BLK_T_OUT: u32 = 1;
pub const VIRTIO_BLK_T_FLUSH: u32 = 4;
pub const VIRTIO_BLK_T_GET_ID: u32 = 8;
pub const VIRTIO_BLK_S_OK: u8 = 0;
pub const VIRTIO_BLK_S_IOERR: u8 = 1;
pub const VIRTIO_BLK_S_UNSUPP: u8 = 2;
/// Length of the GET_ID answer.
pub const ID_BYTES: usize = 20;

/// One descriptor as the guest gave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Desc {
    pub addr: u64,
    pub len: u32,
    pub write_only: bool,
}

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestKind {
    Read { sector: u64 },
    Write { sector: u64 },
    Flush,
    GetId,
    Unsupported(u32),
}

/// A request whose every buffer lies in guest memory and whose range lies on the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: RequestKind,
    /// The data buffers, in order.
    pub data: Vec<(GuestAddress, u32)>,
    /// Total bytes of `data`.
    pub data_len: u64,
    pub status: GuestAddress,
}

/// Why a chain is not a valid request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// No usable status descriptor: the error cannot even be reported to the guest.
    NoStatus,
    /// Reported to the guest as IOERR through the status byte at this address.
    Invalid {
        status: GuestAddress,
        reason: &'static str,
    },
}

impl RequestError {
    pub fn reason(&self) -> &'static str {
        match self {
            RequestError::NoStatus => "no writable status descriptor",
            RequestError::Invalid { reason, .. } => reason,
        }
    }
}

/// Validates a descriptor chain against guest memory `mem` and a disk of `capacity_bytes`.
pub fn parse(descs: &[Desc], mem: &GuestMem, capacity_bytes: u64) -> Result<Request, RequestError> {
    let (Some(last), true) = (descs.last(), descs.len() >= 2) else {
        return Err(RequestError::NoStatus);
    };
    let status = GuestAddress(last.addr);
    if !last.write_only || last.len < 1 || !GuestMemoryBackend::check_range(mem, status, 1) {
        return Err(RequestError::NoStatus);
    }
    let invalid = |reason| RequestError::Invalid { status, reason };
    let head = descs[0];
    if head.write_only || head.len < 16 {
        return Err(invalid("request header is not a readable 16-byte buffer"));
    }
    let mut hdr = [0u8; 16];
    mem.read_slice(&mut hdr, GuestAddress(head.addr))
        .map_err(|_| invalid("request header lies outside guest memory"))?;
    let req_type = u32::from_le_bytes(hdr[0..4].try_into().expect("4 bytes"));
    let sector = u64::from_le_bytes(hdr[8..16].try_into().expect("8 bytes"));
    let kind = match req_type {
        VIRTIO_BLK_T_IN => RequestKind::Read { sector },
        VIRTIO_BLK_T_OUT => RequestKind::Write { sector },
        VIRTIO_BLK_T_FLUSH => RequestKind::Flush,
        VIRTIO_BLK_T_GET_ID => RequestKind::GetId,
        t => RequestKind::Unsupported(t),
    };
    let device_writes = matches!(kind, RequestKind::Read { .. } | RequestKind::GetId);
    let data_descs = &descs[1..descs.len() - 1];
    let mut data = Vec::with_capacity(data_descs.len());
    let mut data_len: u64 = 0;
    for d in data_descs {
        if matches!(kind, RequestKind::Flush | RequestKind::Unsupported(_)) {
            break;
        }
        if d.write_only != device_writes {
            return Err(invalid("data descriptor has the wrong direction"));
        }
        let len = usize::try_from(d.len).map_err(|_| invalid("data descriptor too long"))?;
        if !GuestMemoryBackend::check_range(mem, GuestAddress(d.addr), len) {
            return Err(invalid("data buffer lies outside guest memory"));
        }
        data_len = data_len
            .checked_add(u64::from(d.len))
            .ok_or(invalid("data too long"))?;
        data.push((GuestAddress(d.addr), d.len));
    }
    match kind {
        RequestKind::Read { sector } | RequestKind::Write { sector } => {
            if data_len == 0 || data_len % SECTOR_SIZE != 0 {
                return Err(invalid(
                    "data length is not a positive multiple of 512 bytes",
                ));
            }
            let in_range = sector
                .checked_mul(SECTOR_SIZE)
                .and_then(|start| start.checked_add(data_len))
                .is_some_and(|end| end <= capacity_bytes);
            if !in_range {
                return Err(invalid("request reaches past the end of the disk"));
            }
        }
        RequestKind::GetId if data_len < ID_BYTES as u64 => {
            return Err(invalid("GET_ID buffer shorter than 20 bytes"));
        }
        _ => {}
    }
    Ok(Request {
        kind,
        data,
        data_len,
        status,
    })
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // test values are small by construction
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MEM: u64 = 1 << 20;
    const CAP: u64 = 1 << 20;

    fn mem_with_header(req_type: u32, sector: u64) -> GuestMem {
        let m = GuestMem::from_ranges(&[(GuestAddress(0), MEM as usize)]).unwrap();
        m.write_obj(req_type, GuestAddress(0x100)).unwrap();
        m.write_obj(sector, GuestAddress(0x108)).unwrap();
        m
    }

    fn d(addr: u64, len: u32, write_only: bool) -> Desc {
        Desc {
            addr,
            len,
            write_only,
        }
    }

    #[test]
    fn well_formed_read_write_flush_get_id() {
        let m = mem_with_header(VIRTIO_BLK_T_IN, 8);
        let chain = [
            d(0x100, 16, false),
            d(0x1000, 4096, true),
            d(0x2000, 4096, true),
            d(0x200, 1, true),
        ];
        let r = parse(&chain, &m, CAP).unwrap();
        assert_eq!(r.kind, RequestKind::Read { sector: 8 });
        assert_eq!(r.data_len, 8192);
        assert_eq!(r.status, GuestAddress(0x200));

        let m = mem_with_header(VIRTIO_BLK_T_OUT, 0);
        let chain = [
            d(0x100, 16, false),
            d(0x1000, 512, false),
            d(0x200, 1, true),
        ];
        assert_eq!(
            parse(&chain, &m, CAP).unwrap().kind,
            RequestKind::Write { sector: 0 }
        );

        let m = mem_with_header(VIRTIO_BLK_T_FLUSH, 0);
        assert_eq!(
            parse(&[d(0x100, 16, false), d(0x200, 1, true)], &m, CAP)
                .unwrap()
                .kind,
            RequestKind::Flush
        );

        let m = mem_with_header(VIRTIO_BLK_T_GET_ID, 0);
        let chain = [d(0x100, 16, false), d(0x1000, 20, true), d(0x200, 1, true)];
        assert_eq!(parse(&chain, &m, CAP).unwrap().kind, RequestKind::GetId);

        let m = mem_with_header(99, 0);
        let chain = [d(0x100, 16, false), d(0x200, 1, true)];
        assert_eq!(
            parse(&chain, &m, CAP).unwrap().kind,
            RequestKind::Unsupported(99)
        );
    }

    #[test]
    fn hostile_chains_are_rejected() {
        let m = mem_with_header(VIRTIO_BLK_T_IN, 0);
        let st = d(0x200, 1, true);
        let invalid =
            |chain: &[Desc]| matches!(parse(chain, &m, CAP), Err(RequestError::Invalid { .. }));
        // Status missing, read-only, or outside memory.
        assert_eq!(
            parse(&[d(0x100, 16, false)], &m, CAP),
            Err(RequestError::NoStatus)
        );
        assert_eq!(
            parse(&[d(0x100, 16, false), d(0x200, 1, false)], &m, CAP),
            Err(RequestError::NoStatus)
        );
        assert_eq!(
            parse(&[d(0x100, 16, false), d(MEM, 1, true)], &m, CAP),
            Err(RequestError::NoStatus)
        );
        // Header too short, write-only, or outside memory.
        assert!(invalid(&[d(0x100, 8, false), d(0x1000, 512, true), st]));
        assert!(invalid(&[d(0x100, 16, true), d(0x1000, 512, true), st]));
        assert!(invalid(&[d(MEM - 8, 16, false), d(0x1000, 512, true), st]));
        // Data in the wrong direction, outside memory, huge, or not whole sectors.
        assert!(invalid(&[d(0x100, 16, false), d(0x1000, 512, false), st]));
        assert!(invalid(&[d(0x100, 16, false), d(MEM - 256, 512, true), st]));
        assert!(invalid(&[
            d(0x100, 16, false),
            d(0x1000, u32::MAX, true),
            st
        ]));
        assert!(invalid(&[
            d(0x100, 16, false),
            d(u64::MAX - 10, 512, true),
            st
        ]));
        assert!(invalid(&[d(0x100, 16, false), d(0x1000, 100, true), st]));
        assert!(invalid(&[d(0x100, 16, false), st]));
    }

    #[test]
    fn range_checks_do_not_overflow() {
        for sector in [CAP / 512, CAP / 512 - 1 + 1, u64::MAX / 512, u64::MAX] {
            let m = mem_with_header(VIRTIO_BLK_T_IN, sector);
            let chain = [d(0x100, 16, false), d(0x1000, 512, true), d(0x200, 1, true)];
            assert!(
                matches!(parse(&chain, &m, CAP), Err(RequestError::Invalid { .. })),
                "sector {sector}"
            );
        }
        let m = mem_with_header(VIRTIO_BLK_T_IN, CAP / 512 - 1);
        let chain = [d(0x100, 16, false), d(0x1000, 512, true), d(0x200, 1, true)];
        assert!(parse(&chain, &m, CAP).is_ok());
    }

    fn any_desc() -> impl Strategy<Value = Desc> {
        let addr = prop_oneof![0u64..MEM + 4096, Just(u64::MAX - 1), any::<u64>()];
        let len = prop_oneof![0u32..9000, Just(u32::MAX), any::<u32>()];
        (addr, len, any::<bool>()).prop_map(|(addr, len, write_only)| Desc {
            addr,
            len,
            write_only,
        })
    }

    proptest! {
        /// Whatever the guest puts in a chain, parsing never panics, and an accepted request
        /// only names memory inside the guest and sectors inside the disk.
        #[test]
        fn accepted_requests_stay_in_bounds(
            req_type in prop_oneof![Just(0u32), Just(1), Just(4), Just(8), any::<u32>()],
            sector in prop_oneof![0u64..4096, any::<u64>()],
            chain in proptest::collection::vec(any_desc(), 0..6),
        ) {
            let m = mem_with_header(req_type, sector);
            if let Ok(r) = parse(&chain, &m, CAP) {
                prop_assert!(GuestMemoryBackend::check_range(&m, r.status, 1));
                for (a, l) in &r.data {
                    prop_assert!(GuestMemoryBackend::check_range(&m, *a, *l as usize));
                }
                if let RequestKind::Read { sector } | RequestKind::Write { sector } = r.kind {
                    prop_assert!(sector * 512 + r.data_len <= CAP);
                }
            }
        }
    }
}
