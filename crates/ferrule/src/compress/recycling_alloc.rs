//! `RecyclingAlloc`: brotli's allocator, keeping each thread's freed buffers for the next
//! encoder.

use std::any::{Any, TypeId};
use std::cell::RefCell;
use std::collections::HashMap;

/// The most a thread keeps for reuse: about what one encoder at brotli's default level uses
/// (900 KiB), with room for a second at once.
const KEPT_MAX: usize = 2 * 1024 * 1024;

/// brotli's encoder cannot be reset, and allocates about 900 KiB of tables per response at its
/// default level; the server's allocator hands freed memory back to the system at once, so a
/// new encoder faulted all of it in again (400 µs a response). This allocator hands out the
/// thread's freed buffers of the same type and length instead, cleared as new ones would be.
#[derive(Default)]
pub struct RecyclingAlloc;

/// A buffer from `RecyclingAlloc`.
pub struct Recycled<T>(Box<[T]>);

impl<T> Default for Recycled<T> {
    fn default() -> Self {
        Recycled(Box::new([]))
    }
}

impl<T> brotli::SliceWrapper<T> for Recycled<T> {
    fn slice(&self) -> &[T] {
        &self.0
    }
}

impl<T> brotli::SliceWrapperMut<T> for Recycled<T> {
    fn slice_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

#[derive(Default)]
struct Kept {
    buffers: HashMap<(TypeId, usize), Vec<Box<dyn Any>>>,
    bytes: usize,
}

thread_local! {
    static KEPT: RefCell<Kept> = RefCell::new(Kept::default());
}

impl<T: Clone + Default + 'static> brotli::Allocator<T> for RecyclingAlloc {
    type AllocatedMemory = Recycled<T>;

    fn alloc_cell(&mut self, len: usize) -> Recycled<T> {
        let key = (TypeId::of::<T>(), len);
        let kept = KEPT.with_borrow_mut(|kept| {
            let buffer = kept.buffers.get_mut(&key)?.pop()?;
            kept.bytes -= len * std::mem::size_of::<T>();
            buffer.downcast::<Box<[T]>>().ok()
        });
        match kept {
            Some(mut buffer) => {
                buffer.fill(T::default());
                Recycled(*buffer)
            }
            None => Recycled(vec![T::default(); len].into_boxed_slice()),
        }
    }

    fn free_cell(&mut self, data: Recycled<T>) {
        let len = data.0.len();
        let size = len * std::mem::size_of::<T>();
        if len == 0 {
            return;
        }
        KEPT.with_borrow_mut(|kept| {
            if kept.bytes + size <= KEPT_MAX {
                kept.bytes += size;
                let key = (TypeId::of::<T>(), len);
                kept.buffers.entry(key).or_default().push(Box::new(data.0));
            }
        });
    }
}

impl brotli::enc::BrotliAlloc for RecyclingAlloc {}
