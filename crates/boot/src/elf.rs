//! Parsing of 64-bit x86 ELF kernels that carry a PVH entry note.

use crate::error::BootError;

const PT_LOAD: u32 = 1;
const PT_NOTE: u32 = 4;
const EM_X86_64: u16 = 62;
/// `XEN_ELFNOTE_PHYS32_ENTRY`: the 32-bit physical entry point for PVH boot.
const XEN_ELFNOTE_PHYS32_ENTRY: u32 = 18;

/// One `PT_LOAD` segment: `filesz` bytes from `file_offset` go to `paddr`, the rest up to `memsz` is zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    pub paddr: u64,
    pub file_offset: u64,
    pub filesz: u64,
    pub memsz: u64,
}

impl LoadSegment {
    /// One past the last guest-physical byte of the segment (saturating: checked at parse time).
    pub fn end(&self) -> u64 {
        self.paddr.saturating_add(self.memsz)
    }
}

/// A parsed PVH kernel: its load segments and 32-bit entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PvhImage {
    pub entry: u32,
    pub segments: Vec<LoadSegment>,
}

fn bytes_at<'a>(
    data: &'a [u8],
    off: u64,
    len: u64,
    what: &'static str,
) -> Result<&'a [u8], BootError> {
    let start = usize::try_from(off).map_err(|_| BootError::Truncated(what))?;
    let len = usize::try_from(len).map_err(|_| BootError::Truncated(what))?;
    let end = start.checked_add(len).ok_or(BootError::Truncated(what))?;
    data.get(start..end).ok_or(BootError::Truncated(what))
}

fn u16_at(d: &[u8], off: usize) -> u16 {
    u16::from_le_bytes([d[off], d[off + 1]])
}

fn u32_at(d: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(d[off..off + 4].try_into().expect("4 bytes"))
}

fn u64_at(d: &[u8], off: usize) -> u64 {
    u64::from_le_bytes(d[off..off + 8].try_into().expect("8 bytes"))
}

fn align4(n: u64) -> u64 {
    n.saturating_add(3) & !3
}

/// Finds the PVH entry in one `PT_NOTE` segment's contents.
fn find_pvh_entry(notes: &[u8]) -> Result<Option<u32>, BootError> {
    let mut off: u64 = 0;
    let total = notes.len() as u64;
    while off + 12 <= total {
        let hdr = bytes_at(notes, off, 12, "a note header")?;
        let namesz = u64::from(u32_at(hdr, 0));
        let descsz = u64::from(u32_at(hdr, 4));
        let ntype = u32_at(hdr, 8);
        let name_off = off + 12;
        let desc_off = name_off
            .checked_add(align4(namesz))
            .ok_or(BootError::Truncated("a note"))?;
        let name = bytes_at(notes, name_off, namesz, "a note name")?;
        let desc = bytes_at(notes, desc_off, descsz, "a note descriptor")?;
        if ntype == XEN_ELFNOTE_PHYS32_ENTRY && name.strip_suffix(b"\0").unwrap_or(name) == b"Xen" {
            if desc.len() < 4 {
                return Err(BootError::Truncated("the PVH entry note"));
            }
            return Ok(Some(u32_at(desc, 0)));
        }
        off = desc_off
            .checked_add(align4(descsz))
            .ok_or(BootError::Truncated("a note"))?;
    }
    Ok(None)
}

impl PvhImage {
    /// Parses an ELF64 x86-64 file and finds its load segments and PVH entry note.
    pub fn parse(data: &[u8]) -> Result<Self, BootError> {
        if data.len() < 4 || &data[..4] != b"\x7fELF" {
            return Err(BootError::NotElf);
        }
        let ehdr = bytes_at(data, 0, 64, "the ELF header")?;
        if ehdr[4] != 2 {
            return Err(BootError::NotElf64);
        }
        let machine = u16_at(ehdr, 18);
        if machine != EM_X86_64 {
            return Err(BootError::WrongMachine(machine));
        }
        let phoff = u64_at(ehdr, 32);
        let phentsize = u64::from(u16_at(ehdr, 54));
        let phnum = u64::from(u16_at(ehdr, 56));
        if phentsize < 56 {
            return Err(BootError::Truncated("the program header table"));
        }
        let mut segments = Vec::new();
        let mut entry = None;
        for i in 0..phnum {
            let ph = bytes_at(
                data,
                phoff.saturating_add(i * phentsize),
                56,
                "a program header",
            )?;
            let p_type = u32_at(ph, 0);
            let file_offset = u64_at(ph, 8);
            let paddr = u64_at(ph, 24);
            let filesz = u64_at(ph, 32);
            let memsz = u64_at(ph, 40);
            match p_type {
                PT_LOAD => {
                    bytes_at(data, file_offset, filesz, "a loadable segment")?;
                    if filesz > memsz || paddr.checked_add(memsz).is_none() {
                        return Err(BootError::Truncated("a loadable segment's sizes"));
                    }
                    segments.push(LoadSegment {
                        paddr,
                        file_offset,
                        filesz,
                        memsz,
                    });
                }
                PT_NOTE if entry.is_none() => {
                    entry = find_pvh_entry(bytes_at(data, file_offset, filesz, "a note segment")?)?;
                }
                _ => {}
            }
        }
        let entry = entry.ok_or(BootError::NoPvhNote)?;
        if segments.is_empty() {
            return Err(BootError::NoLoadSegment);
        }
        let e = u64::from(entry);
        if !segments
            .iter()
            .any(|s| e >= s.paddr && e < s.paddr + s.filesz)
        {
            return Err(BootError::EntryOutsideImage(entry));
        }
        Ok(PvhImage { entry, segments })
    }

    /// One past the highest guest-physical byte the image occupies.
    pub fn end(&self) -> u64 {
        self.segments
            .iter()
            .map(LoadSegment::end)
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::test_utils::make_elf;
    use super::*;

    #[test]
    fn parses_segments_and_entry() {
        let elf = make_elf(0x10_0000, &[0xf4; 64], Some(0x10_0010));
        let img = PvhImage::parse(&elf).unwrap();
        assert_eq!(img.entry, 0x10_0010);
        assert_eq!(img.segments.len(), 1);
        assert_eq!(img.segments[0].paddr, 0x10_0000);
        assert_eq!(img.segments[0].filesz, 64);
        assert_eq!(img.end(), 0x10_0000 + 64 + 4096);
    }

    #[test]
    fn rejects_missing_note() {
        let elf = make_elf(0x10_0000, &[0xf4; 64], None);
        assert!(matches!(PvhImage::parse(&elf), Err(BootError::NoPvhNote)));
    }

    #[test]
    fn rejects_entry_outside_image() {
        let elf = make_elf(0x10_0000, &[0xf4; 64], Some(0x20_0000));
        assert!(matches!(
            PvhImage::parse(&elf),
            Err(BootError::EntryOutsideImage(0x20_0000))
        ));
    }

    #[test]
    fn rejects_non_elf_and_wrong_class() {
        assert!(matches!(
            PvhImage::parse(b"#!/bin/sh\n"),
            Err(BootError::NotElf)
        ));
        let mut elf = make_elf(0x10_0000, &[0xf4; 64], Some(0x10_0000));
        elf[4] = 1;
        assert!(matches!(PvhImage::parse(&elf), Err(BootError::NotElf64)));
        elf[4] = 2;
        elf[18] = 3;
        assert!(matches!(
            PvhImage::parse(&elf),
            Err(BootError::WrongMachine(3))
        ));
    }

    #[test]
    fn truncation_is_an_error_at_every_length() {
        let elf = make_elf(0x10_0000, &[0xf4; 64], Some(0x10_0000));
        for len in 0..elf.len() {
            assert!(
                PvhImage::parse(&elf[..len]).is_err(),
                "prefix of {len} bytes parsed"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let _ = PvhImage::parse(&data);
        }

        #[test]
        fn corrupted_elf_never_panics(pos in 0usize..300, byte in proptest::prelude::any::<u8>()) {
            let mut elf = make_elf(0x10_0000, &[0x90; 64], Some(0x10_0000));
            let p = pos % elf.len();
            elf[p] = byte;
            let _ = PvhImage::parse(&elf);
        }
    }
}

/// Builders for tests of this and other crates.
#[cfg(any(test, feature = "test-utils"))]
pub mod test_utils {
    use super::{EM_X86_64, PT_LOAD, PT_NOTE, XEN_ELFNOTE_PHYS32_ENTRY};

    /// Builds a minimal ELF64 with one PT_LOAD segment at `paddr` holding `code`, and an
    /// optional PVH note with `entry`.
    pub fn make_elf(paddr: u64, code: &[u8], entry: Option<u32>) -> Vec<u8> {
        let mut note = Vec::new();
        if let Some(e) = entry {
            // A note that is not the PVH one comes first, to exercise the walk.
            note.extend_from_slice(&4u32.to_le_bytes());
            note.extend_from_slice(&4u32.to_le_bytes());
            note.extend_from_slice(&1u32.to_le_bytes());
            note.extend_from_slice(b"GNU\0");
            note.extend_from_slice(&[0; 4]);
            note.extend_from_slice(&4u32.to_le_bytes());
            note.extend_from_slice(&4u32.to_le_bytes());
            note.extend_from_slice(&XEN_ELFNOTE_PHYS32_ENTRY.to_le_bytes());
            note.extend_from_slice(b"Xen\0");
            note.extend_from_slice(&e.to_le_bytes());
        }
        let phnum: u16 = if entry.is_some() { 2 } else { 1 };
        // Page-aligned like a linker's output: QEMU's ELF loader needs p_offset ≡ p_vaddr mod p_align.
        let code_off: u64 = 0x1000;
        let note_off = code_off + code.len() as u64;
        let mut f = vec![0u8; 64];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[5] = 1;
        f[6] = 1;
        f[16..18].copy_from_slice(&2u16.to_le_bytes());
        f[18..20].copy_from_slice(&EM_X86_64.to_le_bytes());
        f[32..40].copy_from_slice(&64u64.to_le_bytes());
        f[54..56].copy_from_slice(&56u16.to_le_bytes());
        f[56..58].copy_from_slice(&phnum.to_le_bytes());
        let ph = |t: u32, off: u64, addr: u64, filesz: u64, memsz: u64, align: u64| {
            let mut p = vec![0u8; 56];
            p[0..4].copy_from_slice(&t.to_le_bytes());
            p[8..16].copy_from_slice(&off.to_le_bytes());
            p[16..24].copy_from_slice(&addr.to_le_bytes());
            p[24..32].copy_from_slice(&addr.to_le_bytes());
            p[32..40].copy_from_slice(&filesz.to_le_bytes());
            p[40..48].copy_from_slice(&memsz.to_le_bytes());
            p[48..56].copy_from_slice(&align.to_le_bytes());
            p
        };
        f.extend(ph(
            PT_LOAD,
            code_off,
            paddr,
            code.len() as u64,
            code.len() as u64 + 4096,
            0x1000,
        ));
        if entry.is_some() {
            f.extend(ph(
                PT_NOTE,
                note_off,
                0,
                note.len() as u64,
                note.len() as u64,
                4,
            ));
        }
        f.resize(0x1000, 0);
        f.extend_from_slice(code);
        f.extend_from_slice(&note);
        f
    }
}
