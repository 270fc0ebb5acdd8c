//! The Trainforge plugin SDK.
