//! Every store of one pager ([`Stores`]): the swap store, the sample store and the disk images,
//! found by the [`StoreId`] a slot names.

use std::sync::OnceLock;

use super::image::ImageFile;
use super::indirect::Indirect;
use super::pool::SwapStore;
use super::sample::SampleStore;
use super::{PageStore, MAX_IMAGES};
use crate::page::StoreId;

/// Every store of one pager.
pub(crate) struct Stores {
    /// The swap file, with the pool in front of it when there is one.
    pub swap: SwapStore,
    pub sample: SampleStore,
    /// Attached once each, while the VM is built; read without a lock afterwards.
    images: [OnceLock<ImageFile>; MAX_IMAGES],
}

impl Stores {
    pub fn new(swap: SwapStore, sample: SampleStore) -> Self {
        Stores {
            swap,
            sample,
            images: Default::default(),
        }
    }

    /// Attaches disk image `disk`; false (and `image` dropped) if that number is taken or out
    /// of range.
    pub fn attach_image(&self, disk: u8, image: ImageFile) -> bool {
        self.images
            .get(usize::from(disk))
            .is_some_and(|cell| cell.set(image).is_ok())
    }

    pub fn get(&self, id: StoreId) -> std::io::Result<&dyn PageStore> {
        match id {
            StoreId::Swap => Ok(&self.swap),
            StoreId::Sample => Ok(&self.sample),
            StoreId::Image(d) => self
                .images
                .get(usize::from(d))
                .and_then(OnceLock::get)
                .map(|i| i as &dyn PageStore)
                .ok_or_else(|| std::io::Error::other(format!("disk image {d} is not attached"))),
        }
    }

    /// Disk image `disk`, if attached.
    pub fn image(&self, disk: u8) -> Option<&ImageFile> {
        self.images.get(usize::from(disk)).and_then(OnceLock::get)
    }

    /// The indirections of disk `disk`, if it has them.
    pub fn indirect(&self, disk: u8) -> Option<&Indirect> {
        self.image(disk).and_then(|i| i.indirect.as_ref())
    }

    /// The attached disk images.
    pub fn images(&self) -> impl Iterator<Item = &ImageFile> {
        self.images.iter().filter_map(OnceLock::get)
    }
}
