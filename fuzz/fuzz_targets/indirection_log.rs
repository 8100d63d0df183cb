//! Tesseract's indirection log (`memvisor_pager::indirect`): the bytes of an `IMAGE.indirections`
//! file, read as a log (`Log::open`: header, records, torn ends), then their records after a
//! header naming a real swap file put back into a real image (`recover`). A log memvisor did not
//! write must be an error, never a panic, and must never grow the image.

#![no_main]

use std::path::PathBuf;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use memvisor_pager::indirect::{log_path, recover, Log};

const BLOCK: usize = 4096;
const IMAGE_BLOCKS: usize = 16;

struct Files {
    _dir: tempfile::TempDir,
    image: PathBuf,
    store: PathBuf,
}

fn files() -> &'static Files {
    static F: OnceLock<Files> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let image = dir.path().join("disk.img");
        let store = dir.path().join("store.swap");
        std::fs::write(&store, vec![0x5au8; 16 * BLOCK]).unwrap();
        Files {
            _dir: dir,
            image,
            store,
        }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = files();
    std::fs::write(&f.image, vec![0u8; IMAGE_BLOCKS * BLOCK]).unwrap();
    let log = log_path(&f.image);
    // The bytes as a whole log file: parsed only (its header may name any path).
    std::fs::write(&log, data).unwrap();
    let _ = Log::open(&f.image);
    match std::fs::remove_file(&log) {
        Ok(()) => {}
        // An empty log is a finished one: `Log::open` deleted it.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && data.is_empty() => {}
        Err(e) => panic!("{}: {e}", log.display()),
    }
    // Past a first block's worth, the bytes as records after a real header.
    let records = data.get(BLOCK..).unwrap_or_default();
    drop(Log::create(&f.image, &f.store).unwrap());
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.truncate(BLOCK);
    bytes.extend_from_slice(records);
    std::fs::write(&log, &bytes).unwrap();
    match recover(&f.image) {
        Ok(_) => assert!(!log.exists(), "a recovered image has no log"),
        Err(_) => {
            let _ = std::fs::remove_file(&log);
        }
    }
    let len = std::fs::metadata(&f.image).unwrap().len();
    assert_eq!(len, (IMAGE_BLOCKS * BLOCK) as u64, "the image never grows");
});
