//! The refusal of an intent's field: a leaf that the intent's own checks and the call
//! identity (`key`) both return.

/// A field of an intent (a [`crate::NewIntent`], a tool call's arguments or `_meta`) that is not
/// acceptable, named as the API and CLI name it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidIntent {
    /// The field, such as `idempotency_key` or `arguments/amount` (a JSON pointer inside
    /// arguments).
    pub field: String,
    /// What is wrong and what to do instead.
    pub reason: String,
}

impl InvalidIntent {
    /// An error about `field`.
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        InvalidIntent {
            field: field.into(),
            reason: reason.into(),
        }
    }
}
