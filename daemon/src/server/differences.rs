//! Logging, once, that an ensure asked a running sandbox for something it
//! does not run with (another task queue, caller class or token).
//!
//! Every execution ensures its sandbox, so a caller whose queue changed
//! would otherwise log the same line on every call. A difference is logged
//! when it is first seen for a runner generation, and again only when the
//! set of differing fields or the runner changes.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

/// The last difference logged, per sandbox base name.
#[derive(Debug, Default)]
pub struct DifferenceLog {
    seen: Mutex<HashMap<String, (u64, Vec<String>)>>,
}

impl DifferenceLog {
    /// True when this difference has not been logged yet (and now counts as logged).
    pub fn first_time(&self, base_name: &str, generation: u64, differs: &[String]) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        let entry = (generation, differs.to_vec());
        if seen.get(base_name) == Some(&entry) {
            return false;
        }
        seen.insert(base_name.to_string(), entry);
        true
    }

    /// The sandbox is gone: a later one of the same name starts afresh.
    pub fn forget(&self, base_name: &str) {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.remove(base_name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_difference_is_new_once_per_generation_and_set() {
        let log = DifferenceLog::default();
        let queue = vec!["task_queue".to_string()];
        assert!(log.first_time("sbx-a", 1, &queue));
        assert!(!log.first_time("sbx-a", 1, &queue));
        assert!(log.first_time("sbx-a", 2, &queue));
        log.forget("sbx-a");
        assert!(log.first_time("sbx-a", 2, &queue));
    }
}
