//! What a blocking call waits for, written once for every PML. Each PML keeps its own
//! `wait_until` (how it spins, yields and sleeps between rounds of progress); `wait`,
//! `wait_any` and the blocking probes are the same loop over different conditions.

use crate::error::PmlError;
use crate::pml_api::{Done, Pml};
use crate::requests::Handle;

pub(crate) trait Waiting: Pml + Sized {
    /// Progresses until `done` holds.
    fn wait_until(
        &mut self,
        done: impl FnMut(&mut Self) -> Result<bool, PmlError>,
    ) -> Result<(), PmlError>;

    /// Progresses until `found` finds something, and returns that.
    fn wait_for<T>(
        &mut self,
        mut found: impl FnMut(&mut Self) -> Result<Option<T>, PmlError>,
    ) -> Result<T, PmlError> {
        let mut result = None;
        self.wait_until(|p| {
            result = found(p)?;
            Ok(result.is_some())
        })?;
        Ok(result.expect("wait_until returns once found"))
    }

    /// Waits for the request and collects it.
    fn wait_collect(&mut self, h: Handle) -> Result<Done, PmlError> {
        self.wait_for(|p| p.collect(h))
    }

    /// Waits until any of `handles` finished; returns its index (not yet collected).
    fn wait_first(&mut self, handles: &[Handle]) -> Result<usize, PmlError> {
        self.wait_for(|p| {
            for (i, &h) in handles.iter().enumerate() {
                if p.is_complete(h)? {
                    return Ok(Some(i));
                }
            }
            Ok(None)
        })
    }
}
