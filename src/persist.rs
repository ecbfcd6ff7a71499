//! STUB (replaced by the `store` branch): grants.json persistence.
use std::path::{Path, PathBuf};

use crate::error::Error;
use crate::secret::Secret;

#[derive(Clone, Debug)]
pub struct StoredGrant {
    pub id: String,
    pub runtime: String,
    pub session: String,
    pub profile: String,
    pub principal: String,
    pub created_at: u64,
    pub expires_at: u64,
    pub secret: Secret,
}

#[derive(Debug, Default)]
pub struct LoadReport {
    pub grants: Vec<StoredGrant>,
    pub dropped: Vec<(String, String)>,
}

#[derive(Debug)]
pub struct GrantStore {
    path: PathBuf,
}

impl GrantStore {
    pub fn open(state_dir: &Path) -> Result<GrantStore, Error> {
        Ok(GrantStore {
            path: state_dir.join("grants.json"),
        })
    }
    pub fn load(&self, _now_unix: u64) -> LoadReport {
        let _ = &self.path;
        LoadReport::default()
    }
    pub fn save(&self, _grants: &[StoredGrant]) -> Result<(), Error> {
        Ok(())
    }
}
