//! What an accumulate does at its target: one of the built-in operations, replace, or
//! no-op, over elements of a primitive type; and the codes both travel under.

use crate::collective::{Operation, SystemOperation};
use crate::datatype::{datatype_of, Datatype};
use crate::error::Cause;

/// The operation of an accumulate (`MPI_Op` in `MPI_Accumulate`): a built-in reduction,
/// `Replace` (`MPI_REPLACE`: the origin's value is stored) or `NoOp` (`MPI_NO_OP`: nothing
/// is stored; with `get_accumulate` or `fetch_and_op`, an atomic read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccumulateOperation {
    System(SystemOperation),
    Replace,
    NoOp,
}

impl From<SystemOperation> for AccumulateOperation {
    fn from(op: SystemOperation) -> Self {
        AccumulateOperation::System(op)
    }
}

/// The built-in operations in code order.
fn builtins() -> [SystemOperation; 10] {
    [
        SystemOperation::sum(),
        SystemOperation::product(),
        SystemOperation::min(),
        SystemOperation::max(),
        SystemOperation::logical_and(),
        SystemOperation::logical_or(),
        SystemOperation::logical_xor(),
        SystemOperation::bitwise_and(),
        SystemOperation::bitwise_or(),
        SystemOperation::bitwise_xor(),
    ]
}

const REPLACE: u8 = 100;
const NO_OP: u8 = 101;

impl AccumulateOperation {
    pub(super) fn code(self) -> u8 {
        match self {
            AccumulateOperation::System(op) => builtins()
                .iter()
                .position(|b| *b == op)
                .expect("every SystemOperation is a built-in")
                as u8,
            AccumulateOperation::Replace => REPLACE,
            AccumulateOperation::NoOp => NO_OP,
        }
    }

    pub(super) fn from_code(code: u8) -> Option<AccumulateOperation> {
        match code {
            REPLACE => Some(AccumulateOperation::Replace),
            NO_OP => Some(AccumulateOperation::NoOp),
            _ => builtins()
                .get(code as usize)
                .map(|&op| AccumulateOperation::System(op)),
        }
    }

    /// Checks, at the origin, that the operation is defined for `datatype`.
    pub(super) fn check(self, datatype: Datatype) -> Result<(), Cause> {
        match self {
            AccumulateOperation::System(op) => op.check(datatype),
            AccumulateOperation::Replace | AccumulateOperation::NoOp => Ok(()),
        }
    }

    /// `target = incoming ∘ target`, element by element, for a datatype `check` accepted.
    pub(super) fn apply(self, datatype: Datatype, incoming: &[u8], target: &mut [u8]) {
        match self {
            AccumulateOperation::System(op) => op.apply(datatype, incoming, target),
            AccumulateOperation::Replace => target.copy_from_slice(incoming),
            AccumulateOperation::NoOp => {}
        }
    }
}

/// The primitive types accumulates know, in code order.
fn elements() -> [Datatype; 12] {
    [
        datatype_of::<i8>(),
        datatype_of::<i16>(),
        datatype_of::<i32>(),
        datatype_of::<i64>(),
        datatype_of::<u8>(),
        datatype_of::<u16>(),
        datatype_of::<u32>(),
        datatype_of::<u64>(),
        datatype_of::<f32>(),
        datatype_of::<f64>(),
        datatype_of::<bool>(),
        datatype_of::<i128>(),
    ]
}

/// The code of a primitive element type, or `None` for a type accumulates do not know.
pub(super) fn element_code(datatype: Datatype) -> Option<u8> {
    elements()
        .iter()
        .position(|d| *d == datatype)
        .map(|i| i as u8)
}

/// Whether the element type of `code` is an integer type of at most 8 bytes (the first eight
/// of `elements`).
pub(super) fn is_integer(code: u8) -> bool {
    code < 8
}

pub(super) fn element_of(code: u8) -> Option<Datatype> {
    elements().get(code as usize).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for op in builtins()
            .map(AccumulateOperation::System)
            .into_iter()
            .chain([AccumulateOperation::Replace, AccumulateOperation::NoOp])
        {
            assert_eq!(AccumulateOperation::from_code(op.code()), Some(op));
        }
        for datatype in elements() {
            assert_eq!(element_of(element_code(datatype).unwrap()), Some(datatype));
        }
        assert_eq!(AccumulateOperation::from_code(50), None);
        assert_eq!(element_code(datatype_of::<char>()), None);
        let integers = elements().map(|d| is_integer(element_code(d).unwrap()));
        assert_eq!(integers.iter().filter(|&&i| i).count(), 8);
        assert!(!is_integer(element_code(datatype_of::<f64>()).unwrap()));
        assert!(!is_integer(element_code(datatype_of::<bool>()).unwrap()));
    }

    #[test]
    fn operations_apply_elementwise() {
        let mut target = 5u32.to_ne_bytes();
        AccumulateOperation::System(SystemOperation::sum()).apply(
            datatype_of::<u32>(),
            &7u32.to_ne_bytes(),
            &mut target,
        );
        assert_eq!(u32::from_ne_bytes(target), 12);
        AccumulateOperation::Replace.apply(datatype_of::<u32>(), &3u32.to_ne_bytes(), &mut target);
        assert_eq!(u32::from_ne_bytes(target), 3);
        AccumulateOperation::NoOp.apply(datatype_of::<u32>(), &9u32.to_ne_bytes(), &mut target);
        assert_eq!(u32::from_ne_bytes(target), 3);
    }
}
