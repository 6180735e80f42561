//! Saved comparisons as stored: one small JSON object per comparison in
//! the object store, under `comparisons/<tenant>/<project>/<name>.json`.
//!
//! Why the object store and not a table of the `MetadataStore`: a saved
//! comparison is a few hundred bytes read whole, by name or as the
//! project's list, never searched, and an object per comparison needs no
//! schema or migration in both metadata stores (embedded and PostgreSQL)
//! while every role that serves queries already holds the object store.
//! One object per comparison rather than one per tenant: two nodes saving
//! two comparisons at once cannot lose one of them (a single object would
//! be read, changed and written back by both). The key is the scope's, as
//! segments' are (`segments/<tenant>/<project>/`), so a key's comparisons
//! are those of its own project and no other.

use std::collections::BTreeMap;

use kiln_storage::{ObjectKey, ObjectStore, Scope};
use serde::{Deserialize, Serialize};

use crate::http::error::ApiError;

/// Saved comparisons a project keeps at most: each runs at every scrape
/// of `/api/v1/comparisons/metrics` (two full queries), so the bound is
/// also that of a scrape's work.
pub(crate) const MAX_PER_PROJECT: usize = 50;
/// Longest name, in bytes.
pub(crate) const MAX_NAME_LEN: usize = 64;
/// Parameters a saved comparison has at most, and the longest of each.
const MAX_PARAMS: usize = 32;
const MAX_PARAM_LEN: usize = 1024;
/// The name that is a route of its own (`/api/v1/comparisons/metrics`).
const RESERVED_NAME: &str = "metrics";

/// One saved comparison: its name and the parameters of
/// `GET /api/v1/compare` it runs with (relative times such as `now-1h`
/// kept as text, resolved at each run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SavedComparison {
    /// Its name, unique in its project.
    pub name: String,
    /// The compare parameters (`base.version` → `1.4`, `from` → `now-1d`).
    pub params: BTreeMap<String, String>,
    /// When it was saved, ns since the epoch.
    pub created_ns: i64,
}

/// Checks a comparison's name: 1 to [`MAX_NAME_LEN`] ASCII letters,
/// digits, `_`, `-` and `.`, starting with a letter or digit (so it is a
/// path segment, an object key's segment and a Prometheus label value
/// as it is), and not `metrics`.
pub(crate) fn check_name(name: &str) -> Result<(), ApiError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if !valid {
        return Err(ApiError::bad_request(format!(
            "name: {name:?} is not a comparison name (1 to {MAX_NAME_LEN} letters, digits, '_', \
             '-' and '.', starting with a letter or digit)"
        )));
    }
    if name == RESERVED_NAME {
        return Err(ApiError::bad_request(format!(
            "name: {RESERVED_NAME:?} is reserved (GET /api/v1/comparisons/metrics is the \
             comparisons' metrics)"
        )));
    }
    Ok(())
}

/// Checks the size of a comparison's parameters and that it leaves the
/// answer's format to whoever reads it (their meaning is checked by
/// parsing them as `GET /api/v1/compare` does).
pub(crate) fn check_params(params: &BTreeMap<String, String>) -> Result<(), ApiError> {
    if params.len() > MAX_PARAMS {
        return Err(ApiError::bad_request(format!(
            "params: {} parameters, at most {MAX_PARAMS}",
            params.len()
        )));
    }
    if let Some((name, _)) = params
        .iter()
        .find(|(k, v)| k.len() > MAX_PARAM_LEN || v.len() > MAX_PARAM_LEN)
    {
        let name: String = name.chars().take(64).collect();
        return Err(ApiError::bad_request(format!(
            "params: {name:?} or its value is over {MAX_PARAM_LEN} bytes"
        )));
    }
    if params.contains_key("format") {
        return Err(ApiError::bad_request(
            "params: format is not saved; ask for it when reading the result \
             (GET /api/v1/comparisons/{name}/result?format=text)",
        ));
    }
    Ok(())
}

/// The saved comparisons of one scope, in `objects`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SavedComparisons<'a> {
    objects: &'a dyn ObjectStore,
    scope: &'a Scope,
}

/// Serializes saves in this process, so that two saves at once cannot
/// both pass the count. Saves on different query nodes can still
/// overshoot [`MAX_PER_PROJECT`] by one per node at most, which bounds it
/// well enough; saves are rare, people make them.
static SAVING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

impl<'a> SavedComparisons<'a> {
    /// `scope`'s comparisons in `objects`.
    pub(crate) fn new(objects: &'a dyn ObjectStore, scope: &'a Scope) -> Self {
        SavedComparisons { objects, scope }
    }

    /// Every saved comparison of the scope, by name. One that vanished
    /// between the listing and its read is left out.
    pub(crate) async fn list(&self) -> Result<Vec<SavedComparison>, ApiError> {
        let mut saved = Vec::new();
        for key in self.objects.list(&self.prefix()).await? {
            if let Some(comparison) = self.read(&key).await? {
                saved.push(comparison);
            }
        }
        Ok(saved)
    }

    /// The comparison named `name`, if saved.
    pub(crate) async fn get(&self, name: &str) -> Result<Option<SavedComparison>, ApiError> {
        check_name(name)?;
        self.read(&self.key(name)?).await
    }

    /// Saves `comparison`: 409 when its name is taken or the scope holds
    /// [`MAX_PER_PROJECT`] already.
    pub(crate) async fn create(&self, comparison: &SavedComparison) -> Result<(), ApiError> {
        check_name(&comparison.name)?;
        let key = self.key(&comparison.name)?;
        let _saving = SAVING.lock().await;
        if self.objects.exists(&key).await? {
            return Err(ApiError::Conflict(format!(
                "a comparison named {:?} exists already; delete it first \
                 (DELETE /api/v1/comparisons/{})",
                comparison.name, comparison.name
            )));
        }
        let count = self.objects.list(&self.prefix()).await?.len();
        if count >= MAX_PER_PROJECT {
            return Err(ApiError::Conflict(format!(
                "this project has {count} saved comparisons, the most it may keep is \
                 {MAX_PER_PROJECT}; delete one (DELETE /api/v1/comparisons/NAME) to save another"
            )));
        }
        // Strings and a map of strings: JSON encodes them whatever they hold.
        let bytes = serde_json::to_vec(comparison).expect("strings encode as JSON");
        self.objects.put(&key, bytes.into()).await?;
        Ok(())
    }

    /// Deletes the comparison named `name`: `false` when none was saved.
    pub(crate) async fn delete(&self, name: &str) -> Result<bool, ApiError> {
        check_name(name)?;
        let key = self.key(name)?;
        if !self.objects.exists(&key).await? {
            return Ok(false);
        }
        self.objects.delete(&key).await?;
        Ok(true)
    }

    /// The comparison under `key`. One that does not decode (a damaged
    /// disk) is logged and read as absent: listing and scraping go on
    /// without it, and deleting it by name removes it.
    async fn read(&self, key: &ObjectKey) -> Result<Option<SavedComparison>, ApiError> {
        let Some(bytes) = self.objects.get(key).await? else {
            return Ok(None);
        };
        match serde_json::from_slice(&bytes) {
            Ok(comparison) => Ok(Some(comparison)),
            Err(error) => {
                tracing::warn!(%key, %error, "a saved comparison does not decode; skipped");
                Ok(None)
            }
        }
    }

    /// `comparisons/<tenant>/<project>/`.
    fn prefix(&self) -> String {
        format!(
            "comparisons/{}/{}/",
            self.scope.tenant(),
            self.scope.project()
        )
    }

    fn key(&self, name: &str) -> Result<ObjectKey, ApiError> {
        Ok(ObjectKey::new(&format!("{}{name}.json", self.prefix()))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_path_segments_and_label_values() {
        for good in ["api-1.5", "a", "Watch_v2", &"x".repeat(MAX_NAME_LEN)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".hidden",
            "-x",
            "a/b",
            "a b",
            "é",
            "metrics",
            &"x".repeat(MAX_NAME_LEN + 1),
        ] {
            let e = check_name(bad).unwrap_err().to_string();
            assert!(e.starts_with("name: "), "{bad}: {e}");
        }
    }

    #[test]
    fn params_are_bounded_and_leave_the_format_out() {
        let params = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert!(check_params(&params(&[("base.version", "1.4")])).is_ok());
        let e = check_params(&params(&[("format", "text")])).unwrap_err();
        assert!(e.to_string().contains("format is not saved"), "{e}");
        let long = "v".repeat(MAX_PARAM_LEN + 1);
        assert!(check_params(&params(&[("base.version", &long)])).is_err());
        let many: BTreeMap<String, String> = (0..=MAX_PARAMS)
            .map(|i| (format!("l{i}"), "v".into()))
            .collect();
        assert!(check_params(&many).is_err());
    }
}
