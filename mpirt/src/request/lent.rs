//! The buffer a request lends the messaging layer, handed back when the operation is over.

use std::marker::PhantomData;
use std::ptr::NonNull;

/// A request's buffer, borrowed for `'a`: kept as a pointer rather than a reference, since the
/// messaging layer may write a receive buffer while the request is in flight, and no
/// reference to it may live meanwhile.
pub(crate) struct Lent<'a, D: ?Sized> {
    ptr: NonNull<D>,
    _borrow: PhantomData<&'a D>,
}

impl<'a, D: ?Sized> Lent<'a, D> {
    /// A buffer the operation only reads (a send's).
    #[inline]
    pub fn shared(data: &'a D) -> Self {
        Lent {
            ptr: NonNull::from(data),
            _borrow: PhantomData,
        }
    }

    /// A buffer the operation writes (a receive's), and what `set_up` makes of it: where the
    /// messaging layer should write. Those pointers stay valid while the request is in
    /// flight, since the request keeps the pointer they were made from, and nothing else
    /// borrows the buffer until [`get`](Self::get).
    #[inline]
    pub fn exclusive<R>(data: &'a mut D, set_up: impl FnOnce(&mut D) -> R) -> (Self, R) {
        let mut ptr = NonNull::from(data);
        // SAFETY: `ptr` comes from the `&'a mut` this call took, so the reference made here
        // is the only one to the buffer; it ends when `set_up` returns, but what `set_up`
        // derived from it (where the messaging layer writes) stays in use until the request
        // is over: the `&'a mut` stays lent to the request meanwhile, and nothing makes a
        // reference to the buffer before `get`.
        let made = set_up(unsafe { ptr.as_mut() });
        let lent = Lent {
            ptr,
            _borrow: PhantomData,
        };
        (lent, made)
    }

    /// The buffer, back from the messaging layer.
    ///
    /// # Safety
    /// The operation the buffer was lent to must be over: nothing writes it any more.
    #[inline]
    pub unsafe fn get(self) -> &'a D {
        // SAFETY: the pointer came from a reference valid for `'a` (`shared`, `exclusive`),
        // and the caller says the operation that may have written through it is over; an
        // `exclusive` buffer's `&'a mut` was given up, so no other reference can exist.
        unsafe { self.ptr.as_ref() }
    }
}

impl<D: ?Sized> Clone for Lent<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: ?Sized> Copy for Lent<'_, D> {}
