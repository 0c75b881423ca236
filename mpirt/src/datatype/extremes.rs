//! Property tests of datatypes built from extreme counts, strides and displacements: each is
//! refused by name exactly where a quantity of its type map would pass `isize::MAX` bytes, and
//! one that is accepted is packed and unpacked through views without a byte outside them read
//! or written. proptest draws the values (a mix of small ones and ones near the limits of
//! `Count` and `Address`), since the wraps hide in combinations no list of cases covers.
//!
//! The model here computes MPI's type map in `i128`, where nothing wraps, independent of
//! `layout.rs`.

use std::panic::{self, AssertUnwindSafe};

use proptest::prelude::*;

use super::pack::{pack_into, unpack_into};
use super::{Equivalence, MutView, UncommittedDatatype, UserDatatype, View};
use crate::point_to_point::Count;

const MAX: i128 = isize::MAX as i128;

/// The most type-map entries a case may have for its datatype to be built and moved: more
/// would only test the block limit, and slowly.
const ENTRIES: i128 = 4096;

/// MPI's type map of a datatype, in `i128`: bounds, data size and, when few, the entries.
#[derive(Clone, Debug)]
struct Model {
    /// `None` for an empty type map.
    bounds: Option<(i128, i128)>,
    end: i128,
    size: i128,
    entries: i128,
    /// (offset, length) in type-map order, where `entries <= ENTRIES`.
    map: Vec<(i128, i128)>,
    /// Whether some quantity passed `isize::MAX` on the way.
    too_large: bool,
}

impl Model {
    fn basic(size: i128) -> Model {
        Model {
            bounds: Some((0, size)),
            end: size,
            size,
            entries: 1,
            map: vec![(0, size)],
            too_large: false,
        }
    }

    fn empty() -> Model {
        Model {
            bounds: None,
            end: 0,
            size: 0,
            entries: 0,
            map: Vec::new(),
            too_large: false,
        }
    }

    fn extent(&self) -> i128 {
        self.bounds.map_or(0, |(lower, upper)| upper - lower)
    }

    /// Blocks of `lengths[k]` elements of `old` at byte `displacements[k]` (`hindexed`;
    /// `hvector` is its regular case).
    fn blocks(old: &Model, lengths: &[i128], displacements: &[i128]) -> Model {
        let mut model = Model::empty();
        model.too_large = old.too_large;
        let extent = old.extent();
        for (&length, &displacement) in lengths.iter().zip(displacements) {
            let Some((lower, upper)) = old.bounds.filter(|_| length > 0) else {
                continue;
            };
            let last = displacement + (length - 1) * extent;
            let block = (displacement + lower, last + upper);
            model.bounds = Some(match model.bounds {
                None => block,
                Some((l, u)) => (l.min(block.0), u.max(block.1)),
            });
            model.end = model.end.max(last + old.end);
            model.size += length * old.size;
            model.entries += length * old.entries;
            model.too_large |= [last + upper, last + old.end, model.size]
                .iter()
                .any(|&bytes| bytes > MAX);
            if model.entries <= ENTRIES {
                for i in 0..length {
                    let base = displacement + i * extent;
                    model
                        .map
                        .extend(old.map.iter().map(|&(o, l)| (base + o, l)));
                }
            }
        }
        model
    }

    fn vector(old: &Model, count: i128, blocklength: i128, stride: i128) -> Model {
        if blocklength == 0 || old.bounds.is_none() {
            return Model {
                too_large: old.too_large,
                ..Model::empty()
            };
        }
        let displacements: Vec<i128> = (0..count.min(2)).map(|i| i * stride).collect();
        if count <= 2 {
            return Model::blocks(old, &vec![blocklength; count as usize], &displacements);
        }
        // Only the first and last blocks set the bounds; the entries are listed when few.
        let mut model = Model::blocks(old, &[blocklength, blocklength], &[0, (count - 1) * stride]);
        model.size = count * blocklength * old.size;
        model.entries = count * blocklength * old.entries;
        model.too_large |= model.size > MAX;
        model.map = match model.entries <= ENTRIES {
            true => {
                Model::blocks(
                    old,
                    &vec![blocklength; count as usize],
                    &(0..count).map(|i| i * stride).collect::<Vec<_>>(),
                )
                .map
            }
            false => Vec::new(),
        };
        model
    }

    /// Bytes `count` elements reach from the buffer's start.
    fn span(&self, count: i128) -> i128 {
        match (count, self.bounds) {
            (0, _) | (_, None) => 0,
            _ => (count - 1) * self.extent() + self.end,
        }
    }
}

/// A datatype to build: a basic one, or blocks of another.
#[derive(Clone, Debug)]
enum Shape {
    Basic(usize),
    Vector {
        count: Count,
        blocklength: Count,
        stride: isize,
        old: Box<Shape>,
    },
    Indexed {
        lengths: Vec<Count>,
        displacements: Vec<isize>,
        old: Box<Shape>,
    },
}

impl Shape {
    fn model(&self) -> Model {
        match self {
            Shape::Basic(size) => Model::basic(*size as i128),
            Shape::Vector {
                count,
                blocklength,
                stride,
                old,
            } => Model::vector(
                &old.model(),
                *count as i128,
                *blocklength as i128,
                *stride as i128,
            ),
            Shape::Indexed {
                lengths,
                displacements,
                old,
            } => {
                let lengths: Vec<i128> = lengths.iter().map(|&l| l as i128).collect();
                let displacements: Vec<i128> = displacements.iter().map(|&d| d as i128).collect();
                Model::blocks(&old.model(), &lengths, &displacements)
            }
        }
    }

    fn build(&self) -> UserDatatype {
        match self {
            Shape::Basic(1) => UserDatatype::contiguous(1, &u8::equivalent_datatype()),
            Shape::Basic(4) => UserDatatype::contiguous(1, &u32::equivalent_datatype()),
            Shape::Basic(_) => UserDatatype::contiguous(1, &f64::equivalent_datatype()),
            Shape::Vector {
                count,
                blocklength,
                stride,
                old,
            } => UserDatatype::heterogeneous_vector(*count, *blocklength, *stride, &old.build()),
            Shape::Indexed {
                lengths,
                displacements,
                old,
            } => UserDatatype::heterogeneous_indexed(lengths, displacements, &old.build()),
        }
    }
}

fn count() -> impl Strategy<Value = Count> {
    prop_oneof![
        0..4 as Count,
        Just(1 << 20),
        Just(1 << 30),
        Just(Count::MAX)
    ]
}

fn bytes() -> impl Strategy<Value = isize> {
    prop_oneof![
        0..64isize,
        Just(1 << 31),
        Just(1 << 40),
        Just(1 << 61),
        Just(1 << 62),
        Just(isize::MAX / 3),
        Just(isize::MAX - 7),
        Just(isize::MAX),
    ]
}

fn shape() -> impl Strategy<Value = Shape> {
    let basic = prop_oneof![Just(1usize), Just(4), Just(8)].prop_map(Shape::Basic);
    basic.prop_recursive(2, 8, 3, |old| {
        prop_oneof![
            (count(), count(), bytes(), old.clone()).prop_map(
                |(count, blocklength, stride, old)| {
                    Shape::Vector {
                        count,
                        blocklength,
                        stride,
                        old: Box::new(old),
                    }
                }
            ),
            (prop::collection::vec((count(), bytes()), 1..4), old).prop_map(|(blocks, old)| {
                let (lengths, displacements) = blocks.into_iter().unzip();
                Shape::Indexed {
                    lengths,
                    displacements,
                    old: Box::new(old),
                }
            }),
        ]
    })
}

/// Whether every datatype on the way to `shape` has few enough entries to be built.
fn buildable(shape: &Shape) -> bool {
    let model = shape.model();
    let inner = match shape {
        Shape::Basic(_) => true,
        Shape::Vector { old, .. } | Shape::Indexed { old, .. } => buildable(old),
    };
    inner && (model.too_large || model.entries <= ENTRIES)
}

/// The panic message of `f`, if it panicked.
fn refusal<T>(f: impl FnOnce() -> T) -> Option<String> {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(_) => None,
        Err(payload) => Some(
            payload
                .downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "a panic without a message".into()),
        ),
    }
}

proptest! {
    // Cases whose datatypes are accepted with millions of entries are drawn and skipped.
    #![proptest_config(ProptestConfig {
        cases: 2000,
        max_global_rejects: 20_000,
        ..ProptestConfig::default()
    })]

    #[test]
    fn extreme_datatypes_are_refused_or_stay_inside_their_buffers(
        shape in shape(),
        count in 0..4usize,
    ) {
        prop_assume!(buildable(&shape));
        let model = shape.model();
        let built = panic::catch_unwind(AssertUnwindSafe(|| shape.build()));
        let datatype = match (built, model.too_large) {
            (Err(payload), true) => {
                let message = payload.downcast_ref::<String>().cloned().unwrap_or_default();
                prop_assert!(
                    message.starts_with("UserDatatype::heterogeneous_")
                        && message.contains("would pass"),
                    "refused without naming the constructor and the limit: {message}"
                );
                return Ok(());
            }
            (Ok(_), true) => {
                return Err(TestCaseError::fail(format!("{model:?} was accepted")))
            }
            (Err(_), false) => {
                return Err(TestCaseError::fail(format!("{model:?} was refused")))
            }
            (Ok(datatype), false) => datatype,
        };
        let layout = datatype.descriptor().layout().expect("alive");
        prop_assert_eq!(layout.extent as i128, model.extent());
        prop_assert_eq!(layout.size as i128, model.size);
        let span = model.span(count as i128);
        prop_assert_eq!(layout.span(count).ok().map(|s| s as i128), (span <= MAX).then_some(span));

        // A buffer of the span and a guard after it: what a view may reach, and what it may not.
        let guard = 64;
        if span > 1 << 16 {
            let small = vec![0u8; guard];
            // SAFETY: a view refused before any use; one accepted would be a failure here.
            let view = refusal(|| unsafe {
                View::with_count_and_datatype(&small[..], count as Count, &datatype)
            });
            prop_assert!(view.is_some(), "a view spanning {span} bytes over {guard} was accepted");
            return Ok(());
        }
        let span = span as usize;
        let original: Vec<u8> = (0..span + guard).map(|i| (i * 7 + 3) as u8).collect();
        let mut memory = original.clone();
        if span > 0 {
            // SAFETY: as above.
            let short = refusal(|| unsafe {
                View::with_count_and_datatype(&memory[..span - 1], count as Count, &datatype)
            });
            prop_assert!(short.is_some(), "a view of {span} bytes over {} was accepted", span - 1);
        }
        let mut map = Vec::new();
        for i in 0..count as i128 {
            map.extend(model.map.iter().map(|&(o, l)| (i * model.extent() + o, l)));
        }
        // The model's pack, by indexing (which would panic outside the buffer).
        let expected: Vec<u8> = map
            .iter()
            .flat_map(|&(o, l)| memory[o as usize..(o + l) as usize].to_vec())
            .collect();
        let mut packed = vec![0u8; expected.len()];
        // SAFETY: the view was checked against the span; the bytes are initialized.
        let view = unsafe {
            View::with_count_and_datatype(&memory[..span], count as Count, &datatype)
        };
        prop_assert_eq!(pack_into(&view, &mut packed, 0).map_err(|e| e.to_string()), Ok(expected.len() as Count));
        prop_assert_eq!(&packed, &expected);

        let overlaps = {
            let mut sorted = map.clone();
            sorted.sort();
            sorted.windows(2).any(|w| w[0].0 + w[0].1 > w[1].0)
        };
        prop_assert_eq!(layout.overlap(count).is_some(), overlaps);
        if overlaps {
            // SAFETY: a view refused before any use; one accepted would be a failure here.
            let view = refusal(|| unsafe {
                MutView::with_count_and_datatype(&mut memory[..span], count as Count, &datatype)
            });
            prop_assert!(view.is_some(), "a receive view of overlapping blocks was accepted");
            return Ok(());
        }
        let incoming: Vec<u8> = (0..expected.len()).map(|i| !(i as u8)).collect();
        {
            let (inside, _) = memory.split_at_mut(span);
            // SAFETY: as above; `u8`s take any value.
            let mut view = unsafe {
                MutView::with_count_and_datatype(inside, count as Count, &datatype)
            };
            prop_assert_eq!(unpack_into(&incoming, &mut view, 0).map_err(|e| e.to_string()), Ok(incoming.len() as Count));
        }
        let mut want = original.clone();
        let mut at = 0;
        for &(o, l) in &map {
            want[o as usize..(o + l) as usize].copy_from_slice(&incoming[at..at + l as usize]);
            at += l as usize;
        }
        prop_assert_eq!(memory, want);
    }
}
