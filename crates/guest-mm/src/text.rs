//! Text-like file content for the guest kit's `compress` workload: deterministic from a key and
//! a page index, so a page can be made (and checked) on its own once the key's vocabulary is
//! made ([`Text::fill`]), and compressible the way prose is, so a compressor's ratio and speed
//! mean something (random words, as mkdisk writes, do not compress at all; a repeated pattern
//! compresses unrealistically well).
//!
//! Each page is lines of at most [`WIDTH`] characters of sentences: 4 to 19 words, the first
//! capitalised, separated by spaces, a comma now and then, ending with a full stop. Words come
//! from a vocabulary of [`VOCAB`] words made from the key (1 to 12 letters, shorter ones more
//! likely, letters drawn with English's letter frequencies), drawn by Zipf's law (the word of
//! rank k with a frequency ∝ 1/k, as in prose); one word in 32 is a number. DEFLATE (level 6)
//! compresses it to about 36 % (a ratio of 2.8, what gzip gets on English text). A [`Text`]
//! takes 68 KiB.

use crate::format::splitmix64;

/// Bytes in a page.
pub const PAGE: usize = 4096;
/// Words in the vocabulary.
pub const VOCAB: u64 = 4096;
/// Characters in a line at most, not counting its newline.
pub const WIDTH: usize = 72;

/// Letters from the most frequent in English to the least, each given `FREQ` shares.
const LETTERS: &[u8; 26] = b"etaoinshrdlcumwfgypbvkjxqz";
/// Relative frequency (per 1000) of each letter of [`LETTERS`].
const FREQ: [u16; 26] = [
    124, 91, 82, 75, 70, 67, 63, 61, 60, 43, 40, 28, 28, 24, 24, 22, 20, 20, 19, 15, 10, 8, 2, 2,
    1, 1,
];

/// A letter for the uniform value `r` in `0..1000` (the frequencies add up to 1000).
fn letter(r: u64) -> u8 {
    let mut acc = 0u64;
    for (i, &f) in FREQ.iter().enumerate() {
        acc += u64::from(f);
        if r < acc {
            return LETTERS[i];
        }
    }
    LETTERS[0]
}

/// Word `id` of the vocabulary of `key`, written into `out`; returns its length (1..=12).
fn word(key: u64, id: u64, out: &mut [u8; 12]) -> usize {
    let mut h = splitmix64(key ^ id.wrapping_mul(0x9E37_79B9));
    // Lengths 1..=12, most between 3 and 7: the sum of two draws.
    let len = 1 + (h % 7 + (h >> 8) % 6) as usize;
    for c in out.iter_mut().take(len) {
        h = splitmix64(h);
        *c = letter(h % 1000);
    }
    len
}

/// The text of one key: its vocabulary, made once with its Zipf table (68 KiB), from which pages are made.
pub struct Text {
    words: [[u8; 12]; VOCAB as usize],
    lens: [u8; VOCAB as usize],
    /// The share of draws at or below each rank, of 2^32: Zipf's law, rank k drawn ∝ 1/k.
    cdf: [u32; VOCAB as usize],
    key: u64,
}

impl Text {
    /// An empty text, all zeroes (so it can be made in place, e.g. in zeroed memory).
    pub const EMPTY: Text = Text {
        words: [[0; 12]; VOCAB as usize],
        lens: [0; VOCAB as usize],
        cdf: [0; VOCAB as usize],
        key: 0,
    };

    /// Makes the vocabulary of `key` in place.
    pub fn fill(&mut self, key: u64) {
        self.key = key;
        for (id, (w, l)) in self.words.iter_mut().zip(self.lens.iter_mut()).enumerate() {
            *l = word(key, id as u64, w) as u8;
        }
        // Weights 2^40 / k for rank k = 1..=VOCAB, summed and scaled to 2^32.
        let weight = |k: u64| (1u64 << 40) / k;
        let total: u64 = (1..=VOCAB).map(weight).sum();
        let mut acc = 0u64;
        for (i, c) in self.cdf.iter_mut().enumerate() {
            acc += weight(i as u64 + 1);
            *c = ((u128::from(acc) << 32) / u128::from(total)).min(u128::from(u32::MAX)) as u32;
        }
    }

    /// The word id (rank) for the uniform draw `r`.
    fn pick(&self, r: u64) -> usize {
        let u = (r >> 32) as u32;
        self.cdf.partition_point(|&c| c < u).min(VOCAB as usize - 1)
    }
}

/// A small generator for the page's choices.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = splitmix64(self.0);
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next()) * u128::from(n)) >> 64) as u64
    }
}

impl Text {
    /// Fills `page` with page `index` of this text.
    pub fn page(&self, index: u64, page: &mut [u8; PAGE]) {
        let mut rng = Rng(splitmix64(self.key ^ 0x7465_7874) ^ index);
        let mut pos = 0;
        let mut col = 0;
        // Words left in the sentence; 0 starts a new one.
        let mut left = 0u64;
        let mut num = [0u8; 12];
        while pos < PAGE {
            let start = left == 0;
            if start {
                left = 4 + rng.below(16);
            }
            let r = rng.next();
            let (text, len): (&[u8], usize) = if r % 32 == 0 {
                let mut n = (r >> 8) % 10_000;
                let mut l = 0;
                loop {
                    num[11 - l] = b'0' + (n % 10) as u8;
                    l += 1;
                    n /= 10;
                    if n == 0 {
                        break;
                    }
                }
                (&num[12 - l..], l)
            } else {
                let id = self.pick(r);
                let l = usize::from(self.lens[id]);
                (&self.words[id][..l], l)
            };
            left -= 1;
            let punct = if left == 0 {
                Some(b'.')
            } else if rng.below(12) == 0 {
                Some(b',')
            } else {
                None
            };
            let need = len + usize::from(punct.is_some());
            // The separator: a newline when the word does not fit the line, else a space.
            if col > 0 {
                let sep = if col + 1 + need > WIDTH { b'\n' } else { b' ' };
                if pos < PAGE {
                    page[pos] = sep;
                    pos += 1;
                }
                col = if sep == b'\n' { 0 } else { col + 1 };
            }
            for (i, &c) in text.iter().enumerate() {
                if pos == PAGE {
                    return;
                }
                page[pos] = if start && i == 0 {
                    c.to_ascii_uppercase()
                } else {
                    c
                };
                pos += 1;
            }
            if let Some(p) = punct.filter(|_| pos < PAGE) {
                page[pos] = p;
                pos += 1;
            }
            col += need;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(key: u64) -> std::boxed::Box<Text> {
        let mut t = std::boxed::Box::new(Text::EMPTY);
        t.fill(key);
        t
    }

    #[test]
    fn pages_are_deterministic_and_differ_by_key_and_index() {
        let (one, two) = (text(1), text(2));
        let (mut a, mut b) = ([0u8; PAGE], [0u8; PAGE]);
        one.page(7, &mut a);
        text(1).page(7, &mut b);
        assert_eq!(a, b);
        one.page(8, &mut b);
        assert_ne!(a, b);
        two.page(7, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn pages_look_like_text() {
        let t = text(0xfeed);
        let mut p = [0u8; PAGE];
        for index in 0..64 {
            t.page(index, &mut p);
            assert!(
                p.iter()
                    .all(|&c| c.is_ascii_alphanumeric() || b" ,.\n".contains(&c)),
                "page {index}"
            );
            // Lines are at most WIDTH characters.
            for line in p.split(|&c| c == b'\n') {
                assert!(line.len() <= WIDTH, "page {index}: {} chars", line.len());
            }
            let words = p.split(|&c| c == b' ' || c == b'\n').count();
            assert!((500..1200).contains(&words), "page {index}: {words} words");
            assert!(p.iter().filter(|&&c| c == b'.').count() > 20);
            assert!(p.iter().any(u8::is_ascii_uppercase));
        }
    }

    #[test]
    fn word_ranks_follow_zipfs_law() {
        // Under Zipf's law the first 64 ranks of 4096 get H(64) / H(4096) = 4.74 / 8.89 = 53 %
        // of the draws, rank 1 twice as many as rank 2.
        let t = text(3);
        let mut rng = Rng(5);
        let mut counts = [0u32; VOCAB as usize];
        for _ in 0..100_000 {
            counts[t.pick(rng.next())] += 1;
        }
        let top: u32 = counts[..64].iter().sum();
        assert!((51_000..55_000).contains(&top), "{top}");
        let ratio = f64::from(counts[0]) / f64::from(counts[1]);
        assert!((1.8..2.2).contains(&ratio), "{ratio}");
        assert!(counts[VOCAB as usize - 1] < 20);
    }
}
