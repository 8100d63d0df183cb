//! The pool's compression (zswap-like, `--pool-compress lz4|zstd`): a [`Packer`] compresses the
//! pages of a write on their way into the pool, an [`Unpacker`] decompresses them on their way
//! out. A page that does not compress to [`MAX_COMPRESSED`] or less is kept whole.

use memvisor_api::PoolCompress;

use crate::page::PAGE_SIZE;

/// The most a compressed page may take; a page that does not compress to this is kept whole.
pub const MAX_COMPRESSED: usize = 3 * PAGE_SIZE / 4;

/// Where the compressor puts page `i` of a write: at `i * STRIDE` (LZ4 needs room for its
/// worst case even when the result is small).
pub(super) const STRIDE: usize = lz4_flex::block::get_maximum_output_size(PAGE_SIZE);
/// zstd's level: its fastest, as zswap's zstd uses by default.
pub(super) const ZSTD_LEVEL: i32 = 1;
pub(super) fn corrupt(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// Compresses pages on their way into the pool (reclaim's side).
pub(super) struct Packer {
    pub(super) how: PoolCompress,
    pub(super) zstd: Option<zstd::bulk::Compressor<'static>>,
    /// Page `i` of the write under way, compressed, at `i * STRIDE`.
    pub(super) out: Vec<u8>,
}

impl Packer {
    pub(super) fn new(how: PoolCompress) -> std::io::Result<Packer> {
        let zstd = match how {
            PoolCompress::Zstd => Some(zstd::bulk::Compressor::new(ZSTD_LEVEL)?),
            _ => None,
        };
        Ok(Packer {
            how,
            zstd,
            out: Vec::new(),
        })
    }

    /// Compresses the pages of `data` into `out`; for each, its compressed length, or `None`
    /// to keep it whole.
    pub(super) fn pack(&mut self, data: &[u8]) -> Vec<Option<usize>> {
        let n = data.len() / PAGE_SIZE;
        if self.how == PoolCompress::None {
            return vec![None; n];
        }
        if self.out.len() < n * STRIDE {
            self.out.resize(n * STRIDE, 0);
        }
        let mut lens = Vec::with_capacity(n);
        for (i, page) in data.chunks_exact(PAGE_SIZE).enumerate() {
            let out = &mut self.out[i * STRIDE..(i + 1) * STRIDE];
            let len = match (&mut self.zstd, self.how) {
                // Too big for `out` is an error, as is incompressible: either way, kept whole.
                (Some(z), _) => z.compress_to_buffer(page, &mut out[..MAX_COMPRESSED]).ok(),
                (None, PoolCompress::Lz4) => lz4_flex::block::compress_into(page, out).ok(),
                (None, _) => None,
            };
            lens.push(len.filter(|&l| l > 0 && l <= MAX_COMPRESSED));
        }
        lens
    }
}

/// Decompresses pages on their way out of the pool.
pub(super) struct Unpacker {
    pub(super) how: PoolCompress,
    pub(super) zstd: Option<zstd::bulk::Decompressor<'static>>,
}

impl Unpacker {
    pub(super) fn new(how: PoolCompress) -> std::io::Result<Unpacker> {
        let zstd = match how {
            PoolCompress::Zstd => Some(zstd::bulk::Decompressor::new()?),
            _ => None,
        };
        Ok(Unpacker { how, zstd })
    }

    /// Writes the page kept as `src` (whole, or compressed) into `page`.
    pub(super) fn unpack(&mut self, src: &[u8], page: &mut [u8]) -> std::io::Result<()> {
        if src.len() == PAGE_SIZE {
            page.copy_from_slice(src);
            return Ok(());
        }
        let n = match (&mut self.zstd, self.how) {
            (Some(z), _) => z.decompress_to_buffer(src, page)?,
            (None, PoolCompress::Lz4) => lz4_flex::block::decompress_into(src, page)
                .map_err(|e| corrupt(format!("a pooled page does not decompress: {e}")))?,
            (None, _) => {
                return Err(corrupt(format!(
                    "a pooled page of {} bytes in a pool without compression",
                    src.len()
                )))
            }
        };
        if n != PAGE_SIZE {
            return Err(corrupt(format!(
                "a pooled page decompressed to {n} bytes, not {PAGE_SIZE}"
            )));
        }
        Ok(())
    }
}
