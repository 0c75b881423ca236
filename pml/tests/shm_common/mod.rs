//! What the shared-memory tests share: a segment name that is removed even if a test fails
//! before every rank attached.

use std::path::Path;

use pml::transport::shm::unlink_segment;

pub struct Name(pub String);

impl Name {
    pub fn new(test: &str) -> Name {
        Name(format!("mpirt-test-{}-{test}", std::process::id()))
    }

    pub fn exists(&self) -> bool {
        Path::new("/dev/shm").join(&self.0).exists()
    }
}

impl Drop for Name {
    fn drop(&mut self) {
        let _ = unlink_segment(&self.0);
    }
}
