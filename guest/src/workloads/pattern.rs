//! The disk test pattern: the little-endian u64 at byte offset `o` is
//! `splitmix64(seed ^ o)`. The host recomputes it to verify disk images.

/// SplitMix64 finaliser (all arithmetic wrapping).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Expected word at disk byte offset `offset` (a multiple of 8).
pub fn word_at(seed: u64, offset: u64) -> u64 {
    splitmix64(seed ^ offset)
}

/// Fills `buf` (whole words) with the pattern for disk offset `base`.
pub fn fill(buf: &mut [u64], seed: u64, base: u64) {
    for (i, w) in buf.iter_mut().enumerate() {
        *w = word_at(seed, base + 8 * i as u64).to_le();
    }
}
