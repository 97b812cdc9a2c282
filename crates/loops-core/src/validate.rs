//! Validation of user-supplied targets. Messages name the offending field and value.
