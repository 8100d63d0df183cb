//! Admission control (ESX §6.2): a VM starts only if host memory can be reserved for its `min`
//! plus its VMM's overhead, and swap for the rest of its memory (`max − min`), so that every
//! VM's memory can be kept whatever happens. Reservations are bytes.

use thiserror::Error;

/// What the host has reserved so far, and what it has.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Reservations {
    /// The memory budget for all guests and their overhead.
    pub memory: u64,
    pub memory_reserved: u64,
    /// Swap space the host can give VMs.
    pub swap: u64,
    pub swap_reserved: u64,
}

/// Why a VM was refused, and by how much.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum AdmissionRefusal {
    #[error("min + overhead ({needed} bytes) does not fit in the {available} bytes of unreserved memory: {} bytes short", needed - available)]
    Memory { needed: u64, available: u64 },
    #[error("max - min ({needed} bytes) does not fit in the {available} bytes of unreserved swap: {} bytes short", needed - available)]
    Swap { needed: u64, available: u64 },
    #[error("min ({min} bytes) is above max ({max} bytes)")]
    MinAboveMax { min: u64, max: u64 },
}

/// The reservations after admitting a VM of `min` and `max` bytes with `overhead` bytes of VMM
/// overhead, or why it cannot be admitted (nothing is reserved then).
pub fn admit(
    r: &Reservations,
    min: u64,
    max: u64,
    overhead: u64,
) -> Result<Reservations, AdmissionRefusal> {
    if min > max {
        return Err(AdmissionRefusal::MinAboveMax { min, max });
    }
    let needed = min.saturating_add(overhead);
    let available = r.memory.saturating_sub(r.memory_reserved);
    if needed > available {
        return Err(AdmissionRefusal::Memory { needed, available });
    }
    let swap_needed = max - min;
    let swap_available = r.swap.saturating_sub(r.swap_reserved);
    if swap_needed > swap_available {
        return Err(AdmissionRefusal::Swap {
            needed: swap_needed,
            available: swap_available,
        });
    }
    Ok(Reservations {
        memory_reserved: r.memory_reserved + needed,
        swap_reserved: r.swap_reserved + swap_needed,
        ..*r
    })
}

/// The reservations after a VM admitted with the same numbers has gone.
pub fn unreserve(r: &Reservations, min: u64, max: u64, overhead: u64) -> Reservations {
    Reservations {
        memory_reserved: r
            .memory_reserved
            .saturating_sub(min.saturating_add(overhead)),
        swap_reserved: r.swap_reserved.saturating_sub(max.saturating_sub(min)),
        ..*r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn refusals_say_which_reservation_failed_and_by_how_much() {
        let r = Reservations {
            memory: 1024 * MIB,
            swap: 512 * MIB,
            ..Reservations::default()
        };
        let r = admit(&r, 512 * MIB, 1024 * MIB, 32 * MIB).unwrap();
        assert_eq!(r.memory_reserved, 544 * MIB);
        assert_eq!(r.swap_reserved, 512 * MIB);
        let e = admit(&r, 500 * MIB, 500 * MIB, 32 * MIB).unwrap_err();
        assert_eq!(
            e,
            AdmissionRefusal::Memory {
                needed: 532 * MIB,
                available: 480 * MIB
            }
        );
        assert!(e.to_string().contains(&format!("{} bytes short", 52 * MIB)));
        let e = admit(&r, 64 * MIB, 128 * MIB, 32 * MIB).unwrap_err();
        assert!(matches!(e, AdmissionRefusal::Swap { needed, available: 0 } if needed == 64 * MIB));
        assert!(matches!(
            admit(&r, 2, 1, 0),
            Err(AdmissionRefusal::MinAboveMax { .. })
        ));
    }

    proptest! {
        #[test]
        fn admitted_vms_never_overcommit_the_reservations(
            vms in proptest::collection::vec((0u64..1 << 32, 0u64..1 << 32, 0u64..1 << 26), 0..20)
        ) {
            let mut r = Reservations { memory: 16 << 30, swap: 8 << 30, ..Reservations::default() };
            let mut admitted = Vec::new();
            for (a, b, o) in vms {
                let (min, max) = (a.min(b), a.max(b));
                if let Ok(next) = admit(&r, min, max, o) {
                    r = next;
                    admitted.push((min, max, o));
                }
                prop_assert!(r.memory_reserved <= r.memory);
                prop_assert!(r.swap_reserved <= r.swap);
            }
            for (min, max, o) in admitted {
                r = unreserve(&r, min, max, o);
            }
            prop_assert_eq!(r.memory_reserved, 0);
            prop_assert_eq!(r.swap_reserved, 0);
        }
    }
}
