//! Attributes cached on communicators (`MPI_Comm_set_attr`), keyed by their Rust type as in
//! rsmpi: [`CommAttribute`] marks a type that can be cached, and
//! [`AnyCommunicator`](crate::communicator::AnyCommunicator) sets and gets it.
//!
//! The values live in the communicator handle they were set on: they drop with it, a
//! [`duplicate`](crate::communicator::Communicator::duplicate) copies those whose type says
//! [`CommAttribute::CLONE_ON_DUP`], and a clone of the handle copies them all. rsmpi hands out
//! a reference to a value that another handle of the same MPI communicator (a second
//! `universe.world()`) may replace and free while the reference lives; here `set_attr` needs
//! the handle mutably, so the borrow checker rules that out.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;

/// The key an attribute type is cached under (`MPI_Comm_create_keyval`): one per type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct AttributeKey(u32);

impl AttributeKey {
    /// The key of `A`, made the first time it is asked for.
    fn of<A: 'static>() -> AttributeKey {
        static KEYS: Mutex<Option<HashMap<TypeId, u32>>> = Mutex::new(None);
        // A panic elsewhere while the map was locked leaves it whole: keys are only added.
        let mut keys = KEYS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let keys = keys.get_or_insert_with(HashMap::new);
        let next = keys.len() as u32;
        AttributeKey(*keys.entry(TypeId::of::<A>()).or_insert(next))
    }
}

/// A type whose values can be cached on a communicator (rsmpi's `CommAttribute`).
///
/// ```no_run
/// use mpirt::traits::*;
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct Tuning(u32);
/// impl CommAttribute for Tuning {
///     const CLONE_ON_DUP: bool = true;
/// }
///
/// let universe = mpirt::initialize().unwrap();
/// let mut world = universe.world();
/// world.set_attr(Tuning(4));
/// let copy = world.duplicate();
/// assert_eq!(copy.get_attr::<Tuning>(), Some(&Tuning(4)));
/// ```
pub trait CommAttribute: 'static + Sized + Clone {
    /// Whether a duplicate of the communicator gets a clone of the value
    /// (`MPI_COMM_DUP_FN`); otherwise it starts without one (`MPI_COMM_NULL_COPY_FN`).
    const CLONE_ON_DUP: bool = false;

    /// The key values of this type are cached under.
    fn get_key() -> AttributeKey {
        AttributeKey::of::<Self>()
    }
}

/// A cached value, its type erased.
trait Stored: Any {
    fn clone_stored(&self) -> Box<dyn Stored>;
    fn clone_on_duplicate(&self) -> bool;
    fn as_any(&self) -> &dyn Any;
}

impl<A: CommAttribute> Stored for A {
    fn clone_stored(&self) -> Box<dyn Stored> {
        Box::new(self.clone())
    }
    fn clone_on_duplicate(&self) -> bool {
        A::CLONE_ON_DUP
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The attributes of one communicator handle.
#[doc(hidden)]
#[derive(Default)]
pub struct Attributes {
    entries: Vec<(AttributeKey, Box<dyn Stored>)>,
}

impl Attributes {
    /// The value cached under `A`'s key, if it is an `A` (a `get_key` shared by two types
    /// finds the other's value as absent, never as the wrong type).
    pub(crate) fn get<A: CommAttribute>(&self) -> Option<&A> {
        let key = A::get_key();
        let (_, value) = self.entries.iter().find(|(k, _)| *k == key)?;
        value.as_any().downcast_ref()
    }

    /// Caches `value`, dropping the value it replaces.
    pub(crate) fn set<A: CommAttribute>(&mut self, value: A) {
        let key = A::get_key();
        let value: Box<dyn Stored> = Box::new(value);
        match self.entries.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.entries.push((key, value)),
        }
    }

    /// What a duplicate of the communicator starts with.
    pub(crate) fn for_duplicate(&self) -> Attributes {
        let entries = self.entries.iter().filter(|(_, v)| v.clone_on_duplicate());
        Attributes {
            entries: entries.map(|(k, v)| (*k, v.clone_stored())).collect(),
        }
    }
}

impl Clone for Attributes {
    fn clone(&self) -> Attributes {
        Attributes {
            entries: self
                .entries
                .iter()
                .map(|(k, v)| (*k, v.clone_stored()))
                .collect(),
        }
    }
}

impl fmt::Debug for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|(k, _)| k))
            .finish()
    }
}

/// The attribute traits: `use mpirt::attribute::traits::*;`.
pub mod traits {
    pub use super::CommAttribute;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::rc::Rc;

    #[derive(Clone, Debug, PartialEq)]
    struct Copied(i32);
    impl CommAttribute for Copied {
        const CLONE_ON_DUP: bool = true;
    }

    /// Counts its drops in a shared cell.
    #[derive(Clone)]
    struct Counted(Rc<Cell<u32>>);
    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }
    impl CommAttribute for Counted {}

    #[test]
    fn values_are_kept_per_type_replaced_and_dropped() {
        let drops = Rc::new(Cell::new(0));
        let mut attributes = Attributes::default();
        attributes.set(Copied(1));
        attributes.set(Counted(drops.clone()));
        assert_eq!(attributes.get::<Copied>(), Some(&Copied(1)));
        attributes.set(Counted(drops.clone()));
        assert_eq!(drops.get(), 1, "the replaced value drops");
        let duplicate = attributes.for_duplicate();
        assert_eq!(duplicate.get::<Copied>(), Some(&Copied(1)));
        assert!(duplicate.get::<Counted>().is_none());
        let clone = attributes.clone();
        assert!(clone.get::<Counted>().is_some());
        drop((attributes, clone, duplicate));
        assert_eq!(drops.get(), 3);
        assert_ne!(Copied::get_key(), Counted::get_key());
        assert_eq!(Copied::get_key(), Copied::get_key());
    }
}
