//! The plugin-facing data model exchanged (as JSON) between the host and Wasm
//! plugins: the runtime info a plugin sees and edits. Owned by the plugin
//! runtime work; the merge that fills it belongs to the pipeline.
