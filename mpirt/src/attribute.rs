//! Attributes cached on communicators (`MPI_Comm_set_attr`), keyed by their Rust type as in
//! rsmpi: [`CommAttribute`] marks a type that can be cached, and
//! [`AnyCommunicator`](crate::communicator::AnyCommunicator) sets and gets it.
//!
//! The values belong to the communicator, as in MPI: every handle of it (a clone, a second
//! `universe.world()`) sees the same ones, a
//! [`duplicate`](crate::communicator::Communicator::duplicate) starts with clones of those whose
//! type says [`CommAttribute::CLONE_ON_DUP`] (MPI's copy callback), and they drop (MPI's delete
//! callback) when they are replaced or when the communicator's last handle drops.
//!
//! rsmpi hands out a reference to a value that another handle of the same communicator may
//! replace and free while the reference lives. Here a replaced value drops at once where no
//! reference to it can live: where it was never read since it was set, or where the setter's
//! handle owns the communicator and is its only one (borrowed mutably, so no reference into it
//! lives either). Otherwise it is kept, unreachable, until the communicator is freed or such a
//! sole handle sets a value, so that a reference another handle holds never dangles.

use std::any::{Any, TypeId};
use std::cell::{Cell, RefCell};
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

/// The attributes of one communicator, shared by its handles.
#[derive(Default)]
pub(crate) struct Attributes {
    cache: RefCell<Cache>,
}

#[derive(Default)]
struct Cache {
    entries: Vec<Entry>,
    /// Values replaced while another handle might hold a reference to them.
    retired: Vec<Box<dyn Stored>>,
}

struct Entry {
    key: AttributeKey,
    value: Box<dyn Stored>,
    /// Whether `get` handed out a reference to `value`: one never read cannot be referenced,
    /// so replacing it drops it at once (a loop setting a world attribute each step keeps
    /// nothing).
    read: Cell<bool>,
}

impl Attributes {
    /// Whether no value is cached, nor kept for a reference that may still live.
    pub(crate) fn is_empty(&self) -> bool {
        let cache = self.cache.borrow();
        cache.entries.is_empty() && cache.retired.is_empty()
    }

    /// The value cached under `A`'s key, if it is an `A` (a `get_key` shared by two types
    /// finds the other's value as absent, never as the wrong type).
    pub(crate) fn get<A: CommAttribute>(&self) -> Option<&A> {
        let key = A::get_key();
        let cache = self.cache.borrow();
        let entry = cache.entries.iter().find(|entry| entry.key == key)?;
        let value: *const A = entry.value.as_any().downcast_ref()?;
        entry.read.set(true);
        // SAFETY: the value is boxed, so it stays put while `entries` grows, and its box is
        // dropped only by `set` where no reference to it can live (see there) or with `self`,
        // which the returned reference borrows.
        Some(unsafe { &*value })
    }

    /// Caches `value`. The value it replaces drops at once where it was never read or where
    /// `sole_handle` says the caller's handle owns the communicator, is its only one and is
    /// borrowed mutably (so no reference from `get` lives); it is otherwise kept until the
    /// communicator is freed.
    pub(crate) fn set<A: CommAttribute>(&self, value: A, sole_handle: bool) {
        let key = A::get_key();
        let value: Box<dyn Stored> = Box::new(value);
        let mut cache = self.cache.borrow_mut();
        let replaced = match cache.entries.iter_mut().find(|entry| entry.key == key) {
            Some(entry) => Some((
                std::mem::replace(&mut entry.value, value),
                entry.read.replace(false),
            )),
            None => {
                cache.entries.push(Entry {
                    key,
                    value,
                    read: Cell::new(false),
                });
                None
            }
        };
        let mut dropped = if sole_handle {
            std::mem::take(&mut cache.retired)
        } else {
            Vec::new()
        };
        match replaced {
            Some((old, true)) if !sole_handle => cache.retired.push(old),
            old => dropped.extend(old.map(|(old, _)| old)),
        }
        // Dropped outside the borrow: a value's `Drop` may use the communicator's attributes.
        drop(cache);
        drop(dropped);
    }

    /// Fills a new duplicate's attributes from these (`MPI_Comm_dup`'s copy callbacks).
    pub(crate) fn copy_for_duplicate(&self, duplicate: &Attributes) {
        let copies: Vec<_> = self
            .cache
            .borrow()
            .entries
            .iter()
            .filter(|entry| entry.value.clone_on_duplicate())
            .map(|entry| Entry {
                key: entry.key,
                value: entry.value.clone_stored(),
                read: Cell::new(false),
            })
            .collect();
        duplicate.cache.borrow_mut().entries = copies;
    }
}

impl fmt::Debug for Attributes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.cache.borrow().entries.iter().map(|entry| entry.key))
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
        let attributes = Attributes::default();
        attributes.set(Copied(1), true);
        attributes.set(Counted(drops.clone()), true);
        assert_eq!(attributes.get::<Copied>(), Some(&Copied(1)));
        attributes.set(Counted(drops.clone()), true);
        assert_eq!(drops.get(), 1, "the replaced value drops");
        let duplicate = Attributes::default();
        attributes.copy_for_duplicate(&duplicate);
        assert_eq!(duplicate.get::<Copied>(), Some(&Copied(1)));
        assert!(duplicate.get::<Counted>().is_none());
        drop((attributes, duplicate));
        assert_eq!(drops.get(), 2);
        assert_ne!(Copied::get_key(), Counted::get_key());
        assert_eq!(Copied::get_key(), Copied::get_key());
    }

    #[test]
    fn a_value_replaced_beside_other_handles_outlives_their_references() {
        let drops = Rc::new(Cell::new(0));
        let attributes = Attributes::default();
        attributes.set(Copied(1), false);
        attributes.set(Counted(drops.clone()), false);
        let held = attributes.get::<Copied>().expect("set");
        assert!(attributes.get::<Counted>().is_some());
        attributes.set(Copied(2), false);
        attributes.set(Counted(drops.clone()), false);
        assert_eq!(
            held,
            &Copied(1),
            "still readable where another handle holds it"
        );
        assert_eq!(attributes.get::<Copied>(), Some(&Copied(2)));
        assert_eq!(drops.get(), 0, "kept while other handles may hold it");
        attributes.set(Counted(drops.clone()), true);
        assert_eq!(
            drops.get(),
            2,
            "dropped, with the one kept, once the setter is alone"
        );
        drop(attributes);
        assert_eq!(drops.get(), 3);
    }

    #[test]
    fn a_value_never_read_drops_when_replaced_even_beside_other_handles() {
        let drops = Rc::new(Cell::new(0));
        let attributes = Attributes::default();
        for step in 1..=100 {
            attributes.set(Counted(drops.clone()), false);
            assert_eq!(drops.get(), step - 1, "nothing kept at step {step}");
        }
        assert!(attributes.get::<Counted>().is_some());
        attributes.set(Counted(drops.clone()), false);
        assert_eq!(drops.get(), 99, "a value read is kept beside other handles");
        attributes.set(Counted(drops.clone()), false);
        assert_eq!(drops.get(), 100, "its unread successor is not");
    }
}
