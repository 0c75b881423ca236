//! Request storage: a slab whose handles carry a generation, so that a handle kept after its
//! request completed is an error rather than a silent alias of whatever reused the slot.

use std::fmt;

use slab::Slab;

/// Names one request. On the wire it travels as a `u64` that is never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Handle {
    index: u32,
    generation: u32,
}

impl Handle {
    /// A send that completed as it was posted and left no request behind. No slab handle
    /// equals it: their generations are never 0.
    pub const SENT: Handle = Handle {
        index: u32::MAX,
        generation: 0,
    };

    pub fn to_wire(self) -> u64 {
        (u64::from(self.generation) << 32) | u64::from(self.index)
    }

    pub fn from_wire(id: u64) -> Handle {
        Handle {
            index: id as u32,
            generation: (id >> 32) as u32,
        }
    }
}

impl fmt::Display for Handle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}.{}", self.index, self.generation)
    }
}

/// A handle that names no live request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StaleHandle(pub Handle);

pub struct Requests<T> {
    slab: Slab<(u32, T)>,
    /// Starts at 1 and skips 0 on wrap, so that no handle's wire form is 0.
    next_generation: u32,
}

impl<T> Default for Requests<T> {
    fn default() -> Self {
        Requests {
            slab: Slab::new(),
            next_generation: 1,
        }
    }
}

impl<T> Requests<T> {
    pub fn insert(&mut self, value: T) -> Handle {
        self.insert_with(|_| value)
    }

    /// Inserts a value that needs its own handle (a receive posted under it, say).
    #[inline]
    pub fn insert_with(&mut self, make: impl FnOnce(Handle) -> T) -> Handle {
        let generation = self.next_generation;
        self.next_generation = self.next_generation.checked_add(1).unwrap_or(1);
        let h = Handle {
            index: u32::try_from(self.slab.vacant_key()).expect("more than 2^32 live requests"),
            generation,
        };
        // The slab fills the key it reported vacant; its `VacantEntry`, which says so in the
        // types, cost a posted receive 24 instructions more (callgrind).
        let key = self.slab.insert((generation, make(h)));
        debug_assert_eq!(key, h.index as usize);
        h
    }

    #[inline]
    pub fn get(&self, h: Handle) -> Result<&T, StaleHandle> {
        match self.slab.get(h.index as usize) {
            Some((g, v)) if *g == h.generation => Ok(v),
            _ => Err(StaleHandle(h)),
        }
    }

    #[inline]
    pub fn get_mut(&mut self, h: Handle) -> Result<&mut T, StaleHandle> {
        match self.slab.get_mut(h.index as usize) {
            Some((g, v)) if *g == h.generation => Ok(v),
            _ => Err(StaleHandle(h)),
        }
    }

    /// Removes the value if `ready` accepts it, finding it once either way.
    #[inline]
    pub fn remove_if(
        &mut self,
        h: Handle,
        ready: impl FnOnce(&T) -> bool,
    ) -> Result<Option<T>, StaleHandle> {
        match self.slab.get(h.index as usize) {
            Some((g, v)) if *g == h.generation => {
                if !ready(v) {
                    return Ok(None);
                }
            }
            _ => return Err(StaleHandle(h)),
        }
        Ok(Some(self.slab.remove(h.index as usize).1))
    }

    pub fn remove(&mut self, h: Handle) -> Result<T, StaleHandle> {
        self.get(h)?;
        Ok(self.slab.remove(h.index as usize).1)
    }

    /// Every live request, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.slab.iter().map(|(_, (_, value))| value)
    }

    pub fn len(&self) -> usize {
        self.slab.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stale_handle_never_reaches_the_new_occupant() {
        let mut r: Requests<&str> = Requests::default();
        let a = r.insert("a");
        assert_eq!(r.remove(a), Ok("a"));
        let b = r.insert("b");
        assert_eq!(r.get(a), Err(StaleHandle(a)));
        assert_eq!(r.get(b), Ok(&"b"));
        assert_eq!(Handle::from_wire(b.to_wire()), b);
        assert_ne!(b.to_wire(), 0);
    }

    #[test]
    fn remove_if_takes_only_what_is_ready() {
        let mut r: Requests<u32> = Requests::default();
        let h = r.insert(7);
        assert_eq!(r.remove_if(h, |&v| v > 7), Ok(None));
        assert_eq!(r.get(h), Ok(&7));
        assert_eq!(r.remove_if(h, |&v| v == 7), Ok(Some(7)));
        assert_eq!(r.remove_if(h, |_| true), Err(StaleHandle(h)));
    }

    #[test]
    fn generation_skips_zero_on_wrap() {
        let mut r: Requests<()> = Requests {
            slab: Slab::new(),
            next_generation: u32::MAX,
        };
        let last = r.insert(());
        let wrapped = r.insert(());
        assert_eq!(last.generation, u32::MAX);
        assert_eq!(wrapped.generation, 1);
    }
}
