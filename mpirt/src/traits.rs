//! The traits a program needs in scope: `use mpirt::traits::*;`.

pub use crate::attribute::CommAttribute;
pub use crate::collective::{CommunicatorCollectives, Operation, Root};
pub use crate::communicator::{AnyCommunicator, AsCommunicator, Communicator};
pub use crate::datatype::{
    Buffer, BufferMut, Equivalence, Partitioned, PartitionedBuffer, PartitionedBufferMut,
    UncommittedDatatype,
};
pub use crate::group::Group;
pub use crate::point_to_point::{Destination, ImmediateReceiveRaw, MatchedReceiveVec, Source};
pub use crate::request::Scope;
/// `#[derive(Equivalence)]`, in the macro namespace beside the trait of the same name.
pub use mpirt_derive::Equivalence;
