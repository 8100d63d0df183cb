//! `memvisor mkdisk`: builds the guest kit's data disks (files with deterministic content in the
//! format of `memvisor_guest_mm::format`) and swap disks; `memvisor disk disentangle` puts an
//! image's indirected blocks back into it (`memvisor_pager::indirect`).

use std::fs::OpenOptions;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use memvisor_api::exit::status;
use memvisor_api::parse_size;
use memvisor_guest_mm::format::{
    encode_swap_header, file_word, Extent, FileEntry, Superblock, BLOCK_SIZE, ENTRIES_PER_BLOCK,
    ENTRY_SIZE, NAME_MAX,
};

use crate::bad_input::BadInput;

#[derive(Args, Debug)]
pub struct DiskArgs {
    #[command(subcommand)]
    pub action: DiskAction,
}

#[derive(Subcommand, Debug)]
pub enum DiskAction {
    /// Copy every block an image's indirection log lists from the swap file the log names back
    /// into the image, then delete the log (Tesseract §4.4.2). Give every image of a VM: the
    /// swap file is left in place, and is not needed once they all stand alone.
    Disentangle {
        /// The disk images.
        #[arg(required = true)]
        images: Vec<PathBuf>,
    },
}

/// `memvisor disk`.
pub fn disk(args: DiskArgs) -> ExitCode {
    let DiskAction::Disentangle { images } = args.action;
    let mut worst = ExitCode::SUCCESS;
    for image in &images {
        if !image.is_file() {
            eprintln!("memvisor: {}: not a disk image file", image.display());
            worst = ExitCode::from(status::BAD_INPUT);
            continue;
        }
        match memvisor_pager::indirect::recover(image) {
            Ok(None) => println!("{}: no indirections; it stands alone", image.display()),
            Ok(Some(d)) => println!(
                "{}: {} blocks put back from {} ({} log records); it stands alone",
                image.display(),
                d.blocks,
                d.store.display(),
                d.records
            ),
            Err(e @ memvisor_pager::indirect::IndirectError::Corrupt { .. }) => {
                eprintln!("memvisor: {e}");
                worst = ExitCode::from(status::BAD_INPUT);
            }
            Err(e) => {
                eprintln!("memvisor: {}: {e}", image.display());
                worst = ExitCode::from(status::VMM_FAILURE);
            }
        }
    }
    worst
}

/// File-table blocks of a data disk: 64 files, as many as the guest kit keeps in memory.
const TABLE_BLOCKS: u32 = 2;
const MAX_FILES: usize = TABLE_BLOCKS as usize * ENTRIES_PER_BLOCK;

#[derive(Args, Debug)]
pub struct MkdiskArgs {
    #[command(subcommand)]
    pub kind: DiskKind,
}

#[derive(Subcommand, Debug)]
pub enum DiskKind {
    /// A data disk: a file table and files whose content the guest can verify.
    Data(DataArgs),
    /// A swap disk for the guest kit (a header block, then one 4 KiB slot per block).
    Swap(SwapArgs),
}

#[derive(Args, Debug)]
pub struct DataArgs {
    /// The image to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Disk size: 256M, 1G, or bytes (a multiple of 4 KiB).
    #[arg(long)]
    pub size: String,
    /// Files as NAME:SIZE,... (e.g. seq:200M,src:64M); at most 64, names up to 48 characters.
    #[arg(long, default_value = "")]
    pub files: String,
    /// Seed of the files' content: word at byte `o` of file number `i` is splitmix64(seed ^ i << 48 ^ o).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

#[derive(Args, Debug)]
pub struct SwapArgs {
    /// The image to write.
    #[arg(long)]
    pub out: PathBuf,
    /// Disk size: 512M, 1G, or bytes (a multiple of 4 KiB, at least 8 KiB).
    #[arg(long)]
    pub size: String,
    /// Overwrite an existing file.
    #[arg(long)]
    pub force: bool,
}

/// `memvisor mkdisk`.
pub fn run(args: MkdiskArgs) -> ExitCode {
    let r = match args.kind {
        DiskKind::Data(a) => data(&a),
        DiskKind::Swap(a) => swap(&a),
    };
    match r {
        Ok(line) => {
            println!("{line}");
            ExitCode::SUCCESS
        }
        Err(bad) => bad.report(),
    }
}

fn disk_size(s: &str) -> Result<u64, BadInput> {
    let size = parse_size(s).map_err(BadInput)?;
    if size == 0 || size % BLOCK_SIZE as u64 != 0 {
        return Err(BadInput(format!(
            "disk size '{s}' must be a positive multiple of 4 KiB"
        )));
    }
    Ok(size)
}

/// Parses NAME:SIZE,... into names and byte sizes.
fn parse_files(spec: &str) -> Result<Vec<(String, u64)>, BadInput> {
    let mut files: Vec<(String, u64)> = Vec::new();
    for item in spec.split(',').filter(|s| !s.is_empty()) {
        let (name, size) = item
            .split_once(':')
            .ok_or_else(|| BadInput(format!("file '{item}' must be NAME:SIZE, e.g. seq:200M")))?;
        if name.is_empty() || name.len() > NAME_MAX || !name.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(BadInput(format!(
                "file name '{name}' must be 1 to {NAME_MAX} printable characters"
            )));
        }
        if files.iter().any(|(n, _)| n == name) {
            return Err(BadInput(format!("file name '{name}' appears twice")));
        }
        let size = parse_size(size).map_err(|e| BadInput(format!("file {name}: {e}")))?;
        files.push((name.to_owned(), size));
    }
    if files.len() > MAX_FILES {
        return Err(BadInput(format!(
            "{} files given; a data disk holds at most {MAX_FILES}",
            files.len()
        )));
    }
    Ok(files)
}

fn create(out: &PathBuf, force: bool) -> Result<std::fs::File, BadInput> {
    let mut o = OpenOptions::new();
    o.write(true);
    if force {
        o.create(true).truncate(true);
    } else {
        o.create_new(true);
    }
    o.open(out).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            BadInput(format!(
                "{} exists; pass --force to overwrite it",
                out.display()
            ))
        } else {
            BadInput(format!("cannot create {}: {e}", out.display()))
        }
    })
}

fn io_err(out: &std::path::Path) -> impl Fn(std::io::Error) -> BadInput + '_ {
    move |e| BadInput(format!("cannot write {}: {e}", out.display()))
}

fn data(a: &DataArgs) -> Result<String, BadInput> {
    let size = disk_size(&a.size)?;
    let files = parse_files(&a.files)?;
    let total_blocks = size / BLOCK_SIZE as u64;
    let mut sb = Superblock {
        total_blocks,
        table_blocks: TABLE_BLOCKS,
        nr_files: u32::try_from(files.len()).unwrap_or(u32::MAX),
        next_free: 1 + u64::from(TABLE_BLOCKS),
        seed: a.seed,
    };
    let mut entries = Vec::new();
    for (name, bytes) in &files {
        let blocks = bytes.div_ceil(BLOCK_SIZE as u64);
        let mut e = FileEntry::new(name, *bytes);
        e.extents[0] = Extent {
            start: sb.next_free,
            len: blocks,
        };
        sb.next_free += blocks;
        entries.push(e);
    }
    if sb.next_free > total_blocks {
        let need = sb.next_free * BLOCK_SIZE as u64;
        return Err(BadInput(format!(
            "the files need {need} bytes ({} MiB) with the file table; the disk is {size} bytes",
            need.div_ceil(1 << 20)
        )));
    }
    let file = create(&a.out, a.force)?;
    let err = io_err(&a.out);
    file.set_len(size).map_err(&err)?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let mut block = vec![0u8; BLOCK_SIZE];
    sb.encode(&mut block);
    w.write_all(&block).map_err(&err)?;
    for t in 0..TABLE_BLOCKS as usize {
        block.fill(0);
        for (k, e) in entries
            .iter()
            .enumerate()
            .skip(t * ENTRIES_PER_BLOCK)
            .take(ENTRIES_PER_BLOCK)
        {
            let at = (k % ENTRIES_PER_BLOCK) * ENTRY_SIZE;
            e.encode(&mut block[at..at + ENTRY_SIZE]);
        }
        w.write_all(&block).map_err(&err)?;
    }
    let blocks: u64 = entries.iter().map(|e| e.extents[0].len).sum();
    // Only a disk that takes a while to write (over 256 MiB of files) gets a bar.
    let bar = if blocks * (BLOCK_SIZE as u64) > 256 << 20 {
        memvisor_bench::progress::bar(blocks, "blocks")
    } else {
        indicatif::ProgressBar::hidden()
    };
    bar.set_message("writing files");
    for (i, e) in entries.iter().enumerate() {
        let id = u32::try_from(i).unwrap_or(u32::MAX);
        w.seek(SeekFrom::Start(e.extents[0].start * BLOCK_SIZE as u64))
            .map_err(&err)?;
        for b in 0..e.extents[0].len {
            for (k, chunk) in block.chunks_exact_mut(8).enumerate() {
                let off = b * BLOCK_SIZE as u64 + 8 * k as u64;
                chunk.copy_from_slice(&file_word(a.seed, id, off).to_le_bytes());
            }
            w.write_all(&block).map_err(&err)?;
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    w.flush().map_err(&err)?;
    w.get_ref().sync_all().map_err(&err)?;
    let list: Vec<String> = files.iter().map(|(n, b)| format!("{n}={b}")).collect();
    Ok(format!(
        "{}: data disk, {size} bytes, seed {}, files: {}",
        a.out.display(),
        a.seed,
        if list.is_empty() {
            "none".to_owned()
        } else {
            list.join(" ")
        }
    ))
}

fn swap(a: &SwapArgs) -> Result<String, BadInput> {
    let size = disk_size(&a.size)?;
    let slots = size / BLOCK_SIZE as u64 - 1;
    if slots == 0 {
        return Err(BadInput(format!(
            "swap size '{}' holds no slot; use at least 8K",
            a.size
        )));
    }
    let mut file = create(&a.out, a.force)?;
    let err = io_err(&a.out);
    file.set_len(size).map_err(&err)?;
    let mut block = vec![0u8; BLOCK_SIZE];
    encode_swap_header(&mut block, slots);
    file.write_all(&block).map_err(&err)?;
    file.sync_all().map_err(&err)?;
    Ok(format!(
        "{}: swap disk, {size} bytes, {slots} slots",
        a.out.display()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memvisor_guest_mm::format::{decode_swap_header, Superblock};

    #[test]
    fn data_disk_holds_the_table_and_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("d.img");
        let a = DataArgs {
            out: out.clone(),
            size: "1M".into(),
            files: "a:10000,b:8K".into(),
            seed: 9,
            force: false,
        };
        data(&a).unwrap_or_else(|BadInput(m)| panic!("{m}"));
        let img = std::fs::read(&out).unwrap();
        assert_eq!(img.len(), 1 << 20);
        let sb = Superblock::decode(&img[..BLOCK_SIZE]).unwrap();
        assert_eq!(sb.nr_files, 2);
        let e1 = FileEntry::decode(
            &img[BLOCK_SIZE + ENTRY_SIZE..BLOCK_SIZE + 2 * ENTRY_SIZE],
            &sb,
        )
        .unwrap();
        assert_eq!(e1.name(), "b");
        let at = usize::try_from(e1.extents[0].start).unwrap() * BLOCK_SIZE + 4096 + 16;
        let w = u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        assert_eq!(w, file_word(9, 1, 4096 + 16));
        // Exists without --force.
        assert!(data(&a).is_err());
    }

    #[test]
    fn bad_sizes_and_files_are_refused() {
        assert!(disk_size("12X").is_err());
        assert!(disk_size("1000").is_err());
        assert!(parse_files("a").is_err());
        assert!(parse_files("a:1M,a:2M").is_err());
        let dir = tempfile::tempdir().unwrap();
        let a = DataArgs {
            out: dir.path().join("x"),
            size: "1M".into(),
            files: "big:2M".into(),
            seed: 1,
            force: false,
        };
        assert!(data(&a).is_err());
        assert!(
            !dir.path().join("x").exists(),
            "nothing written on bad input"
        );
    }

    #[test]
    fn swap_disk_has_a_header() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("s.img");
        swap(&SwapArgs {
            out: out.clone(),
            size: "64K".into(),
            force: false,
        })
        .unwrap_or_else(|BadInput(m)| panic!("{m}"));
        let img = std::fs::read(&out).unwrap();
        assert_eq!(decode_swap_header(&img), Ok(15));
    }
}
