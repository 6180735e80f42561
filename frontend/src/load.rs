//! The state of something fetched from the API.

/// Loading, loaded, or failed with a message for the user.
#[derive(Debug, Clone, PartialEq)]
pub enum Load<T> {
    /// Not answered yet.
    Loading,
    /// The answer.
    Ready(T),
    /// What went wrong, in words.
    Failed(String),
}

impl<T> Load<T> {
    /// The answer, if there is one.
    pub fn ready(&self) -> Option<&T> {
        match self {
            Load::Ready(value) => Some(value),
            _ => None,
        }
    }
}
