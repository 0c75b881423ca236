//! Guards that finish a request when they are dropped, as rsmpi's do; `From` converts between
//! them and requests.

use std::fmt;

use super::{Request, Scope, StaticScope};

/// Waits for its request when dropped.
// An `Option` only so that conversions can take the request out; a live guard holds one.
pub struct WaitGuard<'a, D: ?Sized, S: Scope<'a> = StaticScope>(Option<Request<'a, D, S>>);

impl<'a, D: ?Sized, S: Scope<'a>> Drop for WaitGuard<'a, D, S> {
    fn drop(&mut self) {
        if let Some(request) = self.0.take() {
            request.wait();
        }
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(request: Request<'a, D, S>) -> Self {
        WaitGuard(Some(request))
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<WaitGuard<'a, D, S>> for Request<'a, D, S> {
    fn from(mut guard: WaitGuard<'a, D, S>) -> Self {
        guard.0.take().expect("a guard holds its request")
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> fmt::Debug for WaitGuard<'a, D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("WaitGuard").field(&self.0).finish()
    }
}

/// Cancels its request, then waits for it, when dropped.
pub struct CancelGuard<'a, D: ?Sized, S: Scope<'a> = StaticScope>(Option<Request<'a, D, S>>);

impl<'a, D: ?Sized, S: Scope<'a>> Drop for CancelGuard<'a, D, S> {
    fn drop(&mut self) {
        if let Some(request) = self.0.take() {
            request.cancel();
            request.wait();
        }
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<Request<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(request: Request<'a, D, S>) -> Self {
        CancelGuard(Some(request))
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<WaitGuard<'a, D, S>> for CancelGuard<'a, D, S> {
    fn from(guard: WaitGuard<'a, D, S>) -> Self {
        CancelGuard(Some(Request::from(guard)))
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> From<CancelGuard<'a, D, S>> for WaitGuard<'a, D, S> {
    fn from(mut guard: CancelGuard<'a, D, S>) -> Self {
        WaitGuard(guard.0.take())
    }
}

impl<'a, D: ?Sized, S: Scope<'a>> fmt::Debug for CancelGuard<'a, D, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("CancelGuard").field(&self.0).finish()
    }
}
