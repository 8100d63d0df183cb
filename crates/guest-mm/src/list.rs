//! The intrusive doubly linked lists that thread frames through their [`Frame`](crate::Frame)
//! metadata (Linux's `list.h`): the free list and the four LRU lists.

use crate::mm_types::{L_NONE, NIL};
use crate::Mm;

impl Mm<'_> {
    pub(crate) fn unlink(&mut self, f: u32) {
        let fr = self.frames[f as usize];
        let l = usize::from(fr.list);
        debug_assert!(l != usize::from(L_NONE));
        if fr.prev == NIL {
            self.lists[l].head = fr.next;
        } else {
            self.frames[fr.prev as usize].next = fr.next;
        }
        if fr.next == NIL {
            self.lists[l].tail = fr.prev;
        } else {
            self.frames[fr.next as usize].prev = fr.prev;
        }
        self.lists[l].len -= 1;
        let fr = &mut self.frames[f as usize];
        fr.prev = NIL;
        fr.next = NIL;
        fr.list = L_NONE;
    }

    pub(crate) fn push_front(&mut self, list: u8, f: u32) {
        let l = usize::from(list);
        let head = self.lists[l].head;
        {
            let fr = &mut self.frames[f as usize];
            fr.list = list;
            fr.prev = NIL;
            fr.next = head;
        }
        if head == NIL {
            self.lists[l].tail = f;
        } else {
            self.frames[head as usize].prev = f;
        }
        self.lists[l].head = f;
        self.lists[l].len += 1;
    }

    pub(crate) fn push_back(&mut self, list: u8, f: u32) {
        let l = usize::from(list);
        let tail = self.lists[l].tail;
        {
            let fr = &mut self.frames[f as usize];
            fr.list = list;
            fr.next = NIL;
            fr.prev = tail;
        }
        if tail == NIL {
            self.lists[l].head = f;
        } else {
            self.frames[tail as usize].next = f;
        }
        self.lists[l].tail = f;
        self.lists[l].len += 1;
    }
}
