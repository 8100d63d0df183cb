//! A keyed 128-bit digest of a page: SipHash-1-3 with 128-bit output, under a key drawn from the
//! host's random source when the pager starts.
//!
//! The Swap Mapper takes the digest of a block's content when a guest disk read fills a page
//! with it, and compares it with the digest of the page at reclaim (with the page write-protected
//! first), so it learns whether the page still mirrors the block without write-protecting it for
//! all the time it is resident (`docs/vswapper.md`). The key is secret to the VMM: the guest never
//! sees a digest, and without the key it cannot build a page that collides with a block it wants
//! to come back in place of its own writes. Pure but for the key: no other system call.

use crate::page::PAGE_SIZE;

/// A digest of one page.
pub type Digest = u128;

/// Fills `bytes` from the host's random source (`getrandom`).
pub(crate) fn random_bytes(bytes: &mut [u8]) -> std::io::Result<()> {
    let mut got = 0;
    while got < bytes.len() {
        let rest = &mut bytes[got..];
        // SAFETY: `rest` is a live buffer of `rest.len()` writable bytes.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        got += usize::try_from(n).unwrap_or(0);
    }
    Ok(())
}

/// The key of the page digests of one pager.
#[derive(Clone, Copy)]
pub struct DigestKey {
    k0: u64,
    k1: u64,
}

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never printed: the key is what keeps collisions out of the guest's reach.
        f.write_str("DigestKey(..)")
    }
}

impl DigestKey {
    /// A key from the host's random source (`getrandom`).
    pub fn random() -> std::io::Result<Self> {
        let mut bytes = [0u8; 16];
        random_bytes(&mut bytes)?;
        let (a, b) = bytes.split_at(8);
        Ok(DigestKey {
            k0: u64::from_le_bytes(a.try_into().unwrap_or_default()),
            k1: u64::from_le_bytes(b.try_into().unwrap_or_default()),
        })
    }

    /// A fixed key (tests).
    #[cfg(test)]
    pub fn from_parts(k0: u64, k1: u64) -> Self {
        DigestKey { k0, k1 }
    }

    /// The digest of a page's content (`page` is one page long; a shorter or longer slice is
    /// digested as it is).
    pub fn page(&self, page: &[u8]) -> Digest {
        debug_assert_eq!(page.len(), PAGE_SIZE);
        siphash::<1, 3>(self.k0, self.k1, page)
    }
}

/// The digests of the disk blocks guest reads brought in lately, so that a block read again (a
/// loop over a file the guest's page cache cannot hold) is not digested again: the Swap Mapper
/// takes a digest of every block a read lands, and on a stream through the page cache that was
/// the largest part of its cost per page. Direct-mapped by block number, so a run of
/// consecutive blocks up to the table's size never evicts itself; an entry goes when its block
/// is written ([`Self::forget`]) or another block takes its slot. The table's memory is
/// allocated zeroed and touched as it is used.
pub struct BlockDigests {
    /// Per slot: `(disk << 32 | block) + 1` (0: empty) and the block's digest.
    slots: Vec<(u64, Digest)>,
    /// Digests answered from the table, and taken afresh.
    pub reused: u64,
    pub taken: u64,
}

impl BlockDigests {
    /// A table of `slots` entries (rounded up to a power of two, at least 1).
    pub fn new(slots: usize) -> Self {
        BlockDigests {
            slots: vec![(0, 0); slots.max(1).next_power_of_two()],
            reused: 0,
            taken: 0,
        }
    }

    fn tag(disk: u8, block: u32) -> u64 {
        (u64::from(disk) << 32 | u64::from(block)) + 1
    }

    fn slot(&self, disk: u8, block: u32) -> usize {
        // Disks apart by a large odd stride, blocks of one disk side by side.
        let i = u64::from(block).wrapping_add(u64::from(disk).wrapping_mul(0x9e37_79b1));
        usize::try_from(i).unwrap_or(0) & (self.slots.len() - 1)
    }

    /// The digest of block `block` of disk `disk`, whose content `data` (one page) a guest read
    /// has just brought from the disk: from the table if the block was digested since it was
    /// last written, else taken under `key` and kept.
    pub fn of_block(&mut self, key: &DigestKey, disk: u8, block: u32, data: &[u8]) -> Digest {
        let (tag, i) = (Self::tag(disk, block), self.slot(disk, block));
        if self.slots[i].0 == tag {
            self.reused += 1;
            return self.slots[i].1;
        }
        let d = key.page(data);
        self.slots[i] = (tag, d);
        self.taken += 1;
        d
    }

    /// Blocks `first..end` of disk `disk` are being written: their digests are forgotten.
    pub fn forget(&mut self, disk: u8, first: u64, end: u64) {
        let (first, end) = (
            u32::try_from(first).unwrap_or(u32::MAX),
            u32::try_from(end).unwrap_or(u32::MAX),
        );
        if u64::from(end - first.min(end)) >= self.slots.len() as u64 {
            // A write longer than the table: every entry of the disk may be in the range.
            for s in &mut self.slots {
                if s.0 != 0 && (s.0 - 1) >> 32 == u64::from(disk) {
                    *s = (0, 0);
                }
            }
            return;
        }
        for b in first..end {
            let i = self.slot(disk, b);
            if self.slots[i].0 == Self::tag(disk, b) {
                self.slots[i] = (0, 0);
            }
        }
    }
}

struct Sip {
    v: [u64; 4],
}

impl Sip {
    #[inline(always)]
    fn round(&mut self) {
        let [mut v0, mut v1, mut v2, mut v3] = self.v;
        v0 = v0.wrapping_add(v1);
        v1 = v1.rotate_left(13) ^ v0;
        v0 = v0.rotate_left(32);
        v2 = v2.wrapping_add(v3);
        v3 = v3.rotate_left(16) ^ v2;
        v0 = v0.wrapping_add(v3);
        v3 = v3.rotate_left(21) ^ v0;
        v2 = v2.wrapping_add(v1);
        v1 = v1.rotate_left(17) ^ v2;
        v2 = v2.rotate_left(32);
        self.v = [v0, v1, v2, v3];
    }

    #[inline(always)]
    fn compress<const C: usize>(&mut self, m: u64) {
        self.v[3] ^= m;
        for _ in 0..C {
            self.round();
        }
        self.v[0] ^= m;
    }

    fn fold(&self) -> u64 {
        self.v[0] ^ self.v[1] ^ self.v[2] ^ self.v[3]
    }
}

/// Absorbs `data` into `s` (every word, then the length byte with the tail), `C` rounds a word.
fn absorb<const C: usize>(s: &mut Sip, data: &[u8]) {
    let mut words = data.chunks_exact(8);
    for w in &mut words {
        s.compress::<C>(u64::from_le_bytes(w.try_into().unwrap_or_default()));
    }
    let mut last = (data.len() as u64 & 0xff) << 56;
    for (i, &b) in words.remainder().iter().enumerate() {
        last |= u64::from(b) << (8 * i);
    }
    s.compress::<C>(last);
}

fn init(k0: u64, k1: u64) -> Sip {
    Sip {
        v: [
            k0 ^ 0x736f_6d65_7073_6575,
            k1 ^ 0x646f_7261_6e64_6f6d,
            k0 ^ 0x6c79_6765_6e65_7261,
            k1 ^ 0x7465_6462_7974_6573,
        ],
    }
}

/// SipHash-C-D of `data` under key (`k0`, `k1`), 128-bit output (the reference's `siphash`
/// with `outlen` 16; its bytes are the number's little-endian bytes).
fn siphash<const C: usize, const D: usize>(k0: u64, k1: u64, data: &[u8]) -> u128 {
    let mut s = init(k0, k1);
    s.v[1] ^= 0xee;
    absorb::<C>(&mut s, data);
    s.v[2] ^= 0xee;
    for _ in 0..D {
        s.round();
    }
    let lo = s.fold();
    s.v[1] ^= 0xdd;
    for _ in 0..D {
        s.round();
    }
    let hi = s.fold();
    u128::from(lo) | u128::from(hi) << 64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference key: bytes 00 01 .. 0f.
    const K0: u64 = 0x0706_0504_0302_0100;
    const K1: u64 = 0x0f0e_0d0c_0b0a_0908;

    /// The reference implementation's 128-bit output bytes, as a number read little-endian.
    fn le(bytes: [u8; 16]) -> u128 {
        u128::from_le_bytes(bytes)
    }

    #[test]
    fn a_block_digest_is_reused_until_the_block_is_written() {
        let key = DigestKey::from_parts(7, 9);
        let a = vec![1u8; PAGE_SIZE];
        let b = vec![2u8; PAGE_SIZE];
        let mut t = BlockDigests::new(8);
        assert_eq!(t.of_block(&key, 0, 5, &a), key.page(&a));
        // Read again: the table answers, even for other bytes (it trusts the disk).
        assert_eq!(t.of_block(&key, 0, 5, &b), key.page(&a));
        assert_eq!((t.taken, t.reused), (1, 1));
        // Another disk's block 5 is another entry; written blocks are digested afresh.
        assert_eq!(t.of_block(&key, 1, 5, &b), key.page(&b));
        t.forget(0, 4, 6);
        assert_eq!(t.of_block(&key, 0, 5, &b), key.page(&b));
        // A run as long as the table keeps every block; the next one takes a slot.
        let mut t = BlockDigests::new(8);
        for blk in 100..108 {
            t.of_block(&key, 0, blk, &a);
        }
        for blk in 100..108 {
            t.of_block(&key, 0, blk, &a);
        }
        assert_eq!((t.taken, t.reused), (8, 8));
        t.of_block(&key, 0, 108, &a);
        assert_eq!(t.of_block(&key, 0, 100, &b), key.page(&b));
        // A write longer than the table forgets the disk's entries, not the other disk's.
        t.of_block(&key, 1, 3, &a);
        t.forget(0, 0, 1 << 20);
        assert_eq!(t.of_block(&key, 0, 101, &b), key.page(&b));
        assert_eq!(t.of_block(&key, 1, 3, &b), key.page(&a));
    }

    #[test]
    fn siphash_2_4_128_matches_the_reference_vectors() {
        // vectors_sip128[0] and [1] of the reference implementation: messages 00 .. (n-1).
        assert_eq!(
            siphash::<2, 4>(K0, K1, &[]),
            le([
                0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6, 0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55,
                0x02, 0x93
            ])
        );
        assert_eq!(
            siphash::<2, 4>(K0, K1, &[0]),
            le([
                0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44, 0x34, 0x76, 0x59, 0x11, 0x9b, 0x22,
                0xfc, 0x45
            ])
        );
    }

    /// SipHash-2-4 with 64-bit output, built from the same parts: what `std::hash::SipHasher`
    /// computes, which checks the word loop and the tail at every length.
    fn siphash64_2_4(k0: u64, k1: u64, data: &[u8]) -> u64 {
        let mut s = init(k0, k1);
        absorb::<2>(&mut s, data);
        s.v[2] ^= 0xff;
        for _ in 0..4 {
            s.round();
        }
        s.fold()
    }

    #[test]
    #[allow(deprecated)]
    fn the_word_loop_and_tail_match_std_siphash_at_every_length() {
        use std::hash::Hasher;
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3).to_le_bytes()[0]).collect();
        for n in 0..data.len() {
            let mut h = std::hash::SipHasher::new_with_keys(K0, K1 ^ n as u64);
            h.write(&data[..n]);
            assert_eq!(
                siphash64_2_4(K0, K1 ^ n as u64, &data[..n]),
                h.finish(),
                "{n} bytes"
            );
        }
    }

    #[test]
    fn a_page_digest_depends_on_every_byte_and_on_the_key() {
        let key = DigestKey::from_parts(1, 2);
        let page = vec![7u8; PAGE_SIZE];
        let d = key.page(&page);
        assert_eq!(d, key.page(&page.clone()));
        for i in [0, 1, 7, 8, 2047, PAGE_SIZE - 1] {
            let mut other = page.clone();
            other[i] ^= 1;
            assert_ne!(key.page(&other), d, "byte {i}");
        }
        assert_ne!(DigestKey::from_parts(1, 3).page(&page), d);
        let a = DigestKey::random().unwrap();
        let b = DigestKey::random().unwrap();
        assert_ne!(a.page(&page), b.page(&page), "two runs draw two keys");
    }
}
