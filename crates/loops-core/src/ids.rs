//! Identifier newtypes, so one kind of id cannot be passed for another. Generated ids
//! are short lowercase hex strings so they stay typeable; the CLI resolves any
//! unambiguous prefix. A [`StepId`] is the exception: the spec's author names steps.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
        #[serde(transparent)]
        pub struct $name(String);

        /// As the id's text (`"3fa0…"`), so messages quoting an id with `{:?}` read
        /// the same whatever its type.
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Debug::fmt(&self.0, f)
            }
        }

        impl $name {
            /// Wraps an existing id string (as stored or typed).
            pub fn new(value: impl Into<String>) -> Self {
                Self(value.into())
            }
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(value: &str) -> Self {
                Self(value.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(value: String) -> Self {
                Self(value)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    };
}

id_type!(
    /// Identifies a loop.
    LoopId
);
id_type!(
    /// Identifies one run (one attempt at one slot).
    RunId
);
id_type!(
    /// Identifies one stored version of a workflow spec.
    WorkflowId
);
id_type!(
    /// Identifies one execution of a workflow spec.
    WorkflowRunId
);
id_type!(
    /// Names a step within a workflow spec (chosen by the spec's author, unique within
    /// the spec; `dependsOn` refers to steps by it).
    StepId
);
id_type!(
    /// Identifies one step of one workflow run.
    StepRunId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_read_as_their_text() {
        let id = WorkflowRunId::new("3fa0c1d2e3f4");
        assert_eq!(format!("{id:?}"), "\"3fa0c1d2e3f4\"");
        assert_eq!(id.to_string(), "3fa0c1d2e3f4");
        assert_eq!(
            serde_json::to_value(&id).unwrap(),
            serde_json::json!("3fa0c1d2e3f4")
        );
        assert_eq!(id, "3fa0c1d2e3f4");
        let step: StepId = serde_json::from_str("\"build\"").unwrap();
        assert_eq!(format!("step {step:?} failed"), "step \"build\" failed");
    }
}
