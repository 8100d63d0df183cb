//! A fast keyed hash for the state table's maps, whose keys (page indices, disk blocks) come
//! from the guest: std's SipHash cost more than the rest of a page's bookkeeping on every page a
//! guest disk read fills, and an unkeyed fast hash would let a guest pick keys that collide.
//! Each process draws one key from the host's random source; the mixing is FxHash's (rotate,
//! xor, multiply) and the result goes through MurmurHash3's finaliser, so the high bits the
//! hash table groups by depend on every bit of the key. Not a cryptographic hash: a guest that
//! could see bucket timings might still learn something of the key, which costs it only its own
//! VM's speed.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::OnceLock;

/// A `HashMap` hashed by [`KeyedState`].
pub type KeyedMap<K, V> = HashMap<K, V, KeyedState>;

/// The process's key, drawn once.
fn process_key() -> u64 {
    static KEY: OnceLock<u64> = OnceLock::new();
    *KEY.get_or_init(|| {
        let mut b = [0u8; 8];
        match crate::digest::random_bytes(&mut b) {
            Ok(()) => u64::from_le_bytes(b),
            // Without the random source: the clock, which the guest cannot read to the nanosecond.
            Err(_) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x5bd1_e995, |d| {
                    d.as_secs() << 30 ^ u64::from(d.subsec_nanos())
                }),
        }
    })
}

/// Builds [`KeyedHasher`]s under the process's key.
#[derive(Clone, Copy, Debug)]
pub struct KeyedState {
    key: u64,
}

impl Default for KeyedState {
    fn default() -> Self {
        KeyedState { key: process_key() }
    }
}

impl BuildHasher for KeyedState {
    type Hasher = KeyedHasher;

    fn build_hasher(&self) -> KeyedHasher {
        KeyedHasher { h: self.key }
    }
}

pub struct KeyedHasher {
    h: u64,
}

impl KeyedHasher {
    #[inline]
    fn mix(&mut self, x: u64) {
        self.h = (self.h.rotate_left(5) ^ x).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for KeyedHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut b = [0u8; 8];
            b[..chunk.len()].copy_from_slice(chunk);
            self.mix(u64::from_le_bytes(b));
        }
    }

    fn write_u8(&mut self, x: u8) {
        self.mix(u64::from(x));
    }

    fn write_u32(&mut self, x: u32) {
        self.mix(u64::from(x));
    }

    fn write_u64(&mut self, x: u64) {
        self.mix(x);
    }

    fn write_usize(&mut self, x: usize) {
        self.mix(x as u64);
    }

    fn finish(&self) -> u64 {
        // MurmurHash3's fmix64.
        let mut h = self.h;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_hash_apart_and_the_high_bits_vary() {
        let s = KeyedState { key: 12345 };
        let h = |x: u32| s.hash_one(x);
        // Neighbouring keys differ in their top 7 bits about as often as chance says.
        let tops: std::collections::HashSet<u64> = (0..1000u32).map(|x| h(x) >> 57).collect();
        assert!(tops.len() > 100, "{}", tops.len());
        // Another key gives other hashes.
        let t = KeyedState { key: 54321 };
        assert!((0..100u32).all(|x| t.hash_one(x) != h(x)));
        // A map works under it.
        let mut m: KeyedMap<u32, u32> = KeyedMap::default();
        for x in 0..10_000 {
            m.insert(x, x * 2);
        }
        assert!((0..10_000).all(|x| m[&x] == x * 2));
    }
}
